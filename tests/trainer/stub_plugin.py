"""Stand-ins for NCCL's OFI plugin, its libraries and ``fi_info``, compiled here with gcc.

The real plugin comes with AWS's EFA installer, which only a build with internet access downloads.
What the network check and the image's ``ENV`` must get right does not depend on the plugin's
code, only on the loader: the file names NCCL opens, the ``NEEDED`` entries the loader must
resolve, the exported API symbol. These stubs have exactly those, and nothing else:

- ``libnccl-net.so`` exports ``ncclNetPlugin_v9`` and NEEDs ``libstubfabric.so.1`` and
  ``libstubhwloc.so.15`` (made-up names, so no library of this machine can stand in for them);
- ``libnccl-ofi-tuner.so`` exports ``ncclTunerPlugin_v3``;
- ``fi_info`` scripts that find the EFA provider, find none, or hang.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

NET_NEEDED = ("libstubfabric.so.1", "libstubhwloc.so.15")


@dataclass(frozen=True)
class StubPlugins:
    """Where the stubs are.

    Attributes:
        plugin_dir: ``libnccl-net.so`` and ``libnccl-ofi-tuner.so``.
        deps_dir: The two libraries the net plugin NEEDs.
        fi_info_efa: An ``fi_info`` that lists one EFA domain.
        fi_info_none: An ``fi_info`` that finds no EFA provider (``-61``, as libfabric says it).
        fi_info_hangs: An ``fi_info`` that never answers.
    """

    plugin_dir: Path
    deps_dir: Path
    fi_info_efa: Path
    fi_info_none: Path
    fi_info_hangs: Path

    def library_path(self, *, with_deps: bool = True) -> str:
        """An ``LD_LIBRARY_PATH`` with the plugin's directory, and its libraries' unless told otherwise."""
        return ":".join([str(self.plugin_dir), *([str(self.deps_dir)] if with_deps else [])])


def _gcc(*args: str | Path) -> None:
    done = subprocess.run(["gcc", *map(str, args)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def compile_library(source: str, output: Path, *needed: str, search: Path | None = None) -> Path:
    """A shared library at ``output`` (its SONAME the file name) from C ``source``, NEEDing ``needed``."""
    c_file = output.with_suffix(".c")
    c_file.write_text(source)
    links = [f"-l:{name}" for name in needed]
    library_dirs = [f"-L{search}"] if search else []
    # --no-as-needed: every library named is NEEDED, as a plugin linked against it would be.
    _gcc("-shared", "-fPIC", "-o", output, f"-Wl,-soname,{output.name}", c_file, *library_dirs, "-Wl,--no-as-needed", *links)
    c_file.unlink()
    return output


def needed_libraries(library: Path) -> list[str]:
    """The ``NEEDED`` entries of an ELF shared library, in order (``readelf -d``)."""
    done = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, timeout=30, check=True)
    return [line.split("[", 1)[1].rstrip("]") for line in done.stdout.splitlines() if "(NEEDED)" in line]


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def build(root: Path) -> StubPlugins:
    """Compiles the stubs under ``root``; skips the test where gcc or readelf is missing."""
    for tool in ("gcc", "readelf"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install gcc binutils)")
    plugin_dir, deps_dir, bin_dir = root / "plugin", root / "deps", root / "bin"
    for directory in (plugin_dir, deps_dir, bin_dir):
        directory.mkdir(parents=True)
    compile_library("int stub_fabric(void) { return 1; }\n", deps_dir / NET_NEEDED[0])
    compile_library("int stub_hwloc(void) { return 2; }\n", deps_dir / NET_NEEDED[1])
    compile_library(
        "int stub_fabric(void); int stub_hwloc(void);\n"
        "struct { const char *name; int (*init)(void); } ncclNetPlugin_v9 = { \"AWS Libfabric (stub)\", stub_fabric };\n"
        "int uses_hwloc(void) { return stub_hwloc(); }\n",
        plugin_dir / "libnccl-net.so",
        *NET_NEEDED,
        search=deps_dir,
    )
    compile_library("struct { const char *name; } ncclTunerPlugin_v3 = { \"stub tuner\" };\n", plugin_dir / "libnccl-ofi-tuner.so")
    return StubPlugins(
        plugin_dir=plugin_dir,
        deps_dir=deps_dir,
        fi_info_efa=_script(
            bin_dir / "fi_info_efa",
            'echo "provider: efa"; echo "    fabric: efa"; echo "    domain: rdmap16s27-rdm"; echo "    version: 122.0"\n',
        ),
        fi_info_none=_script(bin_dir / "fi_info_none", 'echo "fi_getinfo: -61 (No data available)" >&2; exit 61\n'),
        fi_info_hangs=_script(bin_dir / "fi_info_hangs", "exec sleep 30\n"),
    )
