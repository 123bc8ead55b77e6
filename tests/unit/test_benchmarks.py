"""The benchmarks' arithmetic: FLOPs counted per layer, MFU, the GPU table lookups, probe summaries.

Benchmarks are not timed tests: nothing here measures or asserts a speed.
"""

from __future__ import annotations

import pytest

from benchmarks import _flops, _probe
from benchmarks._trainer import median_epoch, read_metric_lines


@pytest.fixture(scope="module")
def keras():
    return pytest.importorskip("keras")


def test_dense_flops_are_six_times_the_weights(keras):
    inputs = keras.Input(shape=(10,))
    hidden = keras.layers.Dense(20, activation="relu")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(5)(hidden))
    # Forward: 2 * (10*20 + 20*5) multiply-adds; training is 3x that, i.e. 6 x the 300 weights.
    assert _flops.forward_flops_per_example(model) == 600
    assert _flops.training_flops_per_example(model) == 1800 == 6 * (10 * 20 + 20 * 5)


def test_conv_flops_count_every_output_position(keras):
    inputs = keras.Input(shape=(8, 8, 1))
    conv = keras.layers.Conv2D(4, 3, padding="same")(inputs)  # 8*8 positions * 3*3*1*4 weights
    pooled = keras.layers.MaxPooling2D(2)(conv)  # free
    valid = keras.layers.Conv2D(2, 3, padding="valid")(pooled)  # 2*2 positions * 3*3*4*2 weights
    model = keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Flatten()(valid)))  # 8*3 weights
    expected_forward = 2 * (64 * 36 + 4 * 72 + 8 * 3)
    assert _flops.forward_flops_per_example(model) == expected_forward == 5232
    assert _flops.training_flops_per_example(model) == 3 * expected_forward


def test_trainers_cnn_is_counted_per_layer(keras):
    from trainer.contract.hyperparameters import TrainingConfig
    from trainer.train.models import build_model, parameter_count

    config = TrainingConfig(model="cnn", image_shape=(8, 8, 1), conv_filters=(4,))
    model = build_model(config, num_features=64, num_classes=3)
    # conv 8x8 positions * 9*1*4, pool to 4x4x4, logits 64*3.
    assert _flops.forward_flops_per_example(model) == 2 * (64 * 36 + 64 * 3)
    # 6 x parameters would undercount: each conv weight is reused at 64 positions.
    assert _flops.training_flops_per_example(model) > 6 * parameter_count(model)


def test_an_uncounted_kernel_layer_is_refused(keras):
    inputs = keras.Input(shape=(4, 4, 2))
    model = keras.Model(inputs, keras.layers.Conv2DTranspose(2, 3)(inputs))
    with pytest.raises(ValueError, match="Conv2DTranspose"):
        _flops.forward_flops_per_example(model)


def test_mfu_is_model_flops_over_peak():
    # 1 GFLOP per example at 200k examples/s on a 400 TFLOP/s GPU is half its peak.
    assert _flops.mfu(1e9, 200_000, 400.0) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        _flops.mfu(1e9, 1.0, 0.0)


def test_peak_and_gpu_name_come_from_the_gpu_table():
    assert _flops.peak_tflops("p5.48xlarge") == _flops.peak_tflops("ml.p5.48xlarge") == 989.0
    with pytest.raises(KeyError):
        _flops.peak_tflops("m5.large")
    assert _flops.instance_type_for_gpu("NVIDIA H100 80GB HBM3").startswith("p5.")
    assert _flops.instance_type_for_gpu("NVIDIA A100-SXM4-40GB").startswith("p4d")
    assert _flops.instance_type_for_gpu("NVIDIA L40S").startswith("g6e.")
    assert _flops.instance_type_for_gpu("NVIDIA L4").startswith("g6.")
    assert _flops.instance_type_for_gpu("Intel Xeon") is None


def test_probe_report_gives_input_wait_per_epoch():
    report = {"epochs": [
        {"opened_at": 100.0, "ended_at": 101.0, "waits_s": [0.3, 0.1, 0.1, 0.0], "next_at": [100.0, 100.5, 100.7, 101.0]},
        {"opened_at": 102.0, "ended_at": None, "waits_s": [], "next_at": []},
    ]}  # fmt: skip
    (epoch,) = _probe.epoch_timings(report)
    assert (epoch.steps, epoch.first_wait_s) == (3, 0.3)
    assert epoch.wait_fraction == pytest.approx(0.5)
    assert _probe.first_step_done_at(report) == 100.5


def test_median_epoch_keeps_rate_and_step_time_of_one_epoch():
    text = "\n".join(
        f"[metrics] epoch={i} loss=0.1 accuracy=0.9 examples_per_sec={eps} step_time_ms={ms}"
        for i, (eps, ms) in enumerate([(100.0, 10.0), (300.0, 3.3), (200.0, 5.0), (400.0, 2.5)], start=1)
    )
    summary = median_epoch(read_metric_lines(text + "\n[trainer] something else"))
    assert (summary.examples_per_sec, summary.step_time_ms) == (200.0, 5.0)
    assert (summary.low, summary.high, summary.epochs) == (100.0, 400.0, 4)


def test_serve_bench_level_figures():
    from benchmarks.serve_bench import Level

    level = Level(requests=100, seconds=2.0, latencies_ms=tuple(float(i) for i in range(1, 101)), mean_batch=4.0)
    assert level.rps == 50.0
    assert (level.percentile(50), level.percentile(99)) == (51.0, 100.0)
    assert level.describe() == "50 req/s, p50 51.00 ms, p99 100.00 ms, 4.0 req/call"
    from benchmarks.serve_bench import median_level

    levels = [Level(n, 1.0, (1.0,), 1.0) for n in (30, 10, 20, 40)]
    assert median_level(levels).requests == 20 and median_level(levels[:3]).requests == 20


def test_process_bench_rates_and_median():
    from benchmarks.process_bench import Rate, median_rate

    rate = Rate(examples=50_000, input_bytes=25_000_000, seconds=2.0)
    assert (rate.per_second, rate.mb_per_second) == (25_000.0, 12.5)
    assert rate.describe() == "25,000 ex/s, 12.5 MB/s (2.00 s)"
    runs = [Rate(10, 10, s) for s in (3.0, 1.0, 2.0, 4.0)]
    assert median_rate(runs).seconds == 2.0 and median_rate(runs[:3]).seconds == 2.0


@pytest.mark.slow
def test_process_bench_baselines_write_what_the_transform_writes(tmp_path):
    """Like for like: the single-threaded baselines convert the same data into the same records."""
    pytest.importorskip("tensorflow")
    from collections import Counter

    import tensorflow as tf

    from benchmarks.process_bench import baseline_csv, baseline_images, write_csv_input, write_image_input

    def examples(directory):
        found = []
        for path in sorted(directory.rglob("*.tfrecord")):
            for record in tf.data.TFRecordDataset(str(path)):
                feature = tf.train.Example.FromString(record.numpy()).features.feature
                if "features" in feature:
                    found.append((tuple(feature["features"].float_list.value), feature["label"].int64_list.value[0]))
                else:
                    pixels = tf.io.decode_jpeg(feature["image/encoded"].bytes_list.value[0]).numpy()
                    found.append((pixels.shape, feature["image/class/label"].int64_list.value[0]))
        return found

    write_csv_input(tmp_path / "csv", rows=300, features=5, files=2)
    assert baseline_csv(tmp_path / "csv", tmp_path / "baseline-csv") == 300
    write_image_input(tmp_path / "pictures", count=24, side=16)
    assert baseline_images(tmp_path / "pictures", tmp_path / "baseline-pictures", side=8) == 24
    from trainer.process import contract, transform
    from trainer.process.options import TransformOptions

    for kind, raw, size in (("csv", tmp_path / "csv", None), ("pictures", tmp_path / "pictures", (8, 8))):
        base = tmp_path / f"transform-{kind}"
        (base / "processing" / "input").mkdir(parents=True)
        (base / "processing" / "input" / "raw").symlink_to(raw)
        transform.run(contract.load_environment({"SAGEMAKER_BASE_DIR": str(base)}), TransformOptions(image_size=size))
        ours = examples(base / "processing" / "output")
        theirs = examples(tmp_path / f"baseline-{kind}")
        assert Counter(ours) == Counter(theirs), kind
