"""Job state changes on an SNS topic that people and tools can subscribe to."""

from __future__ import annotations

from typing import Optional, Sequence

import jsii
from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.components.encryption_key import topic_key

JOB_END_STATES = ("Completed", "Failed", "Stopped")
PROJECT_TAG = "Project"
"""The tag every job of the project carries (``stacks.config.PLATFORM_TAGS``): what tells its jobs from
another project's whose name begins the same."""
EXECUTION_FAILURES = ("FAILED", "TIMED_OUT", "ABORTED")
PIPELINE_INTERRUPTIONS = ("TIMED_OUT", "ABORTED")
"""A pipeline execution that failed published its reason itself; these ends skip its last states."""


def gpu_idle_alarm_prefix(project_name: str) -> str:
    """Every job's GPU idle alarm is named ``<prefix><job name>`` (stacks.components.gpu_idle_watch)."""
    return f"{project_name}-gpu-idle-"


def job_state_rule_name(project_name: str) -> str:
    """The rule that publishes the project's ended jobs (its ``AWS/Events`` metrics count them)."""
    return f"{project_name}-training-job-state"


def gpu_idle_rule_name(project_name: str) -> str:
    """The rule that publishes the project's GPU idle alarms entering ALARM."""
    return f"{project_name}-gpu-idle-alarm"


def idle_alarm_pattern(prefix: str) -> events.EventPattern:
    """A job's GPU idle alarm (named ``<prefix><job>``) entering ALARM."""
    return events.EventPattern(
        source=["aws.cloudwatch"],
        detail_type=["CloudWatch Alarm State Change"],
        detail={"alarmName": [{"prefix": prefix}], "state": {"value": ["ALARM"]}},
    )



def project_job_state_pattern(project_name: str, statuses: Sequence[str]) -> events.EventPattern:
    """A project training job (``<project>-*``, tagged ``Project=<project>``) entering one of ``statuses``.

    The name prefix alone is not the project's: ``gputrain-`` also begins every job of project
    ``gputrain-dev`` (a legal name), whose jobs would get this project's idle alarms (and, with
    ``stop_job``, be stopped by them) and notifications. Every job the platform creates carries the
    ``Project`` tag (the job templates; a tuning job's tags go to its trials), and SageMaker's event
    carries the job's tags as a map (``detail.Tags``), so the rule takes only this project's.
    """
    return events.EventPattern(
        source=["aws.sagemaker"],
        detail_type=["SageMaker Training Job State Change"],
        detail={
            "TrainingJobStatus": list(statuses),
            "TrainingJobName": [{"prefix": f"{project_name}-"}],
            "Tags": {PROJECT_TAG: [project_name]},
        },
    )


def execution_ended_pattern(statuses: Sequence[str], state_machine_arn: str) -> events.EventPattern:
    """An execution of one state machine ending in one of ``statuses``."""
    return events.EventPattern(
        source=["aws.states"],
        detail_type=["Step Functions Execution Status Change"],
        detail={"status": list(statuses), "stateMachineArn": [state_machine_arn]},
    )

class TrainingJobNotifications(Construct):
    """An encrypted SNS topic fed by two EventBridge rules.

    - ``JobStateChange``: a project job (``<project>-*``, tagged ``Project=<project>``) completed, failed or stopped, whether
      the workflow or ``scripts.launch --direct`` started it.
    - ``WorkflowFailure``: an execution of the workflow failed, timed out or was aborted (also
      when it failed before creating a job, e.g. on invalid launch options).
    - ``PipelineInterrupted`` (with a pipeline): an execution of the pipeline timed out or was
      aborted.
    - ``GpuIdle`` (with ``gpu_idle_alarms``): a job's GPU idle alarm fired; the message is the
      alarm's description (job, threshold, minutes). The pipeline publishes its own successes and named failures (with the reason);
      these two ends never reach its last states.

    The topic has its own key: EventBridge may only publish to a topic whose key policy lets it,
    and the platform key's policy belongs to the data-plane stack. The topic and key policies
    admit ``events.amazonaws.com`` only for these two rules of this account (``aws:SourceArn``,
    ``aws:SourceAccount``: no other account's rule can use the service to publish here); the rules
    have fixed names so the key policy can name them without a reference cycle.

    Attributes:
        topic: Subscribe here (e-mail, SQS, Lambda, chat integrations).
        topic_key: The topic's KMS key (publishers need ``kms:GenerateDataKey`` on it).
        job_rule: The SageMaker job state rule.
        workflow_rule: The Step Functions execution rule.
        pipeline_rule: The pipeline's timed-out/aborted rule, or ``None`` without a pipeline.
        gpu_idle_rule: The GPU idle alarm rule, or ``None`` without ``gpu_idle_alarms``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project_name: str,
        state_machine: sfn.IStateMachine,
        email: Optional[str] = None,
        pipeline_name: Optional[str] = None,
        gpu_idle_alarms: bool = False,
    ) -> None:
        """Create the topic and rules.

        Args:
            scope: Parent construct.
            construct_id: Construct id.
            project_name: Jobs named ``<project_name>-*`` are reported.
            state_machine: The training workflow whose failed executions are reported.
            email: Subscribe this address (it must confirm). Default none.
            pipeline_name: The pipeline state machine's name, whose interrupted executions are
                reported. Default none (no pipeline).
            gpu_idle_alarms: Publish the project's GPU idle alarms entering ALARM. Default ``False``.
        """
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        rule_names = {"job": job_state_rule_name(project_name), "workflow": f"{project_name}-training-workflow-failure"}
        if pipeline_name is not None:
            rule_names["pipeline"] = f"{project_name}-pipeline-interrupted"
        if gpu_idle_alarms:
            rule_names["gpu_idle"] = gpu_idle_rule_name(project_name)
        events_from_these_rules = {
            "StringEquals": {"aws:SourceAccount": stack.account},
            "ArnEquals": {
                "aws:SourceArn": [stack.format_arn(service="events", resource="rule", resource_name=n) for n in rule_names.values()]
            },
        }
        publisher = iam.PrincipalWithConditions(iam.ServicePrincipal("events.amazonaws.com"), events_from_these_rules)
        self.topic_key = key = topic_key(self, "TopicKey", description=f"{project_name}: training job notifications topic")
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name=f"{project_name} training jobs",
            master_key=key,
            enforce_ssl=True,
        )
        if email:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        # One grant with conditions: sns:Publish in the topic policy and kms:Decrypt and
        # kms:GenerateDataKey* in the key policy (the targets below grant nothing themselves).
        self.topic.grant_publish(publisher)

        # The events' fields the messages quote (EventBridge fills them in).
        job = events.EventField.from_path("$.detail.TrainingJobName")
        status = events.EventField.from_path("$.detail.TrainingJobStatus")
        reason = events.EventField.from_path("$.detail.FailureReason")
        execution = events.EventField.from_path("$.detail.name")
        exec_status = events.EventField.from_path("$.detail.status")
        self.job_rule = self._publishing_rule(
            "JobStateChange",
            rule_names["job"],
            f"{project_name}: a training job completed, failed or stopped",
            project_job_state_pattern(project_name, JOB_END_STATES),
            f"Training job {job} is {status}. {reason}",
        )
        self.workflow_rule = self._publishing_rule(
            "WorkflowFailure",
            rule_names["workflow"],
            f"{project_name}: a training workflow execution failed, timed out or was aborted",
            execution_ended_pattern(EXECUTION_FAILURES, state_machine.state_machine_arn),
            f"Training workflow execution {execution} is {exec_status}.",
        )
        self.pipeline_rule: Optional[events.Rule] = None
        if pipeline_name is not None:
            pipeline_arn = stack.format_arn(
                service="states", resource="stateMachine", resource_name=pipeline_name, arn_format=ArnFormat.COLON_RESOURCE_NAME
            )
            self.pipeline_rule = self._publishing_rule(
                "PipelineInterrupted",
                rule_names["pipeline"],
                f"{project_name}: a pipeline execution timed out or was aborted",
                execution_ended_pattern(PIPELINE_INTERRUPTIONS, pipeline_arn),
                f"Pipeline execution {execution} is {exec_status}.",
            )
        self.gpu_idle_rule: Optional[events.Rule] = None
        if gpu_idle_alarms:
            description = events.EventField.from_path("$.detail.configuration.description")
            self.gpu_idle_rule = self._publishing_rule(
                "GpuIdle",
                rule_names["gpu_idle"],
                f"{project_name}: a training job's GPUs idled (its GPU idle alarm fired)",
                idle_alarm_pattern(gpu_idle_alarm_prefix(project_name)),
                f"GPU idle alarm: {description}",
            )

    def _publishing_rule(
        self, construct_id: str, rule_name: str, description: str, event_pattern: events.EventPattern, message: str
    ) -> events.Rule:
        """A rule that publishes ``message`` (with the event's fields filled in) to the topic."""
        return events.Rule(
            self,
            construct_id,
            rule_name=rule_name,
            description=description,
            event_pattern=event_pattern,
            targets=[_PublishTo(self.topic, events.RuleTargetInput.from_text(message))],
        )

@jsii.implements(events.IRuleTarget)
class _PublishTo:
    """A topic as a rule target, without the unconditioned grant to ``events.amazonaws.com``
    that ``aws_events_targets.SnsTopic`` adds to the topic and key policies."""

    def __init__(self, topic: sns.ITopic, message: events.RuleTargetInput) -> None:
        self._topic = topic
        self._message = message

    def bind(self, _rule: events.IRule, _id: Optional[str] = None) -> events.RuleTargetConfig:
        return events.RuleTargetConfig(arn=self._topic.topic_arn, input=self._message, target_resource=self._topic)
