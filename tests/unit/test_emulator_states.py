"""The local Step Functions executor (scripts.emulator.states) on small hand-written JSONata definitions.

Each test creates a state machine on an in-process emulator, starts an execution with the
Step Functions API, lets the executor run it and reads the outcome back with DescribeExecution and
GetExecutionHistory, as the operator scripts do. JSONata is evaluated by the npm ``jsonata``
package (node_modules); without node and that package the executor, and so these tests, fail.
"""

from __future__ import annotations

import json
import time
from typing import Any, Iterator

import pytest

from scripts.emulator import server
from scripts.emulator.states import Aborted, Integrations, Interpreter, JsonataEvaluator, LocalStepFunctions, StatesError

ROLE = f"arn:aws:iam::{server.ACCOUNT}:role/workflow"


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[server.Emulator]:
    emu = server.start(log_file=tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture(scope="module")
def executor(emulator: server.Emulator) -> Iterator[LocalStepFunctions]:
    states = LocalStepFunctions(
        endpoint_url=emulator.endpoint_url, region=server.REGION, account=server.ACCOUNT, on_event=lambda _: None, poll_seconds=0.1,
        max_wait_seconds=None,
    )
    states.start()
    try:
        yield states
    finally:
        states.stop()


def _client(emulator: server.Emulator, service: str) -> Any:
    return server.client(service, endpoint_url=emulator.endpoint_url)


_COUNTER = iter(range(10_000))


def _execute(emulator: server.Emulator, executor: LocalStepFunctions, states: dict[str, Any], execution_input: Any = None,
             *, start_at: str | None = None, name: str | None = None) -> dict[str, Any]:
    sfn = _client(emulator, "stepfunctions")
    definition = {"QueryLanguage": "JSONata", "StartAt": start_at or next(iter(states)), "States": states}
    machine = sfn.create_state_machine(name=f"m{next(_COUNTER)}", definition=json.dumps(definition), roleArn=ROLE)["stateMachineArn"]
    arn = sfn.start_execution(stateMachineArn=machine, name=name or "run", input=json.dumps(execution_input or {}))["executionArn"]
    executor.wait(arn, timeout=60)
    described = sfn.describe_execution(executionArn=arn)
    described["history"] = sfn.get_execution_history(executionArn=arn)["events"]
    return described


def test_a_started_execution_reports_running_until_the_executor_records_its_end(emulator, executor) -> None:
    sfn = _client(emulator, "stepfunctions")
    definition = {"QueryLanguage": "JSONata", "StartAt": "Nap", "States": {"Nap": {"Type": "Wait", "Seconds": 1, "End": True}}}
    machine = sfn.create_state_machine(name="napper", definition=json.dumps(definition), roleArn=ROLE)["stateMachineArn"]
    arn = sfn.start_execution(stateMachineArn=machine, name="nap", input='{"a": 1}')["executionArn"]
    running = sfn.describe_execution(executionArn=arn)
    assert running["status"] == "RUNNING" and "stopDate" not in running and "output" not in running
    executor.wait(arn, timeout=30)
    done = sfn.describe_execution(executionArn=arn)
    assert done["status"] == "SUCCEEDED"
    assert json.loads(done["output"]) == {"a": 1}, "a Wait passes its input on"
    assert (done["stopDate"] - done["startDate"]).total_seconds() >= 1


def test_choice_takes_the_first_true_condition_else_the_default(emulator, executor) -> None:
    states = {
        "Pick": {
            "Type": "Choice",
            "Choices": [
                {"Condition": "{% $states.input.n > 10 %}", "Next": "Big", "Output": {"size": "big"}},
                {"Condition": "{% $states.input.n > 5 %}", "Next": "Big", "Output": {"size": "medium"}},
            ],
            "Default": "Small",
        },
        "Big": {"Type": "Succeed"},
        "Small": {"Type": "Succeed", "Output": {"size": "small", "n": "{% $states.input.n %}"}},
    }
    assert json.loads(_execute(emulator, executor, states, {"n": 20})["output"]) == {"size": "big"}
    assert json.loads(_execute(emulator, executor, states, {"n": 7})["output"]) == {"size": "medium"}
    assert json.loads(_execute(emulator, executor, states, {"n": 1})["output"]) == {"size": "small", "n": 1}


def test_a_choice_without_default_fails_with_no_choice_matched(emulator, executor) -> None:
    states = {"Pick": {"Type": "Choice", "Choices": [{"Condition": "{% false %}", "Next": "End"}]}, "End": {"Type": "Succeed"}}
    result = _execute(emulator, executor, states)
    assert result["status"] == "FAILED" and result["error"] == "States.NoChoiceMatched"


def test_assign_is_seen_by_later_states_but_not_by_the_same_states_output(emulator, executor) -> None:
    states = {
        "First": {
            "Type": "Pass",
            "Assign": {"total": "{% $states.input.start + 1 %}", "label": "first"},
            # Output and Assign of one state both see the variables as they were on entry.
            "Output": {"total_seen_by_output": "{% $exists($total) ? $total : 'unset' %}"},
            "Next": "Second",
        },
        "Second": {
            "Type": "Pass",
            "Assign": {"total": "{% $total * 10 %}", "previous": "{% $total %}"},
            "Output": {"input": "{% $states.input %}", "total": "{% $total %}", "label": "{% $label %}"},
            "Next": "Third",
        },
        "Third": {"Type": "Succeed", "Output": {"second": "{% $states.input %}", "total": "{% $total %}", "previous": "{% $previous %}"}},
    }
    output = json.loads(_execute(emulator, executor, states, {"start": 1})["output"])
    assert output == {
        "second": {"input": {"total_seen_by_output": "unset"}, "total": 2, "label": "first"},
        "total": 20,
        "previous": 2,
    }


def test_context_carries_the_execution_and_state_machine(emulator, executor) -> None:
    states = {
        "Look": {
            "Type": "Pass",
            "Output": {
                "name": "{% $states.context.Execution.Name %}",
                "id": "{% $states.context.Execution.Id %}",
                "input": "{% $states.context.Execution.Input %}",
                "machine": "{% $states.context.StateMachine.Name %}",
                "state": "{% $states.context.State.Name %}",
            },
            "End": True,
        }
    }
    result = _execute(emulator, executor, states, {"k": "v"}, name="ctx-run")
    output = json.loads(result["output"])
    assert output["name"] == "ctx-run" and output["id"] == result["executionArn"]
    assert output["input"] == {"k": "v"} and output["state"] == "Look"
    assert result["stateMachineArn"].endswith(":" + output["machine"])


def test_fail_state_names_its_error_and_evaluates_its_cause(emulator, executor) -> None:
    states = {"Stop": {"Type": "Fail", "Error": "InvalidPipelineInput", "Cause": "{% 'no step in ' & $string($keys($states.input)) %}"}}
    result = _execute(emulator, executor, states, {"other": 1})
    assert result["status"] == "FAILED"
    assert result["error"] == "InvalidPipelineInput"
    assert result["cause"] == 'no step in other'
    assert [e["type"] for e in result["history"]][-1] == "ExecutionFailed"


def test_catch_with_states_all_passes_the_error_output_and_assigns(emulator, executor) -> None:
    states = {
        "Read": {
            "Type": "Task",
            "Resource": "arn:aws:states:::aws-sdk:s3:getObject",
            "Arguments": {"Bucket": "no-such-bucket", "Key": "{% $states.input.key %}"},
            "Catch": [
                {"ErrorEquals": ["S3.NoSuchKey"], "Next": "Wrong"},
                {"ErrorEquals": ["States.ALL"], "Next": "Handled", "Assign": {"failed_key": "{% $states.input.key %}"}},
            ],
            "Next": "Wrong",
        },
        "Wrong": {"Type": "Fail", "Error": "WrongBranch"},
        "Handled": {"Type": "Succeed", "Output": {"caught": "{% $states.input %}", "key": "{% $failed_key %}"}},
    }
    result = _execute(emulator, executor, states, {"key": "a/b.csv"})
    assert result["status"] == "SUCCEEDED", result.get("cause")
    output = json.loads(result["output"])
    assert output["key"] == "a/b.csv"
    # Without an Output, a catcher hands on $states.errorOutput: the SDK error as Step Functions names it.
    assert output["caught"]["Error"] == "S3.NoSuchBucket"
    assert "bucket does not exist" in output["caught"]["Cause"]
    types = [e["type"] for e in result["history"]]
    assert "TaskFailed" in types and types.index("TaskFailed") < types.index("SucceedStateEntered")


def test_catch_output_can_parse_the_cause_of_a_task_failure(emulator, executor) -> None:
    s3 = _client(emulator, "s3")
    s3.create_bucket(Bucket="catch-parse")
    states = {
        "Go": {"Type": "Pass", "Next": "Fails"},
        "Fails": {
            "Type": "Fail",
            "Error": "Custom.Error",
            "Cause": '{% $string({"reason": "disk full", "code": 28}) %}',
        },
    }
    result = _execute(emulator, executor, states)
    assert result["error"] == "Custom.Error" and json.loads(result["cause"]) == {"reason": "disk full", "code": 28}
    # A task's errorOutput.Cause parsed with $parse in the catcher's Output.
    states = {
        "Publish": {
            "Type": "Task",
            "Resource": "arn:aws:states:::sns:publish",
            "Arguments": {"TopicArn": f"arn:aws:sns:{server.REGION}:{server.ACCOUNT}:missing", "Message": "x"},
            "Catch": [{"ErrorEquals": ["States.TaskFailed"], "Next": "Done",
                       "Output": {"error": "{% $states.errorOutput.Error %}", "cause_type": "{% $type($states.errorOutput.Cause) %}"}}],
            "End": True,
        },
        "Done": {"Type": "Succeed"},
    }
    output = json.loads(_execute(emulator, executor, states)["output"])
    assert output["error"].startswith("SNS.") and output["cause_type"] == "string"


@pytest.mark.slow
def test_sns_publish_and_sdk_calls_reach_the_emulator(emulator, executor) -> None:
    sns, s3 = _client(emulator, "sns"), _client(emulator, "s3")
    topic = sns.create_topic(Name="notify")["TopicArn"]
    s3.create_bucket(Bucket="sdk-calls")
    s3.put_object(Bucket="sdk-calls", Key="raw/one.csv", Body=b"1")
    states = {
        "List": {
            "Type": "Task",
            "Resource": "arn:aws:states:::aws-sdk:s3:listObjectsV2",
            "Arguments": {"Bucket": "sdk-calls", "Prefix": "raw/", "MaxKeys": 1},
            "Output": {"count": "{% $states.result.KeyCount %}"},
            "Next": "Notify",
        },
        "Notify": {
            "Type": "Task",
            "Resource": "arn:aws:states:::sns:publish",
            "Arguments": {"TopicArn": topic, "Message": "{% 'objects: ' & $string($states.input.count) %}"},
            "Output": {"count": "{% $states.input.count %}", "message_id": "{% $states.result.MessageId %}"},
            "End": True,
        },
    }
    output = json.loads(_execute(emulator, executor, states)["output"])
    assert output["count"] == 1 and output["message_id"]
    # Step Functions' SDK integration takes PascalCase members even where boto3's API model is camelCase.
    states = {
        "Describe": {
            "Type": "Task",
            "Resource": "arn:aws:states:::aws-sdk:sfn:listStateMachines",
            "Arguments": {"MaxResults": 100},
            "Output": "{% $count($states.result.StateMachines) > 0 %}",
            "End": True,
        }
    }
    assert json.loads(_execute(emulator, executor, states)["output"]) is True


def test_retry_retries_matching_errors_then_the_catcher_takes_over(emulator, executor) -> None:
    states = {
        "Read": {
            "Type": "Task",
            "Resource": "arn:aws:states:::aws-sdk:s3:headBucket",
            "Arguments": {"Bucket": "never-created"},
            "Retry": [{"ErrorEquals": ["States.ALL"], "IntervalSeconds": 0, "MaxAttempts": 2}],
            "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Gave up", "Output": {"retries": "{% $states.context.State.RetryCount %}"}}],
            "End": True,
        },
        "Gave up": {"Type": "Succeed"},
    }
    result = _execute(emulator, executor, states)
    assert json.loads(result["output"]) == {"retries": 2}
    assert [e["type"] for e in result["history"]].count("TaskScheduled") == 3


def test_an_unsupported_resource_fails_the_execution_naming_it(emulator, executor) -> None:
    states = {
        "Invoke": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke",
            "Arguments": {"FunctionName": "f"},
            # States.Runtime is not caught by States.ALL: a definition the executor cannot run is never "handled".
            "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Handled"}],
            "End": True,
        },
        "Handled": {"Type": "Succeed"},
    }
    result = _execute(emulator, executor, states)
    assert result["status"] == "FAILED" and result["error"] == "States.Runtime"
    assert "arn:aws:states:::lambda:invoke is not supported by the local executor" in result["cause"]


def test_an_unsupported_state_type_fails_the_execution_naming_it(emulator, executor) -> None:
    states = {"Fan": {"Type": "Parallel", "Branches": [], "End": True}}
    result = _execute(emulator, executor, states)
    assert result["error"] == "States.Runtime" and "type Parallel" in result["cause"]


def test_a_jsonata_error_is_a_query_evaluation_error_naming_the_field(emulator, executor) -> None:
    states = {"Bad": {"Type": "Pass", "Output": {"x": "{% $number('not a number') + %}"}, "End": True}}
    result = _execute(emulator, executor, states)
    assert result["error"] == "States.QueryEvaluationError" and result["cause"].startswith("Bad.Output:")
    states = {"Nothing": {"Type": "Pass", "Output": "{% $states.input.missing %}", "End": True}}
    result = _execute(emulator, executor, states)
    assert result["error"] == "States.QueryEvaluationError" and "returned no value" in result["cause"]


def test_stop_execution_aborts_a_waiting_execution_and_keeps_its_error(emulator, executor) -> None:
    sfn = _client(emulator, "stepfunctions")
    definition = {"QueryLanguage": "JSONata", "StartAt": "Long", "States": {"Long": {"Type": "Wait", "Seconds": 600, "Next": "After"},
                                                                            "After": {"Type": "Succeed"}}}
    machine = sfn.create_state_machine(name="long", definition=json.dumps(definition), roleArn=ROLE)["stateMachineArn"]
    arn = sfn.start_execution(stateMachineArn=machine, name="long")["executionArn"]
    deadline = time.monotonic() + 10
    while "WaitStateEntered" not in [e["type"] for e in sfn.get_execution_history(executionArn=arn)["events"]]:
        assert time.monotonic() < deadline, "the executor never entered the Wait state"
        time.sleep(0.1)
    sfn.stop_execution(executionArn=arn, error="StoppedByTeardown", cause="python -m scripts.teardown --stop-running")
    assert executor.wait(arn, timeout=10).status == "ABORTED"
    described = sfn.describe_execution(executionArn=arn)
    assert described["status"] == "ABORTED" and described["error"] == "StoppedByTeardown"
    assert "SucceedStateEntered" not in [e["type"] for e in sfn.get_execution_history(executionArn=arn)["events"]]


def test_a_jsonpath_definition_is_refused_not_guessed(emulator, executor) -> None:
    sfn = _client(emulator, "stepfunctions")
    definition = {"StartAt": "P", "States": {"P": {"Type": "Pass", "Result": {"a": 1}, "End": True}}}
    machine = sfn.create_state_machine(name="jsonpath", definition=json.dumps(definition), roleArn=ROLE)["stateMachineArn"]
    arn = sfn.start_execution(stateMachineArn=machine, name="jp")["executionArn"]
    executor.wait(arn, timeout=30)
    described = sfn.describe_execution(executionArn=arn)
    assert described["error"] == "States.Runtime" and "JSONPath query language" in described["cause"]


def test_step_functions_jsonata_functions_are_bound_and_eval_is_not() -> None:
    evaluator = JsonataEvaluator()
    try:
        bindings = {"states": {"input": {"doc": '{"a": [1, 2]}'}}}
        assert evaluator.evaluate("{% $parse($states.input.doc).a %}", bindings) == [1, 2]
        assert evaluator.evaluate("{% $partition([1, 2, 3], 2) %}", {}) == [[1, 2], [3]]
        assert evaluator.evaluate("{% $range(0, 6, 3) %}", {}) == [0, 3, 6]
        assert evaluator.evaluate("{% $hash('abc', 'SHA-256') %}", {}).startswith("ba7816bf")
        assert evaluator.evaluate("{% $random(7) = $random(7) %}", {}) is True
        assert len(evaluator.evaluate("{% $uuid() %}", {})) == 36
        with pytest.raises(StatesError, match=r"\$eval is not available"):
            evaluator.evaluate("{% $eval('1') %}", {})
        # Values without {% %} are not sent to node at all, and pass through unchanged.
        assert evaluator.evaluate({"a": ["{ %not% }", 1]}, {}) == {"a": ["{ %not% }", 1]}
    finally:
        evaluator.close()


def test_a_capped_wait_still_leads_to_its_next_state() -> None:
    """The emulator caps Wait delays (its runners finish in seconds); the path through the definition is unchanged."""
    definition = {"QueryLanguage": "JSONata", "StartAt": "Long", "States": {
        "Long": {"Type": "Wait", "Seconds": 600, "Next": "After"},
        "After": {"Type": "Pass", "Output": "{% {'waited': true} %}", "End": True}}}
    evaluator = JsonataEvaluator()
    slept: list[float] = []
    try:
        interpreter = Interpreter(definition, evaluator, Integrations(lambda service: None), context={"Execution": {"Name": "w"}},
                                  sleep=slept.append, max_wait_seconds=0.0)
        outcome = interpreter.run({})
    finally:
        evaluator.close()
    assert outcome.status == "SUCCEEDED" and outcome.output == {"waited": True}
    assert sum(slept) == 0.0


class _FakeTransforms:
    """A SageMaker client that plays one transform job through the statuses given, recording the calls."""

    def __init__(self, statuses: list[str], **described: Any) -> None:
        self.statuses, self.described, self.calls = list(statuses), described, []

    def create_transform_job(self, **request: Any) -> dict[str, Any]:
        self.calls.append(("create", request))
        return {"TransformJobArn": f"arn:aws:sagemaker:{server.REGION}:{server.ACCOUNT}:transform-job/{request['TransformJobName']}"}

    def describe_transform_job(self, TransformJobName: str) -> dict[str, Any]:
        self.calls.append(("describe", TransformJobName))
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"TransformJobName": TransformJobName, "TransformJobStatus": status, **self.described}

    def stop_transform_job(self, TransformJobName: str) -> None:
        self.calls.append(("stop", TransformJobName))


TRANSFORM_SYNC = "arn:aws:states:::sagemaker:createTransformJob.sync"


def test_a_transform_sync_task_creates_the_job_and_polls_it_to_its_end() -> None:
    fake = _FakeTransforms(["InProgress", "InProgress", "Completed"], TransformOutput={"S3OutputPath": "s3://a/out/"})
    integrations = Integrations(lambda service: fake, poll_seconds=0)
    request = {"TransformJobName": "gputrain-r1-transform", "ModelName": "gputrain-r1"}
    result = integrations.call(TRANSFORM_SYNC, request, aborted=lambda: False, deadline=None)
    assert result["TransformJobStatus"] == "Completed" and result["TransformOutput"] == {"S3OutputPath": "s3://a/out/"}
    assert fake.calls[0] == ("create", request)
    assert [c for c in fake.calls if c[0] == "describe"] == [("describe", "gputrain-r1-transform")] * 3


@pytest.mark.parametrize("status", ["Failed", "Stopped"])
def test_a_failed_or_stopped_transform_fails_the_task_with_its_description(status: str) -> None:
    fake = _FakeTransforms(["InProgress", status], FailureReason="ClientError: record 3 of score/a.csv: 400")
    integrations = Integrations(lambda service: fake, poll_seconds=0)
    with pytest.raises(StatesError) as failed:
        integrations.call(TRANSFORM_SYNC, {"TransformJobName": "gputrain-r2-transform"}, aborted=lambda: False, deadline=None)
    assert failed.value.error == "States.TaskFailed"
    assert json.loads(failed.value.cause)["TransformJobStatus"] == status
    assert json.loads(failed.value.cause)["FailureReason"].startswith("ClientError: record 3")


def test_a_timed_out_transform_task_stops_its_job() -> None:
    fake = _FakeTransforms(["InProgress"])
    integrations = Integrations(lambda service: fake, poll_seconds=0)
    with pytest.raises(StatesError) as timed_out:
        integrations.call(TRANSFORM_SYNC, {"TransformJobName": "gputrain-r3-transform"}, aborted=lambda: False, deadline=0.0)
    assert timed_out.value.error == "States.Timeout" and "gputrain-r3-transform was still InProgress" in timed_out.value.cause
    assert fake.calls[-1] == ("stop", "gputrain-r3-transform"), "Step Functions stops the job of a timed-out .sync task"


class _FakeTuner:
    """A SageMaker client that plays one tuning job through the statuses given, recording the calls."""

    def __init__(self, statuses: list[str], **described: Any) -> None:
        self.statuses, self.described, self.calls = list(statuses), described, []

    def create_hyper_parameter_tuning_job(self, **request: Any) -> dict[str, Any]:
        self.calls.append(("create", request))
        return {"HyperParameterTuningJobArn": f"arn:aws:sagemaker:{server.REGION}:{server.ACCOUNT}:hyper-parameter-tuning-job/x"}

    def describe_hyper_parameter_tuning_job(self, HyperParameterTuningJobName: str) -> dict[str, Any]:
        self.calls.append(("describe", HyperParameterTuningJobName))
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"HyperParameterTuningJobName": HyperParameterTuningJobName, "HyperParameterTuningJobStatus": status, **self.described}

    def stop_hyper_parameter_tuning_job(self, HyperParameterTuningJobName: str) -> None:
        self.calls.append(("stop", HyperParameterTuningJobName))


TUNING_SYNC = "arn:aws:states:::sagemaker:createHyperParameterTuningJob.sync"
BEST = {"TrainingJobName": "gputrain-t1-002-abcd1234", "FinalHyperParameterTuningJobObjectiveMetric": {"MetricName": "train:loss", "Value": 0.1}}


def test_a_tuning_sync_task_creates_the_job_and_polls_it_to_its_end() -> None:
    fake = _FakeTuner(["InProgress", "InProgress", "Completed"], BestTrainingJob=BEST)
    integrations = Integrations(lambda service: fake, poll_seconds=0)
    request = {"HyperParameterTuningJobName": "gputrain-t1"}
    result = integrations.call(TUNING_SYNC, request, aborted=lambda: False, deadline=None)
    assert result["HyperParameterTuningJobStatus"] == "Completed" and result["BestTrainingJob"] == BEST
    assert fake.calls[0] == ("create", request)
    assert [c for c in fake.calls if c[0] == "describe"] == [("describe", "gputrain-t1")] * 3


@pytest.mark.parametrize("status", ["Failed", "Stopped"])
def test_a_failed_or_stopped_tuning_job_fails_the_task_and_the_tune_branch_names_it(status: str) -> None:
    """The .sync task fails with States.TaskFailed and the description; the workflow's TuningJobFailed state
    turns that into one line with SageMaker's reason."""
    from stacks.components.tuning_job_spec import TUNING_FAILED_CAUSE, TUNING_FAILED_ERROR

    fake = _FakeTuner(["InProgress", status], FailureReason="No training job succeeded after 5 attempts")
    integrations = Integrations(lambda service: fake, poll_seconds=0)
    with pytest.raises(StatesError) as failed:
        integrations.call(TUNING_SYNC, {"HyperParameterTuningJobName": "gputrain-t2"}, aborted=lambda: False, deadline=None)
    assert failed.value.error == "States.TaskFailed"
    assert json.loads(failed.value.cause)["HyperParameterTuningJobStatus"] == status
    evaluator = JsonataEvaluator()
    try:
        bindings = {"states": {"input": {"Error": failed.value.error, "Cause": failed.value.cause}}}
        refused = {"states": {"input": {"Error": "SageMaker.ValidationException", "Cause": "bad request"}}}
        assert evaluator.evaluate(TUNING_FAILED_ERROR, bindings) == "TuningJobFailed"
        assert evaluator.evaluate(TUNING_FAILED_CAUSE, bindings) == f"gputrain-t2 {status}: No training job succeeded after 5 attempts"
        assert evaluator.evaluate(TUNING_FAILED_ERROR, refused) == "SageMaker.ValidationException"
        assert evaluator.evaluate(TUNING_FAILED_CAUSE, refused) == "bad request"
    finally:
        evaluator.close()


def test_an_aborted_tuning_task_stops_its_job() -> None:
    fake = _FakeTuner(["InProgress"])
    integrations = Integrations(lambda service: fake, poll_seconds=0)
    with pytest.raises(Aborted):
        integrations.call(TUNING_SYNC, {"HyperParameterTuningJobName": "gputrain-t3"}, aborted=lambda: True, deadline=None)
    assert fake.calls[-1] == ("stop", "gputrain-t3"), "Step Functions stops the tuning job of a stopped execution"
