"""First process of an emulated container: give it SageMaker's ``/opt/ml`` and host name, then exec.

Runs as root inside a fresh mount namespace (``unshare --mount``, see
:mod:`scripts.emulator.containers`), so nothing it mounts is seen outside the one container:

1. ``/opt/ml`` becomes the job's tree for this host (a bind mount), so a command that names
   ``/opt/ml/processing/input/code/x.py`` or ``/opt/ml/input/data/sm_drivers/sm_train.sh`` finds
   it, as in SageMaker's container. Where the machine has no ``/opt/ml`` mount point, ``/opt``
   is covered by a tmpfs that carries every original entry of ``/opt`` (bind-mounted back) plus
   an empty ``ml``: nothing is created outside the namespace.
2. ``/etc/hosts`` (multi-host jobs) names the job's hosts ``algo-1`` .. ``algo-N``.
3. ``TMPDIR`` is a fresh directory of this container's own (a container's ``/tmp`` starts empty;
   the machine's is shared by every emulated container);
4. the working directory is the image's ``WORKDIR`` (``/opt/ml``) and the command is exec'd, so
   its exit status and signals are the container's.

Usage: ``python -m scripts.emulator.container_init --opt-ml DIR [--etc-hosts FILE] -- CMD...``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

OPT = Path("/opt")
OPT_ML = OPT / "ml"


def _mount(*args: str) -> None:
    result = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise OSError(f"mount {' '.join(args)}: {result.stderr.strip() or result.returncode}")


def _opt_ml_mount_point(stage_parent: Path) -> None:
    """Make ``/opt/ml`` exist inside this namespace only (tmpfs over ``/opt``, originals bound back)."""
    if OPT_ML.is_dir():
        return
    if not OPT.is_dir():
        raise OSError("this machine has no /opt to put /opt/ml under")
    stage = Path(tempfile.mkdtemp(prefix="host-opt-", dir=stage_parent))
    _mount("--rbind", str(OPT), str(stage))
    _mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(OPT))
    for entry in sorted(stage.iterdir()):
        target = OPT / entry.name
        if entry.is_symlink():
            target.symlink_to(os.readlink(entry))
        elif entry.is_dir():
            target.mkdir()
            _mount("--rbind", str(entry), str(target))
        else:
            target.touch()
            _mount("--bind", str(entry), str(target))
    OPT_ML.mkdir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="container_init")
    parser.add_argument("--opt-ml", required=True, type=Path)
    parser.add_argument("--etc-hosts", type=Path)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("container_init: no command to run", file=sys.stderr)
        return 2
    try:
        # Nothing mounted here may propagate back to the machine's mount namespace.
        _mount("--make-rprivate", "/")
        _opt_ml_mount_point(args.opt_ml.parent)
        _mount("--bind", str(args.opt_ml), str(OPT_ML))
        if args.etc_hosts:
            _mount("--bind", str(args.etc_hosts), "/etc/hosts")
    except OSError as err:
        print(f"emulated container: cannot lay out /opt/ml: {err}", file=sys.stderr)
        return 125  # docker's "the container could not start"
    os.chdir(OPT_ML)
    # A container starts with its own empty /tmp. The emulated ones share the machine's, so each gets
    # a fresh TMPDIR beside its tree: what one job leaves in its temporary directory (the image
    # guard's once-per-container GPU-check marker, say) is never seen by the next job.
    os.environ["TMPDIR"] = tempfile.mkdtemp(prefix="container-tmp-", dir=args.opt_ml.parent)
    try:
        os.execvp(command[0], command)
    except OSError as err:
        # As docker reports it: the entrypoint does not exist or is not executable.
        print(f"emulated container: cannot run {command[0]!r}: {err.strerror}", file=sys.stderr)
        return 127 if isinstance(err, FileNotFoundError) else 126
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
