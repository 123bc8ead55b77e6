"""User code: the one service that finds, unpacks, installs (offline) and runs a user's code.

Shared by the modes (training scripts, processing scripts, serving handlers); it imports the
shared floors (contract, gpu check, failure), never a mode. Script mode, its first user:

SageMaker's TensorFlow estimator (``entry_point="train.py"``) sets the ``sagemaker_program`` and
``sagemaker_submit_directory`` hyperparameters; the image then runs that script the way AWS's
framework containers do (same ``SM_*`` environment, hyperparameters as command-line arguments,
``requirements.txt``, ``TF_CONFIG`` for MultiWorkerMirroredStrategy), but only after the GPU
check passed, with SIGTERM forwarded, and with any failure written to ``output/failure`` as the
user's exception, file and line.

- :mod:`trainer.user_code.contract`: the environment and arguments (the toolkit's contract);
- :mod:`trainer.user_code.source`: finding, unpacking and installing the user's code;
- :mod:`trainer.user_code.launcher`: runs inside the user process and reports an exception;
- :mod:`trainer.user_code.runner`: the orchestration, run by ``python -m trainer train``;
- :mod:`trainer.user_code.guard`: the same guarantees when a job replaces the entrypoint.

May import: ``trainer.contract`` and ``trainer.logs`` (and, in the processes it starts,
``python -m trainer.gpu_check``); never a mode (``trainer.train``, ``trainer.serve``,
``trainer.process``). The hook/ directory runs inside the user's interpreter and imports nothing
of the trainer.
"""
