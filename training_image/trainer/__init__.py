"""GPU-verified, multi-GPU TensorFlow training entrypoint for SageMaker and EC2 GPU nodes.

Run it as ``python -m trainer`` (the image's ENTRYPOINT). The container contract lives in
:mod:`trainer.contract.environment`, the hyperparameters in :mod:`trainer.config`, and the training loop
in :mod:`trainer.train`. Modules that need TensorFlow import it lazily where device
configuration has to happen before TensorFlow initialises its runtime.
"""

import os

# The training loop is TensorFlow code (tf.distribute, tf.data): a KERAS_BACKEND=jax inherited
# from a notebook or a base image would break it in obscure ways, so the backend is not a choice.
os.environ["KERAS_BACKEND"] = "tensorflow"

__version__ = "1.0.0"
