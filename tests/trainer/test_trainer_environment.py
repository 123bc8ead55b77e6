"""The container contract: paths, variables and the host list, with SageMaker's fallbacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.contract.environment import load_environment, resolve_cluster, resolve_paths
from trainer.contract.errors import ConfigError


def _resource_config(base: Path, **content) -> None:
    path = base / "input" / "config" / "resourceconfig.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))


def test_defaults_follow_the_sagemaker_layout():
    paths = resolve_paths({})
    assert paths.base_dir == Path("/opt/ml")
    assert paths.hyperparameters_file == Path("/opt/ml/input/config/hyperparameters.json")
    assert paths.resource_config_file == Path("/opt/ml/input/config/resourceconfig.json")
    assert paths.input_data_config_file == Path("/opt/ml/input/config/inputdataconfig.json")
    assert paths.channel_dir("train", env={}) == Path("/opt/ml/input/data/train")
    assert paths.model_dir == Path("/opt/ml/model")
    assert paths.failure_file == Path("/opt/ml/output/failure")
    assert paths.tensorboard_dir == Path("/opt/ml/output/tensorboard")
    assert paths.checkpoint_dir == Path("/opt/ml/checkpoints")


def test_base_dir_override_keeps_checkpoints_inside_it(tmp_path):
    paths = resolve_paths({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    assert paths.model_dir == tmp_path / "model"
    assert paths.failure_file == tmp_path / "output" / "failure"
    assert paths.checkpoint_dir == tmp_path / "checkpoints"


def test_checkpoint_dir_variable_wins(tmp_path):
    paths = resolve_paths({"SAGEMAKER_BASE_DIR": str(tmp_path), "CHECKPOINT_DIR": "/shared/ckpt"})
    assert paths.checkpoint_dir == Path("/shared/ckpt")


def test_a_tuning_trial_keeps_its_checkpoints_under_its_own_name():
    """A tuning job's trials share one CheckpointConfig prefix: each resumes only from its own checkpoints."""
    trial = {"CHECKPOINT_PER_JOB": "true", "TRAINING_JOB_NAME": "gputrain-tune-1-002-abcdef12"}
    assert resolve_paths(trial).checkpoint_dir == Path("/opt/ml/checkpoints/gputrain-tune-1-002-abcdef12")
    assert resolve_paths({**trial, "CHECKPOINT_PER_JOB": "false"}).checkpoint_dir == Path("/opt/ml/checkpoints")
    assert resolve_paths({"CHECKPOINT_PER_JOB": "true"}).checkpoint_dir == Path("/opt/ml/checkpoints")


def test_sm_variables_override_model_output_and_channel_dirs(tmp_path):
    env = {"SM_MODEL_DIR": "/m", "SM_OUTPUT_DIR": "/o", "SM_CHANNEL_TRAIN": "/data/t"}
    paths = resolve_paths(env)
    assert paths.model_dir == Path("/m")
    assert paths.failure_file == Path("/o/failure")
    assert paths.channel_dir("train", env=env) == Path("/data/t")
    assert paths.channel_dir("validation", env=env) == Path("/opt/ml/input/data/validation")


def test_one_host_when_nothing_describes_a_cluster(tmp_path):
    cluster = resolve_cluster(resolve_paths({"SAGEMAKER_BASE_DIR": str(tmp_path)}), {})
    assert cluster.num_workers == 1 and cluster.is_chief and cluster.source == "single host"


def test_sagemaker_resourceconfig_gives_hosts_and_tf_config(tmp_path):
    _resource_config(
        tmp_path, current_host="algo-2", hosts=["algo-1", "algo-2"], current_instance_type="ml.g5.12xlarge"
    )
    env = load_environment({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    cluster = env.cluster
    assert (cluster.worker_index, cluster.num_workers, cluster.is_chief) == (1, 2, False)
    assert cluster.tf_config() == {
        "cluster": {"worker": ["algo-1:2222", "algo-2:2222"]},
        "task": {"type": "worker", "index": 1},
    }
    assert env.instance_type == "ml.g5.12xlarge"


def test_training_hosts_take_precedence_over_resourceconfig(tmp_path):
    _resource_config(tmp_path, current_host="algo-1", hosts=["algo-1"])
    env = {
        "SAGEMAKER_BASE_DIR": str(tmp_path),
        "TRAINING_HOSTS": "10.0.0.5, 10.0.0.6,10.0.0.7",
        "TRAINING_CURRENT_HOST": "10.0.0.7",
        "TRAINING_WORKER_PORT": "3333",
    }
    cluster = resolve_cluster(resolve_paths(env), env)
    assert cluster.hosts == ("10.0.0.5", "10.0.0.6", "10.0.0.7")
    assert cluster.worker_index == 2 and cluster.source == "TRAINING_HOSTS"
    assert cluster.addresses == ("10.0.0.5:3333", "10.0.0.6:3333", "10.0.0.7:3333")


def test_host_entries_may_carry_their_own_port():
    env = {"TRAINING_HOSTS": "localhost:4001,localhost:4002", "TRAINING_CURRENT_HOST": "localhost:4002"}
    cluster = resolve_cluster(resolve_paths({}), env)
    assert cluster.addresses == ("localhost:4001", "localhost:4002") and cluster.worker_index == 1


def test_sm_hosts_is_the_last_fallback(tmp_path):
    env = {"SAGEMAKER_BASE_DIR": str(tmp_path), "SM_HOSTS": '["algo-1","algo-2"]', "SM_CURRENT_HOST": "algo-1"}
    cluster = resolve_cluster(resolve_paths(env), env)
    assert cluster.hosts == ("algo-1", "algo-2") and cluster.is_chief


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"TRAINING_HOSTS": "a,b", "TRAINING_CURRENT_HOST": "c"}, "'c' is not in the host list"),
        ({"TRAINING_HOSTS": "a,b"}, "TRAINING_CURRENT_HOST is not"),
        ({"TRAINING_HOSTS": "a,a", "TRAINING_CURRENT_HOST": "a"}, "repeats an entry"),
        ({"TRAINING_WORKER_PORT": "http"}, "TRAINING_WORKER_PORT must be an integer"),
        ({"TRAINING_WORKER_PORT": "70000"}, "TRAINING_WORKER_PORT must be a TCP port"),
    ],
)
def test_inconsistent_host_settings_are_refused_by_name(env, fragment):
    with pytest.raises(ConfigError, match=fragment):
        resolve_cluster(resolve_paths({}), env)


def test_hyperparameters_and_input_data_config_are_read(tmp_path):
    config_dir = tmp_path / "input" / "config"
    config_dir.mkdir(parents=True)
    (config_dir / "hyperparameters.json").write_text('{"epochs": "3"}')
    (config_dir / "inputdataconfig.json").write_text('{"train": {"TrainingInputMode": "File"}}')
    env = load_environment({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    assert env.hyperparameters == {"epochs": "3"}
    assert env.input_data_config == {"train": {"TrainingInputMode": "File"}}
    assert env.expected_gpu_count is None and env.rendezvous_timeout_seconds == 600.0


def test_malformed_hyperparameters_file_is_named(tmp_path):
    config_dir = tmp_path / "input" / "config"
    config_dir.mkdir(parents=True)
    (config_dir / "hyperparameters.json").write_text('{"epochs": ')
    with pytest.raises(ConfigError, match="hyperparameters.json is not valid JSON"):
        load_environment({"SAGEMAKER_BASE_DIR": str(tmp_path)})


def test_hyperparameters_come_from_sm_hps_without_the_file(tmp_path):
    env = load_environment({"SAGEMAKER_BASE_DIR": str(tmp_path), "SM_HPS": '{"epochs": 3}'})
    assert env.hyperparameters == {"epochs": 3}


def test_malformed_sm_hps_is_a_config_error_naming_it_and_the_position(tmp_path):
    with pytest.raises(ConfigError) as raised:
        load_environment({"SAGEMAKER_BASE_DIR": str(tmp_path), "SM_HPS": '{"epochs": 3 "x": 1}'})
    message = str(raised.value)
    assert "SM_HPS is not valid JSON" in message and "line 1 column 14 (char 13)" in message
    assert raised.value.exit_code == 2


@pytest.mark.parametrize("source", ["SM_HPS", "hyperparameters.json"])
def test_hyperparameters_that_are_not_an_object_name_the_source_read(tmp_path, source):
    env = {"SAGEMAKER_BASE_DIR": str(tmp_path), "SM_HPS": "[1, 2]"}
    if source == "hyperparameters.json":
        config_dir = tmp_path / "input" / "config"
        config_dir.mkdir(parents=True)
        (config_dir / "hyperparameters.json").write_text('["epochs"]')
    with pytest.raises(ConfigError, match=r"must hold a JSON object") as raised:
        load_environment(env)
    message = str(raised.value)
    if source == "SM_HPS":
        assert message.startswith("SM_HPS ") and "hyperparameters.json" not in message
    else:
        assert str(tmp_path / "input" / "config" / "hyperparameters.json") in message and "SM_HPS" not in message


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"EXPECTED_GPU_COUNT": "-1"}, "EXPECTED_GPU_COUNT must be >= 0"),
        ({"EXPECTED_GPU_COUNT": "two"}, "EXPECTED_GPU_COUNT must be an integer"),
        ({"RENDEZVOUS_TIMEOUT_SECONDS": "soon"}, "RENDEZVOUS_TIMEOUT_SECONDS must be a positive number of seconds"),
        ({"RENDEZVOUS_TIMEOUT_SECONDS": "0"}, "RENDEZVOUS_TIMEOUT_SECONDS must be a positive number of seconds"),
        ({"TRAINER_LOGICAL_CPU_DEVICES": "0"}, "TRAINER_LOGICAL_CPU_DEVICES must be >= 1"),
    ],
)
def test_invalid_environment_values_are_refused_by_name(tmp_path, env, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_environment({"SAGEMAKER_BASE_DIR": str(tmp_path), **env})


def test_environment_values_are_parsed(tmp_path):
    env = load_environment(
        {
            "SAGEMAKER_BASE_DIR": str(tmp_path),
            "EXPECTED_GPU_COUNT": "0",
            "RENDEZVOUS_TIMEOUT_SECONDS": "30",
            "TRAINER_LOGICAL_CPU_DEVICES": "2",
        }
    )
    assert (env.expected_gpu_count, env.rendezvous_timeout_seconds, env.logical_cpu_devices) == (0, 30.0, 2)


def test_instance_type_precedence(tmp_path):
    _resource_config(tmp_path, current_host="algo-1", hosts=["algo-1"], current_instance_type="ml.p4d.24xlarge")
    base = {"SAGEMAKER_BASE_DIR": str(tmp_path), "SM_CURRENT_INSTANCE_TYPE": "ml.g5.xlarge"}
    assert load_environment({**base, "TRAINING_INSTANCE_TYPE": "g6.12xlarge"}).instance_type == "g6.12xlarge"
    assert load_environment(base).instance_type == "ml.p4d.24xlarge"
    (tmp_path / "input" / "config" / "resourceconfig.json").unlink()
    assert load_environment(base).instance_type == "ml.g5.xlarge"


# --- multi-host failure messages ---------------------------------------------------------------


def _cluster(source: str):
    from trainer.contract.environment import Cluster

    return Cluster(hosts=("algo-1", "algo-2"), current_host="algo-1", worker_port=2222, source=source)


def test_rendezvous_message_speaks_the_platform_the_job_runs_on():
    from trainer.train.distribute import rendezvous_failure_message

    sagemaker = rendezvous_failure_message(_cluster("/opt/ml/input/config/resourceconfig.json"), 600)
    assert "algo-2:2222" in sagemaker and "On SageMaker" in sagemaker and "port 2222" in sagemaker
    assert "TRAINING_HOSTS" not in sagemaker and "TRAINING_WORKER_PORT" not in sagemaker
    ec2 = rendezvous_failure_message(_cluster("TRAINING_HOSTS"), 600)
    assert "TRAINING_HOSTS" in ec2 and "TRAINING_WORKER_PORT" in ec2


def test_a_peer_lost_in_the_startup_all_reduce_is_the_named_multi_host_failure():
    import tensorflow as tf

    from trainer.contract.errors import PeerFailedError
    from trainer.train.distribute import peer_failure

    err = tf.errors.UnavailableError(None, None, "Collective ops is aborted by: failed to connect to all addresses")
    failure = peer_failure(_cluster("SM_HOSTS"), "the start-up GPU check's all-reduce", err)
    assert isinstance(failure, PeerFailedError) and failure.exit_code == 10
    message = str(failure)
    assert message.startswith("A peer of this 2-host job failed during the start-up GPU check's all-reduce")
    assert "algo-2:2222" in message and "check its log" in message and "UnavailableError" in message


def test_the_watchdog_tells_a_refused_port_from_silence():
    import socket

    from trainer.train.watchdog import describe_unanswered, knock

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        open_port = listening.getsockname()[1]
        assert knock(f"127.0.0.1:{open_port}") == "answered"
    assert knock(f"127.0.0.1:{open_port}") == "refused"
    text = describe_unanswered({"a:1": "answered", "b:2": "refused", "c:3": "silent"})
    assert text == " Did not answer: b:2 (refused the connection: the host is up but no trainer listens there), c:3 (no reply)."
