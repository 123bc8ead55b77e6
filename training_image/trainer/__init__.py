"""GPU-verified, multi-GPU TensorFlow training entrypoint for SageMaker and EC2 GPU nodes.

Run it as ``python -m trainer [train|serve|process]`` (the image's ENTRYPOINT); :mod:`trainer.entrypoint`
picks the mode from argv. The layout (training_image/README.md): :mod:`trainer.contract` (the job's
environment, errors and failure file, shared by every mode), :mod:`trainer.datasets`,
:mod:`trainer.user_code`, the GPU floor (``gpu_check``, ``gpu_driver``, ``gpu_table``, ``precision``,
``gpu_monitor``, and ``network_check`` for EFA), and the three modes :mod:`trainer.train`, :mod:`trainer.serve` and
:mod:`trainer.process`, which import the floors and never each other. Modules that need TensorFlow
import it lazily where device configuration has to happen before TensorFlow initialises its runtime.
"""

import os

# The training loop is TensorFlow code (tf.distribute, tf.data): a KERAS_BACKEND=jax inherited
# from a notebook or a base image would break it in obscure ways, so the backend is not a choice.
os.environ["KERAS_BACKEND"] = "tensorflow"

__version__ = "1.0.0"
