"""Script mode: the user's own TensorFlow training script, run inside the platform's guarantees.

SageMaker's TensorFlow estimator (``entry_point="train.py"``) sets the ``sagemaker_program`` and
``sagemaker_submit_directory`` hyperparameters; the image then runs that script the way AWS's
framework containers do (same ``SM_*`` environment, hyperparameters as command-line arguments,
``requirements.txt``, ``TF_CONFIG`` for MultiWorkerMirroredStrategy), but only after the GPU
check passed, with SIGTERM forwarded, and with any failure written to ``output/failure`` as the
user's exception, file and line.

- :mod:`trainer.script.contract`: the environment and arguments (the toolkit's contract);
- :mod:`trainer.script.source`: finding, unpacking and installing the user's code;
- :mod:`trainer.script.launcher`: runs inside the user process and reports an exception;
- :mod:`trainer.script.runner`: the orchestration, run by ``python -m trainer train``.
"""
