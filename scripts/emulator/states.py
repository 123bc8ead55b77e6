"""A local Step Functions executor for JSONata-mode state machines deployed on the emulator.

moto records StartExecution but runs no state: an execution stays RUNNING forever and its
history is canned. This executor plays the Step Functions service for executions started on the
moto server: it reads the state machine's deployed definition (the one CloudFormation created),
runs it state by state, calls the task integrations against the same moto server (where the
local runners play SageMaker), and records the outcome on moto's execution (status, output or
error and cause, stop date, history), so DescribeExecution and GetExecutionHistory tell the truth.

What it runs (Amazon States Language, JSONata query language only):

- states ``Pass``, ``Choice`` (``Condition``, ``Default``), ``Task``, ``Wait`` (``Seconds``,
  ``Timestamp``), ``Succeed``, ``Fail`` (``Error``/``Cause``), with ``Assign`` (every expression
  sees the variables as they were when the state was entered, as does ``Output``), ``Output``,
  ``Retry`` and ``Catch`` (``ErrorEquals`` with ``States.ALL``/``States.TaskFailed``,
  ``$states.errorOutput``);
- ``$states.input``, ``$states.result``, ``$states.errorOutput`` and ``$states.context``
  (``Execution.Id/Name/Input/StartTime/RoleArn``, ``StateMachine.Id/Name``,
  ``State.Name/EnteredTime/RetryCount``);
- task resources ``sagemaker:createTrainingJob.sync``, ``createProcessingJob.sync``,
  ``createTransformJob.sync`` and ``createHyperParameterTuningJob.sync`` (create,
  then poll Describe* until the job ends; the result is the description; a failed or stopped job
  fails the task with ``States.TaskFailed`` and the description as JSON in ``Cause``),
  ``sagemaker:createModel``, ``createEndpointConfig``, ``updateEndpoint``, ``sns:publish`` and
  ``aws-sdk:<service>:<action>`` (a boto3 call; errors named ``<Service>.<ErrorCode>``).

Anything else (``Map``, ``Parallel``, JSONPath states, other resources) fails the execution with
``States.Runtime`` and a cause naming what is not supported: nothing is skipped silently.

JSONata is evaluated by the reference implementation (the npm ``jsonata`` package, the 2.0.6
Step Functions implements) in one long-lived node process (:class:`JsonataEvaluator`), never
re-implemented here.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

ROOT = Path(__file__).resolve().parents[2]
EVALUATOR_SCRIPT = Path(__file__).with_name("jsonata_eval.js")

TASK_FAILED = "States.TaskFailed"
RUNTIME = "States.Runtime"
QUERY_EVALUATION = "States.QueryEvaluationError"
NO_CHOICE_MATCHED = "States.NoChoiceMatched"
TIMEOUT = "States.Timeout"
ALL = "States.ALL"

SYNC_JOBS = {
    # resource action: (create call, describe call, name member, status member)
    "createTrainingJob": ("create_training_job", "describe_training_job", "TrainingJobName", "TrainingJobStatus"),
    "createProcessingJob": ("create_processing_job", "describe_processing_job", "ProcessingJobName", "ProcessingJobStatus"),
    # A transform job on the emulator is played by the local runner (scripts.emulator.transform)
    # while LocalSageMaker watches; its statuses are the other jobs' (Stopping: still running).
    "createTransformJob": ("create_transform_job", "describe_transform_job", "TransformJobName", "TransformJobStatus"),
    # A tuning job is played by the local tuner (scripts.emulator.tuning), its trials by the training runner.
    "createHyperParameterTuningJob": (
        "create_hyper_parameter_tuning_job", "describe_hyper_parameter_tuning_job",
        "HyperParameterTuningJobName", "HyperParameterTuningJobStatus",
    ),
}
JOB_END_STATES = {"Completed", "Failed", "Stopped"}
STOP_CALLS = {
    "createTrainingJob": "stop_training_job",
    "createProcessingJob": "stop_processing_job",
    "createTransformJob": "stop_transform_job",
    "createHyperParameterTuningJob": "stop_hyper_parameter_tuning_job",
}

REQUEST_RESPONSE = {
    # Optimized integrations (arn:aws:states:::<service>:<action>) the executor plays.
    ("sagemaker", "createModel"),
    ("sagemaker", "createEndpointConfig"),
    ("sagemaker", "updateEndpoint"),
    ("sns", "publish"),
}

SDK_SERVICE_NAMES = {"sfn": "stepfunctions", "cloudwatchlogs": "logs", "eventbridge": "events"}
"""aws-sdk integration service names (the AWS SDK's) that boto3 names differently."""


class StatesError(Exception):
    """An error as Step Functions names it: ``error`` (matched by ``ErrorEquals``) and ``cause``."""

    def __init__(self, error: str, cause: str) -> None:
        super().__init__(f"{error}: {cause}")
        self.error = error
        self.cause = cause


class Aborted(Exception):
    """The execution was stopped (StopExecution) while a state ran."""


# --------------------------------------------------------------------------------------------
# JSONata
# --------------------------------------------------------------------------------------------


def _node_env() -> dict[str, str]:
    paths = [p for p in (os.environ.get("JSONATA_NODE_PATH"), str(ROOT / "node_modules")) if p]
    for path in paths:
        if (Path(path) / "jsonata" / "package.json").is_file():
            return {**os.environ, "NODE_PATH": path}
    raise RuntimeError(
        "the local Step Functions executor needs the npm package jsonata (package.json pins 2.0.6): "
        "run `bash scripts/bootstrap.sh`, or point JSONATA_NODE_PATH at a node_modules folder that has it"
    )


class JsonataEvaluator:
    """One long-lived ``node`` process evaluating Step Functions' ``{% %}`` fields (JSON lines).

    Thread-safe: requests are answered one at a time, in order.
    """

    def __init__(self) -> None:
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("the local Step Functions executor needs node on PATH (JSONata runs in it)")
        self._process = subprocess.Popen(
            [node, str(EVALUATOR_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_node_env(),
            text=True,
            bufsize=1,
        )
        self._lock = threading.Lock()
        self._next_id = 0

    def evaluate(self, value: Any, bindings: Mapping[str, Any], *, field_name: str = "field") -> Any:
        """``value`` with every ``"{% expression %}"`` string in it evaluated.

        Raises:
            StatesError: ``States.QueryEvaluationError`` for a JSONata error, or for a field that is
                one expression without a result (JSON cannot carry JSONata's ``undefined``).
        """
        if not _has_expression(value):
            return value
        with self._lock:
            self._next_id += 1
            request = {"id": self._next_id, "value": value, "bindings": dict(bindings)}
            assert self._process.stdin is not None and self._process.stdout is not None
            try:
                self._process.stdin.write(json.dumps(request, default=_json_default) + "\n")
                self._process.stdin.flush()
                line = self._process.stdout.readline()
            except (BrokenPipeError, OSError):
                line = ""
            if not line:
                stderr = self._process.stderr.read() if self._process.stderr and self._process.poll() is not None else ""
                raise RuntimeError(f"the JSONata evaluator (node {EVALUATOR_SCRIPT.name}) exited: {stderr.strip()[-2000:]}")
            reply = json.loads(line)
        if not reply["ok"]:
            raise StatesError(QUERY_EVALUATION, f"{field_name}: {reply['message']}")
        if reply.get("undefined"):
            raise StatesError(QUERY_EVALUATION, f"{field_name}: the JSONata expression {value!r} returned no value")
        return reply["value"]

    def close(self) -> None:
        """End the node process."""
        if self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=5)


def _has_expression(value: Any) -> bool:
    if isinstance(value, str):
        return value.startswith("{%") and value.endswith("%}")
    if isinstance(value, Mapping):
        return any(_has_expression(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_expression(v) for v in value)
    return False


def _json_default(value: Any) -> Any:
    # Step Functions serialises the SDK's timestamps as epoch milliseconds.
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return int(value.timestamp() * 1000)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if hasattr(value, "read"):
        return value.read().decode("utf-8", "replace")
    raise TypeError(f"{type(value).__name__} is not JSON")


def json_safe(value: Any) -> Any:
    """A boto3 response as the JSON Step Functions hands on (timestamps as epoch ms, no metadata)."""
    if isinstance(value, Mapping):
        value = {k: v for k, v in value.items() if k != "ResponseMetadata"}
    return json.loads(json.dumps(value, default=_json_default))


# --------------------------------------------------------------------------------------------
# Task integrations
# --------------------------------------------------------------------------------------------


@dataclass
class Integrations:
    """The AWS calls a Task state makes, against the emulator.

    Attributes:
        client: ``client(service)`` -> a boto3 client for the emulator.
        poll_seconds: Between two Describe* calls of a ``.sync`` task.
    """

    client: Callable[[str], Any]
    poll_seconds: float = 1.0

    def call(self, resource: str, arguments: Any, *, aborted: Callable[[], bool], deadline: float | None) -> Any:
        """Run the task ``resource`` with ``arguments``; its result.

        Raises:
            StatesError: what the task fails with, named as Step Functions names it.
            Aborted: the execution was stopped meanwhile.
        """
        match = re.fullmatch(r"arn:aws[a-zA-Z-]*:states:::(.+)", resource)
        if match is None:
            raise StatesError(RUNTIME, f"Task resource {resource} is not supported by the local executor (scripts.emulator.states): only arn:aws:states::: service integrations run here")
        path = match.group(1)
        if path.startswith("aws-sdk:"):
            _, service, action = (path.split(":") + ["", ""])[:3]
            if not service or not action or "." in action:
                raise StatesError(RUNTIME, f"Task resource {resource} is not supported by the local executor (aws-sdk integrations run request-response only)")
            return self._sdk_call(service, action, arguments)
        service, _, action = path.partition(":")
        if action.endswith(".sync") and service == "sagemaker" and action[: -len(".sync")] in SYNC_JOBS:
            return self._run_job(action[: -len(".sync")], arguments, aborted=aborted, deadline=deadline)
        if (service, action) in REQUEST_RESPONSE:
            return self._sdk_call(service, action, arguments)
        raise StatesError(
            RUNTIME,
            f"Task resource {resource} is not supported by the local executor (scripts.emulator.states); it runs "
            "sagemaker:createTrainingJob.sync, createProcessingJob.sync, createTransformJob.sync, "
            "createHyperParameterTuningJob.sync, createModel, createEndpointConfig, "
            "updateEndpoint, sns:publish and aws-sdk:<service>:<action>",
        )

    def _boto(self, service: str) -> Any:
        return self.client(SDK_SERVICE_NAMES.get(service, service))

    def _sdk_call(self, service: str, action: str, arguments: Any) -> Any:
        from botocore import xform_name
        from botocore.exceptions import ClientError, ParamValidationError

        client = self._boto(service)
        model = client.meta.service_model
        operation_name = action[:1].upper() + action[1:]
        if operation_name not in model.operation_names:
            raise StatesError(RUNTIME, f"{service}:{action} is not an action of {model.service_id} (the aws-sdk integration names the API action in camelCase)")
        operation = model.operation_model(operation_name)
        params = _to_shape(arguments or {}, operation.input_shape) if operation.input_shape is not None else {}
        prefix = _error_prefix(model)
        try:
            response = getattr(client, xform_name(operation_name))(**params)
        except ClientError as err:
            code = err.response.get("Error", {}).get("Code") or "Exception"
            message = err.response.get("Error", {}).get("Message") or str(err)
            raise StatesError(f"{prefix}.{code}", message) from None
        except ParamValidationError as err:
            raise StatesError(f"{prefix}.ValidationException", str(err)) from None
        return json_safe(_from_shape(response, operation.output_shape))

    def _run_job(self, action: str, arguments: Any, *, aborted: Callable[[], bool], deadline: float | None) -> Any:
        from botocore.exceptions import ClientError, ParamValidationError

        create, describe, name_member, status_member = SYNC_JOBS[action]
        sagemaker = self.client("sagemaker")
        name = (arguments or {}).get(name_member)
        try:
            getattr(sagemaker, create)(**arguments)
        except ClientError as err:
            code = err.response.get("Error", {}).get("Code") or "Exception"
            raise StatesError(f"SageMaker.{code}", err.response.get("Error", {}).get("Message") or str(err)) from None
        except ParamValidationError as err:
            raise StatesError("SageMaker.ValidationException", str(err)) from None
        while True:
            description = json_safe(getattr(sagemaker, describe)(**{name_member: name}))
            status = description.get(status_member)
            if status == "Completed":
                return description
            if status in JOB_END_STATES:
                # What Step Functions does with a .sync job that failed or was stopped.
                raise StatesError(TASK_FAILED, json.dumps(description))
            if aborted():
                self._stop_job(action, name)
                raise Aborted()
            if deadline is not None and time.monotonic() > deadline:
                self._stop_job(action, name)
                raise StatesError(TIMEOUT, f"{name} was still {status} at the state's TimeoutSeconds")
            time.sleep(self.poll_seconds)

    def _stop_job(self, action: str, name: str) -> None:
        # Step Functions stops the job of a .sync task whose execution is stopped or times out.
        try:
            getattr(self.client("sagemaker"), STOP_CALLS[action])(**{SYNC_JOBS[action][2]: name})
        except Exception:  # noqa: BLE001 - best effort, as the service's own attempt
            pass


def _error_prefix(model: Any) -> str:
    # Step Functions names an SDK error <Service>.<ErrorCode> (SageMaker.ValidationException).
    return str(model.service_id).replace(" ", "")


def _to_shape(value: Any, shape: Any) -> Any:
    """Step Functions' PascalCase members -> the API's member names (boto3 keeps the model's case)."""
    if shape is None:
        return value
    if shape.type_name == "structure" and isinstance(value, Mapping):
        members = {name.lower(): (name, member) for name, member in shape.members.items()}
        out = {}
        for key, item in value.items():
            name, member = members.get(key.lower(), (key, None))
            out[name] = _to_shape(item, member)
        return out
    if shape.type_name == "list" and isinstance(value, list):
        return [_to_shape(v, shape.member) for v in value]
    if shape.type_name == "map" and isinstance(value, Mapping):
        return {k: _to_shape(v, shape.value) for k, v in value.items()}
    return value


def _from_shape(value: Any, shape: Any) -> Any:
    """The API's member names -> PascalCase, as Step Functions returns an SDK response."""
    if shape is None:
        return value
    if shape.type_name == "structure" and isinstance(value, Mapping):
        return {
            (key[:1].upper() + key[1:]): _from_shape(item, shape.members.get(key))
            for key, item in value.items()
            if key != "ResponseMetadata"
        }
    if shape.type_name == "list" and isinstance(value, list):
        return [_from_shape(v, shape.member) for v in value]
    if shape.type_name == "map" and isinstance(value, Mapping):
        return {k: _from_shape(v, shape.value) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------------------------
# The interpreter
# --------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """How an execution ended.

    Attributes:
        status: ``SUCCEEDED``, ``FAILED`` or ``ABORTED``.
        output: The final output (SUCCEEDED).
        error: The error name (FAILED).
        cause: The cause (FAILED).
    """

    status: str
    output: Any = None
    error: str | None = None
    cause: str | None = None


@dataclass
class History:
    """Execution history events, shaped like GetExecutionHistory's."""

    events: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, event_type: str, details_key: str | None = None, details: Mapping[str, Any] | None = None) -> None:
        """Append one event."""
        with self._lock:
            event: dict[str, Any] = {
                "timestamp": dt.datetime.now(dt.timezone.utc),
                "type": event_type,
                "id": len(self.events) + 1,
                "previousEventId": len(self.events),
            }
            if details_key:
                event[details_key] = dict(details or {})
            self.events.append(event)


def _to_json(value: Any) -> str:
    return json.dumps(value, default=_json_default)


def _matches(error: str, equals: list[str], *, from_task: bool) -> bool:
    for name in equals:
        if name == error:
            return True
        # States.ALL matches every error but States.Runtime (AWS: not retriable or catchable).
        if name == ALL and error != RUNTIME:
            return True
        if name == TASK_FAILED and from_task and error not in (TIMEOUT, RUNTIME):
            return True
    return False


class Interpreter:
    """Runs one execution of a JSONata-mode definition.

    Args:
        definition: The parsed state machine definition.
        evaluator: Evaluates JSONata.
        integrations: Runs Task states.
        context: ``$states.context`` without ``State`` (filled per state).
        history: Where events go.
        aborted: Whether the execution was stopped.
        on_event: One-line progress messages.
        sleep: Waits (Wait states, retries); replaced by tests.
        max_wait_seconds: Cap on one Wait state's delay (``None``: as written). See
            :attr:`LocalStepFunctions.max_wait_seconds`.
    """

    def __init__(
        self,
        definition: Mapping[str, Any],
        evaluator: JsonataEvaluator,
        integrations: Integrations,
        *,
        context: Mapping[str, Any],
        history: History | None = None,
        aborted: Callable[[], bool] = lambda: False,
        on_event: Callable[[str], None] = lambda _: None,
        sleep: Callable[[float], None] = time.sleep,
        max_wait_seconds: float | None = None,
    ) -> None:
        self.definition = definition
        self.evaluator = evaluator
        self.integrations = integrations
        self.context = dict(context)
        self.history = history or History()
        self.aborted = aborted
        self.on_event = on_event
        self.sleep = sleep
        self.max_wait_seconds = max_wait_seconds
        self.variables: dict[str, Any] = {}

    def run(self, execution_input: Any) -> Outcome:
        """Run from ``StartAt`` to the end; the outcome (errors of the definition become FAILED)."""
        self.history.add(
            "ExecutionStarted",
            "executionStartedEventDetails",
            {"input": _to_json(execution_input), "roleArn": self.context.get("Execution", {}).get("RoleArn", "")},
        )
        try:
            output = self._run_states(execution_input)
        except Aborted:
            self.history.add("ExecutionAborted")
            return Outcome("ABORTED")
        except StatesError as err:
            self.history.add("ExecutionFailed", "executionFailedEventDetails", {"error": err.error, "cause": err.cause})
            return Outcome("FAILED", error=err.error, cause=err.cause)
        self.history.add("ExecutionSucceeded", "executionSucceededEventDetails", {"output": _to_json(output)})
        return Outcome("SUCCEEDED", output=output)

    def _run_states(self, state_input: Any) -> Any:
        states = self.definition.get("States") or {}
        top_language = self.definition.get("QueryLanguage", "JSONPath")
        name = self.definition.get("StartAt")
        if name not in states:
            raise StatesError(RUNTIME, f"StartAt {name!r} names no state")
        while True:
            if self.aborted():
                raise Aborted()
            state = states[name]
            language = state.get("QueryLanguage", top_language)
            if language != "JSONata":
                raise StatesError(
                    RUNTIME,
                    f"state {name!r} uses the {language} query language; the local executor "
                    "(scripts.emulator.states) runs JSONata states only",
                )
            state_type = state.get("Type")
            self.on_event(f"state {name} ({state_type}) entered")
            self.history.add(
                f"{state_type}StateEntered", "stateEnteredEventDetails", {"name": name, "input": _to_json(state_input)}
            )
            next_name, state_output, end = self._run_state(name, state, state_input)
            self.history.add(
                f"{state_type}StateExited", "stateExitedEventDetails", {"name": name, "output": _to_json(state_output)}
            )
            if end:
                return state_output
            if next_name not in states:
                raise StatesError(RUNTIME, f"state {name!r} goes to {next_name!r}, which is not a state")
            name, state_input = next_name, state_output

    def _bindings(self, name: str, state_input: Any, retry_count: int = 0, **extra: Any) -> dict[str, Any]:
        context = {
            **self.context,
            "State": {
                "Name": name,
                "EnteredTime": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "RetryCount": retry_count,
            },
        }
        states = {"input": state_input, "context": context, **extra}
        return {**self.variables, "states": states}

    def _finish(self, name: str, spec: Mapping[str, Any], bindings: Mapping[str, Any], default_output: Any) -> Any:
        """Evaluate ``Output`` and ``Assign`` with the same bindings, then apply the assignments."""
        output = (
            self.evaluator.evaluate(spec["Output"], bindings, field_name=f"{name}.Output") if "Output" in spec else default_output
        )
        if "Assign" in spec:
            assigned = self.evaluator.evaluate(spec["Assign"], bindings, field_name=f"{name}.Assign")
            if not isinstance(assigned, Mapping):
                raise StatesError(QUERY_EVALUATION, f"{name}.Assign must be an object of variable names")
            self.variables.update(assigned)
        return output

    def _run_state(self, name: str, state: Mapping[str, Any], state_input: Any) -> tuple[str | None, Any, bool]:
        state_type = state.get("Type")
        end = bool(state.get("End"))
        if state_type == "Pass":
            output = self._finish(name, state, self._bindings(name, state_input), state_input)
            return state.get("Next"), output, end
        if state_type == "Succeed":
            output = self._finish(name, state, self._bindings(name, state_input), state_input)
            return None, output, True
        if state_type == "Fail":
            bindings = self._bindings(name, state_input)
            error = self.evaluator.evaluate(state.get("Error", "States.Fail"), bindings, field_name=f"{name}.Error")
            cause = self.evaluator.evaluate(state.get("Cause", ""), bindings, field_name=f"{name}.Cause")
            raise StatesError(str(error), cause if isinstance(cause, str) else json.dumps(cause))
        if state_type == "Choice":
            return self._choice(name, state, state_input)
        if state_type == "Wait":
            return self._wait(name, state, state_input)
        if state_type == "Task":
            return self._task(name, state, state_input)
        raise StatesError(
            RUNTIME,
            f"state {name!r} has type {state_type}, which the local executor (scripts.emulator.states) does not run "
            "(it runs Pass, Choice, Task, Wait, Succeed and Fail)",
        )

    def _choice(self, name: str, state: Mapping[str, Any], state_input: Any) -> tuple[str | None, Any, bool]:
        bindings = self._bindings(name, state_input)
        for index, rule in enumerate(state.get("Choices") or []):
            if "Condition" not in rule:
                raise StatesError(RUNTIME, f"{name}.Choices[{index}] has no Condition (JSONata Choice rules need one)")
            matched = self.evaluator.evaluate(rule["Condition"], bindings, field_name=f"{name}.Choices[{index}].Condition")
            if not isinstance(matched, bool):
                raise StatesError(QUERY_EVALUATION, f"{name}.Choices[{index}].Condition returned {matched!r}, not a boolean")
            if matched:
                spec = {**{k: state[k] for k in ("Output", "Assign") if k in state}, **{k: rule[k] for k in ("Output", "Assign") if k in rule}}
                return rule["Next"], self._finish(name, spec, bindings, state_input), False
        if "Default" not in state:
            raise StatesError(NO_CHOICE_MATCHED, f"no Choices rule of {name} matched and it has no Default")
        return state["Default"], self._finish(name, state, bindings, state_input), False

    def _wait(self, name: str, state: Mapping[str, Any], state_input: Any) -> tuple[str | None, Any, bool]:
        bindings = self._bindings(name, state_input)
        if "Seconds" in state:
            seconds = self.evaluator.evaluate(state["Seconds"], bindings, field_name=f"{name}.Seconds")
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
                raise StatesError(QUERY_EVALUATION, f"{name}.Seconds must be a non-negative number, got {seconds!r}")
        elif "Timestamp" in state:
            stamp = self.evaluator.evaluate(state["Timestamp"], bindings, field_name=f"{name}.Timestamp")
            try:
                until = dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
            except ValueError:
                raise StatesError(QUERY_EVALUATION, f"{name}.Timestamp {stamp!r} is not an ISO-8601 timestamp") from None
            seconds = max(0.0, (until - dt.datetime.now(dt.timezone.utc)).total_seconds())
        else:
            raise StatesError(RUNTIME, f"Wait state {name} needs Seconds or Timestamp")
        if self.max_wait_seconds is not None:
            seconds = min(float(seconds), self.max_wait_seconds)
        deadline = time.monotonic() + float(seconds)
        while time.monotonic() < deadline:
            if self.aborted():
                raise Aborted()
            self.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        return state.get("Next"), self._finish(name, state, bindings, state_input), bool(state.get("End"))

    def _task(self, name: str, state: Mapping[str, Any], state_input: Any) -> tuple[str | None, Any, bool]:
        resource = str(state.get("Resource", ""))
        retriers = [dict(r) for r in state.get("Retry") or []]
        attempts = [0] * len(retriers)
        retry_count = 0
        while True:
            bindings = self._bindings(name, state_input, retry_count)
            try:
                arguments = self.evaluator.evaluate(state.get("Arguments", {}), bindings, field_name=f"{name}.Arguments")
                timeout = state.get("TimeoutSeconds")
                if timeout is not None:
                    timeout = self.evaluator.evaluate(timeout, bindings, field_name=f"{name}.TimeoutSeconds")
                deadline = time.monotonic() + float(timeout) if timeout is not None else None
                self.history.add(
                    "TaskScheduled",
                    "taskScheduledEventDetails",
                    {"resourceType": resource.split(":::")[-1].split(":")[0], "resource": resource, "parameters": _to_json(arguments)},
                )
                try:
                    result = self.integrations.call(resource, arguments, aborted=self.aborted, deadline=deadline)
                except StatesError as err:
                    self.history.add("TaskFailed", "taskFailedEventDetails", {"resource": resource, "error": err.error, "cause": err.cause})
                    raise
                self.history.add("TaskSucceeded", "taskSucceededEventDetails", {"resource": resource, "output": _to_json(result)})
                bindings = self._bindings(name, state_input, retry_count, result=result)
                output = self._finish(name, state, bindings, result)
                return state.get("Next"), output, bool(state.get("End"))
            except StatesError as err:
                retrier = next(
                    (i for i, r in enumerate(retriers) if _matches(err.error, list(r.get("ErrorEquals") or []), from_task=True)),
                    None,
                )
                if retrier is not None and attempts[retrier] < int(retriers[retrier].get("MaxAttempts", 3)):
                    spec = retriers[retrier]
                    delay = float(spec.get("IntervalSeconds", 1)) * float(spec.get("BackoffRate", 2.0)) ** attempts[retrier]
                    if "MaxDelaySeconds" in spec:
                        delay = min(delay, float(spec["MaxDelaySeconds"]))
                    attempts[retrier] += 1
                    retry_count += 1
                    self.on_event(f"state {name}: {err.error}; retry {attempts[retrier]} in {delay:.0f}s")
                    self.sleep(delay)
                    continue
                for catcher in state.get("Catch") or []:
                    if _matches(err.error, list(catcher.get("ErrorEquals") or []), from_task=True):
                        error_output = {"Error": err.error, "Cause": err.cause}
                        bindings = self._bindings(name, state_input, retry_count, errorOutput=error_output)
                        self.on_event(f"state {name}: {err.error} caught -> {catcher['Next']}")
                        return catcher["Next"], self._finish(name, catcher, bindings, error_output), False
                raise


# --------------------------------------------------------------------------------------------
# The service: executions started on the emulator
# --------------------------------------------------------------------------------------------


@dataclass
class LocalStepFunctions:
    """Runs the executions started on the emulator, each in its own thread.

    Attributes:
        endpoint_url: The emulator (tasks call it).
        region: Region of the state machines.
        account: Account (for moto's backend).
        on_event: One-line progress messages.
        poll_seconds: Between two scans for new executions, and between Describe* calls of a job.
        max_wait_seconds: Longest delay of one Wait state. A deployed definition's waits pace its
            polling of a service (the pipeline checks an updating endpoint every minute); here the
            local runners finish in seconds, so waiting as written would only slow the main job.
            The definition itself runs unchanged: each Wait still leads to its next state.
        executions: Outcome of each finished execution, by ARN.
    """

    endpoint_url: str
    region: str
    account: str
    on_event: Callable[[str], None] = print
    poll_seconds: float = 0.5
    max_wait_seconds: float | None = 2.0
    executions: dict[str, Outcome] = field(default_factory=dict)
    _seen: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _workers: list[threading.Thread] = field(default_factory=list)
    _evaluator: JsonataEvaluator | None = None

    def _client(self, service: str) -> Any:
        from scripts.emulator.aws import client

        return client(service, endpoint_url=self.endpoint_url, region=self.region)

    def _backend(self) -> Any:
        from moto.stepfunctions.models import stepfunctions_backends

        return stepfunctions_backends[self.account][self.region]

    def start(self) -> None:
        """Start the node evaluator and watch for new executions."""
        self._evaluator = JsonataEvaluator()
        self._thread = threading.Thread(target=self._watch, name="local-stepfunctions", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching; running executions are aborted (as the service's would be, were it gone)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for worker in self._workers:
            worker.join(timeout=30)
        if self._evaluator is not None:
            self._evaluator.close()
            self._evaluator = None

    def wait(self, execution_arn: str, timeout: float) -> Outcome:
        """Block until ``execution_arn`` has ended; its outcome."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if execution_arn in self.executions:
                return self.executions[execution_arn]
            time.sleep(0.2)
        raise TimeoutError(f"execution {execution_arn} did not end within {timeout:.0f}s")

    def _watch(self) -> None:
        while not self._stop.is_set():
            for machine in list(self._backend().state_machines):
                for execution in list(machine.executions):
                    if execution.execution_arn in self._seen:
                        continue
                    self._seen.add(execution.execution_arn)
                    if execution.status != "RUNNING":
                        # Stopped before it was picked up: it never runs.
                        self.executions[execution.execution_arn] = Outcome(execution.status)
                        continue
                    worker = threading.Thread(
                        target=self._run, args=(machine, execution), name=f"execution-{execution.name}", daemon=True
                    )
                    self._workers.append(worker)
                    worker.start()
            self._stop.wait(self.poll_seconds)

    def _run(self, machine: Any, execution: Any) -> None:
        from moto.core.utils import utcnow

        history = History()
        HISTORIES[execution.execution_arn] = history
        label = f"execution {execution.name}"
        try:
            definition = json.loads(machine.definition)
            execution_input = json.loads(execution.execution_input or "{}")
        except json.JSONDecodeError as err:
            outcome = Outcome("FAILED", error=RUNTIME, cause=f"the definition or input is not JSON: {err}")
        else:
            context = {
                "Execution": {
                    "Id": execution.execution_arn,
                    "Name": execution.name,
                    "Input": execution_input,
                    "RoleArn": machine.roleArn,
                    "StartTime": execution.start_date.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                    "RedriveCount": 0,
                },
                "StateMachine": {"Id": machine.arn, "Name": machine.name},
            }
            assert self._evaluator is not None
            interpreter = Interpreter(
                definition,
                self._evaluator,
                Integrations(self._client, poll_seconds=max(self.poll_seconds, 0.5)),
                context=context,
                history=history,
                aborted=lambda: execution.status == "ABORTED" or self._stop.is_set(),
                on_event=lambda message: self.on_event(f"{label}: {message}"),
                max_wait_seconds=self.max_wait_seconds,
            )
            self.on_event(f"{label}: started on {machine.name} (local Step Functions executor)")
            try:
                outcome = interpreter.run(execution_input)
            except Exception as err:  # noqa: BLE001 - an executor bug fails the execution, visibly
                outcome = Outcome("FAILED", error=RUNTIME, cause=f"local executor error: {type(err).__name__}: {err}")
        # Record the truth on moto's execution (DescribeExecution, ListExecutions read it).
        if execution.status != "ABORTED":
            execution.status = outcome.status
            execution.stop_date = utcnow()
            if outcome.status == "SUCCEEDED":
                execution.output = json.dumps(outcome.output, default=_json_default)
            else:
                execution.error, execution.cause = outcome.error, outcome.cause
        self.executions[execution.execution_arn] = outcome if execution.status != "ABORTED" else Outcome("ABORTED")
        detail = "" if outcome.status == "SUCCEEDED" else f": {outcome.error}: {(outcome.cause or '')[:300]}"
        self.on_event(f"{label}: {execution.status}{detail}")


HISTORIES: dict[str, History] = {}
"""Execution ARN -> its recorded history (served by the GetExecutionHistory gap patch)."""
