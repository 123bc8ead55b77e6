"""Serving mode: ``python -m trainer serve`` answers SageMaker's hosting contract.

SageMaker starts a hosting container as ``<image> serve`` and talks to it on port 8080 (or
``SAGEMAKER_BIND_TO_PORT``): ``GET /ping`` must answer 200 once the container can serve, and
``POST /invocations`` carries one request. One small module per concern, in the spirit of
sagemaker-inference-toolkit (``model_server.py``, ``transformer.py``):

- settings      the environment variables serving reads (port, batching, limits, model dir):
                ``trainer.contract.serving``, on the shared contract floor like every mode's variables
- ``model``     finds and loads the model once: the built-in classifier (the trainer's
                ``model.keras``) behind one compiled predict function, or any other model's
                signatures as TF Serving serves them
- ``codec``     the classifier's request bodies (JSON, CSV, .npy) to a float32 matrix, or a
                one-line 4xx; its responses to JSON
- ``tfserving`` TF Serving's REST contract (instances/inputs, named inputs and outputs,
                signature_name) and the bodies AWS's serving container turns into it
- ``handlers``  ``code/inference.py``: both of AWS's handler families, requirements from code/lib
- ``batching``  the dynamic batcher: concurrent requests share one model call
- ``server``    the aiohttp application and the start-up sequence (GPU check, load, warm-up);
                ``GET /execution-parameters``, batch transform's question to the container

May import: the shared floors (``trainer.contract``, ``gpu_check``, ``gpu_table``, ``logs``, and
``trainer.user_code`` for the user's module, its requirements and its failures); never
``trainer.train`` or ``trainer.process``.
"""

from trainer.serve.server import main

__all__ = ["main"]
