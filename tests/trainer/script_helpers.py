"""Laying out script-mode jobs: a source directory, the SDK's hyperparameters, wheels for requirements."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
import textwrap
import zipfile
from pathlib import Path
from typing import Any


def write_source(directory: Path, files: dict[str, str]) -> Path:
    """Writes ``files`` (relative path -> text, dedented) into ``directory``."""
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return directory


def pack(directory: Path, archive: Path) -> Path:
    """``sourcedir.tar.gz`` of ``directory``'s contents, as the SageMaker SDK and scripts.launch pack it."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(directory.rglob("*")):
            tar.add(path, arcname=path.relative_to(directory).as_posix(), recursive=False)
    return archive


def script_job(
    base: Path,
    submit_directory: str,
    program: str = "train.py",
    hyperparameters: dict[str, Any] | None = None,
    *,
    channels: dict[str, dict[str, Any]] | None = None,
    resource_config: dict[str, Any] | None = None,
    sdk_encoding: bool = True,
) -> Path:
    """Lays out ``base`` like /opt/ml for a script-mode job.

    With ``sdk_encoding`` every value is JSON-encoded, as the SageMaker Python SDK writes them
    (``"\\"train.py\\""``, ``"3"``); otherwise values are plain strings, as scripts.launch sends them.
    """
    values: dict[str, Any] = {"sagemaker_program": program, "sagemaker_submit_directory": submit_directory}
    values.update(hyperparameters or {})
    encoded = {k: (json.dumps(v) if sdk_encoding else str(v)) for k, v in values.items()}
    config = base / "input" / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "hyperparameters.json").write_text(json.dumps(encoded))
    (config / "inputdataconfig.json").write_text(json.dumps(channels if channels is not None else {}))
    if resource_config is not None:
        (config / "resourceconfig.json").write_text(json.dumps(resource_config))
    for name in (channels or {}):
        (base / "input" / "data" / name).mkdir(parents=True, exist_ok=True)
    return base


def build_wheel(directory: Path, name: str, version: str, module_source: str) -> Path:
    """A pure-Python wheel ``<name>-<version>-py3-none-any.whl`` with one module, made offline."""
    directory.mkdir(parents=True, exist_ok=True)
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": module_source.encode(),
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record_lines = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record_lines.append(f"{path},sha256={digest},{len(data)}")
    record_lines.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record_lines) + "\n").encode()
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    wheel.write_bytes(buffer.getvalue())
    return wheel
