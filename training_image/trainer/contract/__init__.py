"""The job's contract with SageMaker (and with ``docker run`` on an EC2 node), shared by every mode.

What lives here: :mod:`~trainer.contract.environment` (the ``/opt/ml`` paths, ``SM_*`` and the
platform's variables, the host list, ``EXPECTED_GPU_COUNT``, read once into frozen dataclasses),
:mod:`~trainer.contract.serving` (the serving mode's ``SERVE_*`` and ``SAGEMAKER_*`` settings),
:mod:`~trainer.contract.script_runtime` (what a user's script reads through ``trainer.toolkit``:
``TF_CONFIG``, ``SM_NUM_GPUS``...),
:mod:`~trainer.contract.errors` (every failure the image names, each with its exit code) and
:mod:`~trainer.contract.failure` (the one mapping from an outcome to a failure file and an exit
status). It is the only reader of the job's environment; train, serve and process read what they
need from here.

May import: the standard library and each other (no TensorFlow, no other part of the trainer), so a
failure can be recorded even when TensorFlow or the rest of the image is broken.
"""
