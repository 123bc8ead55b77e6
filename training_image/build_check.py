"""Build-time check of the training image, run by the Dockerfile (no GPU needed).

A CPU-only TensorFlow in the image (a resolver choosing tensorflow-cpu, a wrong index, a broken
wheel) would otherwise surface only when the first GPU job starts, after the instances are paid
for. The build information TensorFlow was compiled with is static, so the build host needs no
GPU to check it.

    python build_check.py --expect-tf-version 2.21.0

Exit status 0 when every check passes; 1 with one line per problem on stderr otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def problems_with(tf: Any, expected_version: str | None) -> list[str]:
    """What is wrong with this TensorFlow module for a GPU image (empty when nothing is)."""
    found: list[str] = []
    version = getattr(tf, "__version__", "unknown")
    if expected_version and version != expected_version:
        found.append(f"TensorFlow is {version}, expected {expected_version}")
    if not tf.test.is_built_with_cuda():
        found.append(f"TensorFlow {version} was built without CUDA (tf.test.is_built_with_cuda() is False)")
    else:
        build = dict(tf.sysconfig.get_build_info())
        for key in ("cuda_version", "cudnn_version"):
            if not build.get(key):
                found.append(f"TensorFlow {version} build info has no {key}")
    return found


def problems_with_trainer() -> list[str]:
    """The trainer package must import and carry its data files (metric definitions, GPU table)."""
    try:
        metrics = importlib.import_module("trainer.train.metrics")
        gpu_table = importlib.import_module("trainer.gpu_table")
        # Script mode and the helper library user scripts import.
        importlib.import_module("trainer.user_code.runner")
        importlib.import_module("trainer.user_code.guard")
        importlib.import_module("trainer.toolkit")
        definitions = metrics.metric_definitions()
        instance_types = gpu_table.known_instance_types()
    except Exception as err:  # noqa: BLE001 - any failure here is a broken image
        return [f"the trainer package is broken: {type(err).__name__}: {err}"]
    found = []
    if importlib.util.find_spec("tf_keras") is None:
        found.append("tf-keras is not installed: scripts run with TF_USE_LEGACY_KERAS=1 would fail")
    if not definitions:
        found.append("trainer/metric_definitions.json is empty")
    if not instance_types:
        found.append("trainer/gpu_instances.json lists no instance types")
    return found


def problems_with_python_wrapper(wrapper_dir: str, path: str | None = None) -> list[str]:
    """``python`` and ``python3`` on PATH must be the guard wrapper in ``wrapper_dir``, and the guard must import.

    A job that replaces the entrypoint (ScriptProcessor, ModelTrainer) gets the GPU check and the
    failure file only through that wrapper; a PATH that finds the venv's python first would
    silently drop them.
    """
    found = []
    expected = Path(wrapper_dir)
    for name in ("python", "python3"):
        resolved = shutil.which(name, path=path)
        if resolved is None or Path(resolved).parent != expected:
            found.append(f"{name} on PATH is {resolved}, not the guard wrapper in {expected} (put it first on PATH)")
        elif not os.access(resolved, os.X_OK):
            found.append(f"{resolved} is not executable")
    real = os.environ.get("TRAINER_PYTHON", "")
    if not real or not os.access(real, os.X_OK) or Path(real).parent == expected:
        found.append(f"TRAINER_PYTHON={real!r} must name the real interpreter behind the wrapper")
    try:
        guard = importlib.import_module("trainer.user_code.guard")
        if not (guard.HOOK_DIR / "sitecustomize.py").is_file():
            found.append(f"the guard's hook {guard.HOOK_DIR / 'sitecustomize.py'} is missing from the trainer package")
    except Exception as err:  # noqa: BLE001 - any failure here is a broken image
        found.append(f"trainer.user_code.guard does not import: {type(err).__name__}: {err}")
    return found


def problems_with_efa(environ: dict[str, str] | None = None, timeout: float = 60.0) -> list[str]:
    """NCCL's net and tuner plugins must load in a fresh process of this image, and fi_info must run.

    The same probe the job's network check runs (trainer.network_check), with this build step's
    environment, which is the image's ``ENV``: a plugin whose NEEDED library is missing, a plugin
    name or library path that finds nothing, fails the build instead of a p5 job's first minute.
    ``fi_info -p efa`` needs the EFA device, so here only ``fi_info --version`` (libfabric loads).
    """
    import subprocess

    from trainer import network_check

    env = dict(os.environ if environ is None else environ)
    found = []
    plugins = network_check.probe_plugins(env, timeout)
    if not any(p.kind == "tuner" for p in plugins):
        found.append(f"{network_check.ENV_TUNER_PLUGIN} is not set: NCCL would not load the OFI tuner")
    for plugin in plugins:
        if not plugin.ok:
            why = plugin.error or f"exports none of the plugin APIs NCCL 2.27 loads (found at {plugin.path or plugin.loaded})"
            found.append(f"NCCL's {plugin.kind} plugin does not load ({plugin.setting}: {why})")
    try:
        version = subprocess.run(  # noqa: S603 - a fixed tool and argument
            [network_check.FI_INFO, "--version"], env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if version.returncode != 0:
            found.append(f"{network_check.FI_INFO} --version exited {version.returncode}: {version.stderr.strip()[-200:]}")
    except OSError as err:
        found.append(f"libfabric's fi_info does not run: {err}")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Runs every check and reports all problems at once."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expect-tf-version", help="exact TensorFlow version the image must have")
    parser.add_argument("--skip-trainer", action="store_true", help="check TensorFlow only")
    parser.add_argument("--expect-python-wrapper", metavar="DIR", help="python/python3 on PATH must be the guard wrapper in DIR")
    parser.add_argument(
        "--with-efa", choices=("0", "1"), default="0", help="1: NCCL's OFI plugins must load and fi_info must run (WITH_EFA)"
    )
    args = parser.parse_args(argv)

    try:
        import tensorflow as tf
    except Exception as err:  # noqa: BLE001 - an import failure of any kind fails the build
        print(f"build check failed: TensorFlow does not import: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    found = problems_with(tf, args.expect_tf_version)
    if not args.skip_trainer:
        found += problems_with_trainer()
    if args.expect_python_wrapper:
        found += problems_with_python_wrapper(args.expect_python_wrapper)
    if args.with_efa == "1":
        found += problems_with_efa()
    if found:
        for problem in found:
            print(f"build check failed: {problem}", file=sys.stderr)
        return 1
    build = dict(tf.sysconfig.get_build_info())
    print(
        f"build check passed: tensorflow={tf.__version__} cuda={build.get('cuda_version')} "
        f"cudnn={build.get('cudnn_version')}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
