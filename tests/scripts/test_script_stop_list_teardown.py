"""scripts.stop, scripts.list_jobs and scripts.teardown against moto.

moto has no StopTrainingJob; conftest adds one that moves the job straight to Stopped.
"""

from __future__ import annotations

import json
from pathlib import Path

import boto3
from botocore.exceptions import ClientError

from scripts import common, list_jobs, stop, teardown
from scripts.common import Aws, Deployment, load_platform_config, run
from scripts.launch import main as launch_main
from tests.scripts.conftest import PROJECT, REGION, STOP_CALLS, UPDATE_CALLS


def _running_job(moto_backends, name: str) -> None:
    assert launch_main(["--direct", "--name", name]) == 0
    moto_backends.set_job(name, "InProgress", "Training", "Training in progress")


def _execution_status(aws, name: str) -> str:
    arn = aws.training["StateMachineArn"].replace(":stateMachine:", ":execution:") + f":{name}"
    return boto3.client("stepfunctions", region_name=REGION).describe_execution(executionArn=arn)["status"]


def test_list_shows_only_the_projects_jobs_newest_first(aws, moto_backends, capsys):
    assert launch_main(["--direct", "--name", f"{PROJECT}-list-a"]) == 0
    assert launch_main(["--direct", "--name", f"{PROJECT}-list-b"]) == 0
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    other = sagemaker.describe_training_job(TrainingJobName=f"{PROJECT}-list-a")
    sagemaker.create_training_job(
        TrainingJobName="someone-else-job",
        RoleArn=other["RoleArn"],
        AlgorithmSpecification={"TrainingImage": "img", "TrainingInputMode": "File"},
        OutputDataConfig={"S3OutputPath": "s3://x/"},
        ResourceConfig={"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 1},
        StoppingCondition={"MaxRuntimeInSeconds": 60},
    )
    capsys.readouterr()
    assert run(list_jobs.main, []) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["NAME", "STATUS", "SECONDARY", "CREATED", "(UTC)", "DURATION"]
    assert "someone-else-job" not in out
    assert out.index(f"{PROJECT}-list-b") < out.index(f"{PROJECT}-list-a")


def test_list_filters_by_status(aws, moto_backends, capsys):
    _running_job(moto_backends, f"{PROJECT}-list-running")
    capsys.readouterr()
    assert run(list_jobs.main, ["--status", "InProgress"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split()[0] for r in rows] == [f"{PROJECT}-list-running"]
    assert run(stop.main, [f"{PROJECT}-list-running"]) == 0


def test_stop_stops_the_execution_and_the_job(aws, moto_backends, capsys):
    name = f"{PROJECT}-stop-me"
    assert launch_main(["--name", name]) == 0  # the workflow execution
    _running_job(moto_backends, name)  # ... and the job it created (moto does not run workflows)
    capsys.readouterr()
    assert run(stop.main, [name, "--wait", "--interval", "0"]) == 0
    out = capsys.readouterr().out
    assert f"stopped workflow execution {name}" in out and f"{name} Stopped" in out
    # The trainer checkpointed the steps applied on SIGTERM: where they are, and how to go on from them.
    assert (f"its checkpoints stay in s3://{aws.data['ArtifactsBucketName']}/checkpoints/{name}/: continue it with "
            f"python -m scripts.launch --resume-from {name}") in out
    assert _execution_status(aws, name) == "ABORTED"
    assert moto_backends.job(name).training_job_status == "Stopped"


def test_stop_leaves_an_ended_job_alone(aws, moto_backends, capsys):
    assert launch_main(["--direct", "--name", f"{PROJECT}-stop-done"]) == 0  # moto: Completed at once
    capsys.readouterr()
    assert run(stop.main, [f"{PROJECT}-stop-done"]) == 0
    assert f"training job {PROJECT}-stop-done already Completed; nothing to stop" in capsys.readouterr().out


def _warm_job(moto_backends, name: str, status: str, **attributes) -> None:
    """A --direct job kept warm 900 s after it ends (on-demand: warm pools are not for spot)."""
    assert launch_main(["--direct", "--on-demand", "--keep-alive", "900", "--name", name, "--yes"]) == 0
    moto_backends.set_job(name, status, "Training" if status == "InProgress" else status, **attributes)
    UPDATE_CALLS.clear()
    STOP_CALLS.clear()


def test_stop_ends_the_warm_pool_an_ended_job_keeps_billing(aws, moto_backends, capsys):
    """A Completed job whose pool is Available still bills: 'nothing to stop' would leave it so."""
    name = f"{PROJECT}-stop-warm-done"
    _warm_job(moto_backends, name, "Completed", warm_pool_status="Available")
    try:
        capsys.readouterr()
        assert run(stop.main, [name]) == 0
        out = capsys.readouterr().out
        assert UPDATE_CALLS == [(name, {"KeepAlivePeriodInSeconds": 0})] and STOP_CALLS == []
        assert moto_backends.job(name).warm_pool_status == "Terminated"
        assert f"training job {name} already Completed, but its warm pool is Available (billing)" in out
        assert "nothing to stop" not in out
    finally:
        moto_backends.job(name).warm_pool_status = None


def test_stop_sets_a_running_jobs_keep_alive_to_0_first_so_it_leaves_no_warm_pool(aws, moto_backends, capsys):
    name = f"{PROJECT}-stop-warm-run"
    _warm_job(moto_backends, name, "InProgress")
    try:
        assert run(stop.main, [name, "--wait", "--interval", "0"]) == 0
        assert UPDATE_CALLS == [(name, {"KeepAlivePeriodInSeconds": 0})] and STOP_CALLS == [("StopTrainingJob", name)]
        job = moto_backends.job(name)
        # moto's stop leaves a pool where the keep-alive is still above 0: the update came first.
        assert job.training_job_status == "Stopped" and getattr(job, "warm_pool_status", None) is None
    finally:
        moto_backends.job(name).warm_pool_status = None


def test_a_workflow_jobs_keep_alive_goes_to_0_before_the_executions_stop_stops_the_job(aws, moto_backends, capsys, monkeypatch):
    """Step Functions' .sync integration stops the job when its execution is stopped: the job is Stopping by
    the time it is described again, too late for the keep-alive. So it is set to 0 first, and --wait still
    waits for that stop."""
    name = f"{PROJECT}-stop-warm-flow"
    assert launch_main(["--on-demand", "--keep-alive", "900", "--name", name]) == 0  # the workflow execution
    _warm_job(moto_backends, name, "InProgress")
    original = stop.stop_execution

    def stop_execution_and_its_job(deployment, job_name):  # as Step Functions does (moto runs no workflow)
        stopped = original(deployment, job_name)
        assert UPDATE_CALLS == [(name, {"KeepAlivePeriodInSeconds": 0})], "the keep-alive comes before the stop"
        moto_backends.set_job(name, "Stopping", "Stopping")
        return stopped

    monkeypatch.setattr(stop, "stop_execution", stop_execution_and_its_job)
    try:
        capsys.readouterr()
        assert run(stop.main, [name]) == 0
        out = capsys.readouterr().out
        assert f"stopped workflow execution {name}" in out and f"stopping training job {name}" in out
        assert "nothing to stop" not in out and STOP_CALLS == []  # Step Functions' stop, not a second one
    finally:
        moto_backends.job(name).warm_pool_status = None
        moto_backends.set_job(name, "Stopped", "Stopped")  # ended: the module's teardown tests wait for the project's jobs


def test_stop_of_an_unknown_job_is_one_line_and_exit_3(aws, capsys):
    assert run(stop.main, [f"{PROJECT}-not-there"]) == 3
    assert capsys.readouterr().err == (
        f"error: no training, tuning, processing or transform job named {PROJECT}-not-there in {REGION} (see python -m scripts.list_jobs)\n"
    )


def test_teardown_lists_then_stops_running_executions_and_jobs(aws, moto_backends, capsys):
    _running_job(moto_backends, f"{PROJECT}-td-direct")
    assert launch_main(["--name", f"{PROJECT}-td-workflow"]) == 0
    capsys.readouterr()

    assert run(teardown.main, []) == 1  # without --stop-running: report only
    out = capsys.readouterr().out
    assert f"running training job: {PROJECT}-td-direct" in out
    assert f"running workflow execution: {PROJECT}-td-workflow" in out

    assert run(teardown.main, ["--stop-running", "--interval", "0"]) == 0
    assert "nothing left running" in capsys.readouterr().out
    assert moto_backends.job(f"{PROJECT}-td-direct").training_job_status == "Stopped"
    assert _execution_status(aws, f"{PROJECT}-td-workflow") == "ABORTED"
    assert not teardown.find_running(Deployment(config=load_platform_config(), aws=Aws(boto3.Session())))


def test_teardown_destroy_runs_cdk_destroy_only_when_nothing_is_left(aws, moto_backends, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(common.subprocess, "run", lambda cmd, **kw: calls.append((cmd, kw)) or type("R", (), {"returncode": 0})())
    assert run(teardown.main, ["--stop-running", "--destroy", "--interval", "0"]) == 0
    ((command, options),) = calls
    assert command[1:4] == ["destroy", "--all", "--force"]
    assert options["cwd"] == common.ROOT, "the CLI reads the checkout's cdk.json"
    # Synthesized into a directory of its own: not ./cdk.out, which another CLI in the checkout may hold.
    assert command[-2] == "--output" and Path(command[-1]).parent != common.ROOT

    calls.clear()
    _running_job(moto_backends, f"{PROJECT}-td-stuck")
    monkeypatch.setattr(teardown, "stop_job", lambda deployment, name, job=None: None)  # a job that will not stop
    assert run(teardown.main, ["--stop-running", "--destroy", "--interval", "0", "--timeout", "0"]) == 1
    assert not calls
    assert "not destroying" in capsys.readouterr().err
    moto_backends.set_job(f"{PROJECT}-td-stuck", "Stopped", "Stopped")


def test_teardown_stops_processing_jobs_and_pipeline_executions(aws, moto_backends, capsys):
    from scripts.launch import main as launch

    sagemaker = boto3.client("sagemaker", region_name=REGION)
    sagemaker.create_processing_job(
        ProcessingJobName=f"{PROJECT}-td-process", RoleArn=aws.training["ProcessingRoleArn"],
        AppSpecification={"ImageUri": aws.data["ImageUri"]},
        ProcessingResources={"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.g5.xlarge", "VolumeSizeInGB": 10}},
    )
    moto_backends.sagemaker.processing_jobs[f"{PROJECT}-td-process"].processing_job_status = "InProgress"
    assert launch(["--pipeline", "--name", "td-pipeline"]) == 0
    capsys.readouterr()
    assert run(teardown.main, []) == 1
    out = capsys.readouterr().out
    assert f"running processing job: {PROJECT}-td-process" in out and "running workflow execution: td-pipeline" in out
    assert run(teardown.main, ["--stop-running", "--interval", "0"]) == 0
    assert moto_backends.sagemaker.processing_jobs[f"{PROJECT}-td-process"].processing_job_status == "Stopped"
    arn = aws.training["PipelineStateMachineArn"].replace(":stateMachine:", ":execution:") + ":td-pipeline"
    assert boto3.client("stepfunctions", region_name=REGION).describe_execution(executionArn=arn)["status"] == "ABORTED"


def test_teardown_deletes_the_promote_steps_models_and_configs_once_no_endpoint_serves_them(aws, capsys):
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    for name in (f"{PROJECT}-td-old", f"{PROJECT}-td-live"):
        sagemaker.create_model(ModelName=name, ExecutionRoleArn=aws.training["JobRoleArn"],
                               PrimaryContainer={"Image": aws.data["ImageUri"], "ModelDataUrl": "s3://a/m.tar.gz"})
        sagemaker.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[
            {"VariantName": "AllTraffic", "ModelName": name, "InstanceType": "ml.g4dn.xlarge", "InitialInstanceCount": 1}])
    sagemaker.create_endpoint(EndpointName=f"{PROJECT}-endpoint", EndpointConfigName=f"{PROJECT}-td-live")
    sagemaker.create_model(ModelName="other-project-model", ExecutionRoleArn=aws.training["JobRoleArn"],
                           PrimaryContainer={"Image": aws.data["ImageUri"]})
    try:
        assert run(teardown.main, ["--stop-running", "--interval", "0"]) == 0
        out = capsys.readouterr().out
        assert f"deleting endpoint config {PROJECT}-td-old" in out and f"deleting model {PROJECT}-td-old" in out
        assert f"keeping {PROJECT}-td-live: the endpoint still serves it" in out
        models = {m["ModelName"] for m in sagemaker.list_models()["Models"]}
        assert f"{PROJECT}-td-old" not in models and {f"{PROJECT}-td-live", "other-project-model"} <= models
    finally:
        sagemaker.delete_endpoint(EndpointName=f"{PROJECT}-endpoint")
    # With the endpoint gone (what cdk destroy does), the next pass deletes the rest.
    assert run(teardown.main, ["--stop-running", "--interval", "0"]) == 0
    assert f"{PROJECT}-td-live" not in {m["ModelName"] for m in sagemaker.list_models()["Models"]}
    assert f"{PROJECT}-td-live" not in {c["EndpointConfigName"] for c in sagemaker.list_endpoint_configs()["EndpointConfigs"]}
    sagemaker.delete_model(ModelName="other-project-model")


def _serving_stack() -> None:
    """A stand-in for a promoted ``<project>-serving`` (moto needs a resource in every stack)."""
    template = {"Resources": {"Alarms": {"Type": "AWS::SNS::Topic", "Properties": {"TopicName": f"{PROJECT}-td-serving-alarms"}}}}
    boto3.client("cloudformation", region_name=REGION).create_stack(StackName=f"{PROJECT}-serving", TemplateBody=json.dumps(template))


def _stack_exists(name: str) -> bool:
    try:
        stacks = boto3.client("cloudformation", region_name=REGION).describe_stacks(StackName=name)["Stacks"]
    except ClientError:
        return False
    return bool(stacks) and stacks[0]["StackStatus"] != "DELETE_COMPLETE"


def test_teardown_destroy_deletes_a_promoted_serving_stack_before_cdk_destroy(aws, monkeypatch, capsys):
    """promote deploys the serving stack with -c serving.enabled=true, so `cdk destroy --all` with
    cdk.json's config does not see it: --destroy deletes it first (it imports the data stack's exports)."""
    _serving_stack()
    seen = []
    monkeypatch.setattr(
        common.subprocess, "run",
        lambda cmd, **kw: seen.append((cmd[1:4], _stack_exists(f"{PROJECT}-serving"))) or type("R", (), {"returncode": 0})(),
    )
    assert run(teardown.main, []) == 0
    assert f"{PROJECT}-serving is deployed (its endpoint bills by the hour): --destroy removes it" in capsys.readouterr().out
    assert run(teardown.main, ["--stop-running", "--destroy", "--interval", "0"]) == 0
    assert seen == [(["destroy", "--all", "--force"], False)]
    assert f"deleting stack {PROJECT}-serving" in capsys.readouterr().out
    assert not _stack_exists(f"{PROJECT}-serving")


def test_teardown_deletes_endpoints_no_stack_owns_and_then_their_models(aws, capsys):
    """An endpoint made outside CloudFormation (the SageMaker SDK's deploy()) bills by the hour and
    cdk destroy cannot see it: listed (exit 1), then deleted by --stop-running with its model and config."""
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    name = f"{PROJECT}-sdk-endpoint-1"
    sagemaker.create_model(ModelName=name, ExecutionRoleArn=aws.training["JobRoleArn"],
                           PrimaryContainer={"Image": aws.data["ImageUri"], "ModelDataUrl": "s3://a/m.tar.gz"})
    sagemaker.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[
        {"VariantName": "AllTraffic", "ModelName": name, "InstanceType": "ml.g4dn.xlarge", "InitialInstanceCount": 1}])
    sagemaker.create_endpoint(EndpointName=name, EndpointConfigName=name)
    sagemaker.create_endpoint(EndpointName="other-team-endpoint", EndpointConfigName=name)
    try:
        assert run(teardown.main, []) == 1
        assert f"live endpoint no stack owns: {name}" in capsys.readouterr().out
        assert run(teardown.main, ["--stop-running", "--interval", "0"]) == 0
        out = capsys.readouterr().out
        assert f"deleting endpoint {name}" in out
        endpoints = {e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]}
        assert name not in endpoints and "other-team-endpoint" in endpoints
    finally:
        sagemaker.delete_endpoint(EndpointName="other-team-endpoint")
    # The config the other team's endpoint held is free now: the next pass deletes it and the model.
    assert run(teardown.main, ["--stop-running", "--interval", "0"]) == 0
    assert name not in {m["ModelName"] for m in sagemaker.list_models()["Models"]}


def test_audit_keeps_the_promotion_record_and_names_the_fix_for_a_serving_stack(aws):
    from scripts.teardown_audit import ERROR, KEPT, audit

    ssm = boto3.client("ssm", region_name=REGION)
    record = f"/{PROJECT}/serving/promotion"
    ssm.put_parameter(Name=record, Value="{}", Type="String", Tags=[{"Key": "Project", "Value": PROJECT}])
    _serving_stack()
    try:
        report = audit(project=PROJECT, data_retained=True, region=REGION)
        (kept,) = [f for f in report.findings if f.kind == "ssm:parameter"]
        assert kept.verdict == KEPT and "promotion record" in kept.note
        (stack,) = [f for f in report.findings if f.kind == "cloudformation:stack" and f"{PROJECT}-serving" in f.arn]
        assert stack.verdict == ERROR and "python -m scripts.teardown --stop-running --destroy removes it" in stack.note
    finally:
        ssm.delete_parameter(Name=record)
        boto3.client("cloudformation", region_name=REGION).delete_stack(StackName=f"{PROJECT}-serving")
def _idle_alarm(job: str) -> str:
    name = f"{PROJECT}-gpu-idle-{job}"
    boto3.client("cloudwatch", region_name=REGION).put_metric_alarm(
        AlarmName=name, Namespace="/aws/sagemaker/TrainingJobs", MetricName="GPUUtilization",
        Dimensions=[{"Name": "Host", "Value": f"{job}/algo-1"}], Statistic="Average", Period=60, EvaluationPeriods=30,
        Threshold=10, ComparisonOperator="LessThanThreshold",
    )  # fmt: skip
    return name


def _alarm_names() -> set[str]:
    return {a["AlarmName"] for a in boto3.client("cloudwatch", region_name=REGION).describe_alarms()["MetricAlarms"]}


def test_teardown_deletes_the_gpu_idle_alarms_of_jobs_that_are_not_running(aws, moto_backends, capsys):
    _running_job(moto_backends, f"{PROJECT}-td-alarmed")
    running, ended = _idle_alarm(f"{PROJECT}-td-alarmed"), _idle_alarm(f"{PROJECT}-td-gone")
    others = "another-project-gpu-idle-x"
    boto3.client("cloudwatch", region_name=REGION).put_metric_alarm(
        AlarmName=others, Namespace="AWS/EC2", MetricName="CPUUtilization", Statistic="Average", Period=60,
        EvaluationPeriods=1, Threshold=1, ComparisonOperator="LessThanThreshold",
    )  # fmt: skip
    deployment = Deployment(config=load_platform_config(), aws=Aws(boto3.Session()))
    # A running job keeps its alarm.
    assert teardown.delete_idle_alarms(deployment, [f"{PROJECT}-td-alarmed"]) == [ended]
    assert running in _alarm_names() and ended not in _alarm_names()
    # --stop-running stops the job, then its alarm goes too; another project's alarm stays.
    capsys.readouterr()
    assert run(teardown.main, ["--stop-running", "--interval", "0"]) == 0
    assert f"deleted GPU idle alarm {running} (its job is not running)" in capsys.readouterr().out
    assert running not in _alarm_names() and others in _alarm_names()


# --- tuning and batch transform jobs: teardown stops them, the audit calls them compute ---------

TUNING_RANGES = {"learning_rate": {"type": "continuous", "min": 0.001, "max": 0.1, "scaling": "Logarithmic"}}


def _tuning_job(aws, name: str) -> None:
    """A tuning job created directly, as the SageMaker SDK's tuner does (moto: Completed at once)."""
    boto3.client("sagemaker", region_name=REGION).create_hyper_parameter_tuning_job(
        HyperParameterTuningJobName=name,
        HyperParameterTuningJobConfig={
            "Strategy": "Random", "ResourceLimits": {"MaxNumberOfTrainingJobs": 4, "MaxParallelTrainingJobs": 1},
            "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "train:loss"},
        },
        TrainingJobDefinition={
            "AlgorithmSpecification": {"TrainingImage": aws.data["ImageUri"], "TrainingInputMode": "File"},
            "RoleArn": aws.training["JobRoleArn"], "OutputDataConfig": {"S3OutputPath": "s3://a/out/"},
            "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
            "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        },
    )  # fmt: skip


def _transform_job(name: str) -> None:
    """A batch transform job as the pipeline's transform step (or the SDK's Transformer) creates it (moto: Completed at once)."""
    boto3.client("sagemaker", region_name=REGION).create_transform_job(
        TransformJobName=name, ModelName=f"{PROJECT}-td-model",
        TransformInput={"DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://a/in/"}}},
        TransformOutput={"S3OutputPath": "s3://a/out/"},
        TransformResources={"InstanceType": "ml.g4dn.xlarge", "InstanceCount": 1},
    )  # fmt: skip


def _tuning_status(name: str) -> str:
    return boto3.client("sagemaker", region_name=REGION).describe_hyper_parameter_tuning_job(
        HyperParameterTuningJobName=name)["HyperParameterTuningJobStatus"]  # fmt: skip


def _transform_status(name: str) -> str:
    return boto3.client("sagemaker", region_name=REGION).describe_transform_job(TransformJobName=name)["TransformJobStatus"]


def test_teardown_stops_a_running_tuning_job_before_its_trials_and_waits_for_it(aws, moto_backends, tmp_path, capsys):
    """A `launch --tune --direct` tuning job with a running trial: stopping only the trial lets the
    tuner start the next one (and bill); --stop-running stops the tuning job itself, first."""
    from tests.scripts.conftest import STOP_CALLS

    ranges = tmp_path / "ranges.json"
    ranges.write_text(json.dumps(TUNING_RANGES))
    name, trial = f"{PROJECT}-td-tune", f"{PROJECT}-td-tune-001-0123abcd"
    stopping, other = f"{PROJECT}-td-tune-stopping", f"other-{PROJECT}-td-tune"  # NameContains matches the other project's too
    assert launch_main(["--tune", str(ranges), "--direct", "--max-jobs", "4", "--name", name, "--yes",
                        "-c", "tuning.objective_metric=train:loss"]) == 0  # fmt: skip
    _running_job(moto_backends, trial)  # the tuner's trial
    moto_backends.set_tuning_job(name, "InProgress", trials=[
        {"TrainingJobName": trial, "TrainingJobStatus": "InProgress", "TunedHyperParameters": {"learning_rate": "0.01"}}])
    for extra in (stopping, other):
        _tuning_job(aws, extra)
        moto_backends.sagemaker.hyper_parameter_tuning_jobs[extra].hyper_parameter_tuning_job_status = "InProgress"
    boto3.client("sagemaker", region_name=REGION).stop_hyper_parameter_tuning_job(HyperParameterTuningJobName=stopping)
    STOP_CALLS.clear()
    capsys.readouterr()
    try:
        assert run(teardown.main, []) == 1
        out = capsys.readouterr().out
        assert f"running tuning job: {name}" in out and f"running tuning job: {stopping}" in out
        assert f"running training job: {trial}" in out and other not in out

        assert run(teardown.main, ["--stop-running", "--interval", "0"]) == 0
        out = capsys.readouterr().out
        # The tuning job first; its trial stopped with it, so not on its own; one already Stopping is only waited for.
        assert STOP_CALLS == [("StopHyperParameterTuningJob", name)]
        assert f"stopping tuning job {name}" in out and f"{name} (tuning job)" in out.split("waiting for ", 1)[1]
        assert "nothing left running" in out
        assert (_tuning_status(name), _tuning_status(stopping)) == ("Stopped", "Stopped")
        assert moto_backends.job(trial).training_job_status == "Stopped"
        assert _tuning_status(other) == "InProgress", "another project's tuning job is never touched"
    finally:
        moto_backends.sagemaker.hyper_parameter_tuning_jobs[other].hyper_parameter_tuning_job_status = "Completed"


def test_teardown_stops_a_running_batch_transform_job_and_waits_for_it(aws, moto_backends, capsys):
    from tests.scripts.conftest import STOP_CALLS

    name, other = f"{PROJECT}-td-exec-transform", f"other-{PROJECT}-td-exec-transform"
    for job in (name, other):
        _transform_job(job)
        moto_backends.sagemaker.transform_jobs[job].transform_job_status = "InProgress"
    STOP_CALLS.clear()
    capsys.readouterr()
    try:
        assert run(teardown.main, []) == 1
        out = capsys.readouterr().out
        assert f"running transform job: {name}" in out and other not in out

        assert run(teardown.main, ["--stop-running", "--interval", "0"]) == 0
        out = capsys.readouterr().out
        assert STOP_CALLS == [("StopTransformJob", name)]
        assert f"{name} (transform job)" in out.split("waiting for ", 1)[1] and "nothing left running" in out
        assert _transform_status(name) == "Stopped"
        assert _transform_status(other) == "InProgress", "another project's transform job is never touched"
    finally:
        moto_backends.sagemaker.transform_jobs[other].transform_job_status = "Completed"


def test_audit_calls_running_tuning_and_transform_jobs_compute_left_behind(aws, moto_backends):
    """Found by name (the SDK does not tag them): running ones are errors naming the fix, ended ones job history."""
    from scripts.teardown_audit import ERROR, INFO, audit

    running_tuning, done_tuning = f"{PROJECT}-td-audit-tune", f"{PROJECT}-td-audit-tune-done"
    running_transform, done_transform = f"{PROJECT}-td-audit-transform", f"{PROJECT}-td-audit-transform-done"
    for name in (running_tuning, done_tuning):
        _tuning_job(aws, name)
    for name in (running_transform, done_transform):
        _transform_job(name)
    moto_backends.sagemaker.hyper_parameter_tuning_jobs[running_tuning].hyper_parameter_tuning_job_status = "InProgress"
    moto_backends.sagemaker.transform_jobs[running_transform].transform_job_status = "InProgress"
    try:
        report = audit(project=PROJECT, data_retained=True, region=REGION)
        verdicts = {f.arn.rsplit("/", 1)[-1]: f for f in report.findings}
        for name, kind in ((running_tuning, "sagemaker:hyper-parameter-tuning-job"), (running_transform, "sagemaker:transform-job")):
            assert (verdicts[name].kind, verdicts[name].verdict) == (kind, ERROR)
            assert "compute left behind" in verdicts[name].note and "InProgress" in verdicts[name].note
            assert "python -m scripts.teardown --stop-running stops it" in verdicts[name].note
        for name in (done_tuning, done_transform):
            assert verdicts[name].verdict == INFO and "job record (Completed)" in verdicts[name].note
        assert not report.ok
    finally:
        moto_backends.sagemaker.hyper_parameter_tuning_jobs[running_tuning].hyper_parameter_tuning_job_status = "Completed"
        moto_backends.sagemaker.transform_jobs[running_transform].transform_job_status = "Completed"


def test_stop_stops_a_tuning_job_by_name_not_only_its_trial(aws, moto_backends, tmp_path, capsys):
    """`scripts.stop <tuning job>` (a --direct launch: no execution) stops the tuning job itself, which stops its
    trials and starts no more; before, the name was looked up only as a training job and refused."""
    from tests.scripts.conftest import STOP_CALLS

    ranges = tmp_path / "ranges.json"
    ranges.write_text(json.dumps(TUNING_RANGES))
    name, trial = f"{PROJECT}-stop-tune", f"{PROJECT}-stop-tune-001-0123abcd"
    assert launch_main(["--tune", str(ranges), "--direct", "--max-jobs", "2", "--name", name, "--yes",
                        "-c", "tuning.objective_metric=train:loss"]) == 0  # fmt: skip
    _running_job(moto_backends, trial)
    moto_backends.set_tuning_job(name, "InProgress", trials=[
        {"TrainingJobName": trial, "TrainingJobStatus": "InProgress", "TunedHyperParameters": {"learning_rate": "0.01"}}])
    STOP_CALLS.clear()
    capsys.readouterr()
    assert run(stop.main, [name, "--wait", "--interval", "0"]) == 0
    out = capsys.readouterr().out
    assert STOP_CALLS == [("StopHyperParameterTuningJob", name)]
    assert f"stopping tuning job {name} (and its running trials)" in out and f"{name} Stopped" in out
    assert _tuning_status(name) == "Stopped" and moto_backends.job(trial).training_job_status == "Stopped"
    capsys.readouterr()
    assert run(stop.main, [name]) == 0
    assert f"tuning job {name} already Stopped; nothing to stop" in capsys.readouterr().out


def test_stop_stops_a_processing_or_transform_job_by_name(aws, moto_backends, capsys):
    from tests.scripts.conftest import STOP_CALLS

    transform = f"{PROJECT}-stop-exec-transform"
    _transform_job(transform)
    moto_backends.sagemaker.transform_jobs[transform].transform_job_status = "InProgress"
    processing = f"{PROJECT}-stop-process"
    boto3.client("sagemaker", region_name=REGION).create_processing_job(
        ProcessingJobName=processing, RoleArn=aws.training["ProcessingRoleArn"],
        AppSpecification={"ImageUri": aws.data["ImageUri"]},
        ProcessingResources={"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.xlarge", "VolumeSizeInGB": 10}},
    )  # fmt: skip
    moto_backends.sagemaker.processing_jobs[processing].processing_job_status = "InProgress"
    STOP_CALLS.clear()
    capsys.readouterr()
    assert run(stop.main, [transform, "--wait", "--interval", "0"]) == 0
    assert f"stopping transform job {transform}" in capsys.readouterr().out and _transform_status(transform) == "Stopped"
    assert run(stop.main, [processing]) == 0
    assert f"stopping processing job {processing}" in capsys.readouterr().out
    assert moto_backends.sagemaker.processing_jobs[processing].processing_job_status in ("Stopping", "Stopped")
    assert STOP_CALLS[0] == ("StopTransformJob", transform)


def test_list_kind_lists_tuning_and_transform_jobs_and_all_of_them_with_a_kind_column(aws, moto_backends, capsys):
    tuning, transform = f"{PROJECT}-list-tune", f"{PROJECT}-list-exec-transform"
    _tuning_job(aws, tuning)
    _transform_job(transform)
    _tuning_job(aws, f"other-{PROJECT}-list-tune")  # another project's: NameContains matches it too
    moto_backends.sagemaker.hyper_parameter_tuning_jobs[tuning].hyper_parameter_tuning_job_status = "InProgress"
    try:
        capsys.readouterr()
        assert run(list_jobs.main, ["--kind", "tuning"]) == 0
        rows = [r.split() for r in capsys.readouterr().out.splitlines()[1:]]
        assert [r[:3] for r in rows if r[0] == tuning] == [[tuning, "InProgress", "-"]]
        assert not any("other-" in r[0] for r in rows)
        assert run(list_jobs.main, ["--kind", "all", "--status", "InProgress"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].split()[:3] == ["KIND", "NAME", "STATUS"]
        kinds = {r.split()[1]: r.split()[0] for r in out[1:]}
        assert kinds.get(tuning) == "tuning" and transform not in kinds, "--status applies to every kind"
        assert run(list_jobs.main, ["--kind", "transform"]) == 0
        assert any(r.split()[:2] == [transform, "Completed"] for r in capsys.readouterr().out.splitlines()[1:])
    finally:
        moto_backends.sagemaker.hyper_parameter_tuning_jobs[tuning].hyper_parameter_tuning_job_status = "Completed"


class _Refused:
    """What a before-call handler returns for a refused call: botocore raises its ClientError."""

    status_code = 400
    headers: dict = {}


def test_audit_fails_on_what_it_may_not_read_instead_of_calling_it_gone(aws, moto_backends):
    """A narrow role: DescribeTrainingJob and ListTransformJobs answer AccessDenied. The running job is not
    "job record" or gone, and the listing is not "nothing found": both are UNCHECKED, naming the
    permission, and the audit fails (what it cannot see may still bill)."""
    from scripts.teardown_audit import UNCHECKED, audit

    name = f"{PROJECT}-audit-denied"
    _running_job(moto_backends, name)
    session = boto3.session.Session(region_name=REGION)

    def refuse(**_kwargs):
        return _Refused(), {"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}}

    for operation in ("DescribeTrainingJob", "ListTransformJobs"):
        session.events.register(f"before-call.sagemaker.{operation}", refuse)
    try:
        report = audit(project=PROJECT, data_retained=True, session=session, region=REGION)
        (job,) = [f for f in report.findings if f.arn.endswith(f"/{name}")]
        assert job.verdict == UNCHECKED
        assert "sagemaker:DescribeTrainingJob answered AccessDeniedException (not authorized)" in job.note
        assert "audit with credentials allowed sagemaker:DescribeTrainingJob" in job.note
        (listing,) = [f for f in report.findings if f.kind == "sagemaker:ListTransformJobs"]
        assert listing.verdict == UNCHECKED and f"could not check {PROJECT}-* by name" in listing.note
        # Every training job the session's other tests left is unchecked too (the same denied describe).
        unchecked = report.of(UNCHECKED)
        assert job in unchecked and listing in unchecked and not report.ok
        assert f"{len(unchecked)} unchecked" in report.render()
        assert report.render().splitlines()[-1].startswith("  => FAIL")
    finally:
        assert run(stop.main, [name]) == 0
