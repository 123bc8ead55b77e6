"""The local runner runs what a job asks, as SageMaker's container would, on a bare emulator.

Each job here names its own ``ContainerEntrypoint`` (as ``ScriptProcessor``, ``FrameworkProcessor``
and SDK v3's ``ModelTrainer`` do): the runner must run exactly that, with the job's tree at
``/opt/ml`` (its own mount namespace), one container per instance with SageMaker's host names,
and let the container's exit status and failure file decide the job.

Each test that is about what a job sees runs twice: with the runner's default (this machine's
processes playing the image) and in Docker (``run-local.sh --containers``: containers of the built
image; those are ``image`` and ``slow`` tests, skipped where no Docker engine runs).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from scripts.emulator import containers, server
from scripts.emulator.containers import ContainerRefused, JobNetwork, container_command, host_names
from scripts.emulator import docker_hosts
from scripts.emulator.docker_hosts import DockerHosts, bridge_gateway, image_command, interface_ipv4
from scripts.emulator.sagemaker import LocalSageMaker

ROLE = f"arn:aws:iam::{server.ACCOUNT}:role/training"
IMAGE = f"{server.ACCOUNT}.dkr.ecr.{server.REGION}.amazonaws.com/gputrain-training:1"

# A container that records what it sees at /opt/ml and writes a "model" there.
RECORDER = r"""
import json, os, socket, sys
seen = {
    "argv": sys.argv[1:], "cwd": os.getcwd(),
    "resources": json.load(open("/opt/ml/input/config/resourceconfig.json")),
    "hyperparameters": json.load(open("/opt/ml/input/config/hyperparameters.json")),
    "data": sorted(os.listdir("/opt/ml/input/data/training")),
    "python": sys.executable,
}
os.makedirs("/opt/ml/model", exist_ok=True)
json.dump(seen, open("/opt/ml/model/seen.json", "w"))
"""


@pytest.fixture()
def emulator(tmp_path: Path) -> Iterator[server.Emulator]:
    emu = server.start(log_file=tmp_path / "moto.log")
    try:
        yield emu
    finally:
        emu.stop()


def _runner(emulator: server.Emulator, work_dir: Path, docker: DockerHosts | None = None) -> LocalSageMaker:
    # Jobs are run one by one from the test (run_job), not by the watching thread.
    return LocalSageMaker(
        endpoint_url=emulator.endpoint_url, region=server.REGION, account=server.ACCOUNT, work_dir=work_dir,
        timeout_seconds=120, on_event=lambda _: None, docker=docker,
    )


@pytest.fixture(params=["processes", pytest.param("docker", marks=[pytest.mark.image, pytest.mark.slow])])
def runner(request: pytest.FixtureRequest, emulator: server.Emulator, tmp_path: Path) -> Iterator[LocalSageMaker]:
    """The local runner, playing the image with processes, or running the built image in Docker."""
    if request.param == "processes":
        yield _runner(emulator, tmp_path / "jobs")
        return
    from tests.image.built import built_image_or_skip

    docker = DockerHosts.open(built_image_or_skip().tag, emulator.port)
    try:
        yield _runner(emulator, tmp_path / "jobs", docker)
    finally:
        docker.close()


@pytest.fixture()
def process_runner(emulator: server.Emulator, tmp_path: Path) -> LocalSageMaker:
    """The default runner only: for what is about playing the image with this machine's processes."""
    return _runner(emulator, tmp_path / "jobs")


def _client(emulator: server.Emulator, service: str) -> Any:
    return server.client(service, endpoint_url=emulator.endpoint_url)


def _create_training_job(emulator: server.Emulator, name: str, entrypoint: list[str] | None, arguments: list[str] | None = None,
                         *, instances: int = 1, distribution: str = "FullyReplicated", keep_alive: int = 0,
                         isolated: bool = False, max_runtime: int = 600, checkpoints: str | None = None) -> None:
    s3 = _client(emulator, "s3")
    if "datasets" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket="datasets")
        s3.create_bucket(Bucket="artifacts")
        for part in range(4):
            s3.put_object(Bucket="datasets", Key=f"train/part-{part}.csv", Body=b"f0,label\n0.1,0\n")
    spec: dict[str, Any] = {"TrainingImage": IMAGE, "TrainingInputMode": "File"}
    if entrypoint:
        spec["ContainerEntrypoint"] = entrypoint
    if arguments:
        spec["ContainerArguments"] = arguments
    _client(emulator, "sagemaker").create_training_job(
        TrainingJobName=name,
        RoleArn=ROLE,
        AlgorithmSpecification=spec,
        HyperParameters={"epochs": "2"},
        InputDataConfig=[{"ChannelName": "training", "DataSource": {"S3DataSource": {
            "S3DataType": "S3Prefix", "S3Uri": "s3://datasets/train/", "S3DataDistributionType": distribution}}}],
        OutputDataConfig={"S3OutputPath": "s3://artifacts/output/"},
        ResourceConfig={"InstanceType": "ml.g5.xlarge", "InstanceCount": instances, "VolumeSizeInGB": 50,
                        **({"KeepAlivePeriodInSeconds": keep_alive} if keep_alive else {})},
        StoppingCondition={"MaxRuntimeInSeconds": max_runtime},
        EnableNetworkIsolation=isolated,
        **({"CheckpointConfig": {"S3Uri": checkpoints}} if checkpoints else {}),
    )


def _model_files(emulator: server.Emulator, artifact: str) -> dict[str, Any]:
    bucket, _, key = artifact[len("s3://") :].partition("/")
    body = _client(emulator, "s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        return {m.name: json.loads(tar.extractfile(m).read()) for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_docker_rules_for_entrypoint_and_arguments() -> None:
    assert container_command(None, None) == ["python", "-m", "trainer", "train"]
    assert container_command(None, ["process", "--x"]) == ["python", "-m", "trainer", "process", "--x"]
    assert container_command(["/bin/bash"], ["/opt/ml/input/data/sm_drivers/sm_train.sh"]) == [
        "/bin/bash", "/opt/ml/input/data/sm_drivers/sm_train.sh"]
    assert container_command(["/opt/venv/bin/python", "-m", "trainer"], ["serve"]) == ["python", "-m", "trainer", "serve"]
    assert host_names(3) == ["algo-1", "algo-2", "algo-3"]


def test_docker_run_gets_the_entrypoints_first_word_and_the_rest_as_its_command() -> None:
    # docker run --entrypoint takes one executable: SDK v3's ["/bin/bash", "-c", "..."] must keep -c.
    assert image_command(["/bin/bash", "-c"], ["sm_train.sh"], ["train"]) == ("/bin/bash", ["-c", "sm_train.sh"])
    assert image_command(["python3"], None, ["train"]) == ("python3", [])
    # Without an entrypoint the image's own (tini -- python -m trainer) runs the arguments or the default.
    assert image_command(None, ["process"], ["train"]) == (None, ["process"])
    assert image_command(None, None, ["train"]) == (None, ["train"])
    docker = DockerHosts("gputrain-trainer:local", 4566)
    one_host = docker.job_command("c1", ["python3", "x.py"], ["--a"], opt_ml=Path("/w/opt-ml"), env={"K": "V"}, network=None, host="algo-1")
    assert one_host[:4] == ["docker", "run", "--name", "c1"]
    assert one_host[-5:] == ["--entrypoint", "python3", "gputrain-trainer:local", "x.py", "--a"]
    assert "-v" in one_host and "/w/opt-ml:/opt/ml" in one_host and "K=V" in one_host
    # A network alias exists on a user-defined network only (the default bridge refuses one).
    assert "--network-alias" not in one_host and one_host[one_host.index("--hostname") + 1] == "algo-1"
    two_hosts = docker.job_command("c2", None, None, opt_ml=Path("/w/opt-ml"), env={}, network="net", host="algo-2")
    assert two_hosts[two_hosts.index("--network-alias") + 1] == "algo-2" and two_hosts[two_hosts.index("--network") + 1] == "net"
    assert two_hosts[-2:] == ["gputrain-trainer:local", "train"] and "--entrypoint" not in two_hosts
    assert docker.endpoint_url == "http://host.docker.internal:4566"


def _inspect_bridge(monkeypatch: pytest.MonkeyPatch, network: dict[str, Any] | None, stderr: str = "") -> None:
    """``docker network inspect bridge`` answers ``network`` (or fails with ``stderr``); nothing else is run."""

    def fake_docker(*args: str, timeout: float = 0) -> subprocess.CompletedProcess[str]:
        assert args[:3] == ("network", "inspect", "bridge"), args
        if network is None:
            return subprocess.CompletedProcess(["docker", *args], 1, "", stderr)
        return subprocess.CompletedProcess(["docker", *args], 0, json.dumps(network) + "\n", "")

    monkeypatch.setattr(docker_hosts, "docker", fake_docker)


def test_the_bridge_gateway_is_the_one_the_daemon_records(monkeypatch) -> None:
    _inspect_bridge(monkeypatch, {"IPAM": {"Config": [{"Subnet": "fd00::/64", "Gateway": "fd00::1"},
                                                      {"Subnet": "172.17.0.0/16", "Gateway": "172.17.0.1"}]},
                                  "Options": {"com.docker.network.bridge.name": "no-such-if0"}})
    assert bridge_gateway() == "172.17.0.1"  # the IPv4 one, whatever the interface says


def test_a_bridge_without_a_recorded_gateway_is_read_off_its_interface(monkeypatch) -> None:
    # Debian's docker.io 20.10 on a fresh machine records the subnet alone; docker0 has the address.
    # Here the bridge's interface is loopback, whose address every Linux machine has.
    _inspect_bridge(monkeypatch, {"IPAM": {"Config": [{"Subnet": "172.17.0.0/16"}]},
                                  "Options": {"com.docker.network.bridge.name": "lo"}})
    assert bridge_gateway() == "127.0.0.1"
    assert interface_ipv4("lo") == "127.0.0.1" and interface_ipv4("no-such-if0") == ""


def test_a_bridge_with_no_address_anywhere_is_refused_in_one_line(monkeypatch) -> None:
    _inspect_bridge(monkeypatch, {"IPAM": {"Config": [{"Subnet": "172.17.0.0/16", "Gateway": ""}]},
                                  "Options": {"com.docker.network.bridge.name": "no-such-if0"}})
    with pytest.raises(ContainerRefused, match=r"records no gateway and its interface no-such-if0 has no IPv4 address; restart"):
        bridge_gateway()
    _inspect_bridge(monkeypatch, None, stderr="Error: No such network: bridge")
    with pytest.raises(ContainerRefused, match=r"docker network inspect bridge failed: Error: No such network: bridge"):
        bridge_gateway()


@pytest.mark.image
@pytest.mark.slow
def test_containers_without_the_built_image_are_refused_with_the_command_that_builds_it(emulator) -> None:
    from tests.image.built import built_image_or_skip

    built_image_or_skip()  # an engine that answers, so the refusal is about the image alone
    with pytest.raises(ContainerRefused, match=r"gputrain-trainer:never-built, which is not built here; run scripts/build-image.sh --tag gputrain-trainer:never-built"):
        DockerHosts.open("gputrain-trainer:never-built", emulator.port)


def test_a_training_jobs_own_entrypoint_runs_with_the_job_tree_at_opt_ml(emulator, runner) -> None:
    _create_training_job(emulator, "own-entrypoint", ["python3", "-c", RECORDER], ["--flag", "value"])
    outcome = runner.run_job("own-entrypoint")
    assert outcome.status == "Completed", outcome.failure_reason
    seen = _model_files(emulator, outcome.model_artifact or "")["seen.json"]
    assert seen["argv"] == ["--flag", "value"]
    assert seen["cwd"] == "/opt/ml"  # the image's WORKDIR
    assert seen["data"] == ["part-0.csv", "part-1.csv", "part-2.csv", "part-3.csv"]
    assert seen["hyperparameters"] == {"epochs": "2"}
    assert seen["resources"]["current_host"] == "algo-1" and seen["resources"]["hosts"] == ["algo-1"]
    assert seen["resources"]["current_instance_type"] == "ml.g5.xlarge"
    # python3 on the container's PATH is the image's interpreter (played: the emulator's).
    image_python = Path("/opt/venv/bin") if runner.docker is not None else Path(os.sys.executable).parent
    assert Path(seen["python"]).parent == image_python


def test_a_bash_entrypoint_runs_a_driver_script_from_the_jobs_tree(emulator, runner) -> None:
    # ModelTrainer's shape: /bin/bash plus a script that lives under /opt/ml.
    script = "set -e\nmkdir -p /opt/ml/model\necho \"$0 ran in $(pwd)\" > /opt/ml/model/driver.txt\n"
    _create_training_job(emulator, "bash-driver", ["/bin/bash", "-c", script])
    outcome = runner.run_job("bash-driver")
    assert outcome.status == "Completed", outcome.failure_reason
    assert (outcome.base_dir / "model" / "driver.txt").read_text().strip().endswith("ran in /opt/ml")


@pytest.mark.slow
def test_the_containers_exit_and_failure_file_decide_the_job(emulator, runner) -> None:
    _create_training_job(emulator, "writes-failure", ["/bin/sh", "-c", "echo 'ValueError: bad label in row 3' > /opt/ml/output/failure; exit 3"])
    _create_training_job(emulator, "exits-2", ["/bin/sh", "-c", "mkdir -p /opt/ml/model && echo x > /opt/ml/model/m && exit 2"])
    _create_training_job(emulator, "writes-nothing", ["/bin/true"])
    _create_training_job(emulator, "no-such-entrypoint", ["/opt/ml/code/missing.sh"])
    sagemaker = _client(emulator, "sagemaker")
    reasons = {}
    for name in ("writes-failure", "exits-2", "writes-nothing", "no-such-entrypoint"):
        outcome = runner.run_job(name)
        job = sagemaker.describe_training_job(TrainingJobName=name)
        assert outcome.status == job["TrainingJobStatus"] == "Failed", name
        assert "ModelArtifacts" not in job or not job["ModelArtifacts"].get("S3ModelArtifacts"), name
        reasons[name] = job["FailureReason"]
    assert reasons["writes-failure"] == "ValueError: bad label in row 3"
    assert reasons["exits-2"].startswith("AlgorithmError: the container exited 2")
    assert reasons["writes-nothing"] == "AlgorithmError: the container exited 0 but wrote nothing to /opt/ml/model"
    assert reasons["no-such-entrypoint"].startswith("AlgorithmError: the container exited 127")


def test_a_script_processor_finds_its_code_at_the_container_path(emulator, runner) -> None:
    s3 = _client(emulator, "s3")
    s3.create_bucket(Bucket="datasets")
    code = "import os\nos.makedirs('/opt/ml/processing/output/out', exist_ok=True)\n" \
           "open('/opt/ml/processing/output/out/result.txt', 'w').write(open('/opt/ml/processing/input/data/in.txt').read().upper())\n"
    s3.put_object(Bucket="datasets", Key="code/preprocess.py", Body=code.encode())
    s3.put_object(Bucket="datasets", Key="raw/in.txt", Body=b"hello")
    inputs = [
        {"InputName": name, "S3Input": {"S3Uri": uri, "LocalPath": path, "S3DataType": "S3Prefix", "S3InputMode": "File"}}
        for name, uri, path in (("input-1", "s3://datasets/raw/", "/opt/ml/processing/input/data"),
                                ("code", "s3://datasets/code/preprocess.py", "/opt/ml/processing/input/code"))
    ]
    _client(emulator, "sagemaker").create_processing_job(
        ProcessingJobName="script-processor", RoleArn=ROLE,
        AppSpecification={"ImageUri": IMAGE, "ContainerEntrypoint": ["python3", "/opt/ml/processing/input/code/preprocess.py"]},
        ProcessingResources={"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.g5.xlarge", "VolumeSizeInGB": 30}},
        ProcessingInputs=inputs,
        ProcessingOutputConfig={"Outputs": [{"OutputName": "out", "S3Output": {
            "S3Uri": "s3://datasets/processed/", "LocalPath": "/opt/ml/processing/output/out", "S3UploadMode": "EndOfJob"}}]},
        StoppingCondition={"MaxRuntimeInSeconds": 600},
    )
    outcome = runner.run_processing_job("script-processor")
    assert outcome.status == "Completed", outcome.failure_reason
    assert s3.get_object(Bucket="datasets", Key="processed/result.txt")["Body"].read() == b"HELLO"


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="several hosts need one network namespace per host (root)")

# Each host serves its name on port 2222 (the same port on every host, as on SageMaker) and reads
# the other host's over the job's network by SageMaker's host name.
PEERS = r"""
import json, os, socket, threading, time
config = json.load(open("/opt/ml/input/config/resourceconfig.json"))
me = config["current_host"]
server = socket.socket(); server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("0.0.0.0", 2222)); server.listen()
def answer():
    connection, _ = server.accept(); connection.sendall(me.encode()); connection.close()
threading.Thread(target=answer, daemon=True).start()
other = [h for h in config["hosts"] if h != me][0]
for _ in range(100):
    try:
        heard = socket.create_connection((other, 2222), timeout=2).recv(64).decode(); break
    except OSError:
        time.sleep(0.1)
time.sleep(1)
os.makedirs("/opt/ml/model", exist_ok=True)
json.dump({"me": me, "heard": heard, "hosts": config["hosts"], "data": sorted(os.listdir("/opt/ml/input/data/training"))},
          open("/opt/ml/model/peer.json", "w"))
"""


@needs_root
@pytest.mark.slow
def test_two_instances_are_two_hosts_that_reach_each_other_by_name(emulator, runner) -> None:
    # Played: a network namespace per host; in Docker: a network of the job's own.
    _create_training_job(emulator, "two-hosts", ["python3", "-c", PEERS], instances=2, distribution="ShardedByS3Key")
    outcome = runner.run_job("two-hosts")
    assert outcome.status == "Completed", outcome.failure_reason
    first = json.loads((outcome.base_dir / "model" / "peer.json").read_text())
    second = json.loads((outcome.base_dir.parent / "algo-2" / "opt-ml" / "model" / "peer.json").read_text())
    assert (first["me"], first["heard"], first["hosts"]) == ("algo-1", "algo-2", ["algo-1", "algo-2"])
    assert (second["me"], second["heard"]) == ("algo-2", "algo-1")
    # ShardedByS3Key: each host gets a disjoint half of the keys.
    assert first["data"] == ["part-0.csv", "part-2.csv"] and second["data"] == ["part-1.csv", "part-3.csv"]
    assert _model_files(emulator, outcome.model_artifact or "")["peer.json"]["me"] == "algo-1"


@needs_root
@pytest.mark.slow  # seconds on CI: out of the quick loop
def test_one_failing_host_fails_the_job_and_ends_the_other(emulator, runner) -> None:
    script = "import json,sys,time\nme=json.load(open('/opt/ml/input/config/resourceconfig.json'))['current_host']\n" \
             "if me=='algo-2':\n    open('/opt/ml/output/failure','w').write('RuntimeError: worker lost'); sys.exit(1)\ntime.sleep(300)\n"
    _create_training_job(emulator, "one-fails", ["python3", "-c", script], instances=2)
    outcome = runner.run_job("one-fails")
    assert outcome.status == "Failed" and outcome.seconds < 60
    assert outcome.failure_reason == "algo-2: RuntimeError: worker lost"


@pytest.mark.slow
def test_several_instances_without_a_host_network_are_refused_with_one_line(emulator, process_runner, monkeypatch) -> None:
    runner = process_runner
    def refuse(self: JobNetwork) -> None:
        raise ContainerRefused("InstanceCount 2: the local runner plays several hosts with one network namespace per host, "
                               "which needs root and iproute2 ('ip')")

    monkeypatch.setattr(JobNetwork, "up", refuse)
    _create_training_job(emulator, "refused", ["python3", "-c", RECORDER], instances=2)
    outcome = runner.run_job("refused")
    job = _client(emulator, "sagemaker").describe_training_job(TrainingJobName="refused")
    assert outcome.status == job["TrainingJobStatus"] == "Failed"
    assert job["FailureReason"].startswith("ClientError: InstanceCount 2: the local runner plays several hosts")
    assert "\n" not in job["FailureReason"]
    assert not (outcome.base_dir / "model" / "seen.json").exists(), "nothing ran on one host instead"


def test_a_machine_without_user_namespaces_refuses_rather_than_running_outside_opt_ml(monkeypatch) -> None:
    containers.mount_namespace_prefix.cache_clear()
    monkeypatch.setattr(containers.shutil, "which", lambda name: None)
    try:
        with pytest.raises(ContainerRefused, match="needs util-linux 'unshare'"):
            containers.mount_namespace_prefix()
    finally:
        containers.mount_namespace_prefix.cache_clear()


def test_a_replaced_entrypoints_python_runs_under_the_images_guard(emulator, runner) -> None:
    # The image's python/python3 (training_image/bin, first on PATH) run a job's command under
    # trainer.user_code.guard: the failure file names the user's error, where the job alone would
    # have left none.
    _create_training_job(emulator, "guarded", ["python3", "-c", "import json\nraise ValueError('bad label in row 3')\n"])
    outcome = runner.run_job("guarded")
    assert outcome.status == "Failed"
    assert outcome.failure_reason is not None and outcome.failure_reason.startswith("The training script python -c")
    assert "ValueError: bad label in row 3" in outcome.failure_reason


@pytest.mark.slow
def test_a_container_reaches_the_emulator_as_a_job_reaches_aws(emulator, runner) -> None:
    # A job without network isolation calls AWS with the role's credentials (train25's s3://
    # sagemaker_submit_directory download does); on the emulator, AWS is the emulator.
    script = ("import boto3, os\nos.makedirs('/opt/ml/model', exist_ok=True)\n"
              "keys = [o['Key'] for o in boto3.client('s3').list_objects_v2(Bucket='datasets')['Contents']]\n"
              "open('/opt/ml/model/keys.txt', 'w').write(','.join(keys))\n")
    _create_training_job(emulator, "calls-aws", ["python3", "-c", script])
    outcome = runner.run_job("calls-aws")
    assert outcome.status == "Completed", outcome.failure_reason
    assert (outcome.base_dir / "model" / "keys.txt").read_text() == ",".join(f"train/part-{i}.csv" for i in range(4))


def test_a_network_isolated_container_gets_no_aws_credentials_as_on_sagemaker(emulator, process_runner) -> None:
    """Every platform job has network isolation, and SageMaker gives its container no credentials: the
    same AWS call fails here, at once, instead of passing locally and failing only on AWS."""
    script = ("import boto3, os, sys\nprint('env', sorted(k for k in os.environ if k.startswith('AWS_')))\n"
              "boto3.client('s3').list_objects_v2(Bucket='datasets')\n")
    _create_training_job(emulator, "isolated-calls-aws", ["python3", "-c", script], isolated=True)
    outcome = process_runner.run_job("isolated-calls-aws")
    assert outcome.status == "Failed"
    assert "NoCredentialsError" in (outcome.failure_reason or ""), outcome.failure_reason
    log = outcome.log_file.read_text()
    assert "'AWS_ENDPOINT_URL'" not in log and "'AWS_ACCESS_KEY_ID'" not in log and "'AWS_REGION'" in log


def test_stop_training_job_sends_sigterm_to_the_jobs_process_and_records_stopped(emulator, runner) -> None:
    # As SageMaker does on StopTrainingJob: SIGTERM to the container (in Docker: through the attached
    # docker run and the entrypoint), which has time to leave a checkpoint before it ends.
    import threading
    import time

    script = ("import signal, sys, time\n"
              "def stop(*_):\n    open('/opt/ml/checkpoints/stopped.txt', 'w').write('SIGTERM'); sys.exit(143)\n"
              "signal.signal(signal.SIGTERM, stop)\nprint('waiting for a stop', flush=True)\ntime.sleep(300)\n")
    _create_training_job(emulator, "stopped", ["python3", "-c", script])
    outcomes: list[Any] = []
    thread = threading.Thread(target=lambda: outcomes.append(runner.run_job("stopped")))
    thread.start()
    log = runner.work_dir / "stopped" / "container.log"
    deadline = time.monotonic() + 90
    while not (log.is_file() and "waiting for a stop" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "waiting for a stop" in log.read_text()
    _client(emulator, "sagemaker").stop_training_job(TrainingJobName="stopped")
    thread.join(timeout=90)
    (outcome,) = outcomes
    assert outcome.status == "Stopped" and outcome.seconds < 60
    assert (outcome.base_dir / "checkpoints" / "stopped.txt").read_text() == "SIGTERM"


def test_a_job_its_own_max_runtime_stops_is_stopped_with_what_it_saved_as_on_sagemaker(emulator, process_runner) -> None:
    """SageMaker stops a job at its MaxRuntimeInSeconds (SIGTERM, then its grace) and records it Stopped,
    SecondaryStatus MaxRuntimeExceeded (what scripts.watch names the setting for), with the model saved."""
    script = ("import os, time\nos.makedirs('/opt/ml/model', exist_ok=True)\n"
              "open('/opt/ml/model/epoch-1.txt', 'w').write('1')\nprint('saved', flush=True)\ntime.sleep(300)\n")
    _create_training_job(emulator, "runs-out", ["python3", "-c", script], max_runtime=8)
    outcome = process_runner.run_job("runs-out")
    assert outcome.status == "Stopped" and outcome.seconds < 60
    described = _client(emulator, "sagemaker").describe_training_job(TrainingJobName="runs-out")
    assert (described["TrainingJobStatus"], described["SecondaryStatus"]) == ("Stopped", "MaxRuntimeExceeded")
    assert _model_files_text(emulator, described["ModelArtifacts"]["S3ModelArtifacts"]) == {"epoch-1.txt": "1"}


def test_a_failed_jobs_checkpoints_reach_s3_as_sagemakers_sync_leaves_them(emulator, process_runner) -> None:
    """SageMaker syncs /opt/ml/checkpoints while the job runs: what a failed (or spot-interrupted) job
    saved is in S3 for the rerun that resumes from it."""
    script = ("import os, sys\nos.makedirs('/opt/ml/checkpoints', exist_ok=True)\n"
              "open('/opt/ml/checkpoints/ckpt-3.index', 'w').write('3')\nsys.exit(1)\n")
    _create_training_job(emulator, "fails-after-a-checkpoint", ["python3", "-c", script], checkpoints="s3://artifacts/checkpoints/f1/")
    outcome = process_runner.run_job("fails-after-a-checkpoint")
    assert outcome.status == "Failed"
    body = _client(emulator, "s3").get_object(Bucket="artifacts", Key="checkpoints/f1/ckpt-3.index")["Body"].read()
    assert body == b"3"


def test_only_the_jobs_own_metric_definitions_make_final_metrics(emulator, process_runner) -> None:
    """SageMaker reads a custom image's log with the job's MetricDefinitions only: an SDK estimator that
    names none gets no FinalMetricDataList (and a tuner no objective), here as there."""
    # The line the platform's own definitions read (train:epoch, train:loss): not this job's.
    script = ("import os\nos.makedirs('/opt/ml/model', exist_ok=True)\nopen('/opt/ml/model/m', 'w').write('m')\n"
              "print('[metrics] epoch=1 loss=0.25 accuracy=0.5')\n")
    _create_training_job(emulator, "no-definitions", ["python3", "-c", script])
    outcome = process_runner.run_job("no-definitions")
    assert outcome.status == "Completed" and outcome.final_metrics == {}
    described = _client(emulator, "sagemaker").describe_training_job(TrainingJobName="no-definitions")
    assert not described.get("FinalMetricDataList")


def _model_files_text(emulator: server.Emulator, artifact: str) -> dict[str, str]:
    bucket, _, key = artifact[len("s3://") :].partition("/")
    body = _client(emulator, "s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        return {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


@pytest.mark.slow  # seconds on CI: out of the quick loop
def test_a_warm_pool_is_reported_audited_and_ended_by_teardown(emulator, process_runner, monkeypatch, capsys) -> None:
    """Issue #39: a kept warm pool bills, so the audit reports it and scripts.teardown --stop-running ends it."""
    import boto3

    from scripts import teardown, teardown_audit
    from scripts.common import Aws, Deployment, load_platform_config

    sagemaker = _client(emulator, "sagemaker")
    _create_training_job(emulator, "gputrain-warm-1", ["python3", "-c", RECORDER], keep_alive=900)
    _create_training_job(emulator, "gputrain-cold-1", ["python3", "-c", RECORDER])
    for name in ("gputrain-warm-1", "gputrain-cold-1"):
        assert process_runner.run_job(name).status == "Completed"
    assert sagemaker.describe_training_job(TrainingJobName="gputrain-warm-1")["WarmPoolStatus"]["Status"] == "Available"
    assert "WarmPoolStatus" not in sagemaker.describe_training_job(TrainingJobName="gputrain-cold-1")
    listed = sagemaker.list_training_jobs(WarmPoolStatusEquals="Available")["TrainingJobSummaries"]
    assert [j["TrainingJobName"] for j in listed] == ["gputrain-warm-1"]

    for key, value in {"AWS_ENDPOINT_URL": emulator.endpoint_url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(key, value)
    session = boto3.Session(region_name=server.REGION)
    arn = sagemaker.describe_training_job(TrainingJobName="gputrain-warm-1")["TrainingJobArn"]
    judged = teardown_audit._judge(arn, data_retained=True, client=lambda s: _client(emulator, s), ec2=None)
    assert judged.verdict == teardown_audit.ERROR and "warm pool is Available" in judged.note

    deployment = Deployment(config=load_platform_config(), aws=Aws(session))
    assert teardown.find_running(deployment).warm_pools == ["gputrain-warm-1"]
    left = teardown.stop_running(deployment, interval=0.1, timeout=10)
    assert not left and "ending the warm pool of training job gputrain-warm-1" in capsys.readouterr().out
    pool = sagemaker.describe_training_job(TrainingJobName="gputrain-warm-1")["WarmPoolStatus"]
    assert pool["Status"] == "Terminated" and pool["ResourceRetainedBillableTimeInSeconds"] >= 0
    judged = teardown_audit._judge(arn, data_retained=True, client=lambda s: _client(emulator, s), ec2=None)
    assert judged.verdict == teardown_audit.INFO


def test_an_untagged_jobs_tags_and_a_running_jobs_keep_alive_are_answered_as_sagemaker_does(emulator, process_runner) -> None:
    """The operator tools read each name-matched job's Project tag (ListTags: an untagged transform job
    has none, not a 500) and set a running job's keep-alive to 0 before they stop it (UpdateTrainingJob
    of an InProgress job), after which its end leaves no warm pool."""
    sagemaker = _client(emulator, "sagemaker")
    sagemaker.create_transform_job(
        TransformJobName="gputrain-untagged-1", ModelName="gputrain-m",
        TransformInput={"DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://datasets/score/"}}},
        TransformOutput={"S3OutputPath": "s3://artifacts/scored/"},
        TransformResources={"InstanceType": "ml.g5.xlarge", "InstanceCount": 1},
    )
    arn = sagemaker.describe_transform_job(TransformJobName="gputrain-untagged-1")["TransformJobArn"]
    assert sagemaker.list_tags(ResourceArn=arn)["Tags"] == []
    _create_training_job(emulator, "gputrain-keep-1", ["python3", "-c", RECORDER], keep_alive=900)
    assert sagemaker.describe_training_job(TrainingJobName="gputrain-keep-1")["TrainingJobStatus"] == "InProgress"
    sagemaker.update_training_job(TrainingJobName="gputrain-keep-1", ResourceConfig={"KeepAlivePeriodInSeconds": 0})
    assert process_runner.run_job("gputrain-keep-1").status == "Completed"
    described = sagemaker.describe_training_job(TrainingJobName="gputrain-keep-1")
    assert described["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 0 and "WarmPoolStatus" not in described


def test_stop_hyper_parameter_tuning_job_stops_it_and_its_running_trials_as_sagemaker_does(emulator) -> None:
    """moto has no StopHyperParameterTuningJob: the emulator's turns the tuning job and its running
    trials Stopping (the local tuner and runner then end them Stopped), and refuses an ended one."""
    from botocore.exceptions import ClientError
    from moto.backends import get_backend

    sagemaker = _client(emulator, "sagemaker")
    role = "arn:aws:iam::123456789012:role/r"
    sagemaker.create_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="gputrain-t1",
        HyperParameterTuningJobConfig={
            "Strategy": "Random", "ResourceLimits": {"MaxNumberOfTrainingJobs": 2, "MaxParallelTrainingJobs": 1},
            "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "train:loss"},
        },
        TrainingJobDefinition={
            "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File"}, "RoleArn": role,
            "OutputDataConfig": {"S3OutputPath": "s3://out/x/"}, "StoppingCondition": {"MaxRuntimeInSeconds": 60},
            "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        },
    )
    backend = get_backend("sagemaker")[server.ACCOUNT][server.REGION]
    backend.hyper_parameter_tuning_jobs["gputrain-t1"].hyper_parameter_tuning_job_status = "InProgress"  # as a watching tuner sets it
    for name in ("gputrain-t1-001-0123abcd", "gputrain-other-1"):
        _create_training_job(emulator, name, ["true"])
        backend.training_jobs[name].training_job_status = "InProgress"

    sagemaker.stop_hyper_parameter_tuning_job(HyperParameterTuningJobName="gputrain-t1")
    described = sagemaker.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="gputrain-t1")
    assert described["HyperParameterTuningJobStatus"] == "Stopping"
    assert backend.training_jobs["gputrain-t1-001-0123abcd"].training_job_status == "Stopping"  # its running trial
    assert backend.training_jobs["gputrain-other-1"].training_job_status == "InProgress"  # not its trial
    with pytest.raises(ClientError, match="in status Stopping"):
        sagemaker.stop_hyper_parameter_tuning_job(HyperParameterTuningJobName="gputrain-t1")
