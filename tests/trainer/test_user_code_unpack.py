"""Unpacking a user's sourcedir.tar.gz: what stays inside the source directory is extracted, anything that
would leave it is refused, with and without Python's tar filters (Debian bookworm's 3.11.2 has none)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from trainer.contract.errors import SourceError
from trainer.user_code.source import unpack


def _archive(path: Path, *members: tuple[tarfile.TarInfo, bytes | None]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes = b"print('hi')\n", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info, data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


@pytest.fixture(params=["filters", "no filters"])
def python(request, monkeypatch) -> str:
    """Both code paths: this Python's "data" filter, and the by-hand checks of a Python without filters."""
    if request.param == "no filters":
        monkeypatch.delattr(tarfile, "data_filter")
    return request.param


def test_a_source_archive_is_extracted_with_its_folders_and_links(tmp_path, python) -> None:
    archive = _archive(tmp_path / "sourcedir.tar.gz", _file("train.py"), _file("pkg/util.py", b"X = 1\n"), _link("entry.py", "train.py"))
    out = unpack(archive, tmp_path / "code")
    assert (out / "train.py").read_text() == "print('hi')\n"
    assert (out / "pkg" / "util.py").read_text() == "X = 1\n"
    assert (out / "entry.py").resolve() == (out / "train.py").resolve()


@pytest.mark.parametrize(
    "member",
    [
        _file("../escape.py"),
        _link("out", "../../etc/passwd"),
        _link("abs", "/etc/passwd"),
        _link("hard", "../outside", tarfile.LNKTYPE),
    ],
    ids=["dot-dot", "symlink-out", "symlink-absolute", "hardlink-out"],
)
def test_a_member_that_leaves_the_source_directory_is_refused(tmp_path, python, member) -> None:
    archive = _archive(tmp_path / "sourcedir.tar.gz", _file("train.py"), member)
    with pytest.raises(SourceError, match=r"Cannot unpack the source archive .*sourcedir\.tar\.gz"):
        unpack(archive, tmp_path / "work" / "code")
    assert not (tmp_path / "work" / "escape.py").exists() and not (tmp_path / "escape.py").exists()


def test_an_absolute_member_name_lands_inside_the_source_directory(tmp_path, python) -> None:
    archive = _archive(tmp_path / "sourcedir.tar.gz", _file("/etc/escape.py"))
    out = unpack(archive, tmp_path / "code")
    assert (out / "etc" / "escape.py").is_file()


def test_a_device_file_is_refused(tmp_path, python) -> None:
    device = tarfile.TarInfo("dev0")
    device.type = tarfile.CHRTYPE
    archive = _archive(tmp_path / "sourcedir.tar.gz", _file("train.py"), (device, None))
    with pytest.raises(SourceError, match="Cannot unpack"):
        unpack(archive, tmp_path / "code")


def test_set_user_id_bits_are_dropped(tmp_path, python) -> None:
    archive = _archive(tmp_path / "sourcedir.tar.gz", _file("run.sh", b"#!/bin/sh\n", mode=0o4755))
    out = unpack(archive, tmp_path / "code")
    assert (out / "run.sh").stat().st_mode & 0o7777 == 0o755
