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
import sys
from collections.abc import Sequence
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
        metrics = importlib.import_module("trainer.metrics")
        gpu_table = importlib.import_module("trainer.gpu_table")
        # Script mode and the helper library user scripts import.
        importlib.import_module("trainer.user_code.runner")
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


def main(argv: Sequence[str] | None = None) -> int:
    """Runs every check and reports all problems at once."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expect-tf-version", help="exact TensorFlow version the image must have")
    parser.add_argument("--skip-trainer", action="store_true", help="check TensorFlow only")
    args = parser.parse_args(argv)

    try:
        import tensorflow as tf
    except Exception as err:  # noqa: BLE001 - an import failure of any kind fails the build
        print(f"build check failed: TensorFlow does not import: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    found = problems_with(tf, args.expect_tf_version)
    if not args.skip_trainer:
        found += problems_with_trainer()
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
