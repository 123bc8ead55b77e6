"""scripts.watch --from-log: a recorded trainer log's epochs, its diagnosis and the plot (no AWS)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.common import run
from scripts.epochs import EpochReader, read_log
from scripts.watch import main
from tests.scripts.plot_checks import assert_plot

# Recorded from the trainer on CPU with a deliberately slow input pipeline
# (tests/trainer/slow_input.py, SLOW_INPUT_SECONDS=0.03, 5 epochs); paths rewritten to /opt/ml.
RECORDED = Path(__file__).with_name("recorded") / "slow_input_cpu.log"


def test_a_recorded_log_prints_its_epochs_and_diagnosis_and_writes_the_plot(tmp_path, capsys):
    png = tmp_path / "run.png"
    assert run(main, ["--from-log", str(RECORDED), "--plot", str(png)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines[:5]] == [f"epoch {n}" for n in range(1, 6)]
    recorded = read_log(RECORDED)
    assert [e.epoch for e in recorded.epochs] == [1, 2, 3, 4, 5]
    assert all(e.input_wait_pct is not None and e.gpu_util_pct is None for e in recorded.epochs)
    assert lines[5] == f"diagnosis: {recorded.diagnosis}" and recorded.diagnosis.startswith("input-bound: ")
    assert lines[6] == f"plot: {png} (5 epochs)"
    assert_plot(png)


def test_lines_with_a_cloudwatch_prefix_and_a_repeated_epoch():
    reader = EpochReader()
    assert reader.feed("[trainer] checkpoint path=/opt/ml/checkpoints/ckpt-1 epoch=1") is None
    first = reader.feed("[metrics] epoch=1 loss=0.9 accuracy=0.5 examples_per_sec=100.0 step_time_ms=10.0 input_wait=70.0%")
    assert first is not None and (first.input_wait_pct, first.examples_per_sec) == (70.0, 100.0)
    # A spot restart resumes and prints epoch 1 again: the later figures count.
    reader.feed("[metrics] epoch=1 loss=0.8 accuracy=0.6 examples_per_sec=150.0 step_time_ms=9.0 input_wait=65.0%")
    assert [(e.epoch, e.examples_per_sec) for e in reader.epochs] == [(1, 150.0)]


def test_read_log_finds_lines_behind_timestamps(tmp_path):
    log = tmp_path / "tail.txt"
    log.write_text(
        "2026-01-01T00:00:01 gputrain-x/algo-1-17 [metrics] epoch=1 loss=0.9 accuracy=0.5 examples_per_sec=100.0 "
        "step_time_ms=10.0 input_wait=5.0% gpu_util=91.0% gpu_mem_mib=1000\n"
        "2026-01-01T00:00:02 gputrain-x/algo-1-17 [diagnosis] compute-bound: input waits 5% of step time\n"
    )
    recorded = read_log(log)
    assert [(e.epoch, e.gpu_util_pct, e.gpu_mem_mib) for e in recorded.epochs] == [(1, 91.0, 1000.0)]
    assert recorded.diagnosis == "compute-bound: input waits 5% of step time"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--from-log", "{tmp}/missing.log"], "error: --from-log {tmp}/missing.log: no such file"),
        (["--from-log", "{readme}"], "error: --from-log {readme}: no [metrics] epoch lines in it (is it a training job's log?)"),
    ],
)
def test_a_log_without_epochs_is_one_line(tmp_path, capsys, argv, message):
    readme = Path(__file__).resolve().parents[2] / "README.md"
    fill = {"tmp": tmp_path, "readme": readme}
    assert run(main, [a.format(**fill) for a in argv]) == 2  # a wrong --from-log FILE: usage
    assert capsys.readouterr().err == message.format(**fill) + "\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--from-log", "x.log", "--plot", "out.svg"], "--plot out.svg: give a .png file name"),
        (["--from-log", "x.log", "--plot", "/no/such/dir/p.png"], "--plot /no/such/dir/p.png: the directory /no/such/dir does not exist"),
        (["--pipeline", "--plot", "p.png"], "--plot draws a training job's epochs"),
        (["gputrain-x", "--from-log", "x.log"], "give a training job or --from-log, not both"),
    ],
)
def test_bad_plot_arguments_are_usage_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
