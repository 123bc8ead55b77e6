"""The directory :mod:`trainer.user_code.guard` puts first on a guarded command's ``PYTHONPATH``.

Its ``sitecustomize`` runs at the start of every Python process of the guarded command (the user's
script and anything it starts with Python) and reports an uncaught exception's file and line.
"""
