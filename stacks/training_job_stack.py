"""SageMaker training jobs declared through Step Functions (compute; no data of its own).

``cdk destroy`` cannot stop a running job, and deleting the workflow's role would leave its
jobs running unobserved. Run the pre-destroy step first (docs/teardown-and-cost.md's teardown does)::

    python -m scripts.teardown --stop-running

It stops the workflow's running executions and every in-progress ``<project>-*`` job, and waits
until they have ended.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from stacks.components.gpu_idle_watch import GpuIdleWatch
from stacks.components.operator_policy import OperatorPolicy
from stacks.components.pipeline_workflow import PipelineWorkflow, pipeline_name
from stacks.components.training_job_notifications import TrainingJobNotifications
from stacks.components.training_job_workflow import JobInfrastructure, TrainingJobWorkflow
from stacks.config import PlatformConfig
from stacks.data_plane_stack import DataPlaneStack

PRE_DESTROY_COMMAND = "python -m scripts.teardown --stop-running"


class TrainingJobStack(Stack):
    """A state machine that runs the configured SageMaker training job, the pipeline
    (processing -> training -> promotion, with ``processing.enabled``), and their notifications.

    Attributes:
        workflow: The job's role, security group and state machine.
        notifications: The topic job state changes are published to.
        gpu_idle_watch: The per-job GPU idle alarms, or ``None`` when
            ``training_job.gpu_idle_alarm.enabled`` is false.
        pipeline: The pipeline (processing role, state machine), or ``None`` when
            ``processing.enabled`` is false.
        operator_policy: The operators' managed policy (``<project>-<region>-operator``).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, config: PlatformConfig, data_plane: DataPlaneStack, **kwargs: Any
    ) -> None:
        """Build the workflow on the data plane's key, buckets, repository and network."""
        super().__init__(scope, construct_id, **kwargs)
        network = data_plane.network
        infrastructure = JobInfrastructure(
            key=data_plane.key,
            datasets_bucket=data_plane.datasets_bucket,
            artifacts_bucket=data_plane.artifacts_bucket,
            repository=data_plane.repository,
            image_tag=config.image.tag,
            network=network,
            subnet_ids=network.private_subnet_ids,
        )
        self.workflow = TrainingJobWorkflow(self, "Workflow", config=config, infrastructure=infrastructure)
        self.notifications = TrainingJobNotifications(
            self,
            "Notifications",
            project_name=config.project_name,
            state_machine=self.workflow.state_machine,
            email=config.training_job.notification_email,
            pipeline_name=pipeline_name(config.project_name) if config.processing.enabled else None,
            gpu_idle_alarms=config.training_job.gpu_idle_alarm.enabled,
        )
        self.gpu_idle_watch = None
        if config.training_job.gpu_idle_alarm.enabled:
            self.gpu_idle_watch = GpuIdleWatch(
                self, "GpuIdleWatch", project_name=config.project_name, settings=config.training_job.gpu_idle_alarm, key=data_plane.key
            )
        self.pipeline = None
        if config.processing.enabled:
            self.pipeline = PipelineWorkflow(
                self,
                "Pipeline",
                config=config,
                training=self.workflow,
                infrastructure=infrastructure,
                topic=self.notifications.topic,
                topic_key=self.notifications.topic_key,
            )
        self.operator_policy = OperatorPolicy(
            self,
            "OperatorPolicy",
            project_name=config.project_name,
            training=self.workflow.template,
            key=data_plane.key,
            artifacts_bucket=data_plane.artifacts_bucket,
            datasets_bucket=data_plane.datasets_bucket,
            processing=self.pipeline.template if self.pipeline is not None else None,
            state_machine_names=[pipeline_name(config.project_name)] if self.pipeline is not None else [],
        )
        outputs = {
            "StateMachineArn": (
                self.workflow.state_machine.state_machine_arn,
                f"Training workflow; before cdk destroy run: {PRE_DESTROY_COMMAND}",
            ),
            "JobRoleArn": (self.workflow.job_role.role_arn, "Execution role of the training jobs"),
            "JobSecurityGroupId": (self.workflow.security_group.security_group_id, "Security group of the training jobs"),
            "JobNamePrefix": (self.workflow.template.job_name_prefix, "Every training job of the project is named so"),
            "NotificationTopicArn": (self.notifications.topic.topic_arn, "Job completed/failed/stopped notifications"),
            "StateMachineLogGroup": (self.workflow.log_group.log_group_name, "Workflow execution logs"),
            "PreDestroyCommand": (PRE_DESTROY_COMMAND, "Stops running executions and jobs so destroy orphans none"),
        }
        if self.pipeline is not None:
            outputs.update(
                {
                    "PipelineStateMachineArn": (
                        self.pipeline.state_machine.state_machine_arn,
                        f"Pipeline (process -> train -> promote); before cdk destroy run: {PRE_DESTROY_COMMAND}",
                    ),
                    "ProcessingRoleArn": (self.pipeline.processing_role.role_arn, "Execution role of the processing jobs"),
                    "PipelineLogGroup": (self.pipeline.log_group.log_group_name, "Pipeline execution logs"),
                }
            )
        for name, (value, description) in outputs.items():
            CfnOutput(self, name, value=value, description=description)
