"""Runs SDK v3 user code (a ``ModelTrainer``, a ``HyperparameterTuner``) in .venv-sdk3 (v3 cannot share .venv with v2).

Run by tests/integration/test_sagemaker_sdk_modes.py as a subprocess, with the emulator's
AWS_* variables and SAGEMAKER_USER_CONFIG_OVERRIDE (the file ``python -m scripts.sdk_config``
writes) in its environment; the code is docs/sagemaker-code.md's block (or the test's own) with
its placeholders filled in, so the role, network and keys come from the defaults file, as for a user.

Usage: python sdk3_client.py CODE
Prints one JSON line: the name of the job the code's ``trainer`` created (or null), the name of
the tuning job its ``tuner`` created (or null), what it bound to ``best`` (e.g.
``tuner.best_training_job()``), the records of its ``frame`` (e.g. ``tuner.analytics().dataframe()``),
and the error the code raised.
"""

import json
import sys


def main() -> int:
    namespace: dict = {}
    error = None
    try:
        exec(compile(sys.argv[1], "docs/sagemaker-code.md (Coming from SageMaker, SDK v3)", "exec"), namespace)  # noqa: S102
    except Exception as err:  # noqa: BLE001 - reported to the test, which asserts on the job
        error = f"{type(err).__name__}: {err}"
    trainer, tuner, frame = namespace.get("trainer"), namespace.get("tuner"), namespace.get("frame")
    job = getattr(trainer, "_latest_training_job", None)  # the job train() created
    tuning_job = getattr(tuner, "latest_tuning_job", None)  # the job tune() created
    print(json.dumps({
        "job_name": getattr(job, "training_job_name", None),
        "tuning_job_name": getattr(tuning_job, "hyper_parameter_tuning_job_name", None),
        "best": namespace.get("best"),
        "frame": json.loads(frame.to_json(orient="records")) if frame is not None else None,
        "error": error,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
