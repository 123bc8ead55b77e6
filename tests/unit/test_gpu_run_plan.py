"""The GPU proof's tiers (benchmarks/gpu_run.sh, issue #36), dry-run on CPU.

GPU time comes 15 minutes at a time, so the dry run must catch here what would otherwise cost it:
a module that does not import, an argument its parser refuses, a test file that collects nothing,
the boot's CUDA check that does not build for the H100's sm_90. Each tier must run every step under
its own time limit and write only its two files under $OUT (a call returns at most 8 files).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.helpers import ROOT

GPU_RUN = ROOT / "benchmarks" / "gpu_run.sh"
TIERS = ("tier0", "tf-check", "tests", "resnet", "records", "jit", "fp16-split", "serve", "torch-compile")
CALL_LIMIT_S = 600  # one device call's most
TIER0_BUDGET_S = 300  # its steps' limits together: inside call 1's timeout_s (benchmarks.gpu_calls, 360 s) with the part's copy
HAS_NVCC = bool(shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc"))


def dry_run(tmp_path: Path, *tiers: str, script: Path = GPU_RUN) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "TMPDIR": str(tmp_path),
           "GPU_RUN_JIT_CACHE": str(tmp_path / "jit-cache")}  # fmt: skip
    env.pop("GPU_RUN_SIM_PYTHON", None)
    completed = subprocess.run(["bash", str(script), "--dry-run", *tiers], env=env, capture_output=True, text=True,
                               timeout=300, check=False)  # fmt: skip
    return completed, out


def steps(out: Path, tier: str) -> list[dict]:
    lines = [json.loads(line) for line in (out / f"{tier}.jsonl").read_text().splitlines()]
    return [line for line in lines if "limit_s" in line]


@pytest.mark.slow
def test_every_tier_passes_its_dry_run_with_a_limit_per_step_and_its_files_under_out(tmp_path):
    completed, out = dry_run(tmp_path)
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{t}.{ext}" for t in TIERS for ext in ("jsonl", "log"))
    for tier in TIERS:
        tier_steps = steps(out, tier)
        assert tier_steps, f"{tier} has no step"
        for step in tier_steps:
            assert step["dry_run"] is True and step["rc"] == 0, step
            assert 0 < step["limit_s"] <= CALL_LIMIT_S * 0.7, step  # well inside one call's 10 minutes
            for flag in ("--jsonl", "--known"):  # what a step writes as it goes is under $OUT
                words = step["command"].split()
                if flag in words:
                    assert words[words.index(flag) + 1].startswith(str(out)), step
    assert sum(step["limit_s"] for step in steps(out, "tier0")) <= TIER0_BUDGET_S
    first = json.loads((out / "tier0.jsonl").read_text().splitlines()[0])  # before any step: what picks the CUDA libraries
    assert first["step"] == "library-env" and "CUDA_MODULE_LOADING=LAZY" in first["content"]
    assert "ldconfig -p | grep -E 'libcudnn.so.9|libcublas'" in first["content"] and "xz --version" in first["content"]
    assert [s["step"] for s in steps(out, "jit")] == ["first-step-cold", "first-step-warm"]
    assert "9/" in (out / "tests.log").read_text()  # the gpu-marked tests collected: 9 of tests/trainer's three files


@pytest.mark.skipif(not HAS_NVCC, reason="nvcc (CUDA toolkit) not installed here: the boot check's sm_90 build is not checked")
@pytest.mark.slow
def test_the_boot_cuda_check_builds_for_sm_90_as_the_boot_does(tmp_path):
    completed, out = dry_run(tmp_path, "tier0")
    assert completed.returncode == 0, completed.stdout[-3000:]
    assert "built for sm_90 as the boot builds it" in completed.stdout
    assert "without TensorFlow or torch" in completed.stdout  # trainer.gpu_check ran with both refused


def _mirror_with(tmp_path: Path, old: str, new: str) -> Path:
    """The repository as symlinks, with a gpu_run.sh in which ``old`` became ``new``."""
    mirror = tmp_path / "repo"
    (mirror / "benchmarks").mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name not in ("benchmarks", ".git"):
            (mirror / entry.name).symlink_to(entry)
    for entry in (ROOT / "benchmarks").iterdir():
        if entry.name != "gpu_run.sh":
            (mirror / "benchmarks" / entry.name).symlink_to(entry)
    text = GPU_RUN.read_text()
    assert old in text
    (mirror / "benchmarks" / "gpu_run.sh").write_text(text.replace(old, new))
    return mirror / "benchmarks" / "gpu_run.sh"


@pytest.mark.parametrize(
    ("tier", "old", "new", "failed_step"),
    [
        ("jit", "-m benchmarks.gpu_precision", "-m benchmarks.gpu_precisions", "first-step-cold"),  # no such module
        ("resnet", "--inputs memory", "--inputs memroy", "resnet-vs-torch"),  # a value the parser refuses
        ("torch-compile", "--warmup 15 \\\n", "--warm-up 15 \\\n", "torch-resnet-compile"),  # no such option
        ("fp16-split", 'fp16-split --jsonl "$jsonl"', "fp16-split", "fp16-split"),  # a required option left out
        ("tests", "tests/trainer/test_trainer_gpu.py", "tests/trainer/test_trainer_gpus.py", "pytest"),
    ],
)
def test_a_wrong_module_argument_or_path_fails_the_dry_run(tmp_path, tier, old, new, failed_step):
    completed, out = dry_run(tmp_path, tier, script=_mirror_with(tmp_path, old, new))
    assert completed.returncode != 0
    assert f"FAILED  {tier}/{failed_step}" in completed.stdout, completed.stdout[-3000:]
    assert [s["rc"] != 0 for s in steps(out, tier) if s["step"] == failed_step] == [True]


@pytest.mark.slow
def test_a_wrong_argument_of_the_command_nvml_load_runs_fails_the_dry_run(tmp_path):
    completed, _ = dry_run(tmp_path, "tier0", script=_mirror_with(tmp_path, "--no-compile", "--no-compiled"))
    assert completed.returncode != 0 and "FAILED  tier0/torch-resnet-eager" in completed.stdout


def test_unknown_tiers_and_no_tier_are_refused(tmp_path):
    for args in (["tier9"], []):
        completed = subprocess.run(["bash", str(GPU_RUN), *args], env={**os.environ, "OUT": str(tmp_path)},
                                   capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert completed.returncode == 2 and "gpu_run:" in completed.stderr


def _fake_nvml(utilization: int, used_mib: int):
    from types import SimpleNamespace

    return SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetUtilizationRates=lambda handle: SimpleNamespace(gpu=utilization),
        nvmlDeviceGetMemoryInfo=lambda handle: SimpleNamespace(used=used_mib * 1024 * 1024),
    )  # fmt: skip


def test_nvml_load_samples_the_gpus_while_the_load_runs_a_line_a_period(tmp_path, monkeypatch):
    from benchmarks import gpu_steps
    from trainer import gpu_monitor

    start = gpu_monitor.start
    monkeypatch.setattr(gpu_monitor, "start", lambda interval: start(interval, nvml=_fake_nvml(97, 30_000)))
    jsonl = tmp_path / "tier0.jsonl"
    load = [sys.executable, "-c", "import time; time.sleep(1.2)"]
    assert gpu_steps.nvml_load(jsonl, load, interval=0.05, every=0.3, idle=0.1) == 0
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [line["phase"] for line in lines][:2] == ["idle", "load"] and lines[-1]["phase"] == "summary"
    assert lines[-1]["max_utilization_pct"] == 97.0 and lines[-1]["max_memory_used_mib"] == 30_000.0
    assert lines[-1]["periods"] >= 2 and lines[-1]["command_exit"] == 0


def test_nvml_load_without_nvml_still_runs_the_load_and_exits_5(tmp_path, monkeypatch):
    from benchmarks import gpu_steps
    from trainer import gpu_monitor

    monkeypatch.setattr(gpu_monitor, "start", lambda interval: None)
    jsonl = tmp_path / "tier0.jsonl"
    assert gpu_steps.nvml_load(jsonl, [sys.executable, "-c", "pass"], interval=0.05, every=0.3, idle=0.1) == 5
    assert gpu_steps.nvml_load(jsonl, [sys.executable, "-c", "raise SystemExit(3)"], interval=0.05, every=0.3, idle=0.1) == 3
    assert json.loads(jsonl.read_text().splitlines()[0])["ok"] is False


# --- benchmarks/gpu_calls.py: the run calls from a staged .gpu-stage ------------------------------------------------


def _fake_stage(root: Path, sizes: list[int], sparse: tuple[int, ...] = ()) -> list[bytes]:
    """A git project with one tracked file and a .gpu-stage (ignored) of parts of these sizes."""
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".git" / "info" / "exclude").write_text("/.gpu-stage/\n")
    (root / "tracked.txt").write_bytes(b"x" * 1000)
    stage = root / ".gpu-stage"
    stage.mkdir()
    contents = [bytes([index]) * size for index, size in enumerate(sizes)]
    for index, content in enumerate(contents):
        (stage / f"part-{index:02d}").write_bytes(content)
    for index, size in enumerate(sparse):  # parts as large as real ones, cheaply (zeros)
        with (stage / f"part-{len(sizes) + index:02d}").open("wb") as part:
            part.truncate(size)
    (stage / "install.sh").write_text(f'have=0\n[ "$have" = {len(sizes) + len(sparse)} ] || exit 1\n')
    return contents


def test_gpu_calls_carry_tier0_with_the_first_part_check_each_part_and_install_with_the_last(tmp_path):
    import hashlib

    from benchmarks import gpu_calls

    contents = _fake_stage(tmp_path, [4096, 4096, 4096, 100])
    calls = gpu_calls.plan(tmp_path)
    assert [call.number for call in calls] == list(range(1, 4 + len(gpu_calls.LATER) + 1))
    assert [call.carry for call in calls[:4]] == [(".gpu-stage/part-00",), (".gpu-stage/part-01",), (".gpu-stage/part-02",),
                                                  (".gpu-stage/part-03", ".gpu-stage/install.sh")]  # fmt: skip
    for index, (call, content) in enumerate(zip(calls, contents, strict=False)):
        check = f'echo "{hashlib.sha256(content).hexdigest()}  /root/gpu-stage/part-{index:02d}" | sha256sum -c --quiet'
        assert call.command.startswith(f"mkdir -p /root/gpu-stage && cp .gpu-stage/part-{index:02d} /root/gpu-stage/ && {check} && ")
    assert calls[0].command.endswith(" && bash benchmarks/gpu_run.sh tier0")
    assert calls[3].command.endswith(" && bash .gpu-stage/install.sh && bash benchmarks/gpu_run.sh tf-check")
    assert [call.command for call in calls[4:]] == [f"bash benchmarks/gpu_run.sh {later.tiers}" for later in gpu_calls.LATER]
    tree = 1000  # tracked.txt; the ignored stage is not part of the tree
    install = (tmp_path / ".gpu-stage/install.sh").stat().st_size
    assert [call.carry_bytes for call in calls] == [tree + 4096] * 3 + [tree + 100 + install] + [tree] * len(gpu_calls.LATER)
    assert all(call.timeout_s <= 600 and len(call.command) <= 2000 for call in calls)
    assert json.loads(calls[1].arguments()) == {"carry": [".gpu-stage/part-01"], "timeout_s": 60, "command": calls[1].command}


def test_gpu_calls_refuse_in_one_line_when_a_call_would_pass_the_cap(tmp_path, capsys):
    from benchmarks import gpu_calls

    mib = gpu_calls.MIB
    _fake_stage(tmp_path, [2048], sparse=(60 * mib,))  # part-00 small, part-01 60 MiB
    with pytest.raises(gpu_calls.Refused) as refused:
        gpu_calls.plan(tmp_path, tree=6 * mib)  # 60 MiB + install.sh + 6 MiB of tree
    assert str(refused.value).startswith("gpu_calls: call 2 would carry 66.00 MiB (the tree 6.00 MiB + .gpu-stage/part-01, .gpu-stage/install.sh)")
    assert str(refused.value).endswith("re-split with PART_MIB=56 ../shared/gpu/stage-tensorflow") and "\n" not in str(refused.value)
    with pytest.raises(gpu_calls.Refused, match="the working tree alone is 63.00 MiB"):
        gpu_calls.plan(tmp_path, tree=63 * mib)
    assert gpu_calls.main(["--root", str(tmp_path)]) == 0  # the real tree (1000 bytes) fits
    printed = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in printed if line.startswith("call ")] == [str(n) for n in range(1, 3 + len(gpu_calls.LATER))]
    assert "60.00 of 64 MiB" in printed[2]
    assert any(line.startswith("# budget (900 s): start ~120 s + tier0") and "2 x c" in line for line in printed)
    (tmp_path / ".gpu-stage" / "part-01").unlink()  # install.sh expects 2 parts
    assert gpu_calls.main(["--root", str(tmp_path)]) == 1
    assert capsys.readouterr().out.count("\n") == 1


def test_a_benchmark_child_passes_its_output_on_as_it_comes_and_keeps_its_tail(capsys):
    from benchmarks import resnet_bench

    code, tail = resnet_bench._stream([sys.executable, "-c", "import sys; print('figure 1'); sys.stderr.write('oops\\n'); sys.exit(3)"],
                                      dict(os.environ), tail=5)  # fmt: skip
    assert code == 3 and tail == ["figure 1", "oops"]
    assert capsys.readouterr().err == "  | figure 1\n  | oops\n"


def test_torchvision_prints_its_result_row_before_it_writes_the_file(tmp_path, monkeypatch, capsys):
    from benchmarks import torch_resnet

    monkeypatch.setattr(torch_resnet, "absent_reason", lambda: "")
    monkeypatch.setattr(torch_resnet, "measure", lambda *args: {"images_per_sec": 1234.5})
    out = tmp_path / "torch.json"
    assert torch_resnet.main(["--no-compile", str(out)]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == json.loads(out.read_text()) == {"images_per_sec": 1234.5}
