"""What the built image carries: the ENV, entrypoint and port its Dockerfile promises, and not the
build machine's CA bundle (given to pip as a BuildKit secret, so it must be in no layer)."""

from __future__ import annotations

import os
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.image import containers
from tests.trainer.helpers import TRAINING_IMAGE

pytestmark = [pytest.mark.image, pytest.mark.slow]

CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def dockerfile_runtime_env() -> dict[str, str]:
    """``ENV`` settings of the Dockerfile's runtime stage, ``$PATH`` left as written."""
    runtime = (TRAINING_IMAGE / "Dockerfile").read_text().split(" AS runtime", 1)[1]
    settings: dict[str, str] = {}
    for statement in re.findall(r"^ENV ((?:.*\\\n)*.*)$", runtime, re.MULTILINE):
        settings.update(re.findall(r"(\w+)=(\S+)", statement.replace("\\\n", " ")))
    return settings


def test_the_image_has_every_env_setting_of_the_dockerfile(image):
    config = containers.inspect_image(image.tag)["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    promised = dockerfile_runtime_env()
    assert promised["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" and "CUDA_CACHE_MAXSIZE" in promised
    for key, value in promised.items():
        if key == "PATH":
            assert env["PATH"].startswith(value.removesuffix(":$PATH") + ":"), env["PATH"]
        elif "$" in value:  # LD_LIBRARY_PATH: the Dockerfile's part, then the base's value where it has one
            assert env[key].startswith(value.split("$")[0]), (key, env[key])
        else:
            assert env.get(key) == value, key
    assert config["Entrypoint"] == ["/usr/bin/tini", "--", "/opt/venv/bin/python", "-m", "trainer"]
    assert config["Cmd"] == ["train"]
    assert "8080/tcp" in config["ExposedPorts"]


def test_a_process_in_the_container_sees_the_settings_and_the_guard_wrapper_first(image, tmp_path):
    probe = "import os, shutil; print(os.environ['TF_FORCE_GPU_ALLOW_GROWTH'], shutil.which('python3'), shutil.which('python'))"
    finished = containers.run(image.tag, ["-c", probe], entrypoint="python3")
    assert finished.returncode == 0, finished.explain()
    assert finished.stdout.split() == ["true", "/opt/trainer/bin/python3", "/opt/trainer/bin/python"]


def test_the_build_machines_ca_bundle_is_in_no_layer(image):
    if not CA_BUNDLE.is_file():
        pytest.skip(f"this machine has no {CA_BUNDLE} to look for")
    # The search finds what the image does carry: the guard wrapper the Dockerfile copies in.
    wrapper = (TRAINING_IMAGE / "bin" / "python").read_bytes()
    assert [name for name, data in _layer_files_sized(image.tag, len(wrapper)) if data == wrapper]
    bundle = CA_BUNDLE.read_bytes()
    found = [name for name, data in _layer_files_sized(image.tag, len(bundle)) if data == bundle]
    assert found == [], f"the build machine's CA bundle is baked into the image: {found}"
    secrets = containers.run(image.tag, ["-c", "ls -A /run/secrets 2>/dev/null || true"], entrypoint="/bin/sh")
    assert secrets.stdout.strip() == "", secrets.explain()


def _layer_files_sized(tag: str, size: int) -> Iterator[tuple[str, bytes]]:
    """``(path, bytes)`` of every regular file of ``size`` bytes in any layer of the image.

    Every layer, not only the merged view a container sees: a file deleted by a later layer is still
    in the image anyone who pulls it gets. The layers' directories where this process can read
    them (a local overlay2 daemon, seconds), else the layers ``docker save`` writes (about a minute).
    """
    directories = _overlay_layer_dirs(tag)
    if directories is None:
        yield from _saved_layer_files_sized(tag, size)
        return
    found = subprocess.run(
        ["find", *map(str, directories), "-type", "f", "-size", f"{size}c", "-print0"],
        capture_output=True, timeout=300, check=True,
    )  # fmt: skip
    for name in filter(None, found.stdout.split(b"\0")):
        yield name.decode(errors="replace"), Path(name.decode(errors="surrogateescape")).read_bytes()


def _overlay_layer_dirs(tag: str) -> list[Path] | None:
    driver = containers.inspect_image(tag).get("GraphDriver") or {}
    if driver.get("Name") != "overlay2":
        return None
    data = driver.get("Data") or {}
    directories = [Path(d) for key in ("UpperDir", "LowerDir") for d in (data.get(key) or "").split(":") if d]
    readable = directories and all(d.is_dir() and os.access(d, os.R_OK | os.X_OK) for d in directories)
    return directories if readable else None


def _saved_layer_files_sized(tag: str, size: int) -> Iterator[tuple[str, bytes]]:
    saving = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE)
    assert saving.stdout is not None
    try:
        with tarfile.open(fileobj=saving.stdout, mode="r|") as archive:
            for member in archive:
                if not member.isfile() or not (member.name.endswith("layer.tar") or member.name.startswith("blobs/")):
                    continue
                layer = archive.extractfile(member)
                assert layer is not None
                try:
                    with tarfile.open(fileobj=layer, mode="r|") as files:
                        for entry in files:
                            if entry.isfile() and entry.size == size:
                                content = files.extractfile(entry)
                                assert content is not None
                                yield f"{member.name}:{entry.name}", content.read()
                except tarfile.ReadError:
                    continue  # a blob that is not a layer (config, manifest)
    finally:
        saving.stdout.close()
        saving.wait(timeout=300)
