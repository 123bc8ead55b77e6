"""scripts.launch --tune: the workflow execution's input, the direct tuning job's request, dry run (offline too),
price line, refusals; scripts.promote --best-of."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.session import get_session
from botocore.validate import validate_parameters

from scripts.common import Aws, run
from scripts.launch import main
from tests.scripts.conftest import PROJECT, REGION

RANGES = {
    "learning_rate": {"type": "continuous", "min": 0.001, "max": 0.1, "scaling": "Logarithmic"},
    "optimizer": {"type": "categorical", "values": ["adam", "sgd"]},
}
SENT_RANGES = {
    "learning_rate": {"type": "continuous", "min": "0.001", "max": "0.1", "scaling": "Logarithmic"},
    "optimizer": {"type": "categorical", "values": ["adam", "sgd"]},
}
"""The ranges file's ranges as an execution input carries them: SageMaker's strings."""

TRAIN_LOSS = ["-c", "tuning.objective_metric=train:loss"]


@pytest.fixture
def ranges(tmp_path):
    path = tmp_path / "ranges.json"
    path.write_text(json.dumps(RANGES))
    return path


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)


def test_dry_run_offline_prints_the_execution_input_and_the_price(offline, ranges, capsys):
    argv = ["--tune", str(ranges), "--max-jobs", "3", "--dry-run", "--name", f"{PROJECT}-tune-1", "--hp", "epochs=2", *TRAIN_LOSS]
    assert main(argv) == 0
    captured = capsys.readouterr()
    # What the training workflow's Tune branch reads: the overrides, the ranges as SageMaker's strings, the caps.
    assert json.loads(captured.out) == {
        "job_name": f"{PROJECT}-tune-1",
        "hyperparameters": {"epochs": "2"},
        "tuning": {
            "ranges": SENT_RANGES,
            "max_jobs": 3,
            "max_parallel_jobs": 2,
        },
    }
    (price,) = [line for line in captured.err.splitlines() if line.startswith("price:")]
    assert price.startswith(f"price: tuning job {PROJECT}-tune-1: up to 3 trials of 1 x ml.g5.xlarge, each, managed spot")


def test_direct_dry_run_offline_prints_the_request_and_the_price(offline, ranges, capsys):
    assert main(["--tune", str(ranges), "--direct", "--max-jobs", "3", "--dry-run", "--name", f"{PROJECT}-tune-1", *TRAIN_LOSS]) == 0
    captured = capsys.readouterr()
    request = json.loads(captured.out)
    validate_parameters(request, get_session().get_service_model("sagemaker").operation_model("CreateHyperParameterTuningJob").input_shape)
    assert request["HyperParameterTuningJobName"] == f"{PROJECT}-tune-1"
    assert request["HyperParameterTuningJobConfig"]["ResourceLimits"] == {"MaxNumberOfTrainingJobs": 3, "MaxParallelTrainingJobs": 2}
    assert request["TrainingJobDefinition"]["RoleArn"] == f"<{PROJECT}-training.JobRoleArn>"
    assert request["TrainingJobDefinition"]["EnableNetworkIsolation"] is True
    (price,) = [line for line in captured.err.splitlines() if line.startswith("price:")]
    assert price.startswith(f"price: tuning job {PROJECT}-tune-1: up to 3 trials of 1 x ml.g5.xlarge, each, managed spot")
    assert "over 3 trials' 24 h maximum runtime" in price


@pytest.mark.parametrize(
    "ranges_text, argv, message, code",
    [
        (json.dumps(RANGES), ["--max-jobs", "9"], "--max-jobs 9 must be from 1 to 8, the cap tuning.max_jobs sets", 3),
        (json.dumps({"learning_rate": {"type": "continuous", "min": 0, "max": 1}}), [], "range learning_rate: its min is refused", 3),
        (json.dumps(RANGES), ["--keep-alive", "60"], "--keep-alive does not apply to --tune", 2),
        ("{not json", [], "not JSON (Expecting property name", 2),
    ],
)
def test_bad_tuning_launches_get_one_line(offline, tmp_path, capsys, ranges_text, argv, message, code):
    path = tmp_path / "ranges.json"
    path.write_text(ranges_text)
    assert run(main, ["--tune", str(path), "--dry-run", *TRAIN_LOSS, *argv]) == code
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("error: ") and message in err[-1]


def test_max_jobs_needs_tune(offline, capsys):
    assert run(main, ["--dry-run", "--max-jobs", "2"]) == 2
    assert "--max-jobs and --max-parallel-jobs only apply to --tune" in capsys.readouterr().err


def test_a_launch_over_the_spend_limit_needs_yes(aws, ranges, capsys):
    assert run(main, ["--tune", str(ranges), *TRAIN_LOSS]) == 2
    assert "over cost.confirm_above_usd" in capsys.readouterr().err


def test_tune_starts_a_workflow_execution_named_after_the_tuning_job(aws, ranges, capsys):
    name = f"{PROJECT}-tune-5"
    assert main(["--tune", str(ranges), "--max-jobs", "2", "--name", name, "--yes", "--hp", "epochs=2", *TRAIN_LOSS]) == 0
    out = capsys.readouterr().out
    assert f"tuning job: {name}" in out and "execution: " in out and f"python -m scripts.promote --best-of {name}" in out
    arn = aws.training["StateMachineArn"].replace(":stateMachine:", ":execution:") + f":{name}"
    execution = boto3.client("stepfunctions", region_name=REGION).describe_execution(executionArn=arn)
    execution_input = json.loads(execution["input"])
    assert execution_input["job_name"] == name and execution_input["hyperparameters"] == {"epochs": "2"}
    assert execution_input["tuning"]["max_jobs"] == 2 and set(execution_input["tuning"]["ranges"]) == set(RANGES)
    # Nothing was created directly: the workflow's role creates the tuning job.
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    assert name not in [j["HyperParameterTuningJobName"] for j in sagemaker.list_hyper_parameter_tuning_jobs()["HyperParameterTuningJobSummaries"]]


def test_tune_direct_creates_the_tuning_job_with_the_platforms_definition(aws, ranges, capsys):
    name = f"{PROJECT}-tune-2"
    assert main(["--tune", str(ranges), "--direct", "--max-jobs", "2", "--name", name, "--yes", "--hp", "epochs=2", *TRAIN_LOSS]) == 0
    out = capsys.readouterr().out
    assert f"tuning job: {name}" in out and f"python -m scripts.promote --best-of {name}" in out
    job = boto3.client("sagemaker", region_name=REGION).describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
    definition = job["TrainingJobDefinition"]
    assert definition["RoleArn"] == aws.training["JobRoleArn"]
    assert definition["StaticHyperParameters"]["epochs"] == "2" and "learning_rate" not in definition["StaticHyperParameters"]
    assert definition["VpcConfig"]["Subnets"] == aws.data["PrivateSubnetIds"].split(",")
    assert job["HyperParameterTuningJobConfig"]["ResourceLimits"]["MaxNumberOfTrainingJobs"] == 2


def test_promote_best_of_reads_the_tuning_jobs_best_training_job(aws, monkeypatch, capsys):
    from scripts import promote

    sagemaker = boto3.client("sagemaker", region_name=REGION)
    monkeypatch.setattr(promote, "check_job", lambda deployment, job, key=None: f"s3://artifacts/training-jobs/{job}/output/model.tar.gz")
    monkeypatch.setattr(promote, "read_record", lambda deployment: promote.PromotionRecord())

    class Described:
        def describe_hyper_parameter_tuning_job(self, HyperParameterTuningJobName):
            assert HyperParameterTuningJobName == f"{PROJECT}-tune-3"
            return {"HyperParameterTuningJobStatus": "Completed", "BestTrainingJob": {"TrainingJobName": f"{PROJECT}-tune-3-002-abcdef12"}}

        def describe_endpoint(self, EndpointName):  # the first promotion: no endpoint yet (no instance type to change)
            from botocore.exceptions import ClientError

            raise ClientError({"Error": {"Code": "ValidationException", "Message": f"Could not find endpoint {EndpointName}."}},
                              "DescribeEndpoint")  # fmt: skip

    monkeypatch.setattr(Aws, "client", lambda self, service: Described() if service == "sagemaker" else sagemaker)
    assert promote.main(["--best-of", f"{PROJECT}-tune-3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"{PROJECT}-tune-3: best training job {PROJECT}-tune-3-002-abcdef12" in out
    assert f"serving.training_job_name={PROJECT}-tune-3-002-abcdef12" in out


def test_promote_best_of_refuses_a_tuning_job_without_a_best_job(aws, monkeypatch, capsys):
    from scripts import promote

    monkeypatch.setattr(promote, "read_record", lambda deployment: promote.PromotionRecord())

    class Described:
        def describe_hyper_parameter_tuning_job(self, HyperParameterTuningJobName):
            return {"HyperParameterTuningJobStatus": "Failed"}

    monkeypatch.setattr(Aws, "client", lambda self, service: Described())
    assert run(promote.main, ["--best-of", f"{PROJECT}-tune-4", "--dry-run"]) == 1
    assert "has no best training job yet" in capsys.readouterr().err


# --- launch --pipeline --tune: the pipeline's train step as a tuning job ---------------------


def test_pipeline_tune_dry_run_offline_puts_tuning_in_the_train_step_and_prices_the_tuning_job(offline, ranges, capsys):
    argv = ["--pipeline", "--tune", str(ranges), "--max-jobs", "3", "--max-parallel-jobs", "1", "--hp", "epochs=2",
            "--name", "run-7", "--dry-run"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    execution_input = json.loads(captured.out)
    # The pipeline names the tuning job and feeds it the processing run's outputs: neither is in the input.
    assert execution_input["process"] == {}
    assert execution_input["train"] == {
        "hyperparameters": {"epochs": "2"},
        "tuning": {
            "ranges": SENT_RANGES,
            "max_jobs": 3,
            "max_parallel_jobs": 1,
        },
    }
    err = captured.err.splitlines()
    # The tuning job is priced (3 trials) instead of one training job; the default objective (validation:loss)
    # is measured on the processing run's validation output, so it is not refused.
    prices = [line for line in err if line.startswith("price:")]
    assert any(p.startswith(f"price: tuning job {PROJECT}-run7: up to 3 trials of 1 x ml.g5.xlarge") for p in prices), prices
    assert not any("training job" in p for p in prices) and any("processing job" in p for p in prices)
    assert f"tuning job: {PROJECT}-run7 (its best trial is the run's training job)" in err
    assert not any(line.startswith("training job:") for line in err)


def test_pipeline_tune_without_processing_checks_the_objective_on_the_configured_channels(offline, ranges, capsys):
    # The configured channels have no validation channel: validation:loss would end every trial without an objective.
    assert run(main, ["--pipeline", "--skip-process", "--tune", str(ranges), "--dry-run"]) == 3
    assert "is measured on the 'validation' input channel" in capsys.readouterr().err
    assert main(["--pipeline", "--skip-process", "--tune", str(ranges), "--dry-run", "--name", "run-8", *TRAIN_LOSS]) == 0
    assert json.loads(capsys.readouterr().out) == {"train": {"tuning": {
        "ranges": {"learning_rate": {"type": "continuous", "min": "0.001", "max": "0.1", "scaling": "Logarithmic"},
                   "optimizer": {"type": "categorical", "values": ["adam", "sgd"]}},
        "max_jobs": 8, "max_parallel_jobs": 2}}}
    # A validation channel of the user's own gives every trial its objective.
    assert main(["--pipeline", "--skip-process", "--tune", str(ranges), "--dry-run", "--name", "run-9", "--channel", "validation=train/held-out/"]) == 0
    assert json.loads(capsys.readouterr().out)["train"]["channels"] == {"validation": f"s3://<{PROJECT}-data.DatasetsBucketName>/train/held-out/"}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--skip-train"], "--skip-train drops that step"),
        (["--keep-alive", "60"], "--keep-alive does not apply to --tune"),
        (["--max-jobs", "9"], "--max-jobs 9 must be from 1 to 8"),
    ],
)
def test_bad_pipeline_tuning_launches_get_one_line(offline, ranges, capsys, argv, message):
    assert run(main, ["--pipeline", "--tune", str(ranges), "--dry-run", *argv]) in (2, 3)
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("error: ") and message in err[-1], err


def test_pipeline_tune_starts_one_execution(aws, ranges, capsys):
    assert main(["--pipeline", "--tune", str(ranges), "--max-jobs", "2", "--name", "run-9", "--yes"]) == 0
    out = capsys.readouterr().out
    assert f"tuning job: {PROJECT}-run9" in out
    arn = aws.training["PipelineStateMachineArn"].replace(":stateMachine:", ":execution:") + ":run-9"
    execution_input = json.loads(boto3.client("stepfunctions", region_name=REGION).describe_execution(executionArn=arn)["input"])
    assert set(execution_input) == {"process", "train"} and execution_input["train"]["tuning"]["max_jobs"] == 2


def test_a_pipelines_tuning_job_is_named_as_the_definition_names_it():
    from scripts.pipeline import pipeline_names

    names = pipeline_names(PROJECT, "a-very-long-execution-name-for-tuning", {"train": {"tuning": {}}, "promote": True})
    # <project>- and the execution name's letters and digits, cut to SageMaker's 32 characters.
    assert names.tuning_job == f"{PROJECT}-averylongexecutionnamefortuning"[:32] and names.training_job is None
    assert pipeline_names(PROJECT, "r1", {"train": {"job_name": f"{PROJECT}-t1", "tuning": {}}}).tuning_job == f"{PROJECT}-t1"
