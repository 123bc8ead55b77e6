"""The production image's EFA path (issue #43), proven here as far as a machine without AWS's hosts allows.

Only a build with internet (``scripts/build-image.sh --production``: the CUDA base, WITH_EFA=1)
runs AWS's EFA installer. What is checked here instead: the Dockerfile's EFA and runtime stages
as text (no ``--minimal``, one plugin, no CUDA headers, ``libhwloc15``, the image-level names and
library path); that every library the OFI plugin NEEDs has a provider in the runtime stage; that
the image's ``ENV`` makes a fresh process load a plugin by the names NCCL uses (stand-ins compiled
here); the build's own plugin check; and the production build's refusal where the hosts do not answer.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer import stub_plugin
from tests.trainer.helpers import ROOT, TRAINING_IMAGE
from trainer import network_check

DOCKERFILE = TRAINING_IMAGE / "Dockerfile"
sys.path.insert(0, str(TRAINING_IMAGE))
import build_check  # noqa: E402 - lives beside the Dockerfile, not in a package

INSTALLER_FLAGS = "-y --skip-kmod --skip-limit-conf --no-verify"

# readelf -d of aws-ofi-nccl v1.14.0's libnccl-net.so (the 1.14 series the pinned EFA installer
# carries), built on this machine from the v1.14.0 sources against Debian bookworm's libfabric-dev
# 1.17.0 and libhwloc-dev 2.9.0: ./autogen.sh && ./configure --with-libfabric=/usr
# --with-cuda=<CUDA 12.5 headers> --enable-cudart-dynamic --disable-tests && make. No RPATH.
# Re-derive with AWS_OFI_NCCL_PLUGIN=<path to the built libnccl-net.so> (the test below).
OFI_PLUGIN_NEEDED = ("libcudart.so.12", "libhwloc.so.15", "libfabric.so.1", "libc.so.6")
# What in the runtime stage provides each: the regex it must match there, and why it is enough.
RUNTIME_PROVIDERS = {
    "libfabric.so.1": (re.escape(f"./efa_installer.sh {INSTALLER_FLAGS}"), "the installer's libfabric, in /opt/amazon/efa/lib"),
    "libhwloc.so.15": (r"apt-get install -y --no-install-recommends libhwloc15\b", "Ubuntu's libhwloc15"),
    # Only a --enable-cudart-dynamic build NEEDs it (the default links cudart statically); the
    # CUDA "base" flavour ships the CUDA runtime anyway.
    "libcudart.so.12": (r"^FROM \$\{CUDA_BASE_IMAGE\} AS runtime$", "nvidia/cuda:*-base, which ships libcudart"),
    "libc.so.6": (r"^FROM \$\{CUDA_BASE_IMAGE\} AS runtime$", "every base"),
}


def stages() -> dict[str, str]:
    """The Dockerfile's stages by name, each from its FROM line to the next."""
    parts = re.split(r"^(?=FROM )", DOCKERFILE.read_text(), flags=re.M)
    named = {}
    for part in parts:
        match = re.match(r"FROM \S+ AS ([\w.${}-]+)", part)
        if match:
            named[match[1]] = part
    return named


def instructions(stage: str) -> str:
    """The stage without its comment lines (what Docker runs)."""
    return "\n".join(line for line in stages()[stage].splitlines() if not line.lstrip().startswith("#"))


def runtime_env() -> dict[str, str]:
    settings: dict[str, str] = {}
    for statement in re.findall(r"^ENV ((?:.*\\\n)*.*)$", stages()["runtime"], re.M):
        settings.update(re.findall(r"(\w+)=(\S+)", statement.replace("\\\n", " ")))
    return settings


def test_no_stage_installs_efa_with_minimal_and_the_runtime_installs_it_as_aws_images_do():
    for name in ("efa-1", "efa-0", "efa", "runtime"):
        assert "--minimal" not in instructions(name), name
    runtime = instructions("runtime")
    assert runtime.count("./efa_installer.sh") == 1
    assert re.search(rf"\./efa_installer\.sh {re.escape(INSTALLER_FLAGS)} \\$", runtime, re.M), "exactly AWS's images' flags"
    assert re.search(r'if \[ "\$\{WITH_EFA\}" = 1 \]; then', runtime), "the installer runs only with WITH_EFA=1"
    # The efa-1 stage only downloads the installer, and checks AWS's published checksum first.
    efa = instructions("efa-1")
    assert "efa_installer.sh" not in efa
    assert 'https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz' in efa
    assert re.search(r"^ARG EFA_INSTALLER_SHA256=[0-9a-f]{64}$", efa, re.M) and "sha256sum --check --strict" in efa


def test_one_plugin_the_installers_and_no_cuda_headers_anywhere():
    text = "\n".join(instructions(name) for name in stages())
    for second_plugin in ("aws-ofi-nccl", "github.com", "./configure", "make install", "--with-cuda"):
        assert second_plugin not in text, second_plugin
    assert "COPY --from=efa /opt/amazon/ofi-nccl" not in text
    assert "COPY --from=efa /tmp/efa/aws-efa-installer /tmp/aws-efa-installer" in instructions("runtime")
    for headers in ("cuda-cudart-dev", "cuda-nvcc", "cuda-toolkit", "-dev "):
        assert headers not in instructions("runtime") and headers not in instructions("efa-1"), headers


def test_the_runtime_stage_names_libhwloc15_and_removes_the_installers_open_mpi():
    runtime = instructions("runtime")
    efa_branch = runtime[runtime.index('if [ "${WITH_EFA}" = 1 ]; then') : runtime.index("fi \\")]
    assert "libhwloc15" in efa_branch and "./efa_installer.sh" in efa_branch
    assert efa_branch.index("libhwloc15") < efa_branch.index("./efa_installer.sh")
    assert "dpkg-query -W -f '${Package}\\n' 'openmpi*'" in efa_branch and "xargs -r dpkg --purge" in efa_branch
    assert "apt-get purge" not in efa_branch and "autoremove" not in efa_branch, "dpkg refuses to take a dependent along"
    assert not re.search(r"\bmpirun\b", (TRAINING_IMAGE / "trainer").joinpath("train", "distribute.py").read_text())


def test_the_plugin_names_and_library_path_are_set_for_every_process_of_the_image():
    env = runtime_env()
    assert env["NCCL_NET_PLUGIN"] == "libnccl-net.so"  # aws-ofi-nccl 1.14's file; "ofi" would look for libnccl-net-ofi.so
    assert env["NCCL_TUNER_PLUGIN"] == "libnccl-ofi-tuner.so"
    assert network_check.plugin_names(network_check.NET_PREFIX, env["NCCL_NET_PLUGIN"]) == ["libnccl-net.so"]
    # Without a base LD_LIBRARY_PATH no empty element (the working directory) is appended.
    assert env["LD_LIBRARY_PATH"] == f"{network_check.OFI_NCCL_LIB}:{network_check.EFA_LIB}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
    # Set before the build check runs, so the build proves the names load.
    runtime = stages()["runtime"]
    assert runtime.index("ENV LD_LIBRARY_PATH=") < runtime.index("RUN python /opt/trainer/build_check.py")
    assert re.search(r'build_check\.py .*\\\n\s+--with-efa "\$\{WITH_EFA\}"', runtime)


def test_every_library_the_ofi_plugin_needs_has_a_provider_in_the_runtime_stage():
    runtime = instructions("runtime")
    assert set(OFI_PLUGIN_NEEDED) <= set(RUNTIME_PROVIDERS), "a new NEEDED library: name what installs it"
    for library in OFI_PLUGIN_NEEDED:
        pattern, why = RUNTIME_PROVIDERS[library]
        assert re.search(pattern, runtime, re.M), f"{library}: {why}"
    assert re.search(r"^ARG CUDA_BASE_IMAGE=nvidia/cuda:[\d.]+-base-ubuntu24\.04$", DOCKERFILE.read_text(), re.M)


@pytest.mark.skipif(not os.environ.get("AWS_OFI_NCCL_PLUGIN"), reason="set AWS_OFI_NCCL_PLUGIN to a built libnccl-net.so to re-derive")
def test_the_recorded_needed_list_is_what_a_built_plugin_needs():
    plugin = Path(os.environ["AWS_OFI_NCCL_PLUGIN"])
    if not (stub_plugin.needed_libraries(plugin) and os.access(plugin, os.R_OK)):
        pytest.fail(f"{plugin} has no NEEDED entries")
    assert sorted(stub_plugin.needed_libraries(plugin)) == sorted(OFI_PLUGIN_NEEDED)
    rpath = subprocess.run(["readelf", "-d", str(plugin)], capture_output=True, text=True, check=True).stdout
    assert "RPATH" not in rpath and "RUNPATH" not in rpath, "the plugin finds its libraries only through the loader's path"


@pytest.fixture(scope="module")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The stand-in plugin where the image has it (under a temporary root), and the image's ENV mapped there."""
    root = tmp_path_factory.mktemp("image-root")
    stubs = stub_plugin.build(root / "build")
    ofi, efa = root / network_check.OFI_NCCL_LIB.lstrip("/"), root / network_check.EFA_LIB.lstrip("/")
    ofi.mkdir(parents=True)
    efa.mkdir(parents=True)
    for plugin in stubs.plugin_dir.iterdir():
        plugin.rename(ofi / plugin.name)
    for library in stubs.deps_dir.iterdir():
        library.rename(efa / library.name)
    env = runtime_env()
    image_dirs = env["LD_LIBRARY_PATH"].split("$")[0].split(":")
    return root, {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LD_LIBRARY_PATH": ":".join(str(root / d.lstrip("/")) for d in image_dirs),
        "NCCL_NET_PLUGIN": env["NCCL_NET_PLUGIN"],
        "NCCL_TUNER_PLUGIN": env["NCCL_TUNER_PLUGIN"],
    }


def test_a_fresh_process_with_the_images_environment_loads_the_plugin_by_the_names_nccl_opens(image_root):
    root, env = image_root
    net, tuner = network_check.probe_plugins(env, timeout=20)
    assert net.ok and net.loaded == "libnccl-net.so" and net.path == str(root / network_check.OFI_NCCL_LIB.lstrip("/") / "libnccl-net.so")
    assert tuner.ok and tuner.symbol == "ncclTunerPlugin_v3"


def test_the_build_check_fails_the_build_when_a_plugin_does_not_load(image_root, monkeypatch, tmp_path):
    root, env = image_root
    fi_info = tmp_path / "fi_info"
    fi_info.write_text('#!/bin/sh\necho "fi_info: 2.1.0amzn2.0"\n')
    fi_info.chmod(0o755)
    monkeypatch.setattr(network_check, "FI_INFO", str(fi_info))
    assert build_check.problems_with_efa(env, timeout=20) == []
    # The plugin's libraries not on the path (libhwloc15 left out, say): the build fails naming the library.
    only_plugin = {**env, "LD_LIBRARY_PATH": env["LD_LIBRARY_PATH"].split(":")[0]}
    (problem,) = build_check.problems_with_efa(only_plugin, timeout=20)
    assert problem.startswith("NCCL's net plugin does not load (NCCL_NET_PLUGIN=libnccl-net.so: libstubfabric.so.1: cannot open")
    no_tuner = {k: v for k, v in env.items() if k != "NCCL_TUNER_PLUGIN"}
    assert build_check.problems_with_efa(no_tuner, timeout=20) == ["NCCL_TUNER_PLUGIN is not set: NCCL would not load the OFI tuner"]
    monkeypatch.setattr(network_check, "FI_INFO", str(tmp_path / "absent"))
    assert build_check.problems_with_efa(env, timeout=20)[0].startswith("libfabric's fi_info does not run")


def test_the_build_check_leaves_efa_alone_without_it(monkeypatch):
    monkeypatch.setattr(build_check, "problems_with_efa", lambda: pytest.fail("WITH_EFA=0 checks no plugin"))
    assert build_check.main(["--skip-trainer", "--with-efa", "0"]) in (0, 1)  # 1 here: this TensorFlow has no CUDA
    parser_help = subprocess.run(
        [sys.executable, str(TRAINING_IMAGE / "build_check.py"), "--help"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "--with-efa {0,1}" in parser_help


def _build_image(tmp_path: Path, *args: str, curl_says: str | None) -> subprocess.CompletedProcess[str]:
    """scripts/build-image.sh with a curl that answers as told and a docker that records being run."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir(exist_ok=True)
    marker = tmp_path / "docker-was-run"
    (fake_bin / "docker").write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    curl = f"#!/bin/sh\necho '{curl_says}' >&2\nexit 6\n" if curl_says else "#!/bin/sh\nexit 0\n"
    (fake_bin / "curl").write_text(curl)
    for tool in ("docker", "curl"):
        (fake_bin / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}", "PULL_TIMEOUT_SECONDS": "5"}
    script = ROOT / "scripts" / "build-image.sh"
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env=env, timeout=60, check=False)


def test_the_production_build_refuses_in_one_line_where_the_hosts_do_not_answer(tmp_path):
    done = _build_image(tmp_path, "--production", curl_says="curl: (6) Could not resolve host: registry-1.docker.io")
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("build-image: --production refused: registry-1.docker.io (the registry of nvidia/cuda:12.5.1-base-ubuntu24.04)")
    assert "Could not resolve host" in line and "efa-installer.amazonaws.com" in line
    assert not (tmp_path / "docker-was-run").exists(), "refused before anything touched Docker"


def test_the_production_build_is_never_the_stand_in(tmp_path):
    done = _build_image(tmp_path, "--production", "--standin", curl_says=None)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "build-image: --production and --standin exclude each other: the stand-in is never the production image"
    ]
    assert not (tmp_path / "docker-was-run").exists()


def test_the_build_scripts_help_names_the_production_build():
    script = ROOT / "scripts" / "build-image.sh"
    usage = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True, timeout=30, check=True).stdout
    assert "scripts/build-image.sh --production" in usage and "WITH_EFA=1" in usage
    assert usage.startswith("Builds the training image") and "set -euo pipefail" not in usage
