"""The script-mode contract: the environment and arguments a SageMaker training script expects.

AWS's reference is the SageMaker training toolkit (``sagemaker_training.environment`` and
``mapping``) plus ``sagemaker_tensorflow_container.training`` for ``TF_CONFIG``. The image does
not ship the toolkit: it would download code from S3 (impossible under network isolation),
install requirements from PyPI (likewise) and log "No GPUs detected" and carry on. This module
rebuilds the part a script sees, and ``tests/trainer/test_script_contract.py`` checks it against
the toolkit for the same ``/opt/ml`` tree, so a script written for AWS's TensorFlow containers
runs here unchanged.

No TensorFlow here: the contract is built before any user code or GPU work starts.
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainer.contract.environment import TrainingEnvironment, script_variables
from trainer.contract.errors import ConfigError

PROGRAM = "sagemaker_program"
SUBMIT_DIR = "sagemaker_submit_directory"
LOG_LEVEL = "sagemaker_container_log_level"
JOB_NAME = "sagemaker_job_name"
REGION = "sagemaker_region"
MULTI_WORKER_MIRRORED = "sagemaker_multi_worker_mirrored_strategy_enabled"
PARAMETER_SERVER = "sagemaker_parameter_server_enabled"
DISTRIBUTION_INSTANCE_GROUPS = "sagemaker_distribution_instance_groups"
# Set by SageMaker in every training job of a hyperparameter tuning job.
TUNING_OBJECTIVE = "_tuning_objective_metric"
MODEL_DIR = "model_dir"
# The toolkit's homogeneous group, when resourceconfig.json names none (local mode, EC2 nodes).
HOMOGENEOUS_GROUP = "homogeneousCluster"

# The toolkit's SAGEMAKER_HYPERPARAMETERS: consumed by the toolkit, never passed to the script.
RESERVED = (
    PROGRAM,
    SUBMIT_DIR,
    "sagemaker_enable_cloudwatch_metrics",
    REGION,
    LOG_LEVEL,
    JOB_NAME,
    "default_user_module_name",
    TUNING_OBJECTIVE,
    "sagemaker_s3_output",
)
# Distribution modes of other SageMaker containers that this image does not provide: a job asking
# for one is refused, instead of silently running one process per host without them.
UNSUPPORTED_DISTRIBUTIONS = {
    "sagemaker_mpi_enabled": "MPI / Horovod",
    "sagemaker_distributed_dataparallel_enabled": "SageMaker distributed data parallel",
}
# Every switch with which the toolkit distributes over this host's group when the job names no
# distribution groups (``Environment.get_distribution_instance_groups_from_resource_config``).
TOOLKIT_DISTRIBUTION_SWITCHES = (
    MULTI_WORKER_MIRRORED,
    PARAMETER_SERVER,
    *UNSUPPORTED_DISTRIBUTIONS,
    "sagemaker_pytorch_ddp_enabled",
    "sagemaker_pytorch_xla_multi_worker_enabled",
    "sagemaker_torch_distributed_enabled",
)
# The port sagemaker-tensorflow-training puts in TF_CONFIG for MultiWorkerMirroredStrategy.
TOOLKIT_MWMS_PORT = 8890
# The ports sagemaker-tensorflow-training gives a parameter-server cluster: master/workers, then the ps tasks.
TOOLKIT_PS_WORKER_PORT = 2222
TOOLKIT_PS_PORT = 2223
DEFAULT_CODE_DIR = "/opt/ml/code"
DEFAULT_LOG_LEVEL = 20  # logging.INFO, the toolkit's default


def deserialize(value: Any) -> Any:
    """A hyperparameter as the toolkit reads it: JSON if it parses (the SDK JSON-encodes values), else the string."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _truthy(value: Any) -> bool:
    """The toolkit's test for a switch (plain truthiness of the deserialized value), plus "true"/"yes" strings."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def to_cmd_args(hyperparameters: Mapping[str, Any]) -> list[str]:
    """``{"epochs": 10, "batch-size": 64}`` -> ``["--batch-size", "64", "--epochs", "10"]`` (the toolkit's rules).

    Keys sorted; one-letter keys get a single dash; a mapping value becomes ``k=v,k2=v2``;
    everything else is ``str(value)`` (so JSON ``true`` arrives as ``True``, as on SageMaker).
    """
    args: list[str] = []
    for key in sorted(hyperparameters):
        name = str(key)
        args.append(f"--{name}" if len(name) > 1 else f"-{name}")
        value = hyperparameters[key]
        if isinstance(value, Mapping):
            args.append(",".join(f"{k}={v}" for k, v in sorted(value.items())))
        else:
            args.append("" if value is None else str(value))
    return args


def _env_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


@dataclass(frozen=True)
class ScriptJob:
    """What a script-mode job runs and with which settings.

    Attributes:
        program: The entry point (``train.py``), relative to the source directory.
        submit_directory: Where the code is: a directory, a ``.tar.gz``, or an ``s3://`` URI that
            must also have arrived as the ``code`` channel (network isolation).
        user_hyperparameters: Everything the script receives as arguments (deserialized).
        framework_params: The other ``sagemaker_*`` hyperparameters (distribution switches...).
        log_level: ``sagemaker_container_log_level`` (``SM_LOG_LEVEL``).
        multi_worker_mirrored: The SDK's ``distribution={"multi_worker_mirrored_strategy": ...}``.
        parameter_server: The SDK's ``distribution={"parameter_server": {"enabled": True}}``: on
            several hosts a parameter server per host and the toolkit's TF_CONFIG; on one, nothing.
    """

    program: str
    submit_directory: str
    user_hyperparameters: Mapping[str, Any]
    framework_params: Mapping[str, Any]
    log_level: Any
    multi_worker_mirrored: bool
    parameter_server: bool = False


def script_job(hyperparameters: Mapping[str, Any], env: Mapping[str, str] | None = None) -> ScriptJob | None:
    """The script this job runs, or ``None`` for the built-in trainer.

    ``sagemaker_program`` (or the ``SAGEMAKER_PROGRAM`` environment variable, for images with the
    code baked into ``/opt/ml/code``) selects script mode.

    Raises:
        ConfigError: a submit directory without a program, or a distribution this image lacks.
    """
    variables = script_variables(env)
    values = {str(k): deserialize(v) for k, v in hyperparameters.items()}
    program = values.get(PROGRAM) or variables.program
    if program is None:
        if values.get(SUBMIT_DIR):
            raise ConfigError(
                f"hyperparameter {SUBMIT_DIR}={values[SUBMIT_DIR]!r} is set but {PROGRAM} is not: say which script "
                "to run (the SageMaker SDK's entry_point, or scripts.launch --entry-point)."
            )
        return None
    if not isinstance(program, str) or not program.strip():
        raise ConfigError(f"hyperparameter {PROGRAM} must name the training script, got {program!r}.")
    framework = {k: v for k, v in values.items() if k.startswith("sagemaker_") and k not in RESERVED}
    for key, what in UNSUPPORTED_DISTRIBUTIONS.items():
        if _truthy(framework.get(key)):
            raise ConfigError(
                f"hyperparameter {key} asks for {what}, which this image does not provide; use "
                "distribution={'multi_worker_mirrored_strategy': {'enabled': True}} (TensorFlow's "
                "MultiWorkerMirroredStrategy) or one host with several GPUs (MirroredStrategy)."
            )
    if _truthy(framework.get(PARAMETER_SERVER)) and _truthy(framework.get(MULTI_WORKER_MIRRORED)):
        raise ConfigError(
            f"hyperparameters {PARAMETER_SERVER} and {MULTI_WORKER_MIRRORED} are both set: a job uses one "
            "distribution (the SageMaker SDK accepts only one of parameter_server and multi_worker_mirrored_strategy)."
        )
    user = {k: v for k, v in values.items() if not k.startswith("sagemaker_") and k not in RESERVED}
    if TUNING_OBJECTIVE in values:
        user = trial_model_dir(user, variables.job_name)
    return ScriptJob(
        program=program.strip(),
        submit_directory=str(values.get(SUBMIT_DIR) or variables.submit_directory or DEFAULT_CODE_DIR),
        user_hyperparameters=user,
        framework_params=framework,
        log_level=values.get(LOG_LEVEL, DEFAULT_LOG_LEVEL),
        multi_worker_mirrored=_truthy(framework.get(MULTI_WORKER_MIRRORED)),
        parameter_server=_truthy(framework.get(PARAMETER_SERVER)),
    )


def trial_model_dir(user: Mapping[str, Any], job_name: str | None) -> dict[str, Any]:
    """A tuning trial's ``model_dir``: ``<model_dir>/<training job name>/model``, as sagemaker-tensorflow-training gives it.

    The SDK passes every trial of a tuning job the same ``model_dir`` (``s3://.../model``), so the
    container appends the trial's own job name (``_model_dir_with_training_job``) unless it is under
    ``/opt/ml``; trials running at once then never write over each other's checkpoints.
    Unchanged without a ``model_dir`` string or a job name (``TRAINING_JOB_NAME``).
    """
    model_dir = user.get(MODEL_DIR)
    if not isinstance(model_dir, str) or not job_name or model_dir.startswith("/opt/ml"):
        return dict(user)
    return {**user, MODEL_DIR: f"{model_dir}/{job_name}/model"}


# SDK v3 ModelTrainer's own channel: its drivers and sm_train.sh, run through ContainerEntrypoint.
MODEL_TRAINER_CHANNEL = "sm_drivers"
CODE_CHANNEL = "code"


def refuse_unclaimed_code(env: TrainingEnvironment, process_env: Mapping[str, str] | None = None) -> None:
    """Refuses a job that carries user code but names no script, instead of training a built-in model on its data.

    Signs of user code: ModelTrainer's ``sm_drivers`` channel (its entrypoint, ``/bin/bash
    .../sm_train.sh``, was not what started this image), ``SAGEMAKER_SUBMIT_DIRECTORY``, or a
    ``code`` channel holding a source tarball or scripts.

    Raises:
        SourceError: naming what was found and what to set.
    """
    from trainer.contract.errors import SourceError

    submit_directory = script_variables(process_env).submit_directory
    channels = set(env.input_data_config)
    drivers = env.paths.channel_dir(MODEL_TRAINER_CHANNEL, {})
    if MODEL_TRAINER_CHANNEL in channels or drivers.is_dir():
        raise SourceError(
            f"This job carries SageMaker SDK v3 ModelTrainer code (the '{MODEL_TRAINER_CHANNEL}' channel), which runs "
            "through the job's ContainerEntrypoint (/bin/bash .../sm_drivers/sm_train.sh), but the image was started "
            "with its own entrypoint ('train'), which would train a built-in model instead of your script: run the "
            "job's ContainerEntrypoint and ContainerArguments as given (the SageMaker service and the emulator do)."
        )
    if submit_directory:
        raise SourceError(
            f"SAGEMAKER_SUBMIT_DIRECTORY={submit_directory!r} is set but no script is named: "
            f"set the {PROGRAM} hyperparameter (or SAGEMAKER_PROGRAM) to the entry point, or unset both to train a built-in model."
        )
    code = env.paths.channel_dir(CODE_CHANNEL, {})
    if code.is_dir():
        scripts = sorted(p.name for p in code.iterdir() if p.is_file() and (p.name.endswith((".tar.gz", ".py", ".sh"))))
        if scripts:
            tarball = next((name for name in scripts if name.endswith(".tar.gz")), None)
            submit = f"/opt/ml/input/data/{CODE_CHANNEL}" + (f"/{tarball}" if tarball else "")
            raise SourceError(
                f"The '{CODE_CHANNEL}' channel holds code ({', '.join(scripts[:5])}) but the job names no script: set the "
                f"{PROGRAM} hyperparameter to the entry point and {SUBMIT_DIR} to {submit} (the SageMaker SDK's "
                "entry_point, or scripts.launch --entry-point); a built-in model is "
                "never trained in its place."
            )


def _host_name(address: str) -> str:
    head, sep, tail = address.rpartition(":")
    return head if sep and head and tail.isdigit() else address


def resource_config(env: TrainingEnvironment) -> dict[str, Any]:
    """``resourceconfig.json`` as SageMaker wrote it, or its equivalent on an EC2 node."""
    path = env.paths.resource_config_file
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    hosts = [_host_name(h) for h in env.cluster.hosts]
    return {
        "current_host": _host_name(env.cluster.current_host),
        "hosts": hosts,
        "network_interface_name": "eth0",
        **({"current_instance_type": env.instance_type} if env.instance_type else {}),
    }


@dataclass(frozen=True)
class Distribution:
    """The hosts a job distributes over, as the toolkit picks them (``Environment.distribution_hosts``).

    With instance groups (a heterogeneous cluster), only the hosts of the groups that
    ``sagemaker_distribution_instance_groups`` names take part: they alone are in ``TF_CONFIG``, the
    first of them is the master, and a host of another group runs its script without ``TF_CONFIG``.

    Attributes:
        instance_groups: ``sagemaker_distribution_instance_groups``; without it, this host's group
            when the job turns a distribution on, else none.
        hosts: The names of the hosts of those groups, group by group as ``resourceconfig.json``
            lists them; every host of the job when it lists no groups (local mode, EC2 nodes).
        addresses: ``hosts`` as the cluster's host entries (with the port an entry carries).
        current_address: This host's entry in ``addresses``, or ``None`` when it is not one of them.
        includes_current: This host's group is one of ``instance_groups``: it gets ``TF_CONFIG``.
        master_hostname: The first of ``hosts``, else the job's first host.
    """

    instance_groups: tuple[str, ...]
    hosts: tuple[str, ...]
    addresses: tuple[str, ...]
    current_address: str | None
    includes_current: bool
    master_hostname: str

    @property
    def index(self) -> int:
        """This host's position in ``addresses`` (0: the master, which writes the model).

        Raises:
            ConfigError: this host is not one of the distribution's hosts.
        """
        if self.current_address is None or not self.includes_current:
            raise ConfigError(
                f"This host is not in the distribution's instance groups ({', '.join(self.instance_groups) or 'none'}; "
                f"hosts {', '.join(self.hosts) or 'none'}), so it takes no part in TF_CONFIG."
            )
        return self.addresses.index(self.current_address)


def _framework_params(env: TrainingEnvironment) -> dict[str, Any]:
    values = {str(k): deserialize(v) for k, v in env.hyperparameters.items()}
    return {k: v for k, v in values.items() if k.startswith("sagemaker_") and k not in RESERVED}


def distribution(
    env: TrainingEnvironment, framework_params: Mapping[str, Any] | None = None, *, switch: str | None = None
) -> Distribution:
    """Which hosts the job distributes over, and whether this host is one of them.

    Args:
        env: The resolved container contract (``resourceconfig.json`` and the cluster's hosts).
        framework_params: The job's ``sagemaker_*`` hyperparameters (deserialized); read from
            ``env`` when not given.
        switch: A distribution switch (``MULTI_WORKER_MIRRORED``...) to count as on: the
            distribution a TF_CONFIG is being built for.

    Raises:
        ConfigError: ``sagemaker_distribution_instance_groups`` is not a list of group names.
    """
    params = dict(_framework_params(env) if framework_params is None else framework_params)
    if switch:
        params[switch] = True
    resources = resource_config(env)
    group = resources.get("current_group_name", HOMOGENEOUS_GROUP)
    if DISTRIBUTION_INSTANCE_GROUPS in params:
        named = params[DISTRIBUTION_INSTANCE_GROUPS]
        if not isinstance(named, list) or not all(isinstance(g, str) for g in named):
            raise ConfigError(
                f"hyperparameter {DISTRIBUTION_INSTANCE_GROUPS} must be a JSON list of instance group names "
                f"(the SageMaker SDK's distribution={{'instance_groups': [...]}}), got {named!r}."
            )
        groups = tuple(named)
    else:
        groups = (group,) if any(_truthy(params.get(k)) for k in TOOLKIT_DISTRIBUTION_SWITCHES) else ()
    current = env.cluster.current_host
    groups_config = resources.get("instance_groups") or []
    if groups_config:
        hosts = tuple(h for g in groups_config if g["instance_group_name"] in groups for h in g["hosts"])
        entries = {_host_name(entry): entry for entry in reversed(env.cluster.hosts)}
        addresses = tuple(entries.get(h, h) for h in hosts)
        current_address = entries.get(_host_name(current)) if _host_name(current) in hosts else None
    else:
        # The toolkit's local mode: every host, whatever the switches say.
        hosts = tuple(resources.get("hosts") or ())
        addresses = tuple(env.cluster.hosts)
        current_address = current
    all_hosts = list(resources.get("hosts") or [resources.get("current_host", "")])
    return Distribution(
        instance_groups=groups,
        hosts=hosts,
        addresses=addresses,
        current_address=current_address,
        includes_current=group in groups,
        master_hostname=hosts[0] if hosts else all_hosts[0],
    )


def tf_config(env: TrainingEnvironment, process_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """TF_CONFIG for MultiWorkerMirroredStrategy, as sagemaker-tensorflow-training builds it.

    The workers are the distribution's hosts (:func:`distribution`), one on a single host. Port
    8890 like the toolkit on SageMaker; on EC2 nodes ``TRAINING_WORKER_PORT`` (which the cluster's
    security group opens) or a port carried by a ``TRAINING_HOSTS`` entry wins.

    Raises:
        ConfigError: this host is outside the distribution's instance groups (it gets no TF_CONFIG).
    """
    port = script_variables(process_env).worker_port
    spread = distribution(env, switch=MULTI_WORKER_MIRRORED)
    index = spread.index
    addresses = [h if h != _host_name(h) else f"{h}:{port or TOOLKIT_MWMS_PORT}" for h in spread.addresses]
    return {
        "cluster": {"worker": addresses},
        "environment": "cloud",
        "task": {"index": index, "type": "worker"},
    }


def ps_addresses(env: TrainingEnvironment, process_env: Mapping[str, str] | None = None) -> tuple[list[str], list[str]]:
    """``(worker, ps)`` address of every distribution host (:func:`distribution`) for a parameter-server cluster.

    On SageMaker (host names without ports) the toolkit's 2222 and 2223. ``TRAINING_WORKER_PORT``
    (EC2 nodes) or a port carried by a ``TRAINING_HOSTS`` entry (loopback tests) gives the worker
    port P, and the parameter server listens on P + 1, as 2223 follows 2222.
    """
    set_port = script_variables(process_env).worker_port
    workers, servers = [], []
    for host in distribution(env, switch=PARAMETER_SERVER).addresses:
        name = _host_name(host)
        if host != name:
            port = int(host.rpartition(":")[2])
        else:
            port = set_port or TOOLKIT_PS_WORKER_PORT
        workers.append(f"{name}:{port}")
        servers.append(f"{name}:{port + 1 if host != name or set_port else TOOLKIT_PS_PORT}")
    return workers, servers


def tf_config_for_ps(
    env: TrainingEnvironment, process_env: Mapping[str, str] | None = None, *, ps_task: bool = False
) -> dict[str, Any]:
    """TF_CONFIG for a parameter-server job, as sagemaker-tensorflow-training's ``_build_tf_config_for_ps``.

    Over the distribution's hosts (:func:`distribution`): the first is the ``master``, the others
    ``worker``; every one also runs a ``ps`` task (when there are several). ``ps_task`` builds the
    parameter server's own config.

    Raises:
        ConfigError: ``ps_task`` on a single host (there is no parameter server then), or this host
            is outside the distribution's instance groups.
    """
    workers, servers = ps_addresses(env, process_env)
    index = distribution(env, switch=PARAMETER_SERVER).index
    cluster: dict[str, list[str]] = {"master": workers[:1]}
    if len(workers) > 1:
        cluster["ps"] = servers
        cluster["worker"] = workers[1:]
    if ps_task:
        if len(workers) < 2:
            raise ConfigError("A parameter server task needs a cluster of several hosts.")
        task = {"index": index, "type": "ps"}
    elif index == 0:
        task = {"index": 0, "type": "master"}
    else:
        task = {"index": index - 1, "type": "worker"}
    return {"cluster": cluster, "environment": "cloud", "task": task}


def job_tf_config(
    env: TrainingEnvironment, job: ScriptJob, process_env: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """The TF_CONFIG this host's script gets, or ``None`` (sagemaker-tensorflow-training's ``train``).

    Only a host of the distribution's instance groups (:func:`distribution`) gets one: with
    ``parameter_server`` when they are several hosts, with ``multi_worker_mirrored`` also on one
    (a single worker, which scripts that read its worker list expect).
    """
    spread = distribution(env, job.framework_params)
    if not spread.includes_current:
        return None
    if job.parameter_server:
        return tf_config_for_ps(env, process_env) if len(spread.addresses) > 1 else None
    if job.multi_worker_mirrored:
        return tf_config(env, process_env)
    return None


def sm_environment(
    env: TrainingEnvironment,
    job: ScriptJob,
    *,
    num_gpus: int,
    process_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The ``SM_*`` variables the SageMaker training toolkit exports to a script (``Environment.to_env_vars``).

    Args:
        env: The resolved container contract.
        job: The script job.
        num_gpus: GPUs on this host, as verified by the GPU check (the toolkit counts nvidia-smi lines).
        process_env: The container's environment, read by the contract (job name, framework module); this process's by default.
    """
    variables = script_variables(process_env)
    paths = env.paths
    resources = resource_config(env)
    hosts = list(resources.get("hosts") or [])
    current_host = resources.get("current_host", "")
    instance_type = resources.get("current_instance_type", "local")
    group = resources.get("current_group_name", HOMOGENEOUS_GROUP)
    groups_config = resources.get("instance_groups") or []
    instance_groups = [g["instance_group_name"] for g in groups_config]
    groups_dict = {g["instance_group_name"]: g for g in groups_config}
    group_hosts = next((g["hosts"] for g in groups_config if g["instance_group_name"] == group), [])
    spread = distribution(env, job.framework_params)
    channels = {name: str(paths.channel_dir(name, {})) for name in env.input_data_config}
    model_dir = str(paths.model_dir)
    input_dir = str(paths.base_dir / "input")
    output_dir = str(paths.output_dir)
    module_name = job.program[:-3] if job.program.endswith(".py") else job.program
    user_args = to_cmd_args(job.user_hyperparameters)
    values: dict[str, Any] = {
        "hosts": hosts,
        "network_interface_name": resources.get("network_interface_name", "eth0"),
        "hps": dict(job.user_hyperparameters),
        "user_entry_point": job.program,
        "framework_params": dict(job.framework_params),
        "resource_config": resources,
        "input_data_config": dict(env.input_data_config),
        "output_data_dir": str(paths.output_dir / "data"),
        "channels": sorted(channels),
        "current_host": current_host,
        "current_instance_type": instance_type,
        "current_instance_group": group,
        "current_instance_group_hosts": group_hosts,
        "instance_groups": instance_groups,
        "instance_groups_dict": groups_dict,
        "distribution_instance_groups": list(spread.instance_groups),
        "is_hetero": len(instance_groups) > 1,
        "module_name": module_name,
        "log_level": job.log_level,
        "framework_module": variables.training_module,
        "input_dir": input_dir,
        "input_config_dir": str(paths.hyperparameters_file.parent),
        "output_dir": output_dir,
        "num_cpus": multiprocessing.cpu_count(),
        "num_gpus": num_gpus,
        "num_neurons": 0,
        "model_dir": model_dir,
        "module_dir": job.submit_directory,
        "user_args": user_args,
        "output_intermediate_dir": str(paths.output_dir / "intermediate"),
    }
    training_env = {
        **{k: v for k, v in values.items() if k not in ("hps", "channels", "framework_params", "user_args")},
        "hyperparameters": dict(job.user_hyperparameters),
        "additional_framework_parameters": dict(job.framework_params),
        "channel_input_dirs": channels,
        "job_name": variables.job_name,
        "master_hostname": spread.master_hostname,
        "is_master": current_host == spread.master_hostname,
        "distribution_hosts": list(spread.hosts),
    }
    values["training_env"] = training_env
    for name, path in channels.items():
        values[f"channel_{name}"] = path
    for key, value in job.user_hyperparameters.items():
        values[f"hp_{key}"] = value
    return {f"SM_{str(k).upper()}": _env_value(v) for k, v in values.items()}
