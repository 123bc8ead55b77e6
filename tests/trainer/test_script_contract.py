"""Script mode's contract against AWS's reference implementation, for the same /opt/ml tree.

The SageMaker training toolkit (``sagemaker-training``) and ``sagemaker-tensorflow-training``
are what AWS's TensorFlow containers run; a script written for them reads ``SM_*`` variables,
its hyperparameters as arguments and ``TF_CONFIG``. Here both build the environment for the
same tree, and ours must match: every variable the toolkit sets, with the same value.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainer.script_helpers import script_job
from trainer.contract import environment
from trainer.contract.errors import ConfigError
from trainer.user_code import contract

RESOURCE_CONFIG = {
    "current_host": "algo-2",
    "current_instance_type": "ml.g5.12xlarge",
    "current_group_name": "homogeneousCluster",
    "hosts": ["algo-1", "algo-2"],
    "instance_groups": [
        {"instance_group_name": "homogeneousCluster", "instance_type": "ml.g5.12xlarge", "hosts": ["algo-1", "algo-2"]}
    ],
    "network_interface_name": "eth0",
}
CHANNELS = {
    "training": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"},
    "code": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"},
}
# What the SageMaker Python SDK's TensorFlow estimator writes for a network-isolated job with
# distribution={"multi_worker_mirrored_strategy": {"enabled": True}} and three user hyperparameters.
SDK_HYPERPARAMETERS = {
    "epochs": 10,
    "batch-size": 64,
    "learning_rate": 0.001,
    "use-augmentation": True,
    "layers": {"a": 1, "b": 2},
    "x": "y",
    "sagemaker_submit_directory": "/opt/ml/input/data/code/sourcedir.tar.gz",
    "sagemaker_container_log_level": 20,
    "sagemaker_job_name": "gputrain-sdk-1",
    "sagemaker_region": "eu-west-1",
    "sagemaker_multi_worker_mirrored_strategy_enabled": True,
    "model_dir": "s3://bucket/gputrain-sdk-1/model",
}


# A heterogeneous cluster (the SDK's instance_groups): a CPU data host and two GPU hosts, with
# distribution={"multi_worker_mirrored_strategy": {"enabled": True}, "instance_groups": [gpu]}.
HETERO_GROUPS = [
    {"instance_group_name": "data", "instance_type": "ml.c5.xlarge", "hosts": ["algo-1"]},
    {"instance_group_name": "gpu", "instance_type": "ml.g5.12xlarge", "hosts": ["algo-2", "algo-3"]},
]
HETERO_HYPERPARAMETERS = {
    "epochs": 1,
    "sagemaker_multi_worker_mirrored_strategy_enabled": True,
    "sagemaker_distribution_instance_groups": ["gpu"],
}


def _homogeneous(hosts: list[str], current: str) -> dict[str, object]:
    """resourceconfig.json of a homogeneous SageMaker cluster of ``hosts``, on ``current``."""
    group = {**RESOURCE_CONFIG["instance_groups"][0], "hosts": hosts}  # type: ignore[index]
    return {**RESOURCE_CONFIG, "hosts": hosts, "current_host": current, "instance_groups": [group]}


def _hetero(current: str) -> dict[str, object]:
    """resourceconfig.json of the HETERO_GROUPS cluster, on ``current``."""
    group = next(g for g in HETERO_GROUPS if current in g["hosts"])
    return {
        "current_host": current,
        "current_instance_type": group["instance_type"],
        "current_group_name": group["instance_group_name"],
        "hosts": ["algo-1", "algo-2", "algo-3"],
        "instance_groups": HETERO_GROUPS,
        "network_interface_name": "eth0",
    }


def _toolkit_environment(base: Path) -> dict[str, object]:
    """The toolkit's SM_* variables, user args and TF_CONFIG, computed in a clean process.

    TF_CONFIG as sagemaker-tensorflow-training's ``train`` sets it for multi_worker_mirrored:
    only on a host of the distribution's instance groups (``None`` elsewhere).
    """
    code = """
import json, sys
from sagemaker_training import environment
from sagemaker_tensorflow_container.training import _build_tf_config_for_mwms
env = environment.Environment()
member = env.current_instance_group in env.distribution_instance_groups
print(json.dumps({
    "env": env.to_env_vars(),
    "args": env.to_cmd_args(),
    "tf_config": _build_tf_config_for_mwms(env.distribution_hosts, env.current_host) if member else None,
}))
"""
    process_env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "SAGEMAKER_", "TRAINING_"))}
    process_env.update(SAGEMAKER_BASE_DIR=str(base), TRAINING_JOB_NAME="gputrain-sdk-1", AWS_DEFAULT_REGION="eu-west-1")
    out = subprocess.run(
        [sys.executable, "-c", code], env=process_env, capture_output=True, text=True, timeout=120, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def sdk_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("opt-ml")
    return script_job(
        base,
        "/opt/ml/input/data/code/sourcedir.tar.gz",
        hyperparameters=SDK_HYPERPARAMETERS,
        channels=CHANNELS,
        resource_config=RESOURCE_CONFIG,
    )


def _ours(base: Path) -> tuple[dict[str, str], list[str], dict[str, object] | None]:
    process_env = {"SAGEMAKER_BASE_DIR": str(base), "TRAINING_JOB_NAME": "gputrain-sdk-1"}
    env = environment.load_environment(process_env)
    job = contract.script_job(env.hyperparameters, process_env)
    assert job is not None
    return (
        contract.sm_environment(env, job, num_gpus=0, process_env=process_env),
        contract.to_cmd_args(job.user_hyperparameters),
        contract.job_tf_config(env, job, process_env),
    )


@pytest.mark.slow
def test_every_toolkit_variable_is_set_with_the_toolkit_value(sdk_tree: Path) -> None:
    reference = _toolkit_environment(sdk_tree)
    ours, _, _ = _ours(sdk_tree)
    toolkit_env = reference["env"]
    assert isinstance(toolkit_env, dict)
    missing = sorted(set(toolkit_env) - set(ours))
    assert not missing, f"variables the toolkit sets and we do not: {missing}"
    # SM_TRAINING_ENV is the toolkit's whole Environment object as JSON; compared field by field below.
    different = {
        key: (toolkit_env[key], ours[key]) for key in toolkit_env if key != "SM_TRAINING_ENV" and toolkit_env[key] != ours[key]
    }
    assert not different, f"values that differ from the toolkit's: {json.dumps(different, indent=1)}"


@pytest.mark.slow
def test_training_env_json_agrees_on_what_scripts_read(sdk_tree: Path) -> None:
    reference = json.loads(_toolkit_environment(sdk_tree)["env"]["SM_TRAINING_ENV"])  # type: ignore[index]
    ours = json.loads(_ours(sdk_tree)[0]["SM_TRAINING_ENV"])
    fields = (
        "channel_input_dirs", "hyperparameters", "additional_framework_parameters", "hosts", "current_host",
        "model_dir", "module_dir", "user_entry_point", "module_name", "num_gpus", "num_cpus", "job_name",
        "output_data_dir", "output_dir", "input_dir", "input_config_dir", "resource_config", "input_data_config",
        "master_hostname", "is_master", "distribution_hosts", "current_instance_type", "log_level",
    )
    assert {f: ours.get(f) for f in fields} == {f: reference.get(f) for f in fields}


@pytest.mark.slow
def test_hyperparameters_become_the_toolkit_arguments(sdk_tree: Path) -> None:
    reference = _toolkit_environment(sdk_tree)
    _, args, _ = _ours(sdk_tree)
    assert args == reference["args"]
    # What an argparse script sees: values as SageMaker delivers them, sagemaker_* never.
    assert args[:4] == ["--batch-size", "64", "--epochs", "10"]
    assert "--use-augmentation" in args and args[args.index("--use-augmentation") + 1] == "True"
    assert not any(a.startswith("--sagemaker_") for a in args)


@pytest.mark.slow
def test_tf_config_matches_sagemaker_tensorflow_training(sdk_tree: Path) -> None:
    reference = _toolkit_environment(sdk_tree)
    _, _, tf_config = _ours(sdk_tree)
    assert tf_config == reference["tf_config"]
    assert tf_config is not None and tf_config["task"] == {"index": 1, "type": "worker"}


@pytest.mark.parametrize("host", ["algo-1", "algo-3"])
@pytest.mark.slow
def test_heterogeneous_cluster_distributes_over_the_named_groups_as_the_toolkit(tmp_path: Path, host: str) -> None:
    """algo-1 (group data) is outside the distribution; algo-3 is the second GPU worker."""
    base = script_job(tmp_path, "/opt/ml/code", hyperparameters=HETERO_HYPERPARAMETERS, resource_config=_hetero(host))
    reference = _toolkit_environment(base)
    ours, _, tf_config = _ours(base)
    toolkit_env = reference["env"]
    assert isinstance(toolkit_env, dict)
    different = {
        key: (toolkit_env[key], ours.get(key))
        for key in toolkit_env
        if key != "SM_TRAINING_ENV" and toolkit_env[key] != ours.get(key)
    }
    assert not different, f"values that differ from the toolkit's: {json.dumps(different, indent=1)}"
    theirs_training = json.loads(toolkit_env["SM_TRAINING_ENV"])
    ours_training = json.loads(ours["SM_TRAINING_ENV"])
    fields = (
        "master_hostname", "is_master", "distribution_hosts", "distribution_instance_groups", "is_hetero",
        "current_instance_group", "current_instance_group_hosts", "instance_groups", "hosts", "current_host",
    )
    assert {f: ours_training.get(f) for f in fields} == {f: theirs_training.get(f) for f in fields}
    assert tf_config == reference["tf_config"]


def test_heterogeneous_cluster_tf_config_names_only_the_distribution_hosts(tmp_path: Path) -> None:
    """The reviewer's case, without the toolkit: groups data=[algo-1], gpu=[algo-2, algo-3], distribution over gpu."""
    seen = {}
    for host in ("algo-1", "algo-2", "algo-3"):
        base = script_job(tmp_path / host, "/opt/ml/code", hyperparameters=HETERO_HYPERPARAMETERS, resource_config=_hetero(host))
        sm, _, tf_config = _ours(base)
        training = json.loads(sm["SM_TRAINING_ENV"])
        seen[host] = (tf_config, training["master_hostname"], training["is_master"], training["distribution_hosts"])
        assert json.loads(sm["SM_DISTRIBUTION_INSTANCE_GROUPS"]) == ["gpu"] and sm["SM_IS_HETERO"] == "true"
    workers = ["algo-2:8890", "algo-3:8890"]
    assert seen == {
        "algo-1": (None, "algo-2", False, ["algo-2", "algo-3"]),
        "algo-2": ({"cluster": {"worker": workers}, "environment": "cloud", "task": {"index": 0, "type": "worker"}},
                   "algo-2", True, ["algo-2", "algo-3"]),
        "algo-3": ({"cluster": {"worker": workers}, "environment": "cloud", "task": {"index": 1, "type": "worker"}},
                   "algo-2", False, ["algo-2", "algo-3"]),
    }  # fmt: skip


def test_heterogeneous_parameter_server_spans_only_the_distribution_hosts(tmp_path: Path) -> None:
    hyperparameters = {"sagemaker_parameter_server_enabled": True, "sagemaker_distribution_instance_groups": ["gpu"]}
    configs = {}
    for host in ("algo-1", "algo-3"):
        base = script_job(tmp_path / host, "/opt/ml/code", hyperparameters=hyperparameters, resource_config=_hetero(host))
        configs[host] = _ours(base)[2]
    assert configs["algo-1"] is None
    assert configs["algo-3"] == {
        "cluster": {"master": ["algo-2:2222"], "ps": ["algo-2:2223", "algo-3:2223"], "worker": ["algo-3:2222"]},
        "environment": "cloud",
        "task": {"index": 0, "type": "worker"},
    }


def test_distribution_instance_groups_must_be_a_list_of_names(tmp_path: Path) -> None:
    hyperparameters = {**HETERO_HYPERPARAMETERS, "sagemaker_distribution_instance_groups": "gpu"}
    base = script_job(tmp_path, "/opt/ml/code", hyperparameters=hyperparameters, resource_config=_hetero("algo-2"))
    with pytest.raises(ConfigError, match="sagemaker_distribution_instance_groups must be a JSON list"):
        _ours(base)


def test_multi_worker_mirrored_on_one_host_gets_the_toolkits_one_worker_tf_config(tmp_path: Path) -> None:
    """sagemaker-tensorflow-training sets TF_CONFIG for instance_count=1 too; scripts read its worker list."""
    base = script_job(tmp_path, "/opt/ml/code", hyperparameters=SDK_HYPERPARAMETERS, resource_config=_homogeneous(["algo-1"], "algo-1"))
    assert _ours(base)[2] == {"cluster": {"worker": ["algo-1:8890"]}, "environment": "cloud", "task": {"index": 0, "type": "worker"}}


def test_tf_config_uses_the_ec2_worker_port_and_host_ports() -> None:
    process_env = {"TRAINING_HOSTS": "10.0.0.1,10.0.0.2", "TRAINING_CURRENT_HOST": "10.0.0.1", "TRAINING_WORKER_PORT": "2222"}
    env = environment.load_environment(process_env)
    assert contract.tf_config(env, process_env)["cluster"]["worker"] == ["10.0.0.1:2222", "10.0.0.2:2222"]
    loopback = {"TRAINING_HOSTS": "localhost:4001,localhost:4002", "TRAINING_CURRENT_HOST": "localhost:4002"}
    env = environment.load_environment(loopback)
    config = contract.tf_config(env, loopback)
    assert config["cluster"]["worker"] == ["localhost:4001", "localhost:4002"] and config["task"]["index"] == 1


def test_no_program_means_the_built_in_trainer() -> None:
    assert contract.script_job({"epochs": "3", "sagemaker_region": '"eu-west-1"'}, {}) is None


def test_program_from_the_environment_for_code_baked_into_the_image() -> None:
    job = contract.script_job({"epochs": "3"}, {"SAGEMAKER_PROGRAM": "train.py"})
    assert job is not None and job.program == "train.py" and job.submit_directory == "/opt/ml/code"


def test_plain_string_hyperparameters_as_scripts_launch_sends_them() -> None:
    job = contract.script_job({"sagemaker_program": "train.py", "sagemaker_submit_directory": "/x.tar.gz", "epochs": "3"}, {})
    assert job is not None and job.program == "train.py" and job.user_hyperparameters == {"epochs": 3}


def test_submit_directory_without_a_program_is_refused() -> None:
    with pytest.raises(ConfigError, match="sagemaker_program is not"):
        contract.script_job({"sagemaker_submit_directory": '"s3://b/k/sourcedir.tar.gz"'}, {})


@pytest.mark.parametrize(
    ("switch", "what"),
    [
        ("sagemaker_mpi_enabled", "MPI"),
        ("sagemaker_distributed_dataparallel_enabled", "distributed data parallel"),
    ],
)
def test_distributions_this_image_lacks_are_refused(switch: str, what: str) -> None:
    with pytest.raises(ConfigError, match=what):
        contract.script_job({"sagemaker_program": '"train.py"', switch: "true"}, {})


def test_parameter_server_is_accepted_and_exclusive_with_multi_worker_mirrored() -> None:
    job = contract.script_job({"sagemaker_program": '"train.py"', "sagemaker_parameter_server_enabled": "true"}, {})
    assert job is not None and job.parameter_server and not job.multi_worker_mirrored
    with pytest.raises(ConfigError, match="are both set"):
        contract.script_job(
            {"sagemaker_program": '"train.py"', "sagemaker_parameter_server_enabled": "true",
             "sagemaker_multi_worker_mirrored_strategy_enabled": "true"}, {}
        )  # fmt: skip


def _toolkit_ps_configs(hosts: list[str]) -> list[dict[str, object]]:
    """sagemaker-tensorflow-training's parameter-server TF_CONFIG for each host, then each host's ps task."""
    code = f"""
import json
from sagemaker_tensorflow_container.training import _build_tf_config_for_ps
hosts = {hosts!r}
configs = [_build_tf_config_for_ps(hosts, h) for h in hosts]
configs += [_build_tf_config_for_ps(hosts, h, ps_task=True) for h in hosts] if len(hosts) > 1 else []
print(json.dumps(configs))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("hosts", [["algo-1"], ["algo-1", "algo-2", "algo-3"]])
@pytest.mark.slow
def test_parameter_server_tf_config_matches_sagemaker_tensorflow_training(tmp_path: Path, hosts: list[str]) -> None:
    reference = _toolkit_ps_configs(hosts)
    ours = []
    for ps_task in (False, True) if len(hosts) > 1 else (False,):
        for host in hosts:
            base = tmp_path / f"{host}-{ps_task}"
            script_job(base, "/opt/ml/code", resource_config=_homogeneous(hosts, host))
            process_env = {"SAGEMAKER_BASE_DIR": str(base)}
            ours.append(contract.tf_config_for_ps(environment.load_environment(process_env), process_env, ps_task=ps_task))
    assert ours == reference


def test_parameter_server_ports_follow_the_worker_port_on_ec2_and_loopback() -> None:
    loopback = {"TRAINING_HOSTS": "localhost:4001,localhost:5001", "TRAINING_CURRENT_HOST": "localhost:5001"}
    config = contract.tf_config_for_ps(environment.load_environment(loopback), loopback)
    assert config["cluster"] == {"master": ["localhost:4001"], "ps": ["localhost:4002", "localhost:5002"], "worker": ["localhost:5001"]}
    assert config["task"] == {"index": 0, "type": "worker"}
    ec2 = {"TRAINING_HOSTS": "10.0.0.1,10.0.0.2", "TRAINING_CURRENT_HOST": "10.0.0.1", "TRAINING_WORKER_PORT": "7000"}
    config = contract.tf_config_for_ps(environment.load_environment(ec2), ec2, ps_task=True)
    assert config["cluster"]["ps"] == ["10.0.0.1:7001", "10.0.0.2:7001"] and config["task"] == {"index": 0, "type": "ps"}


def test_a_tuning_trial_gets_a_model_dir_of_its_own_as_the_tensorflow_container_gives_it() -> None:
    """sagemaker-tensorflow-training's _model_dir_with_training_job: trials of one tuning job never share model_dir."""
    sdk = {"sagemaker_program": '"train.py"', "epochs": "2", "model_dir": '"s3://bucket/tune/model"'}
    trial = {**sdk, "_tuning_objective_metric": '"validation:loss"'}
    job = contract.script_job(trial, {"TRAINING_JOB_NAME": "tune-001-4f2a"})
    assert contract.to_cmd_args(job.user_hyperparameters) == ["--epochs", "2", "--model_dir", "s3://bucket/tune/model/tune-001-4f2a/model"]
    # Not a tuning trial, or a model_dir under /opt/ml: as given.
    assert contract.script_job(sdk, {"TRAINING_JOB_NAME": "job-1"}).user_hyperparameters["model_dir"] == "s3://bucket/tune/model"
    local = contract.script_job({**trial, "model_dir": '"/opt/ml/model"'}, {"TRAINING_JOB_NAME": "tune-001-4f2a"})
    assert local.user_hyperparameters["model_dir"] == "/opt/ml/model"
    # The SDK's model_dir=False sends none: none is made up.
    without = {k: v for k, v in trial.items() if k != "model_dir"}
    assert "model_dir" not in contract.script_job(without, {"TRAINING_JOB_NAME": "tune-001-4f2a"}).user_hyperparameters
