"""The pipeline's state machine definition (Amazon States Language, JSONata mode): process -> train -> promote -> transform.

Pure Python (no CDK import): the definition is a plain dict whose values may be CDK tokens
(bucket names, ARNs) at synth time and plain strings in tests, which evaluate its JSONata
with the reference implementation. :class:`~stacks.components.pipeline_workflow.PipelineWorkflow`
deploys it.

Execution input (every key optional, at least one step)::

    {"process": {job_name, instance_type, instance_count, input_uri, arguments, code_uri, entry_point},
     "train":   {the training workflow's options, plus "channels": {name: s3 URI}
                 and, to tune, "tuning": {ranges, max_jobs, max_parallel_jobs}},
     "promote": {"model_uri": "s3://<artifacts>/training-jobs/<job>/output/model.tar.gz"} or true,
     "transform": false}

Each step runs only when its key is present, except the transform (``transform.enabled`` deployments
only): it runs after every execution that has a model (``train``, or ``promote.model_uri``) unless
``"transform": false`` skips it. Everything is checked before anything runs
(``InvalidPipelineInput``); a requested promotion first checks that the endpoint exists
(``EndpointNotDeployed``), so a mistake fails in seconds, not after hours of GPU time. Then:

- process: the run's output prefix must be empty (``OutputPrefixNotEmpty``), then
  ``createProcessingJob.sync`` (``ProcessingJobFailed``);
- train: unless ``train.channels`` is given, the channels are the processing run's outputs
  (``train`` and ``validation``; only ``train`` for a user's processing script), then
  ``createTrainingJob.sync`` with the very request of the training workflow (``TrainingJobFailed``);
  with ``train.tuning`` (the training workflow's ``tuning``, ``scripts.launch --pipeline --tune``)
  a tuning step instead: the training workflow's tuning checks, then
  ``createHyperParameterTuningJob.sync`` with its request, every trial on the same channels
  (``TuningJobFailed``); the best trial is the run's training job and its ``model.tar.gz`` the model;
- promote: CreateModel and CreateEndpointConfig named ``<project>-<execution name>``, UpdateEndpoint
  with the serving stack's blue/green deployment and rollback alarms, then DescribeEndpoint every
  minute until it serves the new config (``PromotionFailed`` when it fails or rolls back), then the
  promotion record ``/<project>/serving/promotion`` names the promoted job live and the one it
  replaced previous, as ``scripts.promote`` writes it, so a later ``cdk deploy`` keeps serving it
  (the record is read, and checked, before anything runs too: ``PromotionFailed`` names it);
- transform: CreateModel ``<project>-<execution name>-transform`` on the run's artifact (unless the
  promotion's model is the same model), then ``createTransformJob.sync`` of the same name over the
  scoring prefix (:mod:`stacks.components.transform_job_spec`; ``TransformJobFailed``).

Every end publishes one message to the notification topic, then succeeds with
``{processing_job, processed_uri, tuning_job, training_job, model_uri, endpoint_config}`` (and with the
transform, ``transform_job`` and ``transform_uri``; ``null`` for skipped steps) or fails with
``Error`` = the failure's name and ``Cause`` = its reason.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from stacks.components.endpoint_spec import (
    ModelResources,
    create_endpoint_config_request,
    create_model_request,
    MAX_PROMOTION_RECORD_BYTES,
    PROMOTION_RECORD_SHAPES,
    endpoint_name,
    promotion_record_name,
    rollback_alarm_names,
    update_endpoint_request,
)
from stacks.components.processing_job_spec import (
    MAX_JOB_NAME_LENGTH,
    STATE_MACHINE_PROCESSING_VALUES,
    TRAIN_OUTPUT,
    VALIDATION_OUTPUT,
    ProcessingTemplate,
    create_processing_job_request,
    processing_launch_rules,
    processing_output_uri,
    processing_state_machine_assignments,
)
from stacks.components.request_expressions import Jsonata, no_problems, refusal_cause, render, to_jsonata
from stacks.components.training_job_spec import (
    OUTPUT_PREFIX,
    STATE_MACHINE_VALUES,
    JobTemplate,
    create_training_job_request,
    launch_rules,
    state_machine_assignments,
)
from stacks.components.tuning_job_spec import (
    TUNE_OUTPUT,
    TUNING_INPUT,
    create_tuning_job_request,
    state_machine_tuning_values,
    tuning_rules,
    tuning_state_machine_assignments,
)
from stacks.components.transform_job_spec import (
    MAX_JOB_NAME_LENGTH as MAX_TRANSFORM_JOB_NAME_LENGTH,
    TransformTemplate,
    create_transform_job_request,
    reuses_promoted_model,
    transform_job_name,
    transform_model_config,
    transform_output_uri,
)
from stacks.config import ServingConfig, TransformConfig, TuningConfig

STEPS = ("process", "train", "promote")
TRANSFORM_STEP = "transform"
TRAIN_JOB_SUFFIX = "train"
PIPELINE_PROBLEMS = "pipeline_problems"
"""The variable ``FindPipelineProblems`` assigns: the broken rules' reasons, read by ``CheckPipelineInput`` and the refusal."""

# Failure names: the pipeline's Fail state's Error.
INVALID_PIPELINE_INPUT = "InvalidPipelineInput"
OUTPUT_PREFIX_NOT_EMPTY = "OutputPrefixNotEmpty"
ENDPOINT_NOT_DEPLOYED = "EndpointNotDeployed"
PROCESSING_JOB_FAILED = "ProcessingJobFailed"
TRAINING_JOB_FAILED = "TrainingJobFailed"
TUNING_JOB_FAILED = "TuningJobFailed"
PROMOTION_FAILED = "PromotionFailed"
TRANSFORM_JOB_FAILED = "TransformJobFailed"
FAILURES = (
    INVALID_PIPELINE_INPUT,
    OUTPUT_PREFIX_NOT_EMPTY,
    ENDPOINT_NOT_DEPLOYED,
    PROCESSING_JOB_FAILED,
    TRAINING_JOB_FAILED,
    TUNING_JOB_FAILED,
    PROMOTION_FAILED,
    TRANSFORM_JOB_FAILED,
)
OUTPUT_KEYS = ("processing_job", "processed_uri", "tuning_job", "training_job", "model_uri", "endpoint_config")
TRANSFORM_OUTPUT_KEYS = ("transform_job", "transform_uri")
"""Further output keys of a pipeline with the transform step."""

ENDPOINT_MISSING_ERRORS = ("SageMaker.ValidationException", "SageMaker.SageMakerException")
"""How the ``aws-sdk`` integration names DescribeEndpoint's error for an endpoint that does not exist."""
ENDPOINT_FAILED_STATES = ("Failed", "UpdateRollbackFailed")
MODEL_FILE_SUFFIX = "/output/model.tar.gz"


def _cause_from_job(status_key: str) -> str:
    """JSONata: the failure reason of a ``.sync`` job from the task's error output.

    A job that fails or stops fails the task with ``States.TaskFailed`` and the Describe*
    response as a JSON string in ``Cause``; a refused request has a plain message there.
    """
    return (
        "{% ($c := $states.input.Cause;"
        " $j := ($type($c) = 'string' and $contains($c, /^\\s*\\{/)) ? $parse($c) : null;"
        " $type($j) = 'object' and $type($j.FailureReason) = 'string'"
        " ? $j.FailureReason & ($type($j.ExitMessage) = 'string' and $j.ExitMessage != $j.FailureReason"
        " ? ' (' & $j.ExitMessage & ')' : '')"
        f" : $type($j) = 'object' and $exists($j.{status_key}) ? 'the job ended ' & $string($j.{status_key})"
        " : $states.input.Error & ': ' & $string($c)) %}"
    )


def pipeline_input_rules(
    *, project_name: str, artifacts_bucket: str, serving: ServingConfig, transform: bool = False
) -> list[tuple[str, str]]:
    """``(JSONata condition, reason)`` of the pipeline's own input rules (the steps' options aside);
    ``transform``: the pipeline has the transform step."""
    keys = [*STEPS, TRANSFORM_STEP] if transform else list(STEPS)
    model_prefix = f"s3://{artifacts_bucket}/{OUTPUT_PREFIX}"
    model_prefix_length = f"{len('s3:///' + OUTPUT_PREFIX)} + $length({to_jsonata(artifacts_bucket)})"
    job_part = (
        f"$substring($given_model_uri, {model_prefix_length},"
        f" $length($given_model_uri) - ({model_prefix_length}) - {len(MODEL_FILE_SUFFIX)})"
    )
    rules = [
        (
            "$type($pipeline_input) = 'object'"
            f" and $count($filter($keys($pipeline_input), function($k) {{$not($k in {to_jsonata(keys)})}})) = 0"
            " and ($run_process or $run_train or $run_promote)",
            "'the input must be an object with at least one of process, train, promote (and no other keys"
            + (", but transform" if transform else "")
            + "), not ' & $string($pipeline_input)",
        ),
        (
            "$not($run_process) or $type($pipeline_input.process) = 'object'",
            "'process must be an object of processing options, not ' & $string($pipeline_input.process)",
        ),
        (
            "$not($run_train) or $type($pipeline_input.train) = 'object'",
            "'train must be an object of training options, not ' & $string($pipeline_input.train)",
        ),
        (
            "$not($exists($pipeline_input.promote)) or $type($pipeline_input.promote) = 'boolean'"
            " or ($type($pipeline_input.promote) = 'object'"
            " and $count($filter($keys($pipeline_input.promote), function($k) {$k != 'model_uri'})) = 0)",
            "'promote must be true or {\"model_uri\": ...}, not ' & $string($pipeline_input.promote)",
        ),
        (
            "$not($run_promote) or $run_train or $given_model_uri != null",
            "'promote without train needs promote.model_uri'",
        ),
        (
            "$given_model_uri = null or ($type($given_model_uri) = 'string'"
            f" and $substring($given_model_uri, 0, {model_prefix_length}) = {to_jsonata(model_prefix)}"
            f" and $substring($given_model_uri, -{len(MODEL_FILE_SUFFIX)}) = {json.dumps(MODEL_FILE_SUFFIX)}"
            f" and $contains({job_part}, /^[a-zA-Z0-9](-*[a-zA-Z0-9])*$/)"
            f" and $substring({job_part}, 0, {len(project_name) + 1}) = {json.dumps(project_name + '-')})",
            "'promote.model_uri ' & $string($given_model_uri) & ' must be "
            f"s3://<artifacts bucket>/{OUTPUT_PREFIX}{project_name}-<job>{MODEL_FILE_SUFFIX} (the only models the model role may read)'",
        ),
        (
            f"$not($run_promote) or ($length($promoted_name) <= {MAX_JOB_NAME_LENGTH}"
            " and $contains($promoted_name, /^[a-zA-Z0-9](-*[a-zA-Z0-9])*$/))",
            f"'the model and endpoint config would be named ' & $promoted_name & ': start the execution with a name of"
            f" letters, digits and hyphens that keeps it at most {MAX_JOB_NAME_LENGTH} characters'",
        ),
    ]
    if transform:
        rules += [
            (
                "$not($exists($pipeline_input.transform)) or $type($pipeline_input.transform) = 'boolean'",
                "'transform must be true or false (false skips the batch transform), not ' & $string($pipeline_input.transform)",
            ),
            (
                "$not($pipeline_input.transform = true) or $run_transform",
                "'transform needs a model: train, or promote.model_uri'",
            ),
            (
                f"$not($run_transform) or ($length($transform_job_name) <= {MAX_TRANSFORM_JOB_NAME_LENGTH}"
                " and $contains($transform_job_name, /^[a-zA-Z0-9](-*[a-zA-Z0-9])*$/))",
                "'the transform job would be named ' & $transform_job_name & ': start the execution with a name of"
                f" letters, digits and hyphens that keeps it at most {MAX_TRANSFORM_JOB_NAME_LENGTH} characters, or skip"
                " it with \"transform\": false'",
            ),
        ]
    if serving.scale_to_zero:
        rules.append(
            (
                "$not($run_promote)",
                "'serving.scale_to_zero serves the model as an inference component, which the pipeline does not promote;"
                " promote with python -m scripts.promote <job>'",
            )
        )
    return rules


def pipeline_definition(
    *,
    project_name: str,
    processing: ProcessingTemplate,
    training: JobTemplate,
    tuning: TuningConfig,
    serving: ServingConfig,
    model_resources: ModelResources | None,
    topic_arn: str,
    partition: str,
    poll_seconds: int = 60,
    transform: TransformTemplate | None = None,
    transform_config: TransformConfig | None = None,
) -> dict[str, Any]:
    """The pipeline's definition (see the module docstring).

    Args:
        project_name: Names: ``<project>-endpoint``, ``<project>-<execution>[-process|-train]``.
        processing: The processing job template (the processing role, the datasets bucket).
        training: The training job template (the training workflow's own).
        tuning: The deployed ``tuning`` section: a ``train.tuning`` step's strategy, objective and caps
            (the training workflow's Tune branch's).
        serving: The serving settings the promoted model and endpoint config are built from.
        model_resources: Role (the promoted-model role), image, key, network of promoted models
            and of the transform's model; ``None`` with ``serving.scale_to_zero`` and no transform.
            With ``serving.scale_to_zero`` the pipeline has no promotion states and refuses
            ``promote`` (an inference component is promoted with ``scripts.promote``).
        topic_arn: The notification topic every end publishes to.
        partition: AWS partition of the task resource ARNs.
        poll_seconds: Wait between two DescribeEndpoint calls during a promotion.
        transform: The transform job's template: the pipeline ends in a batch transform
            (``transform.enabled``); ``None``: no transform step.
        transform_config: The transform settings (its model's GPU count); required with ``transform``.
    """
    states_arn = f"arn:{partition}:states:::"
    endpoint = endpoint_name(project_name)
    promotes = not serving.scale_to_zero
    if (promotes or transform is not None) and model_resources is None:
        raise ValueError("a pipeline that promotes or transforms needs the models' resources")
    if transform is not None and transform_config is None:
        raise ValueError("a pipeline that transforms needs the transform settings")
    # Without promotion, the check goes straight to processing and training ends the pipeline
    # (or goes on to the transform, which also follows a promotion).
    after_promotion = "TransformRequested" if transform is not None else "NotifySuccess"
    after_check = "PromotionRequested" if promotes else "ProcessRequested"
    after_train = "PromoteRequested" if promotes else after_promotion
    states: dict[str, Any] = _input_states(
        project_name=project_name, processing=processing, training=training, tuning=tuning, serving=serving,
        next_state=after_check, transform=transform is not None,
    )
    if promotes:
        states.update(_endpoint_check_states(states_arn, endpoint, promotion_record_name(project_name)))
    states.update(_process_states(states_arn, processing))
    states.update(_train_states(states_arn, training, tuning, next_state=after_train))
    if promotes:
        assert model_resources is not None
        states.update(
            _promotion_states(
                states_arn,
                project_name=project_name,
                serving=serving,
                model_resources=model_resources,
                tags=dict(training.tags),
                poll_seconds=poll_seconds,
                next_state=after_promotion,
            )
        )
    if transform is not None:
        assert model_resources is not None and transform_config is not None
        states.update(
            _transform_states(
                states_arn,
                transform,
                model_config=transform_model_config(serving, transform_config),
                model_resources=model_resources,
                reuse_promoted=reuses_promoted_model(serving, transform_config),
            )
        )
    output_keys = OUTPUT_KEYS + (TRANSFORM_OUTPUT_KEYS if transform is not None else ())
    states.update(_end_states(states_arn, project_name=project_name, topic_arn=topic_arn, output_keys=output_keys))
    comment = "raw data -> processing job -> training (or tuning) job -> endpoint" + (" -> batch transform" if transform else "")
    return {
        "Comment": f"{project_name}: {comment}, each step optional",
        "QueryLanguage": "JSONata",
        "StartAt": "ReadPipelineInput",
        "States": states,
    }


def _fail_with(name: str, cause: str) -> dict[str, Any]:
    """A state that records the failure ``name`` with ``cause`` and goes to the failure notification."""
    return {
        "Type": "Pass",
        "Comment": f"Failure: {name}",
        "Assign": {"failure_error": name, "failure_cause": cause},
        "Next": "NotifyFailure",
    }


def _choice(condition: str, *, then: str, otherwise: str) -> dict[str, Any]:
    """A Choice state: ``then`` when the JSONata ``condition`` holds, else ``otherwise``."""
    return {"Type": "Choice", "Choices": [{"Condition": "{% " + condition + " %}", "Next": then}], "Default": otherwise}


def _catch(target: str, errors: Sequence[str] = ("States.ALL",)) -> dict[str, Any]:
    return {"ErrorEquals": list(errors), "Output": "{% $states.errorOutput %}", "Next": target}


def _sdk_cause(prefix: str) -> str:
    """JSONata: ``prefix`` and an ``aws-sdk`` task's error and cause."""
    return "{% " + json.dumps(prefix) + " & $string($states.input.Error) & ': ' & $string($states.input.Cause) %}"


def _input_states(
    *,
    project_name: str,
    processing: ProcessingTemplate,
    training: JobTemplate,
    tuning: TuningConfig,
    serving: ServingConfig,
    next_state: str,
    transform: bool = False,
) -> dict[str, Any]:
    """Read which steps run and their options, then check every option before anything runs."""
    output_uri = processing_output_uri(processing, Jsonata("$process_job_name"))
    derived_channels = (
        f"($process_code_uri != '' ? {{{json.dumps(TRAIN_OUTPUT)}: {to_jsonata(output_uri)} & '{TRAIN_OUTPUT}/'}}"
        f" : {{{json.dumps(TRAIN_OUTPUT)}: {to_jsonata(output_uri)} & '{TRAIN_OUTPUT}/',"
        f" {json.dumps(VALIDATION_OUTPUT)}: {to_jsonata(output_uri)} & '{VALIDATION_OUTPUT}/'}})"
    )
    given_train = "$pipeline_input.train"
    problems = _input_problems(
        project_name=project_name, processing=processing, training=training, tuning=tuning, serving=serving, transform=transform
    )
    assignments: dict[str, Any] = {
        "pipeline_input": "{% $states.input %}",
        "run_process": "{% $exists($states.input.process) %}",
        "run_train": "{% $exists($states.input.train) %}",
        "run_tune": f"{{% $type($states.input.train) = 'object' and $exists($states.input.train.{TUNING_INPUT}) %}}",
        "run_promote": "{% $exists($states.input.promote) and $states.input.promote != false %}",
        "given_model_uri": "{% $exists($states.input.promote.model_uri) ? $states.input.promote.model_uri : null %}",
        "promoted_name": "{% " + json.dumps(f"{project_name}-") + " & $states.context.Execution.Name %}",
        "processing_job": None,
        "processed_uri": None,
        "tuning_job": None,
        "training_job": None,
        # The tuning step's own variables (ResolveTuneOptions), null unless train.tuning is given.
        **dict.fromkeys(_TUNING_VARIABLES),
        "model_uri": "{% $exists($states.input.promote.model_uri) ? $states.input.promote.model_uri : null %}",
        "endpoint_config": None,
        # The promote step's (CheckPromotionRecord, CreateModel, DescribePromotedJob).
        **(dict.fromkeys(("promotion_record", "promoted_job", "promoted_metrics")) if not serving.scale_to_zero else {}),
        "failure_error": None,
        "failure_cause": None,
        **processing_state_machine_assignments(processing, source="$states.input.process"),
    }
    if transform:
        assignments.update(
            {
                # After every run with a model, unless the input says "transform": false.
                "run_transform": "{% $not($states.input.transform = false)"
                " and ($exists($states.input.train) or $exists($states.input.promote.model_uri)) %}",
                "transform_job_name": render(transform_job_name(project_name, Jsonata("$states.context.Execution.Name"))),
                "transform_job": None,
                "transform_uri": None,
            }
        )
    return {
        "ReadPipelineInput": {
            "Type": "Pass",
            "Comment": "Which steps run, and the processing options over the deployed defaults",
            "Assign": assignments,
            "Next": "ResolveTrainInput",
        },
        "ResolveTrainInput": {
            "Type": "Pass",
            "Comment": "Training reads the processing run's outputs unless train.channels is given",
            "Assign": {
                # Not an object (absent, or a mistake CheckPipelineInput names): the defaults.
                "train_input": "{% "
                + f"$type({given_train}) = 'object'"
                + f" ? (($run_process and $not($exists({given_train}.channels)))"
                + f" ? $merge([{given_train}, {{'channels': {derived_channels}}}]) : {given_train})"
                + " : {} %}"
            },
            "Next": "ResolveTrainOptions",
        },
        "ResolveTrainOptions": {
            "Type": "Pass",
            "Comment": "The training options over the deployed defaults (the training workflow's own rules)",
            "Assign": state_machine_assignments(training, source="$train_input", job_name_suffix=TRAIN_JOB_SUFFIX),
            "Next": "TuningRequested",
        },
        "TuningRequested": _choice("$run_tune", then="ResolveTuneOptions", otherwise="FindPipelineProblems"),
        "ResolveTuneOptions": {
            "Type": "Pass",
            "Comment": "A tuning step: the ranges and caps over the deployed tuning section, the static hyperparameters"
            " (the training workflow's Tune branch's variables)",
            "Assign": tuning_state_machine_assignments(training, tuning, source="$train_input"),
            "Next": "FindPipelineProblems",
        },
        "FindPipelineProblems": {
            "Type": "Pass",
            "Comment": "Every rule of every requested step, evaluated once: the reasons of the broken ones",
            "Assign": {PIPELINE_PROBLEMS: "{% " + problems + " %}"},
            "Next": "CheckPipelineInput",
        },
        "CheckPipelineInput": {
            "Type": "Choice",
            "Comment": "Every option of every requested step, before anything runs",
            "Choices": [{"Condition": no_problems(PIPELINE_PROBLEMS), "Next": next_state}],
            "Default": INVALID_PIPELINE_INPUT,
        },
        INVALID_PIPELINE_INPUT: _fail_with(INVALID_PIPELINE_INPUT, refusal_cause("Invalid pipeline input", PIPELINE_PROBLEMS)),
    }


def _input_problems(
    *,
    project_name: str,
    processing: ProcessingTemplate,
    training: JobTemplate,
    tuning: TuningConfig,
    serving: ServingConfig,
    transform: bool,
) -> str:
    """JSONata: the reasons of the requested steps' broken rules (``[]`` when every rule holds)."""
    pipeline_rules = pipeline_input_rules(
        project_name=project_name, artifacts_bucket=training.resources.artifacts_bucket, serving=serving, transform=transform
    )
    process_rules = processing_launch_rules(processing).rules
    train_rules = launch_rules(training).rules
    tune_rules = tuning_rules(training, tuning).rules
    def reasons(rules: Sequence[tuple[str, str]], prefix: str = "") -> str:
        return "[" + ", ".join(f"$not({c}) ? ({prefix}{r})" for c, r in rules) + "]"

    # Each step's rules are evaluated only when the step runs (one guard per step, not per rule).
    problems = reasons(pipeline_rules)
    for step, rules, prefix in (("$run_process", process_rules, ""), ("$run_train", train_rules, "'train.' & "),
                                ("$run_tune", tune_rules, "'train.' & ")):
        problems = f"$append({problems}, {step} ? {reasons(rules, prefix)} : [])"
    return problems


def _endpoint_check_states(states_arn: str, endpoint: str, record: str) -> dict[str, Any]:
    """A requested promotion first checks that the endpoint exists and the promotion record reads."""
    return {
        "PromotionRequested": _choice("$run_promote", then="CheckEndpoint", otherwise="ProcessRequested"),
        "CheckEndpoint": {
            "Type": "Task",
            "Comment": "A promotion needs the deployed endpoint: fail now, not after the jobs",
            "Resource": f"{states_arn}aws-sdk:sagemaker:describeEndpoint",
            "Arguments": {"EndpointName": endpoint},
            "Catch": [_catch(ENDPOINT_NOT_DEPLOYED, ENDPOINT_MISSING_ERRORS), _catch("EndpointCheckFailed")],
            "Next": "CheckPromotionRecord",
        },
        "CheckPromotionRecord": _read_promotion_record(
            states_arn, record, comment="The record the promotion will update must be readable: fail now, not after the jobs",
            next_state="ProcessRequested", on_error="PromotionRecordUnreadable",
        ),
        "PromotionRecordUnreadable": _fail_with(
            PROMOTION_FAILED,
            _sdk_cause(f"could not read the promotion record {record} (fix or delete the parameter; python -m scripts.promote"
                       " --show reads it): "),
        ),
        ENDPOINT_NOT_DEPLOYED: _fail_with(
            ENDPOINT_NOT_DEPLOYED,
            "{% "
            + json.dumps(f"endpoint {endpoint} is not deployed; deploy it once with python -m scripts.promote <job> (")
            + " & $string($states.input.Cause) & ')' %}",
        ),
        "EndpointCheckFailed": _fail_with(PROMOTION_FAILED, _sdk_cause(f"could not describe endpoint {endpoint}: ")),
    }


def _process_states(states_arn: str, processing: ProcessingTemplate) -> dict[str, Any]:
    """The processing step: an empty output prefix, then the processing job."""
    output_uri = processing_output_uri(processing, Jsonata("$process_job_name"))
    return {
        "ProcessRequested": _choice("$run_process", then="CheckOutputPrefix", otherwise="TrainRequested"),
        "CheckOutputPrefix": {
            "Type": "Task",
            "Comment": "Refuse to mix runs: the run's output prefix must hold nothing yet",
            "Resource": f"{states_arn}aws-sdk:s3:listObjectsV2",
            "Arguments": {
                "Bucket": processing.resources.datasets_bucket,
                "Prefix": "{% " + json.dumps(processing.output_prefix) + " & $process_job_name & '/' %}",
                "MaxKeys": 1,
            },
            "Assign": {"output_prefix_objects": "{% $states.result.KeyCount %}"},
            "Catch": [_catch("OutputPrefixCheckFailed")],
            "Next": "OutputPrefixEmpty",
        },
        "OutputPrefixCheckFailed": _fail_with(PROCESSING_JOB_FAILED, _sdk_cause("could not list the output prefix: ")),
        "OutputPrefixEmpty": _choice("$output_prefix_objects = 0", then="ProcessData", otherwise=OUTPUT_PREFIX_NOT_EMPTY),
        OUTPUT_PREFIX_NOT_EMPTY: _fail_with(
            OUTPUT_PREFIX_NOT_EMPTY,
            "{% " + to_jsonata(output_uri) + " & ' already holds objects; refusing to mix runs: choose another"
            " process.job_name (or execution name), or remove them' %}",
        ),
        "ProcessData": {
            "Type": "Task",
            "Comment": "CreateProcessingJob with the full API, then wait for the job to end",
            "Resource": f"{states_arn}sagemaker:createProcessingJob.sync",
            "Arguments": create_processing_job_request(processing, STATE_MACHINE_PROCESSING_VALUES),
            "Assign": {
                "processing_job": "{% $states.result.ProcessingJobName %}",
                "processed_uri": "{% " + to_jsonata(output_uri) + " %}",
            },
            "Output": "{% {'ProcessingJobName': $states.result.ProcessingJobName,"
            " 'ProcessingJobStatus': $states.result.ProcessingJobStatus} %}",
            "Catch": [_catch(PROCESSING_JOB_FAILED)],
            "Next": "TrainRequested",
        },
        PROCESSING_JOB_FAILED: _fail_with(PROCESSING_JOB_FAILED, _cause_from_job("ProcessingJobStatus")),
    }


def _train_states(states_arn: str, training: JobTemplate, tuning: TuningConfig, *, next_state: str) -> dict[str, Any]:
    """The training step: the training workflow's request (with ``train.tuning``, its tuning request),
    then ``next_state``."""
    return {
        "TrainRequested": {
            "Type": "Choice",
            "Choices": [
                {"Condition": "{% $run_tune %}", "Next": "TuneModel"},
                {"Condition": "{% $run_train %}", "Next": "TrainModel"},
            ],
            "Default": next_state,
        },
        "TrainModel": {
            "Type": "Task",
            "Comment": "CreateTrainingJob with the training workflow's request, then wait for the job to end",
            "Resource": f"{states_arn}sagemaker:createTrainingJob.sync",
            "Arguments": create_training_job_request(training, STATE_MACHINE_VALUES),
            "Assign": {
                "training_job": "{% $states.result.TrainingJobName %}",
                "model_uri": "{% $given_model_uri != null ? $given_model_uri : $states.result.ModelArtifacts.S3ModelArtifacts %}",
            },
            "Output": "{% {'TrainingJobName': $states.result.TrainingJobName,"
            " 'TrainingJobStatus': $states.result.TrainingJobStatus} %}",
            "Catch": [_catch(TRAINING_JOB_FAILED)],
            "Next": next_state,
        },
        TRAINING_JOB_FAILED: _fail_with(TRAINING_JOB_FAILED, _cause_from_job("TrainingJobStatus")),
        **_tune_states(states_arn, training, tuning, next_state=next_state),
    }


_TUNING_VARIABLES = ("tuning", "ranges", "max_jobs", "max_parallel_jobs")
"""The Tune branch's variables that the training launch has not (:func:`tuning_state_machine_assignments`)."""


def _tune_states(states_arn: str, training: JobTemplate, tuning: TuningConfig, *, next_state: str) -> dict[str, Any]:
    """The tuning step: the training workflow's tuning request, every trial the training step's job on the
    same channels; the best trial is the run's training job and its model the run's model."""
    request = create_tuning_job_request(training, state_machine_tuning_values(tuning))
    # Where SageMaker writes a job's model, the single job's ModelArtifacts.S3ModelArtifacts:
    # <S3OutputPath><job>/output/model.tar.gz (a trial's S3OutputPath is the definition's).
    output_path = request["TrainingJobDefinition"]["OutputDataConfig"]["S3OutputPath"]
    best = "$states.result.BestTrainingJob.TrainingJobName"
    return {
        "TuneModel": {
            "Type": "Task",
            "Comment": "CreateHyperParameterTuningJob with the training workflow's request (every trial its training job),"
            " then wait for it to end",
            "Resource": f"{states_arn}sagemaker:createHyperParameterTuningJob.sync",
            "Arguments": request,
            "Assign": {
                "tuning_job": "{% $states.result.HyperParameterTuningJobName %}",
                "training_job": "{% " + best + " %}",
                "model_uri": "{% $given_model_uri != null ? $given_model_uri : "
                + f"{to_jsonata(output_path)} & {best} & {json.dumps(MODEL_FILE_SUFFIX)} %}}",
            },
            "Output": TUNE_OUTPUT,
            "Catch": [_catch(TUNING_JOB_FAILED)],
            "Next": next_state,
        },
        TUNING_JOB_FAILED: _fail_with(TUNING_JOB_FAILED, _cause_from_job("HyperParameterTuningJobStatus")),
    }


def _promotion_states(
    states_arn: str,
    *,
    project_name: str,
    serving: ServingConfig,
    model_resources: ModelResources,
    tags: Mapping[str, str],
    poll_seconds: int,
    next_state: str = "NotifySuccess",
) -> dict[str, Any]:
    """The promote step: the serving stack's model and endpoint config, blue/green, wait for it, then ``next_state``."""
    endpoint = endpoint_name(project_name)
    promoted = Jsonata("$promoted_name")
    return {
        "PromoteRequested": _choice("$run_promote", then="CreateModel", otherwise=next_state),
        "CreateModel": {
            "Type": "Task",
            "Comment": "The serving stack's model, on this run's artifact",
            "Resource": f"{states_arn}aws-sdk:sagemaker:createModel",
            "Arguments": create_model_request(
                serving, model_resources, model_name=promoted, model_data_url=Jsonata("$model_uri"), tags=tags
            ),
            "Assign": {
                "promoted_job": "{% $given_model_uri != null ? $substringBefore($substringAfter($given_model_uri, "
                + json.dumps("/" + OUTPUT_PREFIX) + "), " + json.dumps(MODEL_FILE_SUFFIX) + ") : $training_job %}"
            },
            "Catch": [_catch("PromotionStepFailed")],
            "Next": "CreateEndpointConfig",
        },
        "CreateEndpointConfig": {
            "Type": "Task",
            "Comment": "The serving stack's endpoint config, on the new model",
            "Resource": f"{states_arn}aws-sdk:sagemaker:createEndpointConfig",
            "Arguments": create_endpoint_config_request(
                serving, model_resources, endpoint=endpoint, config_name=promoted, model_name=promoted, tags=tags
            ),
            "Assign": {"endpoint_config": "{% $promoted_name %}"},
            "Catch": [_catch("PromotionStepFailed")],
            "Next": "UpdateEndpoint",
        },
        "UpdateEndpoint": {
            "Type": "Task",
            "Comment": "Blue/green to the new config; the 5xx and latency alarms roll it back",
            "Resource": f"{states_arn}aws-sdk:sagemaker:updateEndpoint",
            "Arguments": update_endpoint_request(
                serving, endpoint=endpoint, config_name=promoted, alarm_names=rollback_alarm_names(project_name)
            ),
            "Catch": [_catch("PromotionStepFailed")],
            "Next": "WaitForEndpoint",
        },
        "PromotionStepFailed": _fail_with(PROMOTION_FAILED, _sdk_cause("")),
        **_endpoint_wait_states(states_arn, endpoint, poll_seconds, "DescribePromotedJob"),
        **_record_states(states_arn, project_name=project_name, next_state=next_state),
    }


PROMOTED_JOB = "$promoted_job"
"""The promoted model's training job: the run's, or the one ``promote.model_uri`` names."""


def _read_promotion_record(states_arn: str, record: str, *, comment: str, next_state: str, on_error: str) -> dict[str, Any]:
    """GetParameters of the promotion record into ``$promotion_record`` (``{}`` before the first
    promotion: GetParameters lists a missing name instead of failing), refusing a value that is not
    one (the checks of ``scripts.promote``'s ``PromotionRecord.from_json``)."""
    parse = (
        "($v := $states.result.Parameters[0].Value; $r := $exists($v) ? $parse($v) : {};"
        " ($type($r) = 'object'"
        " and ($not($exists($r.live)) or $r.live = null or ($type($r.live.job) = 'string' and $type($r.live.model_data_url) = 'string'))"
        " and ($not($exists($r.previous)) or $type($r.previous) = 'array')"
        " and ($not($exists($r.rolled_back)) or $type($r.rolled_back) = 'array'))"
        f" ? $r : $error({json.dumps(f'{record} is not a promotion record (an object with live, previous and rolled_back)')}))"
    )
    return {
        "Type": "Task",
        "Comment": comment,
        "Resource": f"{states_arn}aws-sdk:ssm:getParameters",
        "Arguments": {"Names": [record]},
        "Assign": {"promotion_record": "{% " + parse + " %}"},
        "Retry": [_THROTTLED],
        "Catch": [_catch(on_error)],
        "Next": next_state,
    }


_THROTTLED = {"ErrorEquals": ["Ssm.ThrottlingException", "Ssm.InternalServerErrorException"], "IntervalSeconds": 2,
              "MaxAttempts": 5, "BackoffRate": 2}


def _record_states(states_arn: str, *, project_name: str, next_state: str) -> dict[str, Any]:
    """After the endpoint serves the new config: the promotion record names the promoted job live
    (its final metrics, this execution, the time) and the one it replaced first among the previous
    ones, as ``scripts.promote``'s ``PromotionRecord.promoted`` does, re-read just before the write."""
    record = promotion_record_name(project_name)
    endpoint = endpoint_name(project_name)
    promoted = (
        "($r := $promotion_record;"
        f" $new := {{'job': {PROMOTED_JOB}, 'model_data_url': $model_uri, 'metrics': $promoted_metrics,"
        " 'promoted_by': $states.context.Execution.Id, 'promoted_at': $now('[Y0001]-[M01]-[D01]T[H01]:[m01]:[s01]+00:00')};"
        " $kept := $filter($append(($exists($r.live) and $r.live != null) ? [$r.live] : [], $r.previous),"
        " function($p) {$p.job != $new.job});"
        " $entries := function($ps, $n, $metrics) {$append([], $map($append([], $ps)[[0..$n - 1]],"
        " function($p) {$metrics ? $p : $sift($p, function($v, $k) {$k != 'metrics'})}))};"
        " $texts := [" + ", ".join(
            f"$string({{'live': $new, 'previous': $entries($kept, {previous}, {str(metrics).lower()}),"
            f" 'rolled_back': $entries($r.rolled_back, {rolled_back}, {str(metrics).lower()})}})"
            for previous, rolled_back, metrics in PROMOTION_RECORD_SHAPES
        ) + "];"
        f" $filter($texts, function($t) {{$length($t) <= {MAX_PROMOTION_RECORD_BYTES}}})[0])"
    )
    not_recorded = _fail_with(
        PROMOTION_FAILED,
        "{% "
        + json.dumps(f"endpoint {endpoint} serves ")
        + f" & $promoted_name & ' (the model of ' & {PROMOTED_JOB} & ') but the promotion record {record} was not updated ('"
        " & $string($states.input.Error) & ': ' & $string($states.input.Cause) & '): record it with python -m scripts.promote '"
        f" & {PROMOTED_JOB} & ', or the next cdk deploy serves the model the record names' %}}",
    )
    return {
        "DescribePromotedJob": {
            "Type": "Task",
            "Comment": "The promoted job's final metrics for the record (none if it cannot be described)",
            "Resource": f"{states_arn}aws-sdk:sagemaker:describeTrainingJob",
            "Arguments": {"TrainingJobName": "{% " + PROMOTED_JOB + " %}"},
            "Assign": {"promoted_metrics": "{% $merge($append([{}], $states.result.FinalMetricDataList.{MetricName: Value})) %}"},
            "Catch": [{**_catch("ReadPromotionRecord"), "Assign": {"promoted_metrics": {}}}],
            "Next": "ReadPromotionRecord",
        },
        "ReadPromotionRecord": _read_promotion_record(
            states_arn, record, comment="The record as it is now (a promotion may have happened while the jobs ran)",
            next_state="RecordPromotion", on_error="PromotionNotRecorded",
        ),
        "RecordPromotion": {
            "Type": "Task",
            "Comment": "The promoted job live, the one it replaced first among the previous ones (a new SSM version)",
            "Resource": f"{states_arn}aws-sdk:ssm:putParameter",
            "Arguments": {
                "Name": record,
                "Value": "{% " + promoted + " %}",
                "Type": "String",
                "Overwrite": True,
                "Description": f"{project_name}: the model the endpoint serves and the previously approved ones"
                " (scripts.promote, the pipeline)",
            },
            "Retry": [_THROTTLED],
            "Catch": [_catch("PromotionNotRecorded")],
            "Next": "TagPromotionRecord",
        },
        "TagPromotionRecord": {
            "Type": "Task",
            "Comment": "Tagged as the project's (a first promotion creates the parameter); the teardown audit lists it as kept",
            "Resource": f"{states_arn}aws-sdk:ssm:addTagsToResource",
            "Arguments": {"ResourceType": "Parameter", "ResourceId": record, "Tags": [{"Key": "Project", "Value": project_name}]},
            "Retry": [_THROTTLED],
            "Catch": [_catch("PromotionNotRecorded")],
            "Next": next_state,
        },
        "PromotionNotRecorded": not_recorded,
    }


def _endpoint_wait_states(states_arn: str, endpoint: str, poll_seconds: int, next_state: str) -> dict[str, Any]:
    """DescribeEndpoint every ``poll_seconds`` until it serves the new config, fails or rolls back."""
    return {
        "WaitForEndpoint": {"Type": "Wait", "Seconds": poll_seconds, "Next": "DescribeEndpoint"},
        "DescribeEndpoint": {
            "Type": "Task",
            "Resource": f"{states_arn}aws-sdk:sagemaker:describeEndpoint",
            "Arguments": {"EndpointName": endpoint},
            "Assign": {
                "endpoint_status": "{% $states.result.EndpointStatus %}",
                "endpoint_serves": "{% $states.result.EndpointConfigName %}",
                "endpoint_failure": "{% $exists($states.result.FailureReason) ? $states.result.FailureReason : '' %}",
            },
            "Retry": [{"ErrorEquals": ["States.ALL"], "IntervalSeconds": 10, "MaxAttempts": 3, "BackoffRate": 2}],
            "Catch": [_catch("PromotionStepFailed")],
            "Next": "EndpointUpdated",
        },
        "EndpointUpdated": {
            "Type": "Choice",
            "Comment": "InService on the new config: done; failed, or back on the old one: rolled back",
            "Choices": [
                {"Condition": "{% $endpoint_status = 'InService' and $endpoint_serves = $promoted_name %}", "Next": next_state},
                {
                    "Condition": "{% $endpoint_status in " + to_jsonata(list(ENDPOINT_FAILED_STATES))
                    + " or $endpoint_status = 'InService' %}",
                    "Next": PROMOTION_FAILED,
                },
            ],
            "Default": "WaitForEndpoint",
        },
        PROMOTION_FAILED: _fail_with(
            PROMOTION_FAILED,
            "{% $endpoint_status = 'InService'"
            f" ? 'endpoint {endpoint} rolled back to ' & $endpoint_serves & ' (a rollback alarm fired or the new fleet"
            " did not turn healthy)' & ($endpoint_failure != '' ? ': ' & $endpoint_failure : '')"
            f" : 'endpoint {endpoint} is ' & $endpoint_status & ': ' & $endpoint_failure %}}",
        ),
    }


def _transform_states(
    states_arn: str,
    template: TransformTemplate,
    *,
    model_config: ServingConfig,
    model_resources: ModelResources,
    reuse_promoted: bool,
) -> dict[str, Any]:
    """The transform step: the run's model (the promoted one when it is the same model), then the
    batch transform over the scoring prefix."""
    job_name = Jsonata("$transform_job_name")
    choices = [{"Condition": "{% $run_transform %}", "Next": "CreateTransformModel"}]
    model_name: Any = "{% $transform_job_name %}"
    if reuse_promoted:
        # A promoting run's model runs the transform as it is: no second model of the same artifact.
        choices.insert(0, {"Condition": "{% $run_transform and $run_promote %}", "Next": "TransformData"})
        model_name = "{% $run_promote ? $promoted_name : $transform_job_name %}"
    request = create_transform_job_request(template, job_name=job_name, model_name=Jsonata("$transform_job_name"))
    request["ModelName"] = model_name
    return {
        "TransformRequested": {"Type": "Choice", "Choices": choices, "Default": "NotifySuccess"},
        "CreateTransformModel": {
            "Type": "Task",
            "Comment": "The run's model, as the serving stack's, on the transform's instance type and without network",
            "Resource": f"{states_arn}aws-sdk:sagemaker:createModel",
            "Arguments": create_model_request(
                model_config, model_resources, model_name=job_name, model_data_url=Jsonata("$model_uri"), tags=template.tags
            ),
            "Catch": [_catch("TransformModelFailed")],
            "Next": "TransformData",
        },
        "TransformModelFailed": _fail_with(TRANSFORM_JOB_FAILED, _sdk_cause("could not create the transform's model: ")),
        "TransformData": {
            "Type": "Task",
            "Comment": "CreateTransformJob with the full API over the scoring prefix, then wait for the job to end",
            "Resource": f"{states_arn}sagemaker:createTransformJob.sync",
            "Arguments": request,
            # transform.max_runtime_seconds: a transform job has no stopping condition of its own;
            # at the timeout Step Functions stops it.
            "TimeoutSeconds": template.max_runtime_seconds,
            "Assign": {
                "transform_job": "{% $states.result.TransformJobName %}",
                "transform_uri": "{% " + to_jsonata(transform_output_uri(template, job_name)) + " %}",
            },
            "Output": "{% {'TransformJobName': $states.result.TransformJobName,"
            " 'TransformJobStatus': $states.result.TransformJobStatus} %}",
            "Catch": [_catch(TRANSFORM_JOB_FAILED)],
            "Next": "NotifySuccess",
        },
        TRANSFORM_JOB_FAILED: _fail_with(TRANSFORM_JOB_FAILED, _cause_from_job("TransformJobStatus")),
    }


def _end_states(states_arn: str, *, project_name: str, topic_arn: str, output_keys: Sequence[str] = OUTPUT_KEYS) -> dict[str, Any]:
    """Every end publishes one message to the topic, then succeeds or fails with the pipeline's reason."""
    final_output = _final_output(output_keys)
    return {
        "NotifySuccess": _notify_outcome(
            states_arn, project_name=project_name, topic_arn=topic_arn, outcome="succeeded",
            details="$string(" + final_output + ")", next_state="Succeeded",
        ),
        "Succeeded": {"Type": "Succeed", "Output": "{% " + final_output + " %}"},
        "NotifyFailure": _notify_outcome(
            states_arn, project_name=project_name, topic_arn=topic_arn, outcome="failed",
            details="$failure_error & ': ' & $string($failure_cause)", next_state="Failed",
        ),
        "Failed": {"Type": "Fail", "Error": "{% $failure_error %}", "Cause": "{% $string($failure_cause) %}"},
    }


SUBJECT_MAX_CHARS = 99
"""SNS Publish takes a Subject of less than 100 characters."""


def _notify_outcome(
    states_arn: str, *, project_name: str, topic_arn: str, outcome: str, details: str, next_state: str
) -> dict[str, Any]:
    """Publish ``<project> pipeline <execution> <outcome>: <details>`` to the topic, then go to ``next_state``.

    A lost notification changes nothing: after three tries the state goes on to ``next_state`` all the
    same, so a finished pipeline still succeeds and a failed one still fails with its own reason.
    """
    return {
        "Type": "Task",
        "Resource": f"{states_arn}sns:publish",
        "Arguments": {
            "TopicArn": topic_arn,
            # SNS refuses a Subject of 100 characters or more ("less than 100"), and the Catch below
            # would swallow that refusal: nobody notified. 99 at most.
            "Subject": "{% $substring(" + json.dumps(f"{project_name} pipeline {outcome}: ")
            + f" & $states.context.Execution.Name, 0, {SUBJECT_MAX_CHARS}) %}}",
            "Message": "{% " + json.dumps(f"{project_name} pipeline ")
            + f" & $states.context.Execution.Name & ' {outcome}: ' & " + details + " %}",
        },
        "Retry": [{"ErrorEquals": ["States.ALL"], "IntervalSeconds": 5, "MaxAttempts": 3, "BackoffRate": 2}],
        "Catch": [{"ErrorEquals": ["States.ALL"], "Next": next_state}],
        "Next": next_state,
    }


def _final_output(output_keys: Sequence[str]) -> str:
    return "{" + ", ".join(f"{json.dumps(k)}: ${k}" for k in output_keys) + "}"


def execution_input(
    *,
    process: Mapping[str, Any] | None = None,
    train: Mapping[str, Any] | None = None,
    promote: Any = None,
    transform: bool | None = None,
) -> dict[str, Any]:
    """The execution input for the requested steps (``None`` = skipped; ``transform``: ``None`` leaves
    it to the deployment, ``False`` skips it, ``True`` requires it)."""
    data: dict[str, Any] = {}
    if process is not None:
        data["process"] = dict(process)
    if train is not None:
        data["train"] = dict(train)
    if promote is not None and promote is not False:
        data["promote"] = promote
    if transform is not None:
        data[TRANSFORM_STEP] = transform
    return data
