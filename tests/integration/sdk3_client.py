"""A SageMaker SDK v3 user's ``ModelTrainer`` job, run in .venv-sdk3 (v3 cannot share .venv with v2).

Run by tests/integration/test_sagemaker_sdk_modes.py as a subprocess, with the emulator's
AWS_* variables and SAGEMAKER_USER_CONFIG_OVERRIDE (the file ``python -m scripts.sdk_config``
writes) in its environment. Only what a user would write: the image, their source folder, the
data channel, hyperparameters; the role, network and keys come from the defaults file.

Usage: python sdk3_client.py '{"image": ..., "source_dir": ..., "data": ..., "job_name": ..., "output_path": ...}'
Prints one JSON line: the job name and the SDK's error, if train() raised.
"""

import json
import sys


def main() -> int:
    request = json.loads(sys.argv[1])
    from sagemaker.train import ModelTrainer
    from sagemaker.train.configs import Compute, InputData, OutputDataConfig, SourceCode

    trainer, error = None, None
    try:
        trainer = ModelTrainer(
            training_image=request["image"],
            source_code=SourceCode(source_dir=request["source_dir"], entry_script="train.py"),
            compute=Compute(instance_type="ml.g5.xlarge", instance_count=1),
            hyperparameters={"epochs": 3, "batch-size": 16},
            base_job_name=request["job_name"],
            output_data_config=OutputDataConfig(s3_output_path=request["output_path"]),
        )
        trainer.train(input_data_config=[InputData(channel_name="training", data_source=request["data"])], wait=True, logs=False)
    except Exception as err:  # noqa: BLE001 - reported to the test, which asserts on the job
        error = f"{type(err).__name__}: {err}"
    job = trainer._latest_training_job if trainer is not None else None  # noqa: SLF001 - the job train() created
    print(json.dumps({"job_name": getattr(job, "training_job_name", None), "error": error}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
