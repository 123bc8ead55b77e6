"""Processing mode: ``python -m trainer process [ARGS]`` answers SageMaker Processing's contract.

SageMaker Processing runs the image with ``AppSpecification.ContainerEntrypoint``
``["python3", "-m", "trainer", "process"]`` and the job's ``ContainerArguments`` after it. One
small module per concern, like the other modes:

- ``contract``    the ``/opt/ml/processing`` paths, ``processingjobconfig.json``, ``resourceconfig.json``,
                  ``output/message``, and the few ``SM_*`` variables a user's processing script gets
- ``runner``      the order (GPU check first, then the work) and the failure line + exit code
- ``options``     the built-in transform's arguments
- ``transform``   the built-in transform: raw CSV or an image directory in, TFRecord shards out
- ``records``     ``tf.train.Example`` built in TensorFlow ops; balanced shard writing
- ``statistics``  per-feature mean/std and class counts in one streaming pass on the GPU

A user's processing script (``SAGEMAKER_PROGRAM``) runs through the same code as a training
script (:mod:`trainer.user_code`: source unpacking, offline requirements, launcher, signals).
May import: the shared floors (``trainer.contract``, ``trainer.datasets`` for the formats it
writes, ``trainer.user_code`` for the script runner, ``gpu_check``, ``logs``); never
``trainer.train`` or ``trainer.serve``.
"""

from trainer.process.runner import main

__all__ = ["main"]
