"""The user's code: where it is, unpacking it, and installing its requirements without a network.

The platform's training jobs run with network isolation: the container reaches neither S3 nor PyPI.
So, like the SageMaker Python SDK does for isolated jobs, the source tarball travels as the ``code``
input channel and ``sagemaker_submit_directory`` names it (``/opt/ml/input/data/code/sourcedir.tar.gz``);
an ``s3://`` submit directory is mapped onto that channel when there is one, else downloaded
(:mod:`trainer.user_code.s3_source`) unless the job is known to be isolated. ``requirements.txt``
is installed from wheels shipped in the source directory (``wheels/`` or the directory itself),
into a separate directory put first on the script's ``PYTHONPATH``: the image's own packages
(TensorFlow, CUDA libraries) are never replaced, and only what is missing is installed. A source
directory that is a package (``setup.py``, or a ``pyproject.toml`` with a ``[project]`` table) is
installed there too, with its dependencies, as AWS's toolkit runs ``pip install .``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from trainer.contract.environment import DEFAULT_BASE_DIR, NOTEBOOK_SUFFIX, SCRIPT_SUFFIXES, Paths, notebook_refusal, pip_index_url
from trainer.contract.errors import SourceError
from trainer.logs import log
from trainer.user_code import s3_source

CODE_CHANNEL = "code"
REQUIREMENTS_FILE = "requirements.txt"
SETUP_FILE = "setup.py"
PYPROJECT_FILE = "pyproject.toml"
WHEELS_DIR = "wheels"
SUPPORTED_SUFFIXES = SCRIPT_SUFFIXES


@dataclass(frozen=True)
class SourceCode:
    """The user's code, ready to run.

    Attributes:
        directory: The unpacked source directory (the script's working directory).
        entry_point: The script, inside ``directory``.
        site_dir: Where missing requirements were installed (first on ``PYTHONPATH``), if any.
        installed: ``name==version`` of every package installed from the shipped wheels.
    """

    directory: Path
    entry_point: Path
    site_dir: Path | None
    installed: tuple[str, ...]


def _split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


def locate(submit_directory: str, paths: Paths, input_data_config: Mapping[str, Any]) -> Path:
    """The local file or directory ``submit_directory`` refers to.

    Raises:
        SourceError: it does not exist, or is in S3 without a ``code`` channel carrying it.
    """
    if submit_directory.startswith("s3://"):
        _, key = _split_s3(submit_directory)
        name = PurePosixPath(key).name
        if CODE_CHANNEL in input_data_config or paths.channel_dir(CODE_CHANNEL).is_dir():
            candidate = paths.channel_dir(CODE_CHANNEL) / name
            if candidate.exists():
                return candidate
            raise SourceError(
                f"sagemaker_submit_directory is {submit_directory}, but the '{CODE_CHANNEL}' channel "
                f"({paths.channel_dir(CODE_CHANNEL)}) holds no {name}: point the channel at the tarball's S3 URI."
            )
        channel = f"/opt/ml/input/data/{CODE_CHANNEL}"
        if s3_source.network_isolated(paths.base_dir):
            raise SourceError(s3_source.isolated_message(submit_directory, "sagemaker_submit_directory", channel))
        # Not isolated (the SDK's default): download it, as AWS's training toolkit does.
        return s3_source.download(submit_directory, paths.base_dir / "code-download", "sagemaker_submit_directory", channel)
    local = Path(submit_directory)
    if not local.is_absolute():
        local = paths.base_dir / local
    elif local.is_relative_to(DEFAULT_BASE_DIR) and paths.base_dir != Path(DEFAULT_BASE_DIR):
        # SAGEMAKER_BASE_DIR moved the tree (local runner, tests): /opt/ml/... means the same place in it.
        local = paths.base_dir / local.relative_to(DEFAULT_BASE_DIR)
    if not local.exists():
        raise SourceError(
            f"sagemaker_submit_directory {submit_directory} does not exist in the container; "
            f"expected a directory or a .tar.gz (e.g. /opt/ml/input/data/{CODE_CHANNEL}/sourcedir.tar.gz)."
        )
    return local


def unpack(source: Path, destination: Path) -> Path:
    """``source`` as a directory: a directory as is, a tarball extracted into ``destination``."""
    if source.is_dir():
        return source
    if not tarfile.is_tarfile(source):
        raise SourceError(f"The source {source} is neither a directory nor a tar archive (sourcedir.tar.gz).")
    destination.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(source) as archive:
            if hasattr(tarfile, "data_filter"):
                # The "data" filter refuses absolute paths, '..', device files and links out of the tree.
                archive.extractall(destination, filter="data")
            else:
                # Python before 3.11.4 / 3.10.12 (Debian bookworm's 3.11.2) has no filters: the same refusals, by hand.
                archive.extractall(destination, members=_members_inside(archive, destination))
    except (tarfile.TarError, OSError) as err:
        raise SourceError(f"Cannot unpack the source archive {source}: {err}.") from err
    return destination


def _members_inside(archive: tarfile.TarFile, destination: Path) -> list[tarfile.TarInfo]:
    """Every member of ``archive``, once none of them leaves ``destination`` (what the "data" filter refuses).

    Raises:
        tarfile.TarError: a ``..`` path out of the tree, a device or FIFO, or a link that points out of the tree.
    """
    root = destination.resolve()

    def inside(path: Path) -> bool:
        return path == root or root in path.parents

    members = archive.getmembers()
    for member in members:
        member.name = member.name.lstrip("/")  # as the filter does: /x.py is x.py of the tree
        target = (root / member.name).resolve()
        if not inside(target):
            raise tarfile.TarError(f"member {member.name!r} would be written outside the source directory")
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise tarfile.TarError(f"member {member.name!r} is a device or FIFO, which a source directory cannot hold")
        if member.issym() or member.islnk():
            base = target.parent if member.issym() else root
            if PurePosixPath(member.linkname).is_absolute() or not inside((base / member.linkname).resolve()):
                raise tarfile.TarError(f"member {member.name!r} links to {member.linkname!r}, outside the source directory")
        # As the "data" filter does: no set-user/group-ID bits, files owned by the extracting user.
        member.mode &= 0o755
        member.uid = member.gid = 0
        member.uname = member.gname = ""
    return members


def shebang(path: Path) -> str | None:
    """``path``'s ``#!`` line without the ``#!`` and the newline (``/usr/bin/env python3``), or ``None``."""
    try:
        with path.open("rb") as handle:
            first = handle.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    return first[2:].decode("utf-8", errors="replace").rstrip("\n")


def _is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def entry_command(entry: Path) -> list[str]:
    """How an entry point other than a ``.py`` starts (its arguments follow), as AWS's toolkit runs a command.

    The toolkit makes it executable and runs ``./entry args``, so its ``#!`` line picks the
    interpreter (``#!/bin/bash``, ``#!/usr/bin/env python3``): run directly, or through that line
    when the file could not be made executable (a read-only source). Without a ``#!`` line a ``.sh``
    or an executable text file runs under ``/bin/sh``, as a shell runs one; a binary runs itself.
    """
    line = shebang(entry)
    executable = os.access(entry, os.X_OK)
    if line is not None:
        return [str(entry)] if executable else [*line.strip().split(None, 1), str(entry)]
    if executable and _is_elf(entry):
        return [str(entry)]
    return ["/bin/sh", str(entry)]


def _check_runnable(entry: Path, program: str, what: str) -> None:
    """Refuses, in one line, an entry point that cannot run; makes one with a ``#!`` line executable."""
    if entry.suffix == ".py":
        return
    if entry.name.endswith(NOTEBOOK_SUFFIX):
        raise SourceError(notebook_refusal(program, what))
    line = shebang(entry)
    if line is None:
        if entry.suffix in SUPPORTED_SUFFIXES or os.access(entry, os.X_OK):
            return
        raise SourceError(
            f"The {what} {program!r} has no #! line and is not executable, so it cannot run: name a Python file (.py) "
            "or a shell script (.sh), or start it with a #! line (#!/bin/bash, #!/usr/bin/env python3)."
        )
    if "\r" in line:
        raise SourceError(
            f"The {what} {program!r} has Windows line endings (CRLF), so its #! line names no interpreter: "
            "convert it to Unix line endings (dos2unix, or git's core.autocrlf=input) and pack it again."
        )
    interpreter = (line.split() or [""])[0]
    if not interpreter or not Path(interpreter).is_file():
        raise SourceError(
            f"The {what} {program!r} starts with #!{line.strip()}, but this image has no {interpreter or 'interpreter there'}: "
            "use #!/bin/bash, #!/bin/sh or #!/usr/bin/env python3."
        )
    if not os.access(entry, os.X_OK):
        try:  # as AWS's toolkit does (chmod 777); a read-only source runs through its #! line instead
            entry.chmod(entry.stat().st_mode | 0o111)
        except OSError:
            pass


def find_entry_point(directory: Path, program: str, what: str = "training script") -> Path:
    """The script ``program`` inside ``directory``; refuses paths that leave it and what cannot run.

    A ``.py`` runs through the launcher; anything else as a command (:func:`entry_command`), which
    a notebook, or a file with neither a ``#!`` line nor the executable bit, cannot be.
    ``what`` names the script in messages ("training script", "processing script").
    """
    entry = (directory / program).resolve()
    if directory.resolve() not in entry.parents:
        raise SourceError(f"sagemaker_program {program!r} points outside the source directory {directory}.")
    if not entry.is_file():
        present = sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())
        listing = ", ".join(present[:10]) + (" ..." if len(present) > 10 else "") if present else "no files"
        raise SourceError(
            f"The {what} {program!r} is not in the source directory ({listing}); "
            "check the entry point against the directory you packed."
        )
    _check_runnable(entry, program, what)
    return entry


_MISSING = re.compile(r"(?:No matching distribution found for|Could not find a version that satisfies the requirement) (\S+)")
_NO_BACKEND = re.compile(r"Cannot import build backend '([^']+)'|No module named '([^']+)'")


def package_file(directory: Path) -> str | None:
    """``setup.py`` or ``pyproject.toml`` when ``directory`` is a package pip can install, else ``None``.

    A ``pyproject.toml`` counts only with a ``[project]`` table: one that merely configures tools
    (black, ruff) is not a package.
    """
    if (directory / SETUP_FILE).is_file():
        return SETUP_FILE
    try:
        config = tomllib.loads((directory / PYPROJECT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return PYPROJECT_FILE if isinstance(config.get("project"), dict) else None


def _no_index_reason(isolated: bool | None, index: str | None) -> tuple[str, str]:
    """Why pip found no package, and the other way out: what is true of this job's index."""
    if index:
        return "the package index in PIP_INDEX_URL has none either", ""
    if isolated:
        return "the container has no package index (network isolation)", ""
    return (
        "no package index is configured (the platform's subnets have no internet)",
        ", or set PIP_INDEX_URL in the container's environment to a package index it can reach",
    )


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[;@ ]", requirement.strip(), maxsplit=1)[0].lower()


def _listed(requirements: Path, requirement: str) -> bool:
    """Whether ``requirements`` names ``requirement``'s package on a line of its own."""
    return any(_name(line) == _name(requirement) for line in requirements.read_text(encoding="utf-8").splitlines())


def _requirement_line(requirements: Path, requirement: str) -> str:
    name = re.split(r"[<>=!~\[;@ ]", requirement, maxsplit=1)[0].lower()
    for number, line in enumerate(requirements.read_text(encoding="utf-8").splitlines(), start=1):
        if re.split(r"[<>=!~\[;@ ]", line.strip(), maxsplit=1)[0].lower() == name and name:
            return f"{requirements.name} line {number} ({line.strip()!r})"
    return f"{requirements.name} ({requirement!r}, needed by another requirement)"


def install_requirements(
    directory: Path,
    site_dir: Path,
    env: Mapping[str, str] | None = None,
    wheel_dirs: Sequence[Path] | None = None,
    *,
    project: str | None = None,
    isolated: bool | None = None,
) -> tuple[str, ...]:
    """Installs what ``requirements.txt`` (and the package ``project`` names) needs and the image lacks, from wheels in the source.

    pip first resolves against the image's packages (``--dry-run --report``), so a satisfied
    requirement installs nothing; then the missing wheels go to ``site_dir`` without
    dependencies of their own (the resolution already included them). ``PIP_INDEX_URL`` in the
    job's environment allows an index for jobs that run without network isolation.

    Args:
        directory: Holds ``requirements.txt``.
        site_dir: Where missing packages are installed.
        env: The job's environment, for ``PIP_INDEX_URL`` (read by the contract); this process's by default.
        wheel_dirs: Where the shipped wheels are: ``wheels/`` and ``directory`` itself for
            training and processing code; ``code/lib`` for a serving model's ``inference.py``.
        project: ``setup.py`` or ``pyproject.toml`` (:func:`package_file`): ``directory`` is
            also installed as a package, built with the image's setuptools (no build isolation
            offline: an isolated build would need an index for its build requirements).
        isolated: Whether the job runs with network isolation, for the message when a
            requirement has no wheel (``None``: not known).

    Raises:
        SourceError: naming the requirement and its line (or the package file) when no shipped
            wheel satisfies it, or the package's build backend the image lacks.
    """
    requirements = directory / REQUIREMENTS_FILE
    has_requirements = requirements.is_file()
    wheel_dirs = [directory / WHEELS_DIR, directory] if wheel_dirs is None else list(wheel_dirs)
    shipped = wheel_dirs[0].name if wheel_dirs[0] != directory else "."
    finders = [arg for wheels in wheel_dirs for arg in ("--find-links", str(wheels))]
    index_url = pip_index_url(env)
    index = [] if index_url else ["--no-index", "--no-build-isolation"]
    targets = [*(["-r", str(requirements)] if has_requirements else []), *([str(directory)] if project else [])]
    what = " and ".join(name for name, there in ((requirements.name, has_requirements), (project, project)) if there)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    with tempfile.TemporaryDirectory() as scratch:
        report_file = Path(scratch) / "report.json"
        resolve = subprocess.run(  # noqa: S603 - our interpreter's pip on the user's own requirements file
            [*pip, "install", "--dry-run", "--quiet", "--report", str(report_file), *index, *finders, *targets],
            capture_output=True,
            text=True,
            check=False,
            cwd=directory,
        )
        if resolve.returncode != 0:
            output = resolve.stderr + resolve.stdout
            missing = _MISSING.search(output)
            if missing:
                if (has_requirements and _listed(requirements, missing.group(1))) or not project:
                    where = _requirement_line(requirements, missing.group(1))
                else:
                    where = f"{project} ({missing.group(1)!r}, a dependency of the package it installs)"
                why, otherwise = _no_index_reason(isolated, index_url)
                raise SourceError(
                    f"{where} cannot be installed: no wheel for it in {', '.join(str(w) for w in wheel_dirs)} and "
                    f"{why}. Ship it: pip download "
                    f"--only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.12 -d {shipped} "
                    f"'{missing.group(1)}', then pack {shipped}/ with the code{otherwise}."
                )
            backend = _NO_BACKEND.search(output) if project else None
            if backend:
                lacking = (backend.group(2) or backend.group(1)).split(":")[0].split(".")[0]
                raise SourceError(
                    f"The source directory's {project} cannot be built: it needs {lacking!r}, which this image "
                    "lacks (packages are built offline, with the image's setuptools): build it with setuptools, "
                    f"or ship it as a wheel in {shipped}/ and list it in {REQUIREMENTS_FILE}."
                )
            detail = " ".join(output.split())[-600:]
            raise SourceError(f"pip could not resolve {what} in the source directory: {detail}")
        report = json.loads(report_file.read_text(encoding="utf-8"))
    wanted = report.get("install") or []
    if not wanted:
        log("requirements", file=what, installed="none (all satisfied by the image)")
        return ()
    files = []
    names = []
    for item in wanted:
        url = str(item.get("download_info", {}).get("url", ""))
        meta = item.get("metadata", {})
        names.append(f"{meta.get('name')}=={meta.get('version')}")
        files.append(url[len("file://") :] if url.startswith("file://") else url)
    site_dir.mkdir(parents=True, exist_ok=True)
    install = subprocess.run(  # noqa: S603
        [*pip, "install", "--quiet", "--no-deps", "--target", str(site_dir), *index, *finders, *files],
        capture_output=True,
        text=True,
        check=False,
        cwd=directory,
    )
    if install.returncode != 0:
        detail = " ".join((install.stderr + install.stdout).split())[-600:]
        raise SourceError(f"Installing {', '.join(names)} from the source directory failed: {detail}")
    log("requirements", file=what, installed=",".join(names))
    return tuple(names)


def prepare(
    submit_directory: str,
    program: str,
    paths: Paths,
    input_data_config: Mapping[str, Any],
    what: str = "training script",
) -> SourceCode:
    """Locates, unpacks and checks the user's code, and installs its requirements (shared by training and processing)."""
    location = locate(submit_directory, paths, input_data_config)
    directory = unpack(location, paths.base_dir / "code")
    entry = find_entry_point(directory, program, what)
    site_dir = None
    installed: tuple[str, ...] = ()
    project = package_file(directory)
    if (directory / REQUIREMENTS_FILE).is_file() or project:
        site_dir = paths.base_dir / "code-packages"
        isolated = s3_source.network_isolated(paths.base_dir)
        installed = install_requirements(directory, site_dir, project=project, isolated=isolated)
    return SourceCode(directory=directory, entry_point=entry, site_dir=site_dir, installed=installed)
