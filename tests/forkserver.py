"""A fork server for the tests' trainer runs: TensorFlow imported once per test session, each run a fork.

Most trainer tests start ``python -m trainer ...`` as a real process, as SageMaker does, and most
of each such run on CI's two cores was importing TensorFlow and Keras (about 4 s of CPU each, for
runs that train for a second). Here one server process imports them once; each run is a fork of it
that then behaves like a fresh ``python -m trainer``: its own argv, environment, working directory,
``sys.path`` (from PYTHONPATH), stdin/stdout/stderr, signal dispositions and exit status.

The tests keep their ``subprocess.Popen`` calls: :func:`python_command` returns a command that
starts this file as a small stdlib-only client (``python -E -S``, a few milliseconds). The client
hands its environment, working directory and standard streams to the server, forwards the signals a
test sends it (SIGTERM, SIGINT, ...) to the run, and exits as the run exited: with its status, or
killed by the same signal. If the client is killed (a test's timeout), the run's process group is
killed with it.

What a fork cannot give a run is a different import-time state, so the client runs a real fresh
``python`` instead (``exec``, same argv and environment) when:

- the server is not running, or ``TRAINER_TEST_FORKSERVER=0`` is set (run everything fresh);
- the run's environment differs from the server's in a variable read at import time (``TF_*``,
  ``KERAS_*``, ``CUDA_*``, thread-count and allocator settings, ``PYTHON*`` other than PYTHONPATH
  and PYTHONUNBUFFERED, ``LD_*``), e.g. ``TF_USE_LEGACY_KERAS=1``;
- the run is not ``python -m MODULE``, ``python -c CODE`` or ``python [-P] FILE``.

A run's own Python children may be forks too: in a run, ``sys.executable`` is a small script that
starts this client, and the children of :data:`CHILD_MODULES` and :data:`CHILD_FILES` (the user script's launcher, the
GPU check child, the parameter server: each imported TensorFlow afresh, 3-4 s of CPU a child) are
forks under the same rules. Any other child (``-c``, a file, pip, the rendezvous watchdog) is the
real interpreter: a fork's parent is the server, not the run, and the watchdog and the image's
guard go by their parent's pid.

The real entrypoint in a fresh process is still what the image tests (tests/image), the emulator
and the main job run; the test helpers say which of their runs may be forked.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import signal
import socket
import struct
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the client runs with -S: nothing beyond what it needs is imported at start
    import subprocess

# Variables read while Python, NumPy, TensorFlow or Keras are imported: a run whose value differs
# from the server's cannot be a fork of it.
_IMPORT_TIME_PREFIXES = (
    "TF_", "KERAS_", "CUDA_", "XLA_", "NVIDIA_", "OMP_", "OPENBLAS_", "MKL_", "KMP_", "TCMALLOC_", "MALLOC_",
    "LD_", "PYTHON", "GRPC_",
)  # fmt: skip
# Read when the run starts, not at import: the fork sets them like any other variable.
_RUN_TIME = ("PYTHONPATH", "PYTHONUNBUFFERED", "TF_CONFIG", "PYTHONDONTWRITEBYTECODE")
_FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT)
_HEADER = struct.Struct("!I")
# A run's children that may be forks: none of them looks at its parent process.
CHILD_MODULES = ("trainer.gpu_check", "trainer.user_code.ps_server")
# ... and the user script's launcher, which the runner starts by its file with -P.
CHILD_FILES = ("trainer/user_code/launcher.py",)


def _forkable_child(args: list[str]) -> bool:
    if args[:1] == ["-m"]:
        return len(args) > 1 and args[1] in CHILD_MODULES
    return args[:1] == ["-P"] and len(args) > 1 and args[1].replace(os.sep, "/").endswith(CHILD_FILES)


def _import_state(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_IMPORT_TIME_PREFIXES) and k not in _RUN_TIME}


def _send(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    payload = _HEADER.pack(len(data)) + data
    if fds:
        sock.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.sendall(payload)


def _receive(sock: socket.socket, with_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message (None at EOF) and the file descriptors that came with it."""
    fds: list[int] = []
    buffer = b""
    space = socket.CMSG_SPACE(with_fds * array.array("i").itemsize) if with_fds else 0
    # The header first, then as many bytes as it says.
    while len(buffer) < (want := _HEADER.size + (_HEADER.unpack_from(buffer)[0] if len(buffer) >= _HEADER.size else 0)):
        chunk, ancillary, _, _ = sock.recvmsg(want - len(buffer), space)
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                received = array.array("i")
                received.frombytes(data[: len(data) - (len(data) % received.itemsize)])
                fds.extend(received)
        if not chunk:
            return None, fds
        buffer += chunk
    return json.loads(buffer[_HEADER.size :]), fds


# --- the client: what a test's Popen starts -------------------------------------------------------


def _client(socket_path: str, python_args: list[str]) -> None:
    child = python_args[:1] == ["--child"]  # started by a run as its sys.executable
    python_args = python_args[1:] if child else python_args
    fresh = [sys.executable, *python_args]
    if os.environ.get("TRAINER_TEST_FORKSERVER") == "0" or not os.path.exists(socket_path):
        os.execv(sys.executable, fresh)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(socket_path)
    except OSError:
        os.execv(sys.executable, fresh)
    # Forwarding is set up before the run exists: the run can write its first line (which a test
    # waits for before signalling) before this client has read its pid, and a signal in between
    # would end the client with the default action instead of reaching the run. Held until then.
    run: dict[str, int] = {}
    held: list[int] = []

    def forward(signum: int, frame: object) -> None:
        if "pid" not in run:
            held.append(signum)
            return
        try:
            os.kill(run["pid"], signum)
        except ProcessLookupError:
            pass

    for signum in _FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    request = {"args": python_args, "env": dict(os.environ), "cwd": os.getcwd(), "child": child}
    _send(sock, request, [0, 1, 2])
    answer, _ = _receive(sock)
    if answer is None or "fresh" in answer:
        sock.close()
        for signum in _FORWARDED_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        for signum in held:  # nothing ran yet: what the signal would have done to a fresh interpreter
            os.kill(os.getpid(), signum)
        os.execv(sys.executable, fresh)
    run["pid"] = answer["pid"]
    for signum in held:
        forward(signum, None)
    status, _ = _receive(sock)
    if status is None:  # the server went away: the run was killed with it
        os._exit(255)
    if "signal" in status:
        for signum in _FORWARDED_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(status["signal"], signal.SIG_DFL)
        os.kill(os.getpid(), status["signal"])
        os._exit(128 + status["signal"])
    os._exit(status["code"])


# --- the server ----------------------------------------------------------------------------------


def _serve(socket_path: str) -> None:
    import numpy  # noqa: F401
    import tensorflow  # noqa: F401
    import keras  # noqa: F401

    # What a run's sys.executable names: this client, so that the run's own Python children may be forks.
    child_python = socket_path + "-python"
    with open(child_python, "w") as script:
        script.write(f'#!/bin/sh\nexec "{sys.executable}" -E -S "{os.path.abspath(__file__)}" client "{socket_path}" --child "$@"\n')
    os.chmod(child_python, 0o755)

    base_env = dict(os.environ)
    base_state = _import_state(base_env)
    base_path = [p for p in sys.path if p and p not in _pythonpath(base_env) and p != os.path.dirname(__file__)]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path + ".tmp")
    listener.listen(64)
    os.rename(socket_path + ".tmp", socket_path)  # ready: clients only see the socket once it listens
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    parent = os.getppid()
    listener.settimeout(1.0)
    while os.getppid() == parent:  # the test session ended without stopping us: stop too
        try:
            connection, _ = listener.accept()
        except socket.timeout:
            _reap()
            continue
        _reap()
        connection.settimeout(None)
        if os.fork() == 0:
            listener.close()
            _supervise(connection, base_state, base_path, child_python)
        connection.close()


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _pythonpath(env: dict[str, str]) -> list[str]:
    return [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def _supervise(connection: socket.socket, base_state: dict[str, str], base_path: list[str], child_python: str) -> None:
    """In a fork of the server: starts the run, reports its pid, waits, reports its status."""
    code = 1
    try:
        request, fds = _receive(connection, with_fds=3)
        if request is None or len(fds) != 3:
            os._exit(1)
        reason = _why_fresh(request, base_state)
        if reason:
            _send(connection, {"fresh": reason})
            os._exit(0)
        pid = os.fork()
        if pid == 0:
            connection.close()
            _run(request, fds, base_path, child_python)
        for fd in fds:
            os.close(fd)
        # A client already gone (EPIPE, ECONNRESET) fails these sends; _wait_or_kill sees it gone
        # and kills the run.
        with contextlib.suppress(OSError):
            _send(connection, {"pid": pid})
        status = _wait_or_kill(connection, pid)
        with contextlib.suppress(OSError):
            _send(connection, status)
        code = 0
    finally:
        os._exit(code)


def _why_fresh(request: dict, base_state: dict[str, str]) -> str | None:
    args = request["args"]
    if request.get("child") and not _forkable_child(args):
        return f"a run's child other than {', '.join(CHILD_MODULES + CHILD_FILES)}: {args[:2]}"
    if args[:1] == ["-P"]:  # safe path: nothing prepended to sys.path, which the fork does too
        args = args[1:]
    if not args or (args[0] in ("-m", "-c") and len(args) < 2) or (args[0].startswith("-") and args[0] not in ("-m", "-c")):
        return f"not a -m/-c/file run: {args[:2]}"
    state = _import_state(request["env"])
    if state != base_state:
        differing = sorted(set(state.items()) ^ set(base_state.items()))
        return f"import-time environment differs: {sorted({k for k, _ in differing})}"
    return None


def _wait_or_kill(connection: socket.socket, pid: int) -> dict:
    """Waits for the run; if the client goes away first, kills the run's process group."""
    import select

    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            if os.WIFSIGNALED(status):
                return {"signal": os.WTERMSIG(status)}
            return {"code": os.WEXITSTATUS(status)}
        readable, _, _ = select.select([connection], [], [], 0.05)
        if readable and _closed(connection):
            for target in (lambda s: os.killpg(pid, s), lambda s: os.kill(pid, s)):
                try:
                    target(signal.SIGKILL)
                except ProcessLookupError:
                    pass
            os.waitpid(pid, 0)
            return {"signal": signal.SIGKILL}


def _closed(connection: socket.socket) -> bool:
    """Whether the client has gone: EOF, or ECONNRESET when it was killed before it read the run's pid
    (a Unix socket closed with unread data resets its peer)."""
    try:
        return not connection.recv(1, socket.MSG_PEEK)
    except ConnectionResetError:
        return True


def _run(request: dict, fds: list[int], base_path: list[str], child_python: str) -> None:
    """In the run's own process: becomes ``python ARGS`` in the request's environment and directory,
    whose ``sys.executable`` is ``child_python`` (its Python children go through this server too)."""
    import io
    import runpy
    import traceback

    code = 0
    try:
        os.setpgid(0, 0)  # its own group, so the supervisor can kill what it starts as well
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        env, args = request["env"], request["args"]
        safe_path = args[:1] == ["-P"]
        args = args[1:] if safe_path else args
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(env)
        unbuffered = bool(env.get("PYTHONUNBUFFERED"))
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="strict")
        # As the interpreter sets them up: unbuffered with PYTHONUNBUFFERED, else stderr line-buffered.
        for name, fd, errors in (("stdout", 1, "strict"), ("stderr", 2, "backslashreplace")):
            raw = io.FileIO(fd, "w", closefd=False)
            stream = io.TextIOWrapper(
                raw if unbuffered else io.BufferedWriter(raw), encoding="utf-8", errors=errors,
                line_buffering=not unbuffered and (fd == 2 or os.isatty(fd)), write_through=unbuffered,
            )  # fmt: skip
            setattr(sys, name, stream)
            setattr(sys, f"__{name}__", stream)
        sys.executable = child_python
        first = os.getcwd() if args[0] == "-m" else "" if args[0] == "-c" else os.path.dirname(os.path.abspath(args[0]))
        sys.path[:] = [*([] if safe_path else [first]), *_pythonpath(env), *base_path]
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        elif args[0] == "-c":
            import types

            sys.argv = ["-c", *args[2:]]
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(args[1], "<string>", "exec"), main.__dict__)
        else:
            sys.argv = list(args)
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exit_:
        code = _exit_code(exit_.code)
    except KeyboardInterrupt:
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException as error:  # noqa: BLE001 - as the interpreter does: print it (from the run's frames), exit 1
        traceback.print_exception(type(error), error, error.__traceback__.tb_next if error.__traceback__ else None)
        code = 1
    try:
        import atexit
        import threading

        threading._shutdown()  # type: ignore[attr-defined] - joins non-daemon threads, as at exit
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    _flush()
    os._exit(code)


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe at exit, as the interpreter ignores it
            pass


# --- used by the tests -----------------------------------------------------------------------------

_server: subprocess.Popen[bytes] | None = None
_socket_path: str | None = None


def python_command(*python_args: str) -> list[str]:
    """``[python, *python_args]`` as a command whose run may be a fork of the session's server.

    Starts the server on first use and waits (up to 60 s) until it has imported TensorFlow and
    listens; if it never does, the client finds no socket and every run is a fresh process.
    Stopped by :func:`stop` at the end of the session.
    """
    global _server, _socket_path
    if os.environ.get("TRAINER_TEST_FORKSERVER") == "0":
        return [sys.executable, *python_args]
    if _server is None:
        import subprocess
        import tempfile

        from tests.trainer.helpers import TRAINING_IMAGE, trainer_env

        directory = tempfile.mkdtemp(prefix="trainer-forkserver-")
        _socket_path = os.path.join(directory, "socket")
        with open(os.path.join(directory, "server.log"), "wb") as log:
            _server = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "serve", _socket_path],
                cwd=TRAINING_IMAGE, env=trainer_env(TRAINING_IMAGE), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while not os.path.exists(_socket_path) and _server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    return [sys.executable, "-E", "-S", os.path.abspath(__file__), "client", str(_socket_path), *python_args]


def stop() -> None:
    """Stops the server (its runs in flight end with their clients)."""
    global _server
    if _server is not None:
        import subprocess

        _server.terminate()
        try:
            _server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _server.kill()
        _server = None


if __name__ == "__main__":
    if sys.argv[1] == "client":
        _client(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "serve":
        _serve(sys.argv[2])
    else:
        raise SystemExit(f"usage: {sys.argv[0]} client SOCKET PYTHON_ARGS... | serve SOCKET")
