"""Runs docs/sagemaker-code.md's SDK v3 ``ModelTrainer`` example in .venv-sdk3 (v3 cannot share .venv with v2).

Run by tests/integration/test_sagemaker_sdk_modes.py as a subprocess, with the emulator's
AWS_* variables and SAGEMAKER_USER_CONFIG_OVERRIDE (the file ``python -m scripts.sdk_config``
writes) in its environment; the code is that page's block with its placeholders filled in, so
the role, network and keys come from the defaults file, as for a user.

Usage: python sdk3_client.py CODE
Prints one JSON line: the name of the job ``trainer`` created (or null) and the error the code raised.
"""

import json
import sys


def main() -> int:
    namespace: dict = {}
    error = None
    try:
        exec(compile(sys.argv[1], "docs/sagemaker-code.md (Coming from SageMaker, ModelTrainer)", "exec"), namespace)  # noqa: S102
    except Exception as err:  # noqa: BLE001 - reported to the test, which asserts on the job
        error = f"{type(err).__name__}: {err}"
    trainer = namespace.get("trainer")
    job = trainer._latest_training_job if trainer is not None else None  # noqa: SLF001 - the job train() created
    print(json.dumps({"job_name": getattr(job, "training_job_name", None), "error": error}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
