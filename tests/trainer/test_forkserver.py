"""The fork server the trainer tests run on (tests/forkserver.py): a fork must behave as a fresh process."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import forkserver
from tests.forkserver import python_command
from tests.trainer.helpers import TRAINING_IMAGE, trainer_env

PROBE = """
import json, os, sys
forked = "tensorflow" in sys.modules  # only a fork of the server has it before any import
print(json.dumps({
    "argv": sys.argv, "path0": sys.path[0], "path1": sys.path[1], "cwd": os.getcwd(), "name": __name__,
    "marker": os.environ.get("PROBE_MARKER"),
    "streams": [(s.line_buffering, s.write_through, type(s.buffer).__name__) for s in (sys.stdout, sys.stderr)],
    "forked": forked,
}))
sys.exit(int(sys.argv[1]))
"""


def _probe(command_prefix: list[str], tmp_path, **env: str | None) -> tuple[int, dict]:
    completed = subprocess.run(
        [*command_prefix, "-c", PROBE, "7", "x y"], cwd=tmp_path, env=trainer_env(TRAINING_IMAGE, PROBE_MARKER="m", **env),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return completed.returncode, json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("unbuffered", ["1", None])
def test_a_forked_run_sees_what_a_fresh_python_would(tmp_path, unbuffered):
    fresh_code, fresh = _probe([sys.executable], tmp_path, PYTHONUNBUFFERED=unbuffered)
    forked_code, forked = _probe(python_command(), tmp_path, PYTHONUNBUFFERED=unbuffered)
    assert forked.pop("forked") is True, "the run must have been a fork of the server"
    assert fresh.pop("forked") is False
    assert (forked_code, forked) == (fresh_code, fresh)
    assert forked_code == 7


def test_an_import_time_variable_that_differs_makes_the_run_fresh(tmp_path):
    code, seen = _probe(python_command(), tmp_path, TF_USE_LEGACY_KERAS="1")
    assert (code, seen["forked"]) == (7, False)


def test_a_runs_launcher_child_is_a_fork_and_its_other_children_are_fresh(tmp_path):
    # As the trainer starts its children (the user script's launcher, the watchdog): [sys.executable, ...].
    (tmp_path / "probe.py").write_text(PROBE)
    parent = """
import json, os, subprocess, sys
results = []
launcher = ["-P", LAUNCHER, "r.json", ".", "probe.py", "3", "x"]  # as the runner starts it
for start, env in ((launcher, {}), (launcher, {"TF_USE_LEGACY_KERAS": "1"}), (["-m", "probe", "3", "x"], {})):
    command = [sys.executable, *start]
    child = subprocess.run(command, env=dict(os.environ, **env), capture_output=True, text=True)
    results.append([child.returncode, json.loads(child.stdout.strip().splitlines()[-1])["forked"]])
print(json.dumps(results))
"""
    parent = parent.replace("LAUNCHER", repr(str(TRAINING_IMAGE / "trainer" / "user_code" / "launcher.py")))
    completed = subprocess.run(python_command("-c", parent), cwd=tmp_path, env=trainer_env(TRAINING_IMAGE),
                               capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    # The launcher: a fork, or fresh where an import-time variable differs; any other module: fresh.
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == [[3, True], [3, False], [3, False]], completed.stderr


def test_signals_reach_the_run_and_its_end_is_the_clients(tmp_path):
    env = trainer_env(TRAINING_IMAGE)
    waiting = "import signal, sys, time\nprint('up', flush=True)\ntime.sleep(60)"
    for send, expected in ((signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, -signal.SIGINT)):
        process = subprocess.Popen(python_command("-c", waiting), env=env, stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline().strip() == "up"
        process.send_signal(send)
        assert process.wait(timeout=30) == expected
    handled = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\nprint('up', flush=True)\ntime.sleep(60)"
    process = subprocess.Popen(python_command("-c", handled), env=env, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "up"
    process.terminate()
    assert process.wait(timeout=30) == 143


def test_killing_the_client_kills_the_run(tmp_path):
    marker = tmp_path / "pid"
    code = f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\nprint('up', flush=True)\ntime.sleep(60)"
    process = subprocess.Popen(python_command("-c", code), env=trainer_env(TRAINING_IMAGE), stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "up"
    run_pid = int(marker.read_text())
    assert run_pid != process.pid, "the run must be the server's fork, not the client itself"
    process.kill()
    process.wait(timeout=10)
    _assert_dies(run_pid)


def test_a_client_killed_before_it_read_the_runs_pid_still_kills_the_run(tmp_path):
    # The race a loaded machine hits: the run is up, and its client is killed before it was scheduled
    # to read the pid the server sent. A Unix socket closed with unread data resets its peer
    # (ECONNRESET, not EOF), which left the run alive for its whole 60 s.
    marker = tmp_path / "pid"
    code = f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)"
    client = _raw_client_asking_for(code, tmp_path)
    deadline = time.monotonic() + 30
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.05)
    run_pid = int(marker.read_text())
    select.select([client], [], [], 10)  # the pid is there, and stays unread
    client.close()
    _assert_dies(run_pid)


@pytest.mark.slow  # seconds on CI: out of the quick loop
def test_a_client_gone_before_the_run_started_leaves_no_run(tmp_path):
    # Earlier still: the client closes as soon as it has asked. The server's answer (the pid) then
    # fails to send (EPIPE), which used to end the supervisor and leave its fresh run orphaned.
    marker = tmp_path / "started"
    code = f"import time\nopen({str(marker)!r}, 'w').close()\ntime.sleep(60)"
    client = _raw_client_asking_for(code, tmp_path)
    client.close()
    # A leaked run starts (and stays); a killed one usually never gets to write its marker.
    started = time.monotonic()
    while not marker.exists() and time.monotonic() - started < 3:
        time.sleep(0.05)
    deadline = time.monotonic() + 10
    while (left := _runs_of_the_server()) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], "a run outlived its client"


def _raw_client_asking_for(code: str, cwd: Path) -> socket.socket:
    """A client's socket that has asked the server (started if need be) to run ``python -c code``, and
    does nothing else: what a client killed at that moment leaves behind."""
    python_command()
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(forkserver._socket_path)
    request = {"args": ["-c", code], "env": trainer_env(TRAINING_IMAGE), "cwd": str(cwd), "child": False}
    with open(os.devnull, "r+b") as devnull:
        forkserver._send(client, request, [devnull.fileno()] * 3)
    return client


def _runs_of_the_server() -> list[int]:
    """Live forks of this session's server (its supervisors and runs), the server itself left out."""
    server = forkserver._server.pid
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == server:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and forkserver._socket_path.encode() in argv and _alive(int(entry)):
            found.append(int(entry))
    return found


def _assert_dies(pid: int) -> None:
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = _alive(pid)
    if alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, "the run outlived its client"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("code, expected", [("raise ValueError('boom')", 1), ("raise SystemExit('bye')", 1), ("", 0)])
def test_exit_statuses_and_tracebacks_are_the_interpreters(code, expected):
    env = trainer_env(TRAINING_IMAGE)
    forked = subprocess.run(python_command("-c", code), env=env, capture_output=True, text=True, timeout=60)
    fresh = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert forked.returncode == fresh.returncode == expected
    assert forked.stderr.splitlines()[-1:] == fresh.stderr.splitlines()[-1:]
    assert "forkserver" not in forked.stderr
