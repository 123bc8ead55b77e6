"""Operator tools for the training platform, each a thin ``main()`` over importable functions.

Run them from the repository root with the project's virtualenv; every module's docstring has
its usage. The training-job tools::

    python -m scripts.preflight                 # before a deploy: region, AZs, quotas, DLAMI, bootstrap
    python -m scripts.launch --watch            # start a training job and follow it
    python -m scripts.watch [JOB]               # follow a job (default: the newest) until it ends
    python -m scripts.list_jobs                 # the project's jobs
    python -m scripts.stop JOB                  # stop a job (and the workflow execution running it)
    python -m scripts.teardown --stop-running   # before cdk destroy: stop everything still running

They read the deployed stacks' outputs (CloudFormation DescribeStacks) and the configuration in
``cdk.json``; the same code runs against a real account and, with ``AWS_ENDPOINT_URL`` set,
against a local emulator. Their exit codes are listed in :mod:`scripts.common`.
"""
