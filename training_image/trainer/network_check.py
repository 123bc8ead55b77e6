"""Network verification before any training: on an instance type with EFA, NCCL must use EFA.

NCCL looks for its network plugin once, when the first communicator starts; when the plugin does
not load it says so at INFO level only and runs over TCP sockets, so a p4d/p5 job trains at a
fraction of EFA's bandwidth and nothing fails. What the GPU check (:mod:`trainer.gpu_check`) does
for GPUs this module does for the network. Where the GPU table says the instance type has EFA and
the job spans several hosts on GPUs, the job's start checks that

1. NCCL's net plugin (the AWS OFI plugin) loads by the name NCCL opens (``NCCL_NET_PLUGIN``,
   resolved as NCCL 2.27 resolves it) in a fresh process with the environment this process
   started with, and exports a net-plugin API NCCL loads; the tuner ``NCCL_TUNER_PLUGIN`` names too;
2. libfabric sees the EFA provider (``fi_info -p efa``): the EFA device is attached and passed in;
3. the container sees every EFA interface of the type (``/dev/infiniband/uverbs*``, one per
   network card: 4 on p4d, 32 on p5.48xlarge, the GPU table's ``efa_interfaces``);

and fails with one line naming what is missing. A fresh process, because the dynamic loader reads
``LD_LIBRARY_PATH`` only when a process starts: a change to ``os.environ`` afterwards is seen by
no ``dlopen`` (the image sets it with ``ENV``). Elsewhere it logs what NCCL will use between
hosts: TCP sockets (no EFA on the type), or nothing (one host; CPU collectives run over gRPC).
Each probe is bounded by ``GPU_CHECK_TIMEOUT_SECONDS``, like the GPU check.

The check runs in a fresh process, so it cannot prove that the plugin initializes inside the
training process too. :func:`nccl_environment` therefore also sets ``NCCL_NET`` to the plugin's
network name: NCCL then uses that network or fails the job ("Could not find network"), never
TCP sockets in its place.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from trainer import gpu_table
from trainer.contract.environment import ENV_GPU_CHECK_TIMEOUT, gpu_check_timeout_seconds, loader_environment
from trainer.contract.errors import NetworkCheckError
from trainer.logs import log_json

# Where training_image/Dockerfile has them: the EFA installer's packages (libfabric, the OFI plugin).
OFI_NCCL_LIB = "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu"
EFA_LIB = "/opt/amazon/efa/lib"
FI_INFO = "/opt/amazon/efa/bin/fi_info"
# Where the EFA devices appear in the container (bootstrap.sh passes every uverbs device in; SageMaker does too).
INFINIBAND_DIR = "/dev/infiniband"
# The network name aws-ofi-nccl 1.14 registers for NCCL (src/nccl_ofi_interface_nvidia.c, v1.14.2:
# `.name = "Libfabric"`; it also answers to NCCL_NET "OFI" and "AWS Libfabric"). NCCL_NET set to it
# makes NCCL use the plugin or fail, instead of falling back to its own TCP sockets.
OFI_NET_NAME = "Libfabric"
ENV_NET_PLUGIN = "NCCL_NET_PLUGIN"
ENV_TUNER_PLUGIN = "NCCL_TUNER_PLUGIN"
# NCCL 2.27.7 (src/plugin/plugin_open.cc): the prefix of a plugin given by a short name, and the
# symbols net.cc / tuner.cc look up, newest API first.
NET_PREFIX = "libnccl-net"
TUNER_PREFIX = "libnccl-tuner"
NET_SYMBOLS = tuple(f"ncclNetPlugin_v{v}" for v in (10, 9, 8, 7, 6))
TUNER_SYMBOLS = tuple(f"ncclTunerPlugin_v{v}" for v in (4, 3, 2))
# GPUDirect RDMA over EFA: p4d/p4de (A100) and p5/p5e/p5en (H100/H200); other EFA types copy through host memory.
_RDMA_FAMILIES = ("p4d", "p4de", "p5", "p5e", "p5en")


def nccl_environment(instance_type: str | None, num_workers: int) -> dict[str, str]:
    """The NCCL/libfabric variables for a job of ``num_workers`` hosts of ``instance_type``.

    Empty for one host (NCCL stays on NVLink/PCIe inside it) and for instance types without EFA
    in the GPU table (NCCL's own TCP sockets). With EFA: libfabric's ``efa`` provider for the OFI
    plugin the image names (``NCCL_NET_PLUGIN``, on the image's ``LD_LIBRARY_PATH``), as AWS's deep
    learning containers configure it; RDMA reads where the GPU and EFA support them; NCCL's
    ``NET`` lines (the plugin NCCL loaded, the provider and fabric it chose) in the job's log; and
    ``NCCL_NET`` naming the plugin's network (:data:`OFI_NET_NAME`), so that NCCL fails loudly
    when the plugin does not initialize in the training process instead of running over sockets.
    Read by NCCL with ``getenv`` when its first communicator starts, so setting them in the
    process before that works (unlike ``LD_LIBRARY_PATH``). A job's own value of any of them wins
    (:func:`trainer.train.distribute.apply_nccl_environment`): ``NCCL_NET=Socket`` is the escape
    hatch for a job that knowingly runs over TCP.
    """
    row = gpu_table.lookup(instance_type) if instance_type else None
    if num_workers < 2 or row is None or not row.efa:
        return {}
    env = {
        "FI_PROVIDER": "efa",
        # The trainer forks (the rendezvous watchdog, user code): registered memory must survive it.
        "FI_EFA_FORK_SAFE": "1",
        # NCCL's own bootstrap still needs a TCP interface; never the loopback or docker bridge.
        "NCCL_SOCKET_IFNAME": "^lo,docker",
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "NET",
        "NCCL_NET": OFI_NET_NAME,
    }
    if row.name.split(".")[0] in _RDMA_FAMILIES:
        env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    return env


def plugin_names(prefix: str, setting: str | None) -> list[str]:
    """The file names NCCL 2.27's ``openPluginLib`` hands to ``dlopen``, in order, for one plugin name.

    Unset: ``<prefix>.so``. Set: the name as given (a path, or a library name found on the loader's
    search path), then, for a short name (no ``/``, not ``lib*.so``), ``<prefix>-<name>.so``.
    """
    if not setting:
        return [f"{prefix}.so"]
    names = [setting]
    if "/" not in setting and not (setting.startswith("lib") and setting.endswith(".so")):
        names.append(f"{prefix}-{setting}.so")
    return names


@dataclass(frozen=True)
class PluginLoad:
    """How one NCCL plugin loaded in a fresh process.

    Attributes:
        kind: ``net`` or ``tuner``.
        setting: The variable and its value as NCCL reads it (``NCCL_NET_PLUGIN=libnccl-net.so``).
        tried: The names handed to ``dlopen``, in NCCL's order.
        loaded: The name that loaded, or ``None``.
        path: The file it loaded from, when the loader says.
        symbol: The plugin API symbol found (``ncclNetPlugin_v9``), or ``None``.
        error: Why the last name tried did not load (the loader's message names a missing library).
    """

    kind: str
    setting: str
    tried: tuple[str, ...]
    loaded: str | None = None
    path: str | None = None
    symbol: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Loaded and exports an API NCCL loads."""
        return self.loaded is not None and self.symbol is not None


# Runs in a fresh interpreter (-I: no PYTHONPATH, no site hooks): dlopen each name as NCCL does
# (RTLD_NOW | RTLD_LOCAL) and report the first that loads, the symbol it exports and its file.
_PROBE = r"""
import ctypes, json, os, sys
class Info(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]
def where(lib, symbol):
    try:
        info = Info()
        if ctypes.CDLL(None).dladdr(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p), ctypes.byref(info)) and info.fname:
            return os.path.realpath(info.fname.decode())
    except Exception:
        pass
    return None
results = []
for names, symbols in json.loads(sys.argv[1]):
    result = {"loaded": None, "path": None, "symbol": None, "error": None}
    for name in names:
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as err:
            result["error"] = str(err)
            continue
        result.update(loaded=name, error=None, symbol=next((s for s in symbols if hasattr(lib, s)), None))
        result["path"] = where(lib, result["symbol"]) if result["symbol"] else None
        break
    results.append(result)
print(json.dumps(results))
"""


def _settings(environ: Mapping[str, str]) -> list[tuple[str, str, list[str], tuple[str, ...]]]:
    """(kind, setting, names, symbols) for each plugin NCCL will look for under ``environ``."""
    net = environ.get(ENV_NET_PLUGIN, "")
    wanted = []
    # NCCL_NET_PLUGIN may list several plugins; NCCL tries each in turn.
    for name in [n for n in net.split(",") if n] or [""]:
        setting = f"{ENV_NET_PLUGIN}={name}" if name else f"{ENV_NET_PLUGIN} unset"
        wanted.append(("net", setting, plugin_names(NET_PREFIX, name), NET_SYMBOLS))
    tuner = environ.get(ENV_TUNER_PLUGIN, "")
    if tuner:  # unset: NCCL looks for a tuner in the net plugin's library, then uses its own
        wanted.append(("tuner", f"{ENV_TUNER_PLUGIN}={tuner}", plugin_names(TUNER_PREFIX, tuner), TUNER_SYMBOLS))
    return wanted


def probe_plugins(environ: Mapping[str, str], timeout: float) -> list[PluginLoad]:
    """Loads every plugin NCCL would look for under ``environ``, in one fresh process started with it.

    Raises:
        NetworkCheckError: the probe did not finish within ``timeout`` s or said nothing readable.
    """
    wanted = _settings(environ)
    request = json.dumps([[names, list(symbols)] for _, _, names, symbols in wanted])
    try:
        done = subprocess.run(  # noqa: S603 - our interpreter, our probe
            [sys.executable, "-I", "-c", _PROBE, request],
            env=dict(environ), capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise NetworkCheckError(
            f"Network check failed: loading NCCL's plugins in a fresh process did not finish within {timeout:g}s "
            f"({ENV_GPU_CHECK_TIMEOUT}). Nothing was started."
        ) from None
    try:
        results = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise NetworkCheckError(
            f"Network check failed: the process loading NCCL's plugins ended with status {done.returncode} ({last}). "
            "Nothing was started."
        ) from None
    return [
        PluginLoad(kind=kind, setting=setting, tried=tuple(names), **result)
        for (kind, setting, names, _), result in zip(wanted, results, strict=True)
    ]


@dataclass(frozen=True)
class ProviderProbe:
    """What ``fi_info -p efa`` said.

    Attributes:
        ok: libfabric lists the ``efa`` provider.
        detail: The EFA domains found, or why none were (the tool's last line).
    """

    ok: bool
    detail: str


def probe_efa_provider(environ: Mapping[str, str], timeout: float) -> ProviderProbe:
    """Runs ``fi_info -p efa`` (the image's, else one on ``PATH``) under ``environ``, within ``timeout`` s."""
    binary = FI_INFO if os.access(FI_INFO, os.X_OK) else shutil.which("fi_info", path=environ.get("PATH"))
    if binary is None:
        return ProviderProbe(False, f"libfabric's fi_info is not in the image ({FI_INFO}): an image built with WITH_EFA=0")
    try:
        done = subprocess.run(  # noqa: S603 - a fixed tool and arguments
            [binary, "-p", "efa"], env=dict(environ), capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return ProviderProbe(False, f"fi_info -p efa did not finish within {timeout:g}s ({ENV_GPU_CHECK_TIMEOUT})")
    if done.returncode == 0 and re.search(r"^\s*provider:\s*efa\b", done.stdout, re.MULTILINE):
        domains = sorted(set(re.findall(r"^\s*domain:\s*(\S+)", done.stdout, re.MULTILINE)))
        return ProviderProbe(True, f"domains {','.join(domains) or '(unnamed)'}")
    said = ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1][:200]
    return ProviderProbe(False, f"fi_info -p efa exited {done.returncode}: {said}")


def efa_device_count(directory: str | None = None) -> int:
    """EFA devices this container sees: ``uverbs*`` entries of ``/dev/infiniband`` (one per EFA interface)."""
    try:
        return sum(1 for name in os.listdir(directory or INFINIBAND_DIR) if name.startswith("uverbs"))
    except OSError:
        return 0


def expected_transport(instance_type: str | None, num_workers: int, *, uses_gpus: bool) -> tuple[str, str]:
    """What NCCL should use between hosts, ``efa``, ``sockets`` or ``none``, and why."""
    if num_workers < 2:
        return "none", "one host: NCCL stays on NVLink/PCIe inside it"
    if not uses_gpus:
        return "none", "no GPUs: collectives between hosts run over gRPC, not NCCL"
    row = gpu_table.lookup(instance_type) if instance_type else None
    if row is None:
        return "sockets", f"instance type {instance_type or '(not given)'} is not in gpu_instances.json: TCP sockets expected"
    if not row.efa:
        return "sockets", f"{row.name} has no EFA (gpu_instances.json): NCCL uses TCP sockets between hosts"
    return "efa", f"{row.name} has EFA (gpu_instances.json)"


def _missing(plugins: list[PluginLoad], provider: ProviderProbe, devices: tuple[str, int, int] | None = None) -> list[str]:
    missing = []
    if devices is not None and devices[2] < devices[1]:
        name, expected, seen = devices
        missing.append(f"{name} has {expected} EFA interfaces, the container sees {seen}")
    nets = [p for p in plugins if p.kind == "net"]
    if not any(p.ok for p in nets):
        broken = next((p for p in nets if p.loaded), None)
        if broken is not None:
            missing.append(
                f"NCCL's net plugin {broken.path or broken.loaded} ({broken.setting}) exports none of "
                f"{', '.join(NET_SYMBOLS)}, the APIs NCCL 2.27 loads"
            )
        else:
            tried = "; ".join(f"{p.setting}: {p.error}" for p in nets)
            missing.append(f"NCCL's net plugin does not load ({tried})")
    for tuner in (p for p in plugins if p.kind == "tuner" and not p.ok):
        why = tuner.error if tuner.loaded is None else f"exports none of {', '.join(TUNER_SYMBOLS)}"
        missing.append(f"NCCL's tuner plugin does not load ({tuner.setting}: {why})")
    if not provider.ok:
        missing.append(
            f"libfabric does not see the EFA provider ({provider.detail}; is the instance's EFA interface attached "
            "and /dev/infiniband/uverbs* passed into the container?)"
        )
    return missing


def verify(
    instance_type: str | None,
    num_workers: int,
    *,
    uses_gpus: bool,
    environ: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Checks that NCCL will use EFA where the instance type has it; logs one ``[network-check]`` line.

    Args:
        instance_type: The job's instance type (EC2 or ``ml.`` name), looked up in the GPU table.
        num_workers: Hosts in the job.
        uses_gpus: Whether collectives run on GPUs (NCCL); CPU jobs use gRPC.
        environ: The environment NCCL will see (default: this process's, with ``LD_LIBRARY_PATH`` as
            it started, :func:`loader_environment`, and the job's :func:`nccl_environment` where unset).
        timeout: Bound on each probe in seconds (default ``GPU_CHECK_TIMEOUT_SECONDS``).

    Returns:
        The report logged as ``[network-check] {...}``.

    Raises:
        NetworkCheckError: EFA is expected and the plugin does not load, libfabric sees no EFA
            provider or the container sees fewer EFA devices than the type has ("p4d.24xlarge has 4
            EFA interfaces, the container sees 1"); one line naming each missing piece.
    """
    transport, reason = expected_transport(instance_type, num_workers, uses_gpus=uses_gpus)
    report: dict[str, Any] = {"instance_type": instance_type, "hosts": num_workers, "expected": transport, "reason": reason}
    if transport != "efa":
        report["ok"] = True
        log_json("network-check", report)
        return report
    env = {**nccl_environment(instance_type, num_workers), **(loader_environment() if environ is None else dict(environ))}
    limit = gpu_check_timeout_seconds() if timeout is None else timeout
    plugins = probe_plugins(env, limit)
    provider = probe_efa_provider(env, limit)
    row = gpu_table.lookup(instance_type) if instance_type else None
    devices = (row.name, row.efa_interfaces, efa_device_count()) if row is not None and row.efa_interfaces else None
    missing = _missing(plugins, provider, devices)
    report.update(
        ok=not missing,
        efa_devices={"expected": devices[1], "seen": devices[2]} if devices else None,
        plugins=[{k: v for k, v in asdict(p).items() if v is not None} for p in plugins],
        efa_provider=asdict(provider),
        ld_library_path=env.get("LD_LIBRARY_PATH", ""),
    )
    log_json("network-check", report)
    if missing:
        raise NetworkCheckError(
            f"Network check failed: {reason} and this job spans {num_workers} hosts on GPUs, but "
            f"{'; and '.join(missing)}. NCCL would fall back to TCP sockets at a fraction of EFA's bandwidth; "
            "nothing was started."
        )
    return report
