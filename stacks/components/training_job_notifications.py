"""Job state changes on an SNS topic that people and tools can subscribe to."""

from __future__ import annotations

from typing import Optional

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

JOB_END_STATES = ("Completed", "Failed", "Stopped")
EXECUTION_FAILURES = ("FAILED", "TIMED_OUT", "ABORTED")


class TrainingJobNotifications(Construct):
    """An encrypted SNS topic fed by two EventBridge rules.

    - ``JobStateChange``: a project job (``<project>-*``) completed, failed or stopped, whether
      the workflow or ``scripts.launch --direct`` started it.
    - ``WorkflowFailure``: an execution of the workflow failed, timed out or was aborted (also
      when it failed before creating a job, e.g. on invalid launch options).

    The topic has its own key: EventBridge may only publish to a topic whose key policy lets it,
    and the platform key's policy belongs to the data-plane stack.

    Attributes:
        topic: Subscribe here (e-mail, SQS, Lambda, chat integrations).
        job_rule: The SageMaker job state rule.
        workflow_rule: The Step Functions execution rule.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project_name: str,
        state_machine: sfn.IStateMachine,
        email: Optional[str] = None,
    ) -> None:
        """Create the topic and rules.

        Args:
            scope: Parent construct.
            construct_id: Construct id.
            project_name: Jobs named ``<project_name>-*`` are reported.
            state_machine: The training workflow whose failed executions are reported.
            email: Subscribe this address (it must confirm). Default none.
        """
        super().__init__(scope, construct_id)
        key = kms.Key(
            self,
            "TopicKey",
            description=f"{project_name}: training job notifications topic",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.DESTROY,
            pending_window=Duration.days(7),
        )
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowEventBridgeToPublish",
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy "*" means this key
            )
        )
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name=f"{project_name} training jobs",
            master_key=key,
            enforce_ssl=True,
        )
        if email:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))

        job = events.EventField.from_path("$.detail.TrainingJobName")
        status = events.EventField.from_path("$.detail.TrainingJobStatus")
        reason = events.EventField.from_path("$.detail.FailureReason")
        self.job_rule = events.Rule(
            self,
            "JobStateChange",
            description=f"{project_name}: a training job completed, failed or stopped",
            event_pattern=events.EventPattern(
                source=["aws.sagemaker"],
                detail_type=["SageMaker Training Job State Change"],
                detail={
                    "TrainingJobStatus": list(JOB_END_STATES),
                    "TrainingJobName": [{"prefix": f"{project_name}-"}],
                },
            ),
            targets=[
                targets.SnsTopic(
                    self.topic,
                    message=events.RuleTargetInput.from_text(f"Training job {job} is {status}. {reason}"),
                )
            ],
        )
        execution = events.EventField.from_path("$.detail.name")
        exec_status = events.EventField.from_path("$.detail.status")
        self.workflow_rule = events.Rule(
            self,
            "WorkflowFailure",
            description=f"{project_name}: a training workflow execution failed, timed out or was aborted",
            event_pattern=events.EventPattern(
                source=["aws.states"],
                detail_type=["Step Functions Execution Status Change"],
                detail={"status": list(EXECUTION_FAILURES), "stateMachineArn": [state_machine.state_machine_arn]},
            ),
            targets=[
                targets.SnsTopic(
                    self.topic,
                    message=events.RuleTargetInput.from_text(
                        f"Training workflow execution {execution} is {exec_status}."
                    ),
                )
            ],
        )
