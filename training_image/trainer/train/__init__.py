"""The training mode (``python -m trainer [train]`` without a user script): the built-in models' custom loop.

What lives here: :mod:`~trainer.train.runner` (one job start to end: GPU check, data, model,
the loop, checkpoints, the saved model), :mod:`~trainer.train.models`,
:mod:`~trainer.train.lr_schedule`, :mod:`~trainer.train.distribute` (strategies and the bounded
rendezvous, with :mod:`~trainer.train.watchdog`), :mod:`~trainer.train.metrics` (the metric line
SageMaker's regexes read) and :mod:`~trainer.train.diagnosis`.

May import: the shared floors (``trainer.contract``, ``trainer.datasets``, ``trainer.user_code``,
``gpu_check``, ``precision``, ``gpu_monitor``, ``logs``); never ``trainer.serve`` or
``trainer.process``. A user's training script is run by ``trainer.user_code``, not from here.
"""
