"""The main job in pytest: deploy -> train -> destroy on the local emulator, asserting between phases.

One lifecycle for the module (deploying is the slow part): the tests below run in file order
against it: first what ``cdk deploy`` made, then what training produced (through the deployed
training workflow, run by the local Step Functions executor), a job stopped and resumed from its
checkpoint (``launch --resume-from``), the served model, a user's script,
then the pipeline from raw data (process -> train, then process -> train -> promote onto the same
endpoint, then process -> tune -> the best trial), then what ``cdk destroy`` left. Select with
``-m integration``; skip with ``-m "not slow"``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from scripts.emulator.lifecycle import Lifecycle, Options
from scripts.teardown_audit import COMPUTE_TYPES, ERROR, KEPT

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    # The harness reports the resource types the emulator skips (Lifecycle.deploy_check).
    pytest.mark.filterwarnings("ignore:Tried to parse:UserWarning"),
]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lifecycle]:
    """A lifecycle with every stack deployed on a fresh emulator."""
    # With the pipeline's batch transform step on, so that both pipeline runs below end in one, and a
    # tuning objective the dataset has (it has no validation channel).
    lifecycle = Lifecycle(Options(work_dir=tmp_path_factory.mktemp("lifecycle"), epochs=2, context={"gpu_training.transform.enabled": "true", "gpu_training.tuning.objective_metric": "train:loss"}))
    try:
        lifecycle.check_launch()  # the command line's first phase: nothing is started before it passes
        lifecycle.start()
        lifecycle.bootstrap_and_synth()
        lifecycle.deploy()
        yield lifecycle
    finally:
        lifecycle.close()


@pytest.fixture(scope="module")
def deployed(run: Lifecycle) -> Lifecycle:
    """The lifecycle before destroy (tests of the deployed state must not run after it)."""
    if run.destroyed:
        pytest.fail("the platform was already destroyed: run the integration tests in file order")
    return run


@pytest.fixture(scope="module")
def trained(deployed: Lifecycle) -> Lifecycle:
    """Dataset uploaded, job launched with the launch script, trained by the local runner."""
    deployed.upload_dataset()
    deployed.launch()
    deployed.train()
    return deployed


@pytest.fixture(scope="module")
def served(trained: Lifecycle) -> Lifecycle:
    """The trained model promoted to the GPU endpoint (serving stack), served locally, invoked."""
    trained.deploy_endpoint()
    trained.invoke_endpoint()
    return trained


@pytest.fixture(scope="module")
def destroyed(served: Lifecycle) -> Lifecycle:
    """``cdk destroy --all`` (the serving stack first) done and the teardown audit taken."""
    served.destroy()
    served.audit()
    return served


def _stack_resources(run: Lifecycle, stack: str, resource_type: str) -> list[str]:
    cloudformation = run.client("cloudformation")
    return [
        r["PhysicalResourceId"]
        for r in cloudformation.list_stack_resources(StackName=stack)["StackResourceSummaries"]
        if r["ResourceType"] == resource_type
    ]


def _project_instances(run: Lifecycle, *states: str) -> list[dict[str, Any]]:
    ec2 = run.client("ec2")
    filters = [{"Name": "tag:Project", "Values": [run.config().project_name]}]
    if states:
        filters.append({"Name": "instance-state-name", "Values": list(states)})
    return [i for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]


# --- after deploy ------------------------------------------------------------------------------


def test_every_stack_deployed_and_nothing_supported_is_missing(deployed: Lifecycle) -> None:
    project = deployed.config().project_name
    assert set(deployed.outputs) == {f"{project}-data", f"{project}-cluster", f"{project}-training"}
    assert deployed.deploy_check.missing == []
    assert deployed.deploy_check.unserved_custom_resources == []
    assert deployed.progress.phases[0].name == "check launch options" and deployed.progress.phases[0].ok


def test_gpu_instances_of_the_configured_type_and_count_are_running(deployed: Lifecycle) -> None:
    cluster = deployed.config().cluster
    instances = _project_instances(deployed, "pending", "running")
    assert len(instances) == cluster.node_count
    assert {i["InstanceType"] for i in instances} == {cluster.instance_type}
    ids = deployed.outputs[f"{deployed.config().project_name}-cluster"]["InstanceIds"].split(",")
    assert sorted(ids) == sorted(i["InstanceId"] for i in instances)


def test_nodes_run_the_cached_deep_learning_ami(deployed: Lifecycle) -> None:
    ami = deployed.outputs[f"{deployed.config().project_name}-cluster"]["AmiId"]
    assert {i["ImageId"] for i in _project_instances(deployed, "pending", "running")} == {ami}


def test_data_buckets_are_kms_encrypted_with_the_platform_key(deployed: Lifecycle) -> None:
    data = deployed.outputs[f"{deployed.config().project_name}-data"]
    s3 = deployed.client("s3")
    for bucket in (data["DatasetsBucketName"], data["ArtifactsBucketName"]):
        rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
        default = rules[0]["ApplyServerSideEncryptionByDefault"]
        assert default["SSEAlgorithm"] == "aws:kms"
        assert default["KMSMasterKeyID"] == data["KeyArn"]
        assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
        block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
        assert all(block.values()), block


def test_default_security_group_was_closed_by_the_custom_resource(deployed: Lifecycle) -> None:
    vpc = deployed.outputs[f"{deployed.config().project_name}-data"]["VpcId"]
    ec2 = deployed.client("ec2")
    groups = ec2.describe_security_groups(
        Filters=[{"Name": "vpc-id", "Values": [vpc]}, {"Name": "group-name", "Values": ["default"]}]
    )["SecurityGroups"]
    assert groups and groups[0]["IpPermissions"] == [] and groups[0]["IpPermissionsEgress"] == []


def test_image_repository_exists(deployed: Lifecycle) -> None:
    name = deployed.outputs[f"{deployed.config().project_name}-data"]["RepositoryName"]
    repos = deployed.client("ecr").describe_repositories(repositoryNames=[name])["repositories"]
    assert repos[0]["imageTagMutability"] == "IMMUTABLE"


def test_roles_exist(deployed: Lifecycle) -> None:
    project = deployed.config().project_name
    iam = deployed.client("iam")
    for stack in (f"{project}-cluster", f"{project}-training"):
        roles = _stack_resources(deployed, stack, "AWS::IAM::Role")
        assert roles, f"{stack} has no IAM role"
        for role in roles:
            assert iam.get_role(RoleName=role)["Role"]["RoleName"] == role


def test_state_machine_exists(deployed: Lifecycle) -> None:
    arns = _stack_resources(deployed, f"{deployed.config().project_name}-training", "AWS::StepFunctions::StateMachine")
    # The training workflow, the pipeline (processing.enabled is the default) and the GPU idle watch.
    project = deployed.config().project_name
    assert sorted(a.rsplit(":", 1)[-1] for a in arns) == sorted(f"{project}-{n}" for n in ("training-job", "pipeline", "gpu-idle-watch"))
    definitions = [deployed.client("stepfunctions").describe_state_machine(stateMachineArn=a)["definition"] for a in arns]
    assert sum("createTrainingJob" in d for d in definitions) == 2
    assert sum("createProcessingJob.sync" in d for d in definitions) == 1


# --- after training ----------------------------------------------------------------------------


def test_training_job_completed_with_final_metrics(trained: Lifecycle) -> None:
    job = trained.job
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    metrics = {m["MetricName"]: m["Value"] for m in job["FinalMetricDataList"]}
    assert metrics["train:epoch"] == trained.options.epochs
    assert 0.0 <= metrics["train:accuracy"] <= 1.0
    # The input-wait share is recorded as SageMaker would from the deployed metric definitions; the
    # local runner trains on the CPU, so there are no GPU figures.
    assert 0.0 <= metrics["train:input_wait_pct"] <= 100.0
    assert "train:gpu_utilization" not in metrics


def test_the_job_ran_through_the_deployed_training_workflow(trained: Lifecycle) -> None:
    """The launch script started the workflow; the local executor ran the definition CloudFormation deployed."""
    execution = trained.execution
    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    output = json.loads(execution["output"])
    assert output["TrainingJobName"] == trained.job_name and output["TrainingJobStatus"] == "Completed"
    assert output["ModelArtifacts"] == trained.job["ModelArtifacts"]["S3ModelArtifacts"]
    sfn = trained.client("stepfunctions")
    events = sfn.get_execution_history(executionArn=execution["executionArn"])["events"]
    entered = [e["stateEnteredEventDetails"]["name"] for e in events if e["type"].endswith("StateEntered")]
    assert entered == ["ResolveLaunchOptions", "TuningRequested", "FindLaunchProblems", "CheckLaunchOptions", "CreateTrainingJob"]


def test_the_deployed_workflow_refuses_bad_options_with_its_reason(trained: Lifecycle) -> None:
    import time

    sfn = trained.client("stepfunctions")
    machine = trained.outputs[f"{trained.config().project_name}-training"]["StateMachineArn"]
    arn = sfn.start_execution(stateMachineArn=machine, name="bad-options", input=json.dumps({"instance_count": 0, "use_spot": "yes"}))["executionArn"]
    outcome = trained.states.wait(arn, timeout=60)
    described = sfn.describe_execution(executionArn=arn)
    assert outcome.status == described["status"] == "FAILED"
    assert described["error"] == "InvalidLaunchOptions"
    assert "instance_count 0 must be a whole number from 1 to 64" in described["cause"]
    assert "use_spot yes must be true or false" in described["cause"]
    time.sleep(0.5)
    assert not [j for j in trained.client("sagemaker").list_training_jobs()["TrainingJobSummaries"] if j["TrainingJobName"].endswith("bad-options")]


def test_an_execution_started_directly_cannot_name_the_code_to_run(trained: Lifecycle) -> None:
    """Issue #42: code from a dataset channel instead of s3://<artifacts>/code/ is refused at the check, no job made."""
    import time

    sfn = trained.client("stepfunctions")
    machine = trained.outputs[f"{trained.config().project_name}-training"]["StateMachineArn"]
    evil = {"sagemaker_program": "evil.py", "sagemaker_submit_directory": "/opt/ml/input/data/train/evil.tar.gz"}
    name = f"{trained.config().project_name}-evil-1"
    arn = sfn.start_execution(stateMachineArn=machine, name="evil-1", input=json.dumps({"job_name": name, "hyperparameters": evil}))["executionArn"]
    outcome = trained.states.wait(arn, timeout=60)
    described = sfn.describe_execution(executionArn=arn)
    assert outcome.status == described["status"] == "FAILED" and described["error"] == "InvalidLaunchOptions"
    assert "hyperparameters sagemaker_program, sagemaker_submit_directory are the platform's" in described["cause"]
    time.sleep(0.5)
    assert not [j for j in trained.client("sagemaker").list_training_jobs()["TrainingJobSummaries"] if j["TrainingJobName"] == name]


def test_training_produced_a_loadable_model_in_the_artifacts_bucket(trained: Lifecycle, tmp_path: Path) -> None:
    artifact = trained.job["ModelArtifacts"]["S3ModelArtifacts"]
    artifacts_bucket = trained.outputs[f"{trained.config().project_name}-data"]["ArtifactsBucketName"]
    bucket, key = artifact[len("s3://") :].split("/", 1)
    assert bucket == artifacts_bucket
    assert key.endswith(f"{trained.job_name}/output/model.tar.gz")
    s3 = trained.client("s3")
    assert s3.head_object(Bucket=bucket, Key=key)["ServerSideEncryption"] == "aws:kms"
    archive = tmp_path / "model.tar.gz"
    s3.download_file(bucket, key, str(archive))
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "model", filter="data")
    features = trained.options.features
    # A separate interpreter loads it, as a user would; TensorFlow stays out of this process.
    check = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, numpy as np, keras; m = keras.models.load_model(sys.argv[1]); "
            f"p = m.predict(np.zeros((3, {features}), dtype='float32'), verbose=0); print(json.dumps(list(p.shape)))",
            str(tmp_path / "model" / "model.keras"),
        ],
        cwd=ROOT / "training_image",
        capture_output=True,
        text=True,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert check.returncode == 0, check.stderr[-2000:]
    assert json.loads(check.stdout.strip().splitlines()[-1]) == [3, trained.options.classes]


# --- a stop, then launch --resume-from ----------------------------------------------------------


def _job_lines(run: Lifecycle, job: str) -> list[str]:
    """The job's CloudWatch lines, as SageMaker's log stream has them (``<job>/algo-1-<time>``)."""
    logs = run.client("logs")
    streams = logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix=f"{job}/")["logStreams"]
    return [e["message"] for s in streams
            for e in logs.get_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=s["logStreamName"], startFromHead=True)["events"]]  # fmt: skip


@pytest.fixture(scope="module")
def stopped_then_resumed(trained: Lifecycle) -> dict[str, Any]:
    """A long job through the workflow, stopped with ``scripts.stop --wait`` once an epoch is done (SIGTERM: the
    trainer checkpoints, the runner uploads), then ``scripts.launch --resume-from`` it to one epoch more."""
    run = trained
    project = run.config().project_name
    first, second = f"{project}-stop-1", f"{project}-resume-1"
    run.run_script("launch", "--name", first, "--hp", "epochs=100000", "--hp", "batch_size=16", "--yes")
    deadline = time.monotonic() + 120
    while not any(line.startswith("[metrics] epoch=") for line in _job_lines(run, first)):
        assert time.monotonic() < deadline, f"no epoch of {first} within 120 s: {_job_lines(run, first)[-20:]}"
        time.sleep(1)
    stopped = run.run_script("stop", first, "--wait", "--interval", "1")
    run.runner.wait(first, 120)
    completed = max(int(m) for m in re.findall(r"^\[metrics\] epoch=(\d+)", "\n".join(_job_lines(run, first)), re.M))
    launched = run.run_script("launch", "--resume-from", first, "--name", second, "--hp", f"epochs={completed + 1}", "--yes")
    run.runner.wait(second, 300)
    sagemaker = run.client("sagemaker")
    return {"stopped": stopped, "launched": launched, "completed": completed, "first": sagemaker.describe_training_job(TrainingJobName=first),
            "second": sagemaker.describe_training_job(TrainingJobName=second), "first_lines": _job_lines(run, first),
            "second_lines": _job_lines(run, second)}  # fmt: skip


def test_a_stopped_job_resumes_from_its_checkpoint_where_the_stop_left_it(stopped_then_resumed: dict[str, Any]) -> None:
    first, second, completed = stopped_then_resumed["first"], stopped_then_resumed["second"], stopped_then_resumed["completed"]
    assert first["TrainingJobStatus"] == "Stopped", first.get("FailureReason")
    assert f"resuming {first['TrainingJobName']} (Stopped): from its checkpoints in {first['CheckpointConfig']['S3Uri']}" in stopped_then_resumed["launched"]
    assert second["TrainingJobStatus"] == "Completed", second.get("FailureReason")
    assert second["CheckpointConfig"]["S3Uri"] == first["CheckpointConfig"]["S3Uri"]
    assert second["HyperParameters"]["batch_size"] == "16"  # the stopped job's own, copied
    # Where the SIGTERM left the trainer (an epoch's end, or a step inside the next one) is where the resume starts.
    assert f"stopping training job {first['TrainingJobName']}" in stopped_then_resumed["stopped"], stopped_then_resumed["stopped"]
    stop = next((line for line in stopped_then_resumed["first_lines"] if "Training stopped by SIGTERM" in line), None)
    assert stop is not None, stopped_then_resumed["first_lines"][-20:]
    mid_epoch = re.search(r"in epoch (\d+) at step (\d+) of", stop)
    (resume,) = [line for line in stopped_then_resumed["second_lines"] if line.startswith("[trainer] resume ")]
    assert f"completed_epochs={completed} " in resume + " ", (stop, resume)
    if mid_epoch:
        assert int(mid_epoch.group(1)) == completed + 1 and f"epoch_steps={mid_epoch.group(2)}" in resume, (stop, resume)
    else:
        assert "epoch_steps=" not in resume, (stop, resume)
    finished = [line for line in stopped_then_resumed["second_lines"] if line.startswith("[trainer] finished ")]
    assert finished and f"epochs={completed + 1} resumed_from_epoch={completed}" in finished[0], finished


# --- a tuning job through the deployed workflow -------------------------------------------------


@pytest.fixture(scope="module")
def tuned(trained: Lifecycle) -> dict[str, Any]:
    """``scripts.launch --tune`` with two trials over the learning rate, through the deployed training
    workflow (its Tune branch, run by the local executor; the trials by the local tuner and runner)."""
    ranges = trained.work_dir / "ranges.json"
    ranges.write_text(json.dumps({"learning_rate": {"type": "continuous", "min": 0.0001, "max": 0.05, "scaling": "Logarithmic"}}))
    name = f"{trained.config().project_name}-tune-1"
    launched = trained.run_script("launch", "--tune", str(ranges), "--name", name, "--max-jobs", "2", "--max-parallel-jobs", "1",
                                  "--hp", "epochs=2", "--yes")  # fmt: skip
    state_machine = trained.outputs[f"{trained.config().project_name}-training"]["StateMachineArn"]
    arn = f"{state_machine.replace(':stateMachine:', ':execution:')}:{name}"
    sfn, sagemaker = trained.client("stepfunctions"), trained.client("sagemaker")
    deadline = time.monotonic() + trained.options.job_timeout_seconds
    while (execution := sfn.describe_execution(executionArn=arn))["status"] == "RUNNING" and time.monotonic() < deadline:
        time.sleep(1)
    if execution["status"] != "SUCCEEDED":
        pytest.fail(f"the tuning execution {execution['status']}: {execution.get('error')}: {execution.get('cause')}")
    trials = sagemaker.list_training_jobs_for_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)["TrainingJobSummaries"]
    watched = trained.run_script("watch", "--tuning", name, "--interval", "1")  # the job is over: one poll; exits 0 only if Completed
    return {"name": name, "launched": launched, "execution": execution, "trials": trials, "watched": watched,
            "job": sagemaker.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name), "run": trained}  # fmt: skip


def test_a_tuning_job_ran_through_the_workflow_each_trial_with_its_own_sample(tuned: dict[str, Any]) -> None:
    run, name = tuned["run"], tuned["name"]
    assert f"tuning job: {name}" in tuned["launched"]
    assert tuned["execution"]["status"] == "SUCCEEDED", tuned["execution"].get("cause")
    output = json.loads(tuned["execution"]["output"])
    job = tuned["job"]
    assert job["HyperParameterTuningJobStatus"] == "Completed" and len(tuned["trials"]) == 2
    sagemaker = run.client("sagemaker")
    rates = []
    for trial in tuned["trials"]:
        described = sagemaker.describe_training_job(TrainingJobName=trial["TrainingJobName"])
        # Each trial is the platform's training job: the workflow's role, network isolation, the
        # platform key, with its own sampled rate among the static hyperparameters.
        assert described["EnableNetworkIsolation"] and described["OutputDataConfig"]["KmsKeyId"] == run.outputs[f"{run.config().project_name}-data"]["KeyArn"]
        rate = described["HyperParameters"]["learning_rate"]
        assert rate == trial["TunedHyperParameters"]["learning_rate"] and 0.0001 <= float(rate) <= 0.05
        assert described["HyperParameters"]["epochs"] == "2"
        log = run.runner.outcomes[trial["TrainingJobName"]].log_file.read_text()
        assert re.search(rf"learning_rate={re.escape(rate)}\b|learning_rate[=:] ?{float(rate):g}", log) or rate in log, log[-1500:]
        rates.append(rate)
    assert len(set(rates)) == 2  # two samples, not one job twice
    best = min(tuned["trials"], key=lambda t: t["FinalHyperParameterTuningJobObjectiveMetric"]["Value"])
    assert job["BestTrainingJob"]["TrainingJobName"] == best["TrainingJobName"]
    assert name in json.dumps(output) and best["TrainingJobName"] in json.dumps(output)


def _trial_line(trial: dict[str, Any]) -> str:
    """What scripts.watch prints for a completed trial of one tuned hyperparameter."""
    metric = trial["FinalHyperParameterTuningJobObjectiveMetric"]
    return (f"    trial {trial['TrainingJobName']}: Completed  learning_rate={trial['TunedHyperParameters']['learning_rate']}"
            f"  {metric['MetricName']}={metric['Value']:g}")  # fmt: skip


def test_scripts_watch_tuning_shows_the_ended_tuning_jobs_trials_and_best_trial(tuned: dict[str, Any]) -> None:
    watched, name, job = tuned["watched"], tuned["name"], tuned["job"]
    assert f"following tuning job {name}  https://" in watched
    assert f"  tuning job {name}: Completed, trials: 2 completed, 0 in progress, 0 failed, 0 stopped of 2\n" in watched
    for trial in tuned["trials"]:
        assert _trial_line(trial) + "\n" in watched, watched
    best = job["BestTrainingJob"]
    metric = best["FinalHyperParameterTuningJobObjectiveMetric"]
    assert f"    best so far: {best['TrainingJobName']} {metric['MetricName']}={metric['Value']:g}\n" in watched
    assert f"{name} Completed\n  best training job: {best['TrainingJobName']} {metric['MetricName']}={metric['Value']:g}\n" \
           f"  serve it: python -m scripts.promote --best-of {name}\n" in watched, watched  # fmt: skip
    # Last, what the two trials billed together (the local runner reports each one's billable seconds).
    assert re.search(r"\n  billed: 2 trial\(s\) of 1 x ml\.g5\.xlarge, [\d,]+ s in all, about \$\d+\.\d\d (\(managed spot: [^)]*\) )?"
                     r"\(us-east-1 list prices\)\n$", watched), watched


# --- after serving -----------------------------------------------------------------------------


def test_the_endpoint_serves_the_trained_jobs_model(served: Lifecycle) -> None:
    project = served.config().project_name
    outputs = served.outputs[f"{project}-serving"]
    assert outputs["EndpointName"] == served.endpoint_name == f"{project}-endpoint"
    assert outputs["ModelDataUrl"] == served.job["ModelArtifacts"]["S3ModelArtifacts"]
    sagemaker = served.client("sagemaker")
    config = sagemaker.describe_endpoint_config(
        EndpointConfigName=sagemaker.describe_endpoint(EndpointName=served.endpoint_name)["EndpointConfigName"]
    )
    model = sagemaker.describe_model(ModelName=config["ProductionVariants"][0]["ModelName"])
    assert model["PrimaryContainer"]["ModelDataUrl"] == outputs["ModelDataUrl"]
    assert model["PrimaryContainer"]["Environment"]["EXPECTED_GPU_COUNT"] == "1"
    # Model, config, endpoint, role, alarms are emulated; moto has no Application Auto Scaling
    # in CloudFormation, so the scaling target and policy are reported as skipped.
    check = served.serving_deploy_check
    assert check.missing == []
    assert {"AWS::ApplicationAutoScaling::ScalableTarget", "AWS::ApplicationAutoScaling::ScalingPolicy"} <= set(check.skipped_types)


def test_the_main_job_served_through_scripts_promote_which_recorded_it(served: Lifecycle) -> None:
    """The serving phase is ``python -m scripts.promote JOB`` itself (not its --dry-run and a deploy
    beside it): the record names the job, so the app has the serving stack at destroy (#39)."""
    record_name = f"/{served.config().project_name}/serving/promotion"
    record = json.loads(served.client("ssm").get_parameter(Name=record_name)["Parameter"]["Value"])
    assert record["live"]["job"] == served.job_name and record["previous"] == []
    assert f"serves {served.job_name}; recorded in {record_name}" in (served.work_dir / "promote.log").read_text()


def test_invocations_reach_the_serving_mode_and_predict_held_out_rows(served: Lifecycle) -> None:
    assert len(served.predictions) == 200
    for prediction in served.predictions:
        assert sum(prediction["probabilities"]) == pytest.approx(1.0, abs=1e-4)
        assert len(prediction["probabilities"]) == served.options.classes
    # The synthetic task is learnable in 2 epochs; chance is 1/classes.
    assert served.heldout_accuracy is not None and served.heldout_accuracy > 0.8
    hosted = served.hosting.hosted[served.endpoint_name]
    assert "serve-ready" in hosted.log_file.read_text()


def test_a_bad_request_through_the_endpoint_is_one_line_from_the_model(served: Lifecycle, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2,3\n")
    with pytest.raises(RuntimeError) as caught:
        served.run_script("invoke", "--endpoint", served.endpoint_name, str(bad))
    message = str(caught.value)
    assert f"error: {served.endpoint_name} refused the request (HTTP 400): Row 1 has 3 values" in message
    with pytest.raises(RuntimeError, match="endpoint no-such-endpoint not found"):
        served.run_script("invoke", "--endpoint", "no-such-endpoint", str(bad))


# --- a user's own script (SageMaker script mode) on the same deployment --------------------------


@pytest.fixture(scope="module")
def script_trained(served: Lifecycle) -> Lifecycle:
    """The example Keras image classifier launched with --source-dir, trained by the local runner
    (after the built-in job's model was served, so the endpoint tests see that model)."""
    served.upload_dataset(images=True)
    served.launch(user_script=True)
    served.train()
    return served


def test_user_script_trained_through_the_launch_script(script_trained: Lifecycle, tmp_path: Path) -> None:
    job = script_trained.job
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert job["HyperParameters"]["sagemaker_program"] == "train.py"
    code = next(c for c in job["InputDataConfig"] if c["ChannelName"] == "code")
    data = script_trained.outputs[f"{script_trained.config().project_name}-data"]
    assert code["DataSource"]["S3DataSource"]["S3Uri"] == (
        f"s3://{data['ArtifactsBucketName']}/code/{script_trained.job_name}/sourcedir.tar.gz"
    )
    train = next(c for c in job["InputDataConfig"] if c["ChannelName"] == "train")["DataSource"]["S3DataSource"]["S3Uri"]
    bucket, prefix = train[len("s3://") :].split("/", 1)
    keys = [o["Key"] for o in script_trained.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]]
    pictures = [k for k in keys if k[len(prefix) :].startswith("class_")]
    assert pictures and all(k.endswith(".png") for k in pictures), f"the upload says PNG images: {pictures[:3]}"
    metrics = {m["MetricName"]: m["Value"] for m in job["FinalMetricDataList"]}
    assert metrics["train:epoch"] == script_trained.options.epochs, "the toolkit's metric lines reach the job"
    log = script_trained.runner.outcomes[script_trained.job_name].log_file.read_text()
    assert log.index("[gpu-check] ") < log.index("[trainer] script-start"), "GPU check before user code"
    artifact = job["ModelArtifacts"]["S3ModelArtifacts"]
    bucket, key = artifact[len("s3://") :].split("/", 1)
    archive = tmp_path / "model.tar.gz"
    script_trained.client("s3").download_file(bucket, key, str(archive))
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["classes.txt", "model.keras"], "the script's model, not a built-in one"
        tar.extractall(tmp_path / "model", filter="data")
    assert (tmp_path / "model" / "classes.txt").read_text().split() == [f"class_{i}" for i in range(script_trained.options.classes)]


# --- the pipeline from raw data, on the same deployment -----------------------------------------


@pytest.fixture(scope="module")
def pipelined(script_trained: Lifecycle) -> Lifecycle:
    """Raw CSV rows -> ``<project>-pipeline`` (process -> train), then process -> train -> promote on
    fresh rows onto the endpoint already serving, and held-out rows through it (the deployed
    definition run by the local executor; jobs by the local runner; UpdateEndpoint by local hosting)."""
    first, second = script_trained.upload_raw_data()
    _upload_scoring_rows(script_trained)
    script_trained.run_pipeline(first, promote=False)
    script_trained.run_pipeline(second, promote=True)
    script_trained.check_promoted()
    script_trained.invoke_endpoint()
    return script_trained


SCORED_ROWS = 300


def _upload_scoring_rows(run: Lifecycle) -> None:
    """The held-out rows' features (their labels kept here) under the transform step's input prefix."""
    config = run.config()
    rows = [r for r in (run.work_dir / "raw" / "part-00002.csv").read_text().splitlines() if r.rsplit(",", 1)[1].isdigit()]  # no header
    rows = rows[:SCORED_ROWS]
    run.scored_labels = [int(row.rsplit(",", 1)[1]) for row in rows]
    body = "".join(row.rsplit(",", 1)[0] + "\n" for row in rows)
    bucket = run.outputs[f"{config.project_name}-data"]["DatasetsBucketName"]
    run.client("s3").put_object(Bucket=bucket, Key=f"{config.transform.input_prefix}rows.csv", Body=body.encode())


def _keys(run: Lifecycle, uri: str) -> list[str]:
    bucket, prefix = uri[len("s3://") :].split("/", 1)
    listed = run.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"][len(prefix) :] for o in listed.get("Contents", []))


def test_the_pipeline_turned_raw_rows_into_shards_with_the_processing_mode(pipelined: Lifecycle) -> None:
    project = pipelined.config().project_name
    for run, raw in zip(pipelined.pipeline_runs, pipelined.raw_uris):
        job = run.processing_job
        assert job["ProcessingJobStatus"] == "Completed", job.get("FailureReason")
        assert job["ProcessingJobName"] == f"{project}-{run.execution['name']}-process"
        assert job["AppSpecification"]["ContainerEntrypoint"] == ["python3", "-m", "trainer", "process"]
        assert job["AppSpecification"]["ContainerArguments"] == ["--shards", "2"]
        assert job["ProcessingInputs"][0]["S3Input"]["S3Uri"] == raw
        processed = run.output["processed_uri"]
        assert processed.endswith(f"/processed/{job['ProcessingJobName']}/")
        train, validation = _keys(pipelined, processed + "train/"), _keys(pipelined, processed + "validation/")
        assert len([k for k in train if k.endswith(".tfrecord")]) == 2, train
        assert {".trainer-manifest.json", "statistics.json"} <= set(train)
        assert [k for k in validation if k.endswith(".tfrecord")], validation
        statistics = json.loads(
            pipelined.client("s3").get_object(Bucket=processed.split("/")[2], Key=processed.split("/", 3)[3] + "train/statistics.json")["Body"].read()
        )
        assert statistics["examples"]["train"] + statistics["examples"]["validation"] == pipelined.options.examples // 2
        assert statistics["num_features"] == pipelined.options.features and statistics["num_classes"] == pipelined.options.classes
        log = pipelined.runner.outcomes[job["ProcessingJobName"]].log_file.read_text()
        assert log.index("[gpu-check]") < log.index("gpu-verified"), "the processing mode checks the GPUs first"


def test_the_pipeline_trained_on_the_processed_shards(pipelined: Lifecycle) -> None:
    for run in pipelined.pipeline_runs:
        job = run.training_job
        assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
        assert job["TrainingJobName"] == run.output["training_job"] == f"{pipelined.config().project_name}-{run.execution['name']}-train"
        channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in job["InputDataConfig"]}
        assert channels == {"train": run.output["processed_uri"] + "train/", "validation": run.output["processed_uri"] + "validation/"}
        assert run.output["model_uri"] == job["ModelArtifacts"]["S3ModelArtifacts"]
        metrics = {m["MetricName"]: m["Value"] for m in job["FinalMetricDataList"]}
        assert metrics["train:epoch"] == pipelined.options.epochs
    first, second = pipelined.pipeline_runs
    assert first.output.get("endpoint_config") is None, "the first run did not promote"
    # scripts.watch followed the steps from the execution history the executor recorded.
    assert first.watch_output.index("step ProcessData") < first.watch_output.index("step TrainModel")
    # ... and the jobs' own lines from their CloudWatch streams, as it does for a job.
    assert f"job={first.output['processing_job']}" in first.watch_output
    assert "[metrics] epoch=" in first.watch_output
    assert f"pipeline execution {first.execution['name']} SUCCEEDED" in first.watch_output
    assert json.loads(second.execution["input"])["promote"] is True


def test_promotion_moved_the_endpoint_to_the_second_runs_model(pipelined: Lifecycle) -> None:
    project = pipelined.config().project_name
    second = pipelined.pipeline_runs[-1]
    sagemaker = pipelined.client("sagemaker")
    endpoint = sagemaker.describe_endpoint(EndpointName=pipelined.endpoint_name)
    assert endpoint["EndpointStatus"] == "InService"
    assert endpoint["EndpointConfigName"] == second.output["endpoint_config"] == f"{project}-{second.execution['name']}"
    config = sagemaker.describe_endpoint_config(EndpointConfigName=endpoint["EndpointConfigName"])
    model = sagemaker.describe_model(ModelName=config["ProductionVariants"][0]["ModelName"])
    assert model["PrimaryContainer"]["ModelDataUrl"] == second.output["model_uri"]
    hosted = pipelined.hosting.hosted[pipelined.endpoint_name]
    assert (hosted.config_name, hosted.model_data_url) == (endpoint["EndpointConfigName"], second.output["model_uri"])
    # The promotion record says so, as after scripts.promote: the app (a later cdk deploy) serves it too.
    versions = pipelined.client("ssm").get_parameter_history(Name=f"/{project}/serving/promotion")["Parameters"]
    [record] = [r for r in map(lambda v: json.loads(v["Value"]), versions) if r["live"]["promoted_by"] == second.execution["executionArn"]]
    assert (record["live"]["job"], record["live"]["model_data_url"]) == (second.output["training_job"], second.output["model_uri"])
    assert record["live"]["metrics"]["train:epoch"] == pipelined.options.epochs
    served_before = pipelined.outputs[f"{project}-serving"]["ModelDataUrl"].split("/")[-3]  # scripts.promote's, earlier
    assert [p["job"] for p in record["previous"]][:1] == [served_before]
    # Held-out rows through scripts.invoke reach the promoted model.
    assert len(pipelined.predictions) == 200
    assert pipelined.heldout_accuracy is not None and pipelined.heldout_accuracy > 0.8


def test_each_pipeline_run_ended_in_a_batch_transform_of_the_scoring_rows(pipelined: Lifecycle) -> None:
    """Both runs scored the rows under transform.input_prefix with their own model: one prediction per
    row, in input order (the labels match), written as SageMaker writes a transform's output."""
    project = pipelined.config().project_name
    sagemaker, s3 = pipelined.client("sagemaker"), pipelined.client("s3")
    first, second = pipelined.pipeline_runs
    for run, promoted in ((first, False), (second, True)):
        job = sagemaker.describe_transform_job(TransformJobName=run.output["transform_job"])
        assert job["TransformJobName"] == f"{project}-{run.execution['name']}-transform"
        assert job["TransformJobStatus"] == "Completed", job.get("FailureReason")
        # The promoted model serves the second run's transform; the first makes its own of the run's model.
        model = sagemaker.describe_model(ModelName=job["ModelName"])
        assert model["PrimaryContainer"]["ModelDataUrl"] == run.output["model_uri"]
        assert (job["ModelName"] == f"{project}-{run.execution['name']}") == promoted
        output_uri = run.output["transform_uri"]
        bucket, prefix = output_uri[len("s3://") :].split("/", 1)
        body = s3.get_object(Bucket=bucket, Key=prefix.rstrip("/") + "/rows.csv.out")["Body"].read().decode()
        predictions = [p for line in body.splitlines() if line.strip() for p in json.loads(line)["predictions"]]
        assert len(predictions) == SCORED_ROWS
        hits = sum(p["predicted_class"] == label for p, label in zip(predictions, pipelined.scored_labels))
        assert hits / SCORED_ROWS > 0.8, f"{hits}/{SCORED_ROWS}: the rows were scored out of order or by the wrong model"


# --- the pipeline's tuning step: process -> tune -> the best trial ---------------------------------


@pytest.fixture(scope="module")
def pipeline_tuned(pipelined: Lifecycle) -> dict[str, Any]:
    """``scripts.launch --pipeline --tune`` on the first run's raw rows (two trials over the learning rate, one
    at a time, as the ``tuned`` fixture's; no promotion and no transform, so the endpoint and the runs above are
    left as they were), followed to its end with ``scripts.watch --execution``."""
    run = pipelined
    ranges = run.work_dir / "pipeline-ranges.json"
    ranges.write_text(json.dumps({"learning_rate": {"type": "continuous", "min": 0.0001, "max": 0.05, "scaling": "Logarithmic"}}))
    name = "tune-pipe-1"
    launched = run.run_script("launch", "--pipeline", "--name", name, "--input-uri", run.raw_uris[0], "--process-arg=--shards",
                              "--process-arg=2", "--tune", str(ranges), "--max-jobs", "2", "--max-parallel-jobs", "1",
                              "--hp", "epochs=2", "--hp", "batch_size=64", "--skip-transform", "--yes")  # fmt: skip
    arn = next(line.split(": ", 1)[1] for line in launched.splitlines() if line.startswith("execution: "))
    watched = run.run_script("watch", "--execution", arn, "--interval", "1")  # exits 1 unless SUCCEEDED
    sfn, sagemaker = run.client("stepfunctions"), run.client("sagemaker")
    execution = sfn.describe_execution(executionArn=arn)
    output = json.loads(execution.get("output") or "{}")
    tuning = sagemaker.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=output["tuning_job"])
    trials = sagemaker.list_training_jobs_for_hyper_parameter_tuning_job(HyperParameterTuningJobName=output["tuning_job"])
    described = {t["TrainingJobName"]: sagemaker.describe_training_job(TrainingJobName=t["TrainingJobName"]) for t in trials["TrainingJobSummaries"]}
    events = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    return {"run": run, "name": name, "launched": launched, "watched": watched, "execution": execution, "output": output,
            "tuning": tuning, "trials": trials["TrainingJobSummaries"], "described": described,
            "entered": [e["stateEnteredEventDetails"]["name"] for e in events if e["type"].endswith("StateEntered")]}  # fmt: skip


def test_the_pipeline_tuned_on_the_processed_shards_and_kept_the_best_trial(pipeline_tuned: dict[str, Any]) -> None:
    run, output, execution = pipeline_tuned["run"], pipeline_tuned["output"], pipeline_tuned["execution"]
    project = run.config().project_name
    assert execution["status"] == "SUCCEEDED", execution.get("cause")
    assert output["tuning_job"] == f"{project}-tunepipe1" and f"tuning job: {output['tuning_job']}" in pipeline_tuned["launched"]
    entered = pipeline_tuned["entered"]
    assert "ProcessData" in entered and "TuneModel" in entered and entered.index("ProcessData") < entered.index("TuneModel")
    assert "TrainModel" not in entered and output.get("endpoint_config") is None
    processing = run.client("sagemaker").describe_processing_job(ProcessingJobName=output["processing_job"])
    assert processing["ProcessingJobStatus"] == "Completed", processing.get("FailureReason")
    assert processing["ProcessingInputs"][0]["S3Input"]["S3Uri"] == run.raw_uris[0]

    tuning, trials = pipeline_tuned["tuning"], pipeline_tuned["trials"]
    assert tuning["HyperParameterTuningJobStatus"] == "Completed", tuning.get("FailureReason")
    assert tuning["HyperParameterTuningJobConfig"]["ResourceLimits"]["MaxParallelTrainingJobs"] == 1
    assert len(trials) == 2 and {t["TrainingJobStatus"] for t in trials} == {"Completed"}, trials
    rates = []
    for trial in trials:
        job = pipeline_tuned["described"][trial["TrainingJobName"]]
        # Each trial is the platform's training job on this run's shards, with its own sampled rate.
        channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in job["InputDataConfig"]}
        assert channels == {"train": output["processed_uri"] + "train/", "validation": output["processed_uri"] + "validation/"}
        assert job["EnableNetworkIsolation"] and job["HyperParameters"]["epochs"] == "2"
        rate = job["HyperParameters"]["learning_rate"]
        assert rate == trial["TunedHyperParameters"]["learning_rate"] and 0.0001 <= float(rate) <= 0.05
        log = run.runner.outcomes[trial["TrainingJobName"]].log_file.read_text()
        assert re.search(rf"learning_rate={re.escape(rate)}\b|learning_rate[=:] ?{float(rate):g}", log) or rate in log, log[-1500:]
        rates.append(rate)
    assert len(set(rates)) == 2  # two samples, not one job twice

    # The run's training job and model are the best trial's by the objective (train:loss, Minimize here).
    objective = tuning["HyperParameterTuningJobConfig"]["HyperParameterTuningJobObjective"]
    assert (objective["MetricName"], objective["Type"]) == (run.config().tuning.objective_metric, run.config().tuning.objective_type)
    values = {t["TrainingJobName"]: t["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] for t in trials}
    best = (min if objective["Type"] == "Minimize" else max)(values, key=values.__getitem__)
    metrics = {m["MetricName"]: m["Value"] for m in pipeline_tuned["described"][best]["FinalMetricDataList"]}
    assert values[best] == metrics[objective["MetricName"]]
    assert tuning["BestTrainingJob"]["TrainingJobName"] == output["training_job"] == best, (values, output)
    assert output["model_uri"] == pipeline_tuned["described"][best]["ModelArtifacts"]["S3ModelArtifacts"]


def test_scripts_watch_followed_the_tuning_pipeline_to_its_best_trial(pipeline_tuned: dict[str, Any]) -> None:
    watched, output = pipeline_tuned["watched"], pipeline_tuned["output"]
    assert f"tuning job: {output['tuning_job']} (its best trial is the run's training job)" in watched
    assert watched.index("step ProcessData") < watched.index("step TuneModel")
    assert f"pipeline execution {pipeline_tuned['name']} SUCCEEDED" in watched
    assert f"  training_job: {output['training_job']}" in watched and f"  model_uri: {output['model_uri']}" in watched
    # While TuneModel ran, the tuning job's progress: its counters, each trial as it ended, the best trial so far.
    tuning = output["tuning_job"]
    assert f"  tuning job {tuning}: Completed, trials: 2 completed, 0 in progress, 0 failed, 0 stopped of 2\n" in watched
    for trial in pipeline_tuned["trials"]:
        assert _trial_line(trial) + "\n" in watched, watched
        assert watched.index("step TuneModel") < watched.index(_trial_line(trial)) < watched.index(f"pipeline execution {pipeline_tuned['name']} SUCCEEDED")
    assert f"    best so far: {output['training_job']} " in watched


# --- scripts.promote for real: the promotion record and --rollback ------------------------------


@pytest.fixture(scope="module")
def rolled_back(pipelined: Lifecycle) -> dict[str, Any]:
    """``scripts.promote`` (check, ``cdk deploy <project>-serving``, record) of the pipeline's job,
    then of the first job, then ``--rollback``; the endpoint, local hosting and the record after each."""
    first = pipelined.outputs[f"{pipelined.config().project_name}-serving"]["ModelDataUrl"].split("/")[-3]
    second = pipelined.pipeline_runs[-1].output["training_job"]
    ssm, sagemaker = pipelined.client("ssm"), pipelined.client("sagemaker")
    record_name = f"/{pipelined.config().project_name}/serving/promotion"
    states = {}
    for step, args in (("second", (second,)), ("first", (first,)), ("rollback", ("--rollback",))):
        output = pipelined.promote(*args)
        endpoint = sagemaker.describe_endpoint(EndpointName=pipelined.endpoint_name)
        hosted = pipelined.hosting.hosted[pipelined.endpoint_name]
        states[step] = {
            "output": output,
            "record": json.loads(ssm.get_parameter(Name=record_name)["Parameter"]["Value"]),
            "config": endpoint["EndpointConfigName"],
            "hosted": (hosted.config_name, hosted.model_data_url),
        }
    pipelined.invoke_endpoint()
    return {"first": first, "second": second, "states": states, "run": pipelined}


def test_promote_deploys_the_job_through_the_serving_stack_and_records_it(rolled_back: dict[str, Any]) -> None:
    run, first, second = rolled_back["run"], rolled_back["first"], rolled_back["second"]
    state = rolled_back["states"]["second"]
    # CloudFormation's config now (not the pipeline's UpdateEndpoint one), serving the job's model.
    assert state["config"] != run.pipeline_runs[-1].output["endpoint_config"]
    assert state["hosted"] == (state["config"], run.pipeline_runs[-1].output["model_uri"])
    assert state["record"]["live"]["job"] == second and state["record"]["live"]["metrics"]["train:epoch"] == run.options.epochs
    state = rolled_back["states"]["first"]
    assert state["record"]["live"]["job"] == first and [p["job"] for p in state["record"]["previous"]] == [second]
    assert state["hosted"][1].endswith(f"/training-jobs/{first}/output/model.tar.gz")


def test_rollback_returns_the_endpoint_to_the_previous_approved_model(rolled_back: dict[str, Any]) -> None:
    run, first, second = rolled_back["run"], rolled_back["first"], rolled_back["second"]
    state = rolled_back["states"]["rollback"]
    assert f"rolling back {first} -> {second}" in state["output"]
    record = state["record"]
    assert record["live"]["job"] == second and record["previous"] == [] and [p["job"] for p in record["rolled_back"]] == [first]
    assert state["hosted"] == (state["config"], run.pipeline_runs[-1].output["model_uri"])
    # Held-out rows through scripts.invoke reach the model rolled back to.
    assert run.heldout_accuracy is not None and run.heldout_accuracy > 0.8


# --- the README's plain teardown after a promotion -----------------------------------------------


@pytest.fixture(scope="module")
def plainly_destroyed(rolled_back: dict[str, Any]) -> dict[str, Any]:
    """``npx cdk destroy --all`` with no serving flags after the promotions, then the audit (the
    ``destroyed`` fixture's full teardown runs after it on what is left)."""
    run = rolled_back["run"]
    project = run.config().project_name
    output = run.cdk_destroy_all()
    cfn = run.client("cloudformation")
    stacks = [s["StackName"] for s in cfn.list_stacks()["StackSummaries"] if s["StackStatus"] != "DELETE_COMPLETE"]
    endpoints = [
        (e["EndpointName"], e["EndpointStatus"])
        for e in run.client("sagemaker").list_endpoints()["Endpoints"]
        if e["EndpointName"].startswith(project)
    ]
    report = run.audit()  # raises on an error finding
    return {"output": output, "stacks": stacks, "endpoints": endpoints, "report": report, "project": project}


def test_plain_cdk_destroy_all_removes_the_promoted_endpoint(plainly_destroyed: dict[str, Any]) -> None:
    project = plainly_destroyed["project"]
    assert f"{project}-serving" in plainly_destroyed["output"]  # the app had the serving stack
    assert not [s for s in plainly_destroyed["stacks"] if s.startswith(f"{project}-")]
    assert plainly_destroyed["endpoints"] == []
    report = plainly_destroyed["report"]
    assert report.ok and not [f for f in report.findings if f.kind == "sagemaker:endpoint" and f.verdict == ERROR]


# --- after destroy -----------------------------------------------------------------------------


def test_no_instance_is_left_running(destroyed: Lifecycle) -> None:
    assert _project_instances(destroyed, "pending", "running", "stopping", "stopped") == []


def test_no_compute_resource_remains(destroyed: Lifecycle) -> None:
    report = destroyed.audit_report
    assert destroyed.client("sagemaker").list_endpoints()["Endpoints"] == []
    assert destroyed.hosting is None or not destroyed.hosting.hosted
    assert report.errors == []
    assert report.stacks_left == []
    assert not [f for f in report.findings if f.kind in COMPUTE_TYPES and f.verdict == ERROR]


def test_destroy_keeps_the_promotion_record_for_the_next_deployment(destroyed: Lifecycle) -> None:
    (record,) = [f for f in destroyed.audit_report.findings if f.kind == "ssm:parameter"]
    assert record.verdict == KEPT and record.arn.endswith(f"parameter/{destroyed.config().project_name}/serving/promotion")


def test_the_pipelines_models_and_configs_are_gone_and_its_jobs_are_history(destroyed: Lifecycle) -> None:
    project = destroyed.config().project_name
    sagemaker = destroyed.client("sagemaker")
    assert not [m["ModelName"] for m in sagemaker.list_models()["Models"] if m["ModelName"].startswith(f"{project}-")]
    assert not [c for c in sagemaker.list_endpoint_configs()["EndpointConfigs"] if c["EndpointConfigName"].startswith(f"{project}-")]
    processing = [f for f in destroyed.audit_report.findings if f.kind == "sagemaker:processing-job"]
    ran = [o for o in destroyed.runner.outcomes.values() if o.kind == "processing"]  # the pipeline runs' and the tuned one's
    assert len(processing) == len(ran) and all(f.verdict == "info" for f in processing)


def test_datasets_and_artifacts_buckets_are_kept_by_default(destroyed: Lifecycle) -> None:
    data = destroyed.outputs[f"{destroyed.config().project_name}-data"]
    kept = {f.arn.split(":::")[-1] for f in destroyed.audit_report.of(KEPT) if f.kind == "s3:bucket"}
    assert {data["DatasetsBucketName"], data["ArtifactsBucketName"]} <= kept
    s3 = destroyed.client("s3")
    # The trained model and the dataset are still there.
    assert s3.list_objects_v2(Bucket=data["DatasetsBucketName"])["KeyCount"] > 0
    assert s3.list_objects_v2(Bucket=data["ArtifactsBucketName"])["KeyCount"] > 0
