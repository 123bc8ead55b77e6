"""Bad inputs to the built-in transform: one sentence naming the file (and line), nothing half-written.

In-process (one TensorFlow for the module); one case runs through the entrypoint to show the
sentence lands in ``output/message`` with exit code 5.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.trainer.process_helpers import job_config, output_dir, raw_dir, run_process, write_raw
from trainer.contract.errors import ConfigError, DataError
from trainer.datasets.synthetic import SyntheticSpec
from trainer.process import contract, transform
from trainer.process.options import TransformOptions

CSV = SyntheticSpec("csv", examples=80, features=4, classes=3, seed=2)
PICTURES = SyntheticSpec("image-dir", examples=24, features=12 * 12 * 3, classes=3, image_shape=(12, 12, 3), seed=3)


def _run(base: Path, **options) -> dict:
    return transform.run(contract.load_environment({"SAGEMAKER_BASE_DIR": str(base)}), TransformOptions(**options))


def _outputs_empty(base: Path) -> bool:
    return all(not any(output_dir(base, name).iterdir()) for name in ("train", "validation") if output_dir(base, name).exists())


def test_missing_input_directory(tmp_path):
    with pytest.raises(DataError, match=r"The processing input 'raw' is missing: .*processing/input/raw does not exist"):
        _run(tmp_path)


def test_empty_input_directory(tmp_path):
    raw_dir(tmp_path).mkdir(parents=True)
    (raw_dir(tmp_path) / ".keep").write_text("")
    with pytest.raises(DataError, match=r"The processing input 'raw' is empty: .* holds no files"):
        _run(tmp_path)


@pytest.mark.slow  # seconds on CI: out of the quick loop
def test_files_of_no_known_layout_are_named(tmp_path):
    write_raw(tmp_path, CSV)
    (raw_dir(tmp_path) / "notes.txt").write_text("hello")
    with pytest.raises(DataError) as caught:
        _run(tmp_path)
    assert "Cannot tell the input format" in str(caught.value) and "notes.txt" in str(caught.value)
    write_raw(tmp_path / "pictures-only", PICTURES)
    with pytest.raises(ConfigError, match="--format csv, but the input .* holds no .csv file"):
        _run(tmp_path / "pictures-only", data_format="csv")


@pytest.mark.parametrize(("argument", "options"), [("--image-size", {"image_size": (8, 8)}), ("--skip-bad-images", {"skip_bad_images": True})])
def test_picture_arguments_on_csv_input_are_refused_by_name(tmp_path, argument, options):
    write_raw(tmp_path, CSV)
    with pytest.raises(ConfigError, match=f"Bad processing argument: {argument} applies to pictures"):
        _run(tmp_path, **options)
    assert not output_dir(tmp_path, "train").exists()


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("1,2,3,1", "line 6: 4 fields, expected 5 (4 features and a label)"),
        ("1,2,3,4,5,6", "line 6: 6 fields, expected 5"),
        ("1,2,x,4,1", "line 6, column 3: 'x' is not a number"),
        ("1,2,3,4,1.5", "line 6: label '1.5' is not a non-negative integer"),
        ("1,2,3,4,-1", "line 6: label '-1' is not a non-negative integer"),
        ("", "line 6: the line is empty"),
        # Once accepted and written as label -2**63 (inf, 1e300) or as 10**10 + 1 classes.
        ("1,2,3,4,inf", "line 6, column 5: 'inf' is not a finite number"),
        ("1,2,3,4,1e300", "line 6: label '1e300' is too large for a class number"),
        ("1,2,3,4,1e10", "line 6: label '1e10' is too large for a class number"),
        # Finite in Python, inf as the float32 TensorFlow parses: once refused without file or line.
        ("1e39,2,3,4,1", "line 6, column 1: '1e39' is beyond float32's range"),
    ],
)
def test_a_bad_csv_row_is_named_by_file_and_line_and_nothing_is_left(tmp_path, line, fragment):
    (path,) = write_raw(tmp_path, CSV).glob("*.csv")
    lines = path.read_text().splitlines()
    lines.insert(5, line)  # line 6 of the file: after the header and four rows
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as caught:
        _run(tmp_path)
    assert str(caught.value).startswith(f"Malformed CSV row in {path} {fragment}"), caught.value
    assert _outputs_empty(tmp_path), "a failed run must not leave shards that look like a dataset"


def test_a_fully_quoted_first_row_is_data_not_a_header(tmp_path):
    raw = raw_dir(tmp_path)
    raw.mkdir(parents=True)
    # As csv.QUOTE_ALL writes it: the first row was once taken for a header and silently dropped.
    (raw / "rows.csv").write_text("".join(f'"{i}","{i * 2}","{i % 3}"\n' for i in range(40)))
    statistics = _run(tmp_path, validation_fraction=0.25)
    assert sum(statistics["examples"].values()) == 40
    assert sum(sum(counts.values()) for counts in statistics["class_counts"].values()) == 40


def test_the_trainers_scan_names_a_label_beyond_a_class_number(tmp_path):
    from trainer.datasets import tabular

    channel = tmp_path / "train"
    channel.mkdir()
    (channel / "rows.csv").write_text("".join(f"{i},{i % 3}\n" for i in range(10)) + "1,1e300\n")
    spec = tabular.DatasetSpec("train", channel, "csv", (tabular.DataFile(str(channel / "rows.csv")),))
    # Once an OverflowError traceback (int(inf) for the class count), or a class count of 10**300.
    with pytest.raises(DataError, match=r"rows.csv line 11: label '1e300' is too large for a class number"):
        tabular.scan_channel(spec, 0)


def test_a_second_file_of_another_width_is_named(tmp_path):
    raw = write_raw(tmp_path, CSV)
    (raw / "z-extra.csv").write_text("a,b,label\n1,2,0\n3,4,1\n")
    with pytest.raises(DataError, match=r"z-extra.csv line 2: 3 fields, expected 5"):
        _run(tmp_path)


def test_one_class_only_is_refused(tmp_path):
    raw = raw_dir(tmp_path)
    raw.mkdir(parents=True)
    (raw / "rows.csv").write_text("".join(f"{i},{i * 2},0\n" for i in range(40)))
    with pytest.raises(DataError, match="a classifier needs at least 2 classes"):
        _run(tmp_path)


def test_too_few_examples_to_split(tmp_path):
    raw = raw_dir(tmp_path)
    raw.mkdir(parents=True)
    (raw / "rows.csv").write_text("1,2,0\n3,4,1\n")
    with pytest.raises(DataError, match="too few to split"):
        _run(tmp_path, validation_fraction=0.1)


def test_an_output_that_already_holds_files_is_refused(tmp_path):
    write_raw(tmp_path, CSV)
    earlier = output_dir(tmp_path, "validation") / "part-00000.tfrecord"
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"from an earlier run")
    with pytest.raises(DataError) as caught:
        _run(tmp_path)
    assert "refusing to mix runs" in str(caught.value) and str(earlier.parent) in str(caught.value)
    assert earlier.read_bytes() == b"from an earlier run"
    assert not output_dir(tmp_path, "train").exists() or not any(output_dir(tmp_path, "train").iterdir())


def test_a_corrupt_picture_fails_the_job_naming_it(tmp_path):
    raw = write_raw(tmp_path, PICTURES)
    victim = sorted((raw / "class_1").iterdir())[1]
    victim.write_bytes(victim.read_bytes()[:60])
    with pytest.raises(DataError) as caught:
        _run(tmp_path, image_size=(8, 8))
    assert str(caught.value).startswith(f"Cannot decode image {victim}: it is not a readable JPEG or PNG file")
    assert "--skip-bad-images" in str(caught.value)
    assert _outputs_empty(tmp_path)


def test_skip_bad_images_counts_and_names_them(tmp_path):
    raw = write_raw(tmp_path, PICTURES)
    victims = [sorted((raw / "class_0").iterdir())[0], sorted((raw / "class_2").iterdir())[-1]]
    victims[0].write_bytes(b"not a picture at all")
    victims[1].write_bytes(victims[1].read_bytes()[:50])
    statistics = _run(tmp_path, image_size=(8, 8), skip_bad_images=True)
    skipped = statistics["skipped_images"]
    assert skipped["count"] == 2 and sorted(skipped["files"]) == sorted(str(v) for v in victims)
    assert sum(statistics["examples"].values()) == 22
    written = json.loads((output_dir(tmp_path, "train") / "statistics.json").read_text())
    assert written["skipped_images"]["count"] == 2


def test_a_picture_without_read_permission_is_named(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads every file; the permission check cannot fail here")
    raw = write_raw(tmp_path, PICTURES)
    victim = sorted((raw / "class_0").iterdir())[0]
    victim.chmod(0)
    with pytest.raises(DataError, match=f"Cannot decode image {victim}: it cannot be read \\(permission denied\\)"):
        _run(tmp_path)


@pytest.mark.parametrize(
    ("layout", "fragment"),
    [
        ({"class_a/1.jpg": True, "loose.jpg": True}, "is not directly inside a class sub-directory"),
        ({"class_a/1.jpg": True, "class_a/2.jpg": True}, "has one class directory (class_a)"),
    ],
)
def test_an_image_directory_out_of_layout_is_named(tmp_path, layout, fragment):
    import numpy as np

    from trainer.datasets.synthetic import encode_image

    for name in layout:
        path = raw_dir(tmp_path) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_image(np.zeros((4, 4, 3), np.uint8), "jpeg"))
    with pytest.raises(DataError) as caught:
        _run(tmp_path, data_format="image-dir")
    assert fragment in str(caught.value)


@pytest.mark.slow
def test_through_the_entrypoint_a_bad_row_is_the_jobs_message(tmp_path):
    (path,) = write_raw(tmp_path, CSV).glob("*.csv")
    path.write_text(path.read_text() + "1,2,3\n")
    job_config(tmp_path)
    run = run_process(tmp_path)
    assert run.returncode == 5, run.explain()
    assert run.message == f"Malformed CSV row in {path} line 82: 3 fields, expected 5 (4 features and a label): '1,2,3'\n"
    assert _outputs_empty(tmp_path)
