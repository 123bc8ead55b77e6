"""A CloudWatch alarm per running training job on its GPUs' utilization, created and deleted for it.

SageMaker publishes ``GPUUtilization`` for every training instance (namespace
``/aws/sagemaker/TrainingJobs``, dimension ``Host`` = ``<job>/algo-<n>``), summed over the
instance's GPUs (0-100 per GPU). A job's alarm is created when its state changes to InProgress
and deleted when it completes, fails or stops, whoever launched it (the workflow, the pipeline,
``scripts.launch --direct``): a state machine, started by an EventBridge rule on SageMaker's
job state events for ``<project>-*`` jobs tagged ``Project=<project>``, calls ``PutMetricAlarm``/``DeleteAlarms``. Per job rather
than one Metrics Insights query over all jobs because the threshold must scale with each job's
GPU count, which a query cannot, and because a query cannot select the project's jobs by name
prefix.

The alarm watches the first host: the platform's multi-host training is synchronous
(MultiWorkerMirroredStrategy), so when one host's GPUs wait, all do. Minutes without data
(waiting for spot capacity, instances starting) do not count as idle. In ALARM, the training
notifications' rule publishes to their topic; with ``stop_job``, a second rule starts the same
state machine, which stops the job.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import jsii
from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.components.log_group import encrypted_log_group
from stacks.components.policy import state_machine_logging_statements, state_machine_principal
from stacks.components.training_job_notifications import (
    JOB_END_STATES,
    PROJECT_TAG,
    gpu_idle_alarm_prefix,
    idle_alarm_pattern,
    project_job_state_pattern,
)
from stacks.components.training_job_spec import instance_facts_table
from stacks.components.training_job_workflow import acknowledge_wildcard_resources, logged_state_machine
from stacks.config import GpuIdleAlarmConfig

NAMESPACE = "/aws/sagemaker/TrainingJobs"
METRIC_NAME = "GPUUtilization"
PERIOD_SECONDS = 60


alarm_name_prefix = gpu_idle_alarm_prefix


def gpu_counts() -> dict[str, int]:
    """SageMaker GPU instance type -> GPUs, for scaling the threshold (the workflow's table)."""
    return {name: int(facts["expected_gpu_count"]) for name, facts in instance_facts_table().items()}


def put_alarm_arguments(project_name: str, settings: GpuIdleAlarmConfig) -> dict[str, Any]:
    """``PutMetricAlarm`` arguments for the job of a SageMaker job state event (JSONata)."""
    job = "$states.input.detail.TrainingJobName"
    gpus = f"($g := $lookup({json.dumps(gpu_counts())}, $states.input.detail.ResourceConfig.InstanceType); $exists($g) ? $g : 1)"
    return {
        "AlarmName": f"{{% {json.dumps(alarm_name_prefix(project_name))} & {job} %}}",
        "AlarmDescription": (
            f"{{% {json.dumps(project_name + ': the GPUs of training job ')} & {job} & "
            f"' stayed below {settings.threshold_percent}% utilization for {settings.minutes} minutes "
            f"(' & $string({gpus}) & ' GPUs per instance; python -m scripts.watch ' & {job} & ' shows why)' %}}"
        ),
        "Namespace": NAMESPACE,
        "MetricName": METRIC_NAME,
        "Dimensions": [{"Name": "Host", "Value": f"{{% {job} & '/algo-1' %}}"}],
        "Statistic": "Average",
        "Period": PERIOD_SECONDS,
        "EvaluationPeriods": settings.minutes,
        "DatapointsToAlarm": settings.minutes,
        "Threshold": f"{{% {settings.threshold_percent} * {gpus} %}}",
        "ComparisonOperator": "LessThanThreshold",
        "TreatMissingData": "notBreaching",
    }


class GpuIdleWatch(Construct):
    """Creates, deletes and (optionally) acts on the per-job GPU idle alarms of the project's jobs.

    Attributes:
        state_machine: Handles the events (``<project>-gpu-idle-watch``).
        job_rule: SageMaker job state changes of ``<project>-*`` -> the state machine.
        stop_rule: A job alarm in ALARM -> the state machine (stops the job), or ``None``
            without ``stop_job``.
        alarm_name_prefix: Every job alarm's name starts with it.
    """

    def __init__(self, scope: Construct, construct_id: str, *, project_name: str, settings: GpuIdleAlarmConfig, key: kms.IKey) -> None:
        """Create the state machine and its rules.

        Args:
            scope: Parent construct.
            construct_id: Construct id.
            project_name: Jobs named ``<project_name>-*`` are watched.
            settings: Threshold, minutes and whether to stop the job.
            key: Platform KMS key (the state machine's log group).
        """
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.alarm_name_prefix = prefix = alarm_name_prefix(project_name)
        name = f"{project_name}-gpu-idle-watch"
        definition = watch_definition(project_name, settings, stack.partition)
        log_group = encrypted_log_group(self, "Logs", key=key, log_group_name=f"/aws/vendedlogs/states/{name}")
        role = iam.Role(
            self,
            "Role",
            description=f"{project_name}: creates and deletes the GPU idle alarms of the project's training jobs",
            assumed_by=state_machine_principal(stack, name),
        )
        alarms = stack.format_arn(
            service="cloudwatch", resource="alarm", resource_name=f"{prefix}*", arn_format=ArnFormat.COLON_RESOURCE_NAME
        )
        jobs = stack.format_arn(service="sagemaker", resource="training-job", resource_name=f"{project_name}-*")
        statements = [
            iam.PolicyStatement(sid="ManageJobAlarms", actions=["cloudwatch:PutMetricAlarm", "cloudwatch:DeleteAlarms"], resources=[alarms]),
            *state_machine_logging_statements(),
        ]
        if settings.stop_job:
            # The name pattern alone also matches another project's jobs (<project>-dev-*), which carry
            # their own Project tag: those may not be stopped. ...IfExists: AWS's authorization data lists
            # aws:ResourceTag for SageMaker's training-job resource type but not in StopTrainingJob's own
            # row, so where SageMaker left it out of the request a plain StringEquals would deny every
            # stop (an idle job left billing); the rule's Project tag match keeps untagged jobs away.
            statements.append(
                iam.PolicyStatement(
                    sid="StopIdleJobs",
                    actions=["sagemaker:StopTrainingJob"],
                    resources=[jobs],
                    conditions={"StringEqualsIfExists": {f"aws:ResourceTag/{PROJECT_TAG}": project_name}},
                )
            )
        policy = iam.ManagedPolicy(self, "RolePolicy", statements=statements, roles=[role])
        acknowledge_wildcard_resources(
            policy,
            "The alarms are the project's job alarms (<prefix><job>), the jobs the project's (<project>-*): prefixes, as "
            "every job gets its own; the CloudWatch Logs delivery and X-Ray actions that Step Functions logging and "
            "tracing need support no resource-level permissions.",
            [alarms, jobs, "*"] if settings.stop_job else [alarms, "*"],
        )
        self.state_machine = logged_state_machine(
            self,
            name=name,
            comment=f"{project_name}: a GPU idle alarm per running training job" + (", stops idle jobs" if settings.stop_job else ""),
            query_language=sfn.QueryLanguage.JSONATA,
            definition_body=sfn.DefinitionBody.from_string(json.dumps(definition)),
            role=role,
            policy=policy,
            log_group=log_group,
        )

        rule_names = [f"{project_name}-gpu-idle-watch-jobs"] + ([f"{project_name}-gpu-idle-stop"] if settings.stop_job else [])
        start = _StartExecutionRole(self, "EventsRole", project_name, self.state_machine, rule_names)
        self.job_rule = events.Rule(
            self,
            "JobStateChange",
            rule_name=rule_names[0],
            description=f"{project_name}: a training job started or ended: create or delete its GPU idle alarm",
            event_pattern=project_job_state_pattern(project_name, ["InProgress", *JOB_END_STATES]),
            targets=[start],
        )
        self.stop_rule: Optional[events.Rule] = None
        if settings.stop_job:
            self.stop_rule = events.Rule(
                self,
                "StopIdleJob",
                rule_name=rule_names[1],
                description=f"{project_name}: a training job's GPU idle alarm fired: stop the job",
                event_pattern=idle_alarm_pattern(prefix),
                targets=[start],
            )



def watch_definition(project_name: str, settings: GpuIdleAlarmConfig, partition: str = "aws") -> dict[str, Any]:
    """The state machine (JSONata): route the event; put, delete the job's alarm, or stop the job."""
    states_arn = f"arn:{partition}:states:::aws-sdk:"
    prefix = json.dumps(alarm_name_prefix(project_name))
    detail = "$states.input.detail"
    routes = [
        {"Condition": f"{{% $states.input.source = 'aws.sagemaker' and {detail}.TrainingJobStatus = 'InProgress' %}}", "Next": "WatchJob"},
        {"Condition": f"{{% $states.input.source = 'aws.sagemaker' and {detail}.TrainingJobStatus in {json.dumps(list(JOB_END_STATES))} %}}", "Next": "UnwatchJob"},
    ]
    states: dict[str, Any] = {
        "Route": {"Type": "Choice", "Comment": "A job started or ended, or (with stop_job) its alarm fired", "Choices": routes, "Default": "Ignore"},
        "WatchJob": {
            "Type": "Task",
            "Comment": "The job's alarm (PutMetricAlarm replaces it on a later InProgress event)",
            "Resource": f"{states_arn}cloudwatch:putMetricAlarm",
            "Arguments": put_alarm_arguments(project_name, settings),
            "End": True,
        },
        "UnwatchJob": {
            "Type": "Task",
            "Comment": "The job ended: its alarm goes (deleting an alarm that is not there is no error)",
            "Resource": f"{states_arn}cloudwatch:deleteAlarms",
            "Arguments": {"AlarmNames": [f"{{% {prefix} & {detail}.TrainingJobName %}}"]},
            "End": True,
        },
        "Ignore": {"Type": "Succeed", "Comment": "An event this machine does not act on"},
    }
    if settings.stop_job:
        routes.append(
            {
                "Condition": f"{{% $states.input.source = 'aws.cloudwatch' and {detail}.state.value = 'ALARM' and $substring({detail}.alarmName, 0, {len(alarm_name_prefix(project_name))}) = {prefix} %}}",
                "Next": "StopIdleJob",
            }
        )
        states["StopIdleJob"] = {
            "Type": "Task",
            "Comment": "stop_job: the GPUs idled for the configured minutes; the job's checkpoints stay",
            "Resource": f"{states_arn}sagemaker:stopTrainingJob",
            "Arguments": {"TrainingJobName": f"{{% $substringAfter({detail}.alarmName, {prefix}) %}}"},
            # The job ended meanwhile: nothing to stop.
            "Catch": [{"ErrorEquals": ["SageMaker.ValidationException"], "Next": "AlreadyEnded"}],
            "End": True,
        }
        states["AlreadyEnded"] = {"Type": "Succeed", "Comment": "The job had ended before the stop"}
    return {"Comment": f"{project_name}: GPU idle alarms of the project's training jobs", "QueryLanguage": "JSONata", "StartAt": "Route", "States": states}


@jsii.implements(events.IRuleTarget)
class _StartExecutionRole:
    """The state machine as a rule target, through a role with a managed policy.

    ``aws_events_targets.SfnStateMachine`` grants ``states:StartExecution`` as an inline policy
    (NIST.800.53.R5-IAMNoInlinePolicy); this role holds it in a customer-managed policy, and only
    EventBridge acting for this account's named rules may assume it.
    """

    def __init__(self, scope: Construct, construct_id: str, project_name: str, machine: sfn.IStateMachine, rule_names: list[str]) -> None:
        stack = Stack.of(scope)
        self._machine = machine
        self.role = iam.Role(
            scope,
            construct_id,
            description=f"{project_name}: EventBridge starts the GPU idle watch",
            assumed_by=iam.ServicePrincipal(
                "events.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnEquals": {"aws:SourceArn": [stack.format_arn(service="events", resource="rule", resource_name=n) for n in rule_names]},
                },
            ),
        )
        iam.ManagedPolicy(
            scope,
            f"{construct_id}Policy",
            statements=[iam.PolicyStatement(sid="StartWatch", actions=["states:StartExecution"], resources=[machine.state_machine_arn])],
            roles=[self.role],
        )

    def bind(self, _rule: events.IRule, _id: Optional[str] = None) -> events.RuleTargetConfig:
        return events.RuleTargetConfig(arn=self._machine.state_machine_arn, role=self.role)
