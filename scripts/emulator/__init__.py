"""Run the whole platform on a local AWS emulator: deploy -> train -> destroy -> audit.

``scripts/run-local.sh`` (or ``python -m scripts.emulator``) starts moto on loopback, deploys
every stack with the real CDK CLI, trains a job launched by the operator's launch script with a
local runner playing SageMaker, destroys, and audits what is left. See :mod:`.lifecycle`.

The entry is ``lifecycle`` (with ``cli`` in front of it): it wires the parts, and no part imports
it. A part imports only parts below it, down to ``aws`` (account, region, credentials, a client),
which imports none; ``tests/unit/test_import_cycles.py`` fails on a circle.

Modules:
    aws: the floor: the emulator's account, region, dummy credentials, a boto3 client, a free port.
    server: the in-process moto server, its environment, seeded public parameters.
    gaps: workarounds for moto's gaps, each naming the gap it covers.
    custom_resources: local stand-ins for the Lambda functions behind CDK custom resources.
    cluster: the local runner that plays the GPU cluster's SSM Command document (cluster jobs) on every node
        (processes on loopback, or with ``--containers`` containers of the built image on a network of the job's own).
    sagemaker: the local runner that plays SageMaker for training and processing jobs created on the emulator.
    states: the local Step Functions executor (JSONata-mode definitions, npm jsonata in node).
    hosting: local serving processes for endpoints (and UpdateEndpoint's switch to a new model).
    data_processing: batch transform's DataProcessing (InputFilter, JoinSource, OutputFilter) as SageMaker applies it.
    containers: how a job's container is played with this machine's processes (mount and network namespaces).
    docker_hosts: ``--containers``: the built image in Docker instead, one container per host or endpoint.
    cdk: the CDK CLI, run as a user runs it.
    launching: the launch with the operator's own script (a part: it takes the run as a protocol).
    lifecycle: the entry: the phases, timed.
"""
