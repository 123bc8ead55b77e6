"""Workarounds for gaps in moto's emulation, applied to the in-process moto server only.

Every patch here fills a hole in the *emulator* so the real templates deploy and destroy as
they would on AWS. None of them changes a stack: if a template needs something moto lacks,
the fix goes here, with the gap it covers named next to it. Every patch goes through
:data:`~scripts.emulator.patching.PATCHES`, so stopping the emulator gives the process moto as
shipped again.
"""

from __future__ import annotations

import copy
import json
import logging
import uuid
from typing import Any

from scripts.emulator.patching import PATCHES

log = logging.getLogger(__name__)

def apply_all() -> None:
    """Install every workaround (undone by ``PATCHES.revert()``, which ``Emulator.stop`` calls)."""
    _kms_key_from_template()
    _flow_log_s3_prefix()
    _route_table_deletes()
    _change_set_outputs()
    _change_set_stack_tags()
    _change_sets_per_stack()
    _update_keeps_resolved_ssm_parameters()
    _update_reaches_the_endpoint_of_a_replaced_config()
    _get_stack_output()
    _iam_deletes()
    _non_empty_bucket_delete_fails()
    _bucket_versioning_and_public_access_block()
    _training_jobs_wait_for_a_runner()
    _processing_jobs_wait_for_a_runner()
    _jobs_without_a_runner_fail()
    _tuning_job_trials()
    _stop_jobs()
    _warm_pools()
    _untagged_resources_list_no_tags()
    _validate_images_and_instance_types()
    _hosting_instance_types()
    _endpoint_names_from_template()
    _endpoint_invocations()
    _update_endpoint()
    _executions_run_locally()
    _simulate_principal_policy()
    _placement_groups()
    _commands_wait_for_a_runner()


def _kms_key_from_template() -> None:
    # Gap 1: moto's AWS::KMS::Key handler passes CloudFormation's {Key, Value} tags to the KMS
    # tagger, which expects KMS's {TagKey, TagValue}; every tagged key fails with KeyError.
    # Gap 2: it stores the KeyPolicy object as given (a dict), while the KMS API layer parses
    # the stored policy as a JSON string, so DescribeKey on such a key fails with a 500.
    from moto.kms.models import Key

    original = Key.create_from_cloudformation_json.__func__  # type: ignore[attr-defined]

    def create(cls: Any, resource_name: str, cfn: dict[str, Any], account_id: str, region_name: str, **kw: Any) -> Any:
        props = cfn.setdefault("Properties", {})
        props["Tags"] = [
            {"TagKey": t.get("Key", t.get("TagKey")), "TagValue": t.get("Value", t.get("TagValue"))}
            for t in props.get("Tags", [])
        ]
        if isinstance(props.get("KeyPolicy"), dict):
            props["KeyPolicy"] = json.dumps(props["KeyPolicy"])
        return original(cls, resource_name, cfn, account_id, region_name, **kw)

    PATCHES.set(Key, "create_from_cloudformation_json", classmethod(create))


def _flow_log_s3_prefix() -> None:
    # Gap (delete): moto's AWS::EC2::FlowLog has no delete handler, so destroying the stack
    # leaves the flow log (tagged with the project) behind after its VPC is gone.
    # Gap (create): moto checks an S3 flow-log destination by looking up everything after the ARN's
    # last colon as a bucket name, so `arn:aws:s3:::bucket/prefix/` (valid on AWS) is "missing"
    # and the resource handler crashes on an empty result. Create it against the bare bucket
    # ARN, then record the real destination.
    from moto.ec2.models.flow_logs import FlowLogs

    original = FlowLogs.create_from_cloudformation_json.__func__  # type: ignore[attr-defined]

    def create(cls: Any, resource_name: str, cfn: dict[str, Any], account_id: str, region_name: str, **kw: Any) -> Any:
        props = cfn.get("Properties", {})
        destination = props.get("LogDestination")
        if props.get("LogDestinationType") == "s3" and destination and "/" in destination.split(":", 5)[-1]:
            props = dict(props, LogDestination=destination.split("/", 1)[0])
            flow_log = original(cls, resource_name, dict(cfn, Properties=props), account_id, region_name, **kw)
            flow_log.log_destination = destination
            return flow_log
        return original(cls, resource_name, cfn, account_id, region_name, **kw)

    PATCHES.set(FlowLogs, "create_from_cloudformation_json", classmethod(create))

    def delete(self: Any, account_id: str, region_name: str) -> None:
        from moto.ec2.models import ec2_backends

        ec2_backends[account_id][region_name].delete_flow_logs([self.id])

    PATCHES.set(FlowLogs, "delete", delete)


def _route_table_deletes() -> None:
    # Gap: moto's CloudFormation has no delete for AWS::EC2::RouteTable or
    # AWS::EC2::SubnetRouteTableAssociation, so deleting any stack with a VPC fails on them
    # (and then on the subnets and VPC that still have them). Supply the deletes.
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.route_tables import RouteTable
    from moto.ec2.models.subnets import SubnetRouteTableAssociation

    def delete_route_table(self: Any, account_id: str, region_name: str) -> None:
        ec2_backends[account_id][region_name].delete_route_table(self.id)

    def delete_association(self: Any, account_id: str, region_name: str) -> None:
        backend = ec2_backends[account_id][region_name]
        backend.subnet_associations.pop(f"{self.route_table_id}:{self.subnet_id}", None)

    PATCHES.set(RouteTable, "delete", delete_route_table)
    PATCHES.set(SubnetRouteTableAssociation, "delete", delete_association)


def _change_set_outputs() -> None:
    # Gap: a stack created or updated through a change set (how the CDK CLI deploys) keeps the
    # outputs and exports of the template it had before: moto builds them when the stack object
    # is made (empty template on create) and never again, and a stack made for a change set
    # cannot see other stacks' exports. DescribeStacks then shows no outputs, Fn::ImportValue
    # fails, and the stack's delete trips over exports that were never registered. Give the
    # stack the region's exports before the change set runs; rebuild and register its outputs
    # after.
    from moto.cloudformation.models import CloudFormationBackend

    original = CloudFormationBackend.execute_change_set

    def execute_change_set(self: Any, change_set_name: str, stack_name: str | None = None) -> None:
        change_set = self.change_sets.get(change_set_name) or next(
            (cs for cs in self.change_sets.values() if cs.change_set_name == change_set_name), None
        )
        if change_set is not None:
            stack = self.stacks[change_set.stack_id]
            stack.cross_stack_resources = self.exports
            stack.resource_map.cross_stack_resources = self.exports
        original(self, change_set_name, stack_name)
        if change_set is None:
            return
        for name in [n for n, e in self.exports.items() if e.exporting_stack_id == stack.stack_id]:
            del self.exports[name]
        stack._parse_template()
        stack.description = stack.template_dict.get("Description")
        stack.output_map = stack._create_output_map()
        self._validate_export_uniqueness(stack)
        for export in stack.exports:
            self.exports[export.name] = export

    PATCHES.set(CloudFormationBackend, "execute_change_set", execute_change_set)


def _change_set_stack_tags() -> None:
    # Gap: CloudFormation tags what a stack creates with aws:cloudformation:stack-name, -stack-id
    # and -logical-id; moto does so only for a stack made by CreateStack, not through a change set
    # (how the CDK CLI deploys), so the cluster's instances carried none and a Run Command whose
    # target is tag:aws:cloudformation:stack-name (scripts.cluster_job) selected no node. Tag the
    # EC2 resources of the stack after its change set ran, as create does.
    from moto.cloudformation.models import CloudFormationBackend
    from moto.ec2 import models as ec2_models
    from moto.ec2.models.core import TaggedEC2Resource

    original = CloudFormationBackend.execute_change_set

    def execute_change_set(self: Any, change_set_name: str, stack_name: str | None = None) -> None:
        original(self, change_set_name, stack_name)
        change_set = self.change_sets.get(change_set_name) or next(
            (cs for cs in self.change_sets.values() if cs.change_set_name == change_set_name), None
        )
        stack = self.stacks.get(change_set.stack_id) if change_set is not None else None
        if stack is None:
            return
        backend = ec2_models.ec2_backends[self.account_id][self.region_name]
        tags = {**(stack.tags or {}), "aws:cloudformation:stack-name": stack.name, "aws:cloudformation:stack-id": stack.stack_id}
        for logical_id, resource in list(stack.resource_map._parsed_resources.items()):
            if isinstance(resource, TaggedEC2Resource):
                backend.create_tags([resource.physical_resource_id], {**tags, "aws:cloudformation:logical-id": logical_id})

    PATCHES.set(CloudFormationBackend, "execute_change_set", execute_change_set)


def _change_sets_per_stack() -> None:
    # Gap: moto keeps a region's change sets in one dict and finds them by name alone, ignoring
    # StackName. The CDK CLI names every stack's change set cdk-deploy-change-set, so when it
    # redeploys a stack (scripts.promote's second deploy of the serving stack) its DeleteChangeSet
    # deletes another stack's, DescribeChangeSet keeps answering with the old one, and the CLI waits
    # forever for it to be gone; a change set that does not exist is a ValidationError instead of
    # ChangeSetNotFound (which the CLI takes as "gone"). Resolve the name within the stack named.
    from moto.cloudformation.exceptions import CloudFormationError
    from moto.cloudformation.responses import CloudFormationResponse
    from moto.core.responses import ActionResult, EmptyResult

    class ChangeSetNotFound(CloudFormationError):
        code = "ChangeSetNotFound"
        status_code = 404

    def key(response: Any) -> str:
        backend = response.cloudformation_backend
        name, stack = response._get_param("ChangeSetName"), response._get_param("StackName")
        if name in backend.change_sets:  # an ARN
            return str(name)
        matches = [
            arn for arn, cs in backend.change_sets.items()
            if cs.change_set_name == name and (not stack or stack in (cs.stack_name, cs.stack_id))
        ]  # fmt: skip
        if not matches:
            raise ChangeSetNotFound(f"ChangeSet [{name}] does not exist")
        return matches[-1]

    def describe_change_set(self: Any) -> Any:
        return ActionResult(self.cloudformation_backend.change_sets[key(self)])

    def delete_change_set(self: Any) -> Any:
        # The CLI deletes cdk-deploy-change-set before every deploy, whether the stack has one or
        # not: deleting one that is not there succeeds.
        try:
            del self.cloudformation_backend.change_sets[key(self)]
        except ChangeSetNotFound:
            pass
        return EmptyResult()

    def execute_change_set(self: Any) -> Any:
        self.cloudformation_backend.execute_change_set(change_set_name=key(self), stack_name=self._get_param("StackName"))
        return EmptyResult()

    PATCHES.set(CloudFormationResponse, "describe_change_set", describe_change_set)
    PATCHES.set(CloudFormationResponse, "delete_change_set", delete_change_set)
    PATCHES.set(CloudFormationResponse, "execute_change_set", execute_change_set)


def _update_keeps_resolved_ssm_parameters() -> None:
    # Gap: on a stack update moto resolves AWS::SSM::Parameter::Value<...> parameters again from
    # the values the stack already holds, which are the resolved values (the CDK CLI passes
    # UsePreviousValue for BootstrapVersion), not parameter names: get_parameter("30") is None and
    # the update is a 500. A value that names no parameter and is not a path stays as it is.
    from moto.cloudformation.parsing import ResourceMap
    from moto.ssm.models import ssm_backends

    original = ResourceMap.parse_ssm_parameter

    def parse_ssm_parameter(self: Any, value: str, value_type: str) -> Any:
        backend = ssm_backends[self._account_id][self._region_name]
        if not str(value).startswith("/") and backend.get_parameter(value) is None:
            return value
        return original(self, value, value_type)

    PATCHES.set(ResourceMap, "parse_ssm_parameter", parse_ssm_parameter)


def _referenced_logical_ids(value: Any) -> set[str]:
    """Logical ids a template fragment names through ``Ref`` or ``Fn::GetAtt``."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "Ref" and isinstance(item, str):
                found.add(item)
            elif key == "Fn::GetAtt":
                target = item[0] if isinstance(item, list) else str(item).split(".", 1)[0]
                found.add(target)
            else:
                found |= _referenced_logical_ids(item)
    elif isinstance(value, list):
        for item in value:
            found |= _referenced_logical_ids(item)
    return found


REPLACED_WITH_WHAT_THEY_NAME = ("AWS::SageMaker::EndpointConfig", "AWS::SageMaker::Endpoint")


def _update_reaches_the_endpoint_of_a_replaced_config() -> None:
    # Gap: moto updates only resources whose template JSON changed. A new model data URL replaces
    # the AWS::SageMaker::Model (a new name), so CloudFormation replaces the ::EndpointConfig that
    # names it and updates the ::Endpoint to that config; their JSON (Fn::GetAtt of the same
    # logical ids) is unchanged, so moto left the endpoint on the old config and model
    # (scripts.promote's redeploy of the serving stack). A config or endpoint that names a modified
    # resource is modified too, after it (the list is processed in order).
    from moto.cloudformation.parsing import ResourceMap

    original = ResourceMap.build_resource_diff

    def build_resource_diff(self: Any, other_template: dict[str, Any], parameters: Any = None) -> dict[str, Any]:
        actions = original(self, other_template, parameters)
        new = other_template["Resources"]
        changed = set(actions["Modify"]) | set(actions["Add"])
        grew = True
        while grew:  # a model's config, then that config's endpoint: appended in that order
            grew = False
            for name, resource in new.items():
                if (
                    resource.get("Type") in REPLACED_WITH_WHAT_THEY_NAME
                    and name in self._resource_json_map
                    and name not in changed
                    and _referenced_logical_ids(resource.get("Properties", {})) & changed
                ):
                    actions["Modify"].append(name)
                    changed.add(name)
                    grew = True
        return actions

    PATCHES.set(ResourceMap, "build_resource_diff", build_resource_diff)

    # Gap: moto "replaces" a changed Model or EndpointConfig under the name it had (it deletes and
    # creates it again), so the endpoint's config name never changes and nothing can tell the new
    # model from the old by name; CloudFormation's replacement gets a new physical name.
    from moto.sagemaker.models import FakeEndpointConfig, Model

    for cls, attribute in ((FakeEndpointConfig, "endpoint_config_name"), (Model, "model_name")):
        PATCHES.set(cls, "update_from_cloudformation_json", _replaced_under_a_new_name(cls, attribute))


def _replaced_under_a_new_name(cls: Any, attribute: str) -> Any:
    original = cls.update_from_cloudformation_json.__func__

    def update(
        klass: Any, original_resource: Any, new_resource_name: str, cloudformation_json: Any, account_id: str, region_name: str
    ) -> Any:
        if new_resource_name == getattr(original_resource, attribute, None):
            new_resource_name = f"{new_resource_name.rsplit('-', 1)[0]}-{uuid.uuid4().hex[:12].upper()}"
        return original(klass, original_resource, new_resource_name, cloudformation_json, account_id, region_name)

    return classmethod(update)


def _training_jobs_wait_for_a_runner() -> None:
    # Gap: moto runs no training. CreateTrainingJob returns a job that is already "Completed",
    # with made-up metrics, a made-up metric definition in place of the requested ones, a model
    # artifact that was never written, and the request's Environment dropped. Here a new job
    # stays InProgress (secondary status Starting) with what was asked for, until the local
    # runner (scripts.emulator.sagemaker) plays SageMaker and records the outcome.
    from moto.core.utils import utcnow
    from moto.sagemaker.models import SageMakerModelBackend
    from moto.sagemaker.responses import SageMakerResponse

    original_create = SageMakerModelBackend.create_training_job

    def create_training_job(self: Any, **kwargs: Any) -> Any:
        requested = copy.deepcopy(kwargs.get("algorithm_specification") or {})
        job = original_create(self, **kwargs)
        now = utcnow()
        job.algorithm_specification = requested
        job.training_job_status = "InProgress"
        job.secondary_status = "Starting"
        job.secondary_status_transitions = [
            {"Status": "Starting", "StartTime": now, "StatusMessage": "Waiting for the local runner (emulator)"}
        ]
        job.final_metric_data_list = None
        job.model_artifacts = None
        job.training_start_time = None
        job.training_end_time = None
        return job

    PATCHES.set(SageMakerModelBackend, "create_training_job", create_training_job)

    original_response = SageMakerResponse.create_training_job

    def create_training_job_response(self: Any) -> Any:
        result = original_response(self)
        job = self.sagemaker_backend.training_jobs[self._get_param("TrainingJobName")]
        # Attributes become DescribeTrainingJob fields (moto camel-cases __dict__), as on AWS.
        job.environment = self._get_param("Environment") or {}
        retry = self._get_param("RetryStrategy")
        if retry:
            job.retry_strategy = retry
        return result

    PATCHES.set(SageMakerResponse, "create_training_job", create_training_job_response)


def _processing_jobs_wait_for_a_runner() -> None:
    # Gap: moto runs no processing. CreateProcessingJob returns a job that is already
    # "Completed" (with an end time at creation), and drops the request's ProcessingResources,
    # Environment and any output it cannot map. Here a new job stays InProgress with the whole
    # request, so DescribeProcessingJob reads as on AWS, until the local runner
    # (scripts.emulator.sagemaker) plays SageMaker Processing and records the outcome.
    from moto.sagemaker.responses import SageMakerResponse

    original_response = SageMakerResponse.create_processing_job

    def create_processing_job_response(self: Any) -> Any:
        result = original_response(self)
        job = self.sagemaker_backend.processing_jobs[self._get_param("ProcessingJobName")]
        job.processing_job_status = "InProgress"
        job.processing_end_time = None
        # Attributes become DescribeProcessingJob fields (moto camel-cases __dict__), as on AWS.
        job.processing_resources = self._get_param("ProcessingResources")
        job.environment = self._get_param("Environment") or None
        job.app_specification = self._get_param("AppSpecification")
        job.processing_inputs = self._get_param("ProcessingInputs")
        job.processing_output_config = self._get_param("ProcessingOutputConfig")
        job.network_config = self._get_param("NetworkConfig")
        job.stopping_condition = self._get_param("StoppingCondition")
        return result

    PATCHES.set(SageMakerResponse, "create_processing_job", create_processing_job_response)


LOCAL_RUNNERS: set[str] = set()
"""Job kinds a local runner now plays (``"transform job"``, registered by ``LocalSageMaker.start``):
a new job of such a kind is left InProgress for it, not failed with :data:`NO_RUNNER`."""

NO_RUNNER = "The emulator has no local runner for {kind}s: nothing ran (run this {kind} on AWS)."
"""FailureReason of a job kind the emulator cannot run (its ``{kind}`` is e.g. "transform job")."""


def _jobs_without_a_runner_fail() -> None:
    # Gap: moto answers CreateTransformJob, CreateCompilationJob and
    # CreateHyperParameterTuningJob with a job that is already Completed (a tuning job even with
    # a made-up best training job), though it ran nothing. The emulator has no runner for these
    # kinds, so each new one is Failed with a FailureReason saying so: a client that waits (the
    # SDK's Transformer, tuner, compile) ends with that line, never with a result nobody made.
    # Transform and tuning jobs have a runner while LocalSageMaker watches
    # (scripts.emulator.transform, scripts.emulator.tuning): then a new one stays InProgress for it.
    from moto.sagemaker.responses import SageMakerResponse

    def failing(method: str, jobs: str, name_param: str, kind: str, fail: Any, pick_up: Any = None) -> None:
        original = getattr(SageMakerResponse, method)

        def create(self: Any) -> Any:
            result = original(self)
            job = getattr(self.sagemaker_backend, jobs)[self._get_param(name_param)]
            if pick_up is not None and kind in LOCAL_RUNNERS:
                pick_up(job)
                return result
            fail(job)
            job.failure_reason = NO_RUNNER.format(kind=kind)
            return result

        PATCHES.set(SageMakerResponse, method, create)

    def transform(job: Any) -> None:
        job.transform_job_status = "Failed"

    def transform_in_progress(job: Any) -> None:
        job.transform_job_status, job.transform_end_time = "InProgress", None

    def tuning_in_progress(job: Any) -> None:
        job.hyper_parameter_tuning_job_status, job.hyper_parameter_tuning_end_time = "InProgress", None
        job.training_job_status_counters = {key: 0 for key in job.training_job_status_counters}
        job.objective_status_counters = {key: 0 for key in job.objective_status_counters}
        job.best_training_job = job.OverallBestTrainingJob = None
        job.tuning_job_completion_details, job.consumed_resources, job.local_trials = {}, {}, []

    def compilation(job: Any) -> None:
        job.compilation_job_status = "FAILED"

    def tuning(job: Any) -> None:
        job.hyper_parameter_tuning_job_status = "Failed"
        job.training_job_status_counters = {**job.training_job_status_counters, "Completed": 0}
        job.objective_status_counters = {**job.objective_status_counters, "Succeeded": 0}
        job.best_training_job = None
        job.OverallBestTrainingJob = None

    failing("create_transform_job", "transform_jobs", "TransformJobName", "transform job", transform, transform_in_progress)
    failing("create_compilation_job", "compilation_jobs", "CompilationJobName", "compilation job", compilation)
    failing("create_hyper_parameter_tuning_job", "hyper_parameter_tuning_jobs", "HyperParameterTuningJobName",
            "hyper-parameter tuning job", tuning, tuning_in_progress)


def _tuning_job_trials() -> None:
    # Gap: moto has no ListTrainingJobsForHyperParameterTuningJob (the SDK's tuner.analytics()
    # reads it). It answers from the trials the local tuner recorded (scripts.emulator.tuning):
    # none for a tuning job no runner played.
    from moto.core.responses import ActionResult
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.responses import SageMakerResponse

    def list_training_jobs_for_hyper_parameter_tuning_job(self: Any) -> Any:
        name = self._get_param("HyperParameterTuningJobName")
        jobs = self.sagemaker_backend.hyper_parameter_tuning_jobs
        if name not in jobs:
            raise ValidationError(message=f"Amazon SageMaker can't find a tuning job with name {name}")
        trials = list(getattr(jobs[name], "local_trials", []))
        if self._get_param("StatusEquals"):
            trials = [t for t in trials if t["TrainingJobStatus"] == self._get_param("StatusEquals")]
        sort_by = self._get_param("SortBy") or "CreationTime"
        def key(trial: dict[str, Any]) -> Any:
            if sort_by == "FinalObjectiveMetricValue":
                return (trial.get("FinalHyperParameterTuningJobObjectiveMetric") or {}).get("Value", float("-inf"))
            return trial.get({"Name": "TrainingJobName", "Status": "TrainingJobStatus"}.get(sort_by, "CreationTime"))
        trials.sort(key=key, reverse=(self._get_param("SortOrder") or "Descending") == "Descending")
        start = int(self._get_param("NextToken") or 0)
        size = int(self._get_param("MaxResults") or 100)
        page: dict[str, Any] = {"TrainingJobSummaries": trials[start : start + size]}
        if start + size < len(trials):
            page["NextToken"] = str(start + size)
        return ActionResult(page)

    PATCHES.set(SageMakerResponse, "list_training_jobs_for_hyper_parameter_tuning_job", list_training_jobs_for_hyper_parameter_tuning_job)


def _stop_jobs() -> None:
    # Gap: moto has no StopTrainingJob ("not yet implemented"), and its StopProcessingJob marks a
    # job Stopped at once while nothing stops (and the local runner would then overwrite the
    # status). On SageMaker a stop turns an InProgress job Stopping; the instances get SIGTERM and
    # the job ends Stopped; stopping a job that has ended is a ValidationException. Here the job
    # turns Stopping and the local runner (scripts.emulator.sagemaker) ends its container and
    # records Stopped.
    from moto.core.responses import EmptyResult
    from moto.core.utils import utcnow
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.responses import SageMakerResponse

    def refuse_unless_in_progress(kind: str, status: str) -> None:
        # SageMaker stops only an InProgress job; one that has ended (or is stopping) is a ValidationException.
        if status != "InProgress":
            raise ValidationError(message=f"The request was rejected because the {kind} job is in status {status}.")

    def begin_stop(self: Any, kind: str, name_param: str, describe: str, jobs: str, status_attribute: str) -> tuple[str, Any, Any]:
        # The request's job (ValidationError when it does not exist), refused unless InProgress, now Stopping.
        name = self._get_param(name_param)
        getattr(self.sagemaker_backend, describe)(name)
        job = getattr(self.sagemaker_backend, jobs)[name]
        refuse_unless_in_progress(kind, getattr(job, status_attribute))
        setattr(job, status_attribute, "Stopping")
        job.last_modified_time = now = utcnow()
        return name, job, now

    def stop_training_job(self: Any) -> Any:
        _, job, now = begin_stop(self, "training", "TrainingJobName", "describe_training_job", "training_jobs", "training_job_status")
        transitions = list(job.secondary_status_transitions or [])
        if transitions and "EndTime" not in transitions[-1]:
            transitions[-1] = {**transitions[-1], "EndTime": now}
        job.secondary_status_transitions = [*transitions, {"Status": "Stopping", "StartTime": now, "StatusMessage": "Stopping the job (StopTrainingJob)"}]
        job.secondary_status = "Stopping"
        return EmptyResult()

    def stop_processing_job(self: Any) -> Any:
        begin_stop(self, "processing", "ProcessingJobName", "describe_processing_job", "processing_jobs", "processing_job_status")
        return EmptyResult()

    def stop_hyper_parameter_tuning_job(self: Any) -> Any:
        # Gap: moto has no StopHyperParameterTuningJob. On SageMaker the tuning job turns Stopping,
        # its running trials are stopped, no new trial starts, and it ends Stopped.
        import re

        name, _, now = begin_stop(
            self, "hyper-parameter tuning", "HyperParameterTuningJobName", "describe_hyper_parameter_tuning_job",
            "hyper_parameter_tuning_jobs", "hyper_parameter_tuning_job_status",
        )  # fmt: skip
        trial = re.compile(rf"{re.escape(name)}-\d{{3}}-[0-9a-f]{{8}}$")  # tuning.trial_name's form
        for trial_name, trial_job in self.sagemaker_backend.training_jobs.items():
            if trial.match(trial_name) and trial_job.training_job_status == "InProgress":
                trial_job.training_job_status = trial_job.secondary_status = "Stopping"
                trial_job.last_modified_time = now
        return EmptyResult()

    def stop_transform_job(self: Any) -> Any:
        # Gap: moto has no StopTransformJob. On SageMaker the job turns Stopping, then Stopped;
        # here the local runner (scripts.emulator.transform) sends no further batch and records
        # Stopped. No runner watching: the job was Failed when it was created.
        begin_stop(self, "transform", "TransformJobName", "describe_transform_job", "transform_jobs", "transform_job_status")
        return EmptyResult()

    PATCHES.set(SageMakerResponse, "stop_training_job", stop_training_job)
    PATCHES.set(SageMakerResponse, "stop_processing_job", stop_processing_job)
    PATCHES.set(SageMakerResponse, "stop_transform_job", stop_transform_job)
    PATCHES.set(SageMakerResponse, "stop_hyper_parameter_tuning_job", stop_hyper_parameter_tuning_job)


def refresh_warm_pool(job: Any, now: Any = None) -> None:
    """A finished job's warm pool as SageMaker reports it: ``Available`` from the end of a Completed job with
    ``KeepAlivePeriodInSeconds``, ``Terminated`` once that period has passed, with the billable time kept
    (the emulator never reuses a pool, so never ``Reused``/``InUse``)."""
    from moto.core.utils import utcnow

    pool = getattr(job, "warm_pool_status", None)
    if not pool or pool.get("Status") != "Available":
        return
    now = now or utcnow()
    keep = int((job.resource_config or {}).get("KeepAlivePeriodInSeconds") or 0)
    elapsed = int((now - job.training_end_time).total_seconds())
    if elapsed >= keep:
        job.warm_pool_status = {"Status": "Terminated", "ResourceRetainedBillableTimeInSeconds": keep}
    else:
        job.warm_pool_status = {"Status": "Available", "ResourceRetainedBillableTimeInSeconds": max(0, elapsed)}


def _warm_pools() -> None:
    # Gap: moto keeps ResourceConfig.KeepAlivePeriodInSeconds but reports no WarmPoolStatus, has no
    # UpdateTrainingJob ("not yet implemented") and ignores ListTrainingJobs' WarmPoolStatusEquals,
    # so a warm pool, which bills, would be invisible. Here a Completed job with a keep-alive has
    # its pool Available (the local runner sets it when it records the outcome) until the period
    # passes or UpdateTrainingJob sets KeepAlivePeriodInSeconds to 0, then Terminated; Describe and
    # List report it and List filters on it. No later job reuses a pool: the emulator starts each
    # job afresh and says so by never reporting Reused.
    from moto.core.responses import ActionResult
    from moto.core.utils import utcnow
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.models import SageMakerModelBackend
    from moto.sagemaker.responses import SageMakerResponse

    original_describe = SageMakerModelBackend.describe_training_job

    def describe_training_job(self: Any, training_job_name: str) -> Any:
        job = self.training_jobs.get(training_job_name)
        if job is not None:
            refresh_warm_pool(job)
        return original_describe(self, training_job_name)

    original_list = SageMakerResponse.list_training_jobs

    def list_training_jobs(self: Any) -> Any:
        wanted = self._get_param("WarmPoolStatusEquals")
        result = original_list(self).result
        summaries = []
        for summary in result["TrainingJobSummaries"]:
            job = self.sagemaker_backend.training_jobs[summary["TrainingJobName"]]
            refresh_warm_pool(job)
            pool = getattr(job, "warm_pool_status", None)
            if pool:
                summary = {**summary, "WarmPoolStatus": dict(pool)}
            if wanted is None or (pool or {}).get("Status") == wanted:
                summaries.append(summary)
        return ActionResult({**result, "TrainingJobSummaries": summaries})

    def update_training_job(self: Any) -> Any:
        name = self._get_param("TrainingJobName")
        self.sagemaker_backend.describe_training_job(name)  # ValidationError when it does not exist
        job = self.sagemaker_backend.training_jobs[name]
        keep = (self._get_param("ResourceConfig") or {}).get("KeepAlivePeriodInSeconds")
        if keep is None:
            raise ValidationError(message="The emulator updates only ResourceConfig.KeepAlivePeriodInSeconds of a training job.")
        if job.training_job_status == "InProgress":
            # A running job's retention may change (teardown sets 0 before it stops one): the pool
            # the runner leaves at the end follows the new value.
            job.resource_config = {**(job.resource_config or {}), "KeepAlivePeriodInSeconds": int(keep)}
            job.last_modified_time = utcnow()
            return ActionResult({"TrainingJobArn": job.arn})
        pool = getattr(job, "warm_pool_status", None)
        if not pool or pool.get("Status") != "Available":
            raise ValidationError(message=f"The training job {name} has no available warm pool to update.")
        job.resource_config = {**(job.resource_config or {}), "KeepAlivePeriodInSeconds": int(keep)}
        if int(keep) == 0:
            billed = int((utcnow() - job.training_end_time).total_seconds())
            job.warm_pool_status = {"Status": "Terminated", "ResourceRetainedBillableTimeInSeconds": max(0, billed)}
        job.last_modified_time = utcnow()
        return ActionResult({"TrainingJobArn": job.arn})

    PATCHES.set(SageMakerModelBackend, "describe_training_job", describe_training_job)
    PATCHES.set(SageMakerResponse, "list_training_jobs", list_training_jobs)
    PATCHES.set(SageMakerResponse, "update_training_job", update_training_job)


def _untagged_resources_list_no_tags() -> None:
    # Gap: moto keeps None as the tags of a tuning or transform job created without Tags, and its
    # ListTags then fails (len(None): a 500). SageMaker lists no tags. The operator tools read a
    # name-matched resource's Project tag (scripts.common.ProjectOwnership), so they would fail on
    # a job the SageMaker SDK started untagged.
    from moto.sagemaker.responses import SageMakerResponse

    PATCHES.set(SageMakerResponse, "list_tags", untagged_list_tags(SageMakerResponse.list_tags))


def untagged_list_tags(original: Any) -> Any:
    """moto's ``SageMakerResponse.list_tags`` that lists no tags, not a 500, for a resource created
    without any (the operator tools' moto tests install it too)."""

    def list_tags(self: Any) -> Any:
        resource = self.sagemaker_backend._get_resource_from_arn(self._get_param("ResourceArn"))
        if resource is not None and getattr(resource, "tags", None) is None:
            resource.tags = []
        return original(self)

    return list_tags


def _validate_images_and_instance_types() -> None:
    # Not a gap but a default: moto accepts any AMI id and instance type unless told to check.
    # Check both, as EC2 does, so a template naming an image or type that does not exist fails
    # here too (the harness registers the Deep Learning AMI the app has cached).
    from moto import settings

    PATCHES.set(settings, "ENABLE_AMI_VALIDATION", True)
    PATCHES.set(settings, "EC2_ENABLE_INSTANCE_TYPE_VALIDATION", True)


def _hosting_instance_types() -> None:
    # Gap: moto checks an endpoint config's InstanceType against its own list from before the
    # g5/g6/p4d/p5 families, so a valid GPU endpoint (the serving stack's ml.g5.xlarge) is
    # refused. Check against the real list instead: botocore's ProductionVariantInstanceType,
    # the enum SageMaker validates CreateEndpointConfig with.
    import botocore.session
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.models import FakeEndpointConfig

    valid = set(botocore.session.get_session().get_service_model("sagemaker").shape_for("ProductionVariantInstanceType").enum)

    def validate_instance_type(self: Any, instance_type: str) -> None:
        if instance_type not in valid:
            raise ValidationError(
                message=f"Value '{instance_type}' at 'instanceType' failed to satisfy constraint: "
                "Member must satisfy enum value set (ProductionVariantInstanceType)"
            )

    PATCHES.set(FakeEndpointConfig, "validate_instance_type", validate_instance_type)


def _endpoint_names_from_template() -> None:
    # Gap: moto's AWS::SageMaker::Endpoint handler ignores the EndpointName property and names
    # the endpoint after the logical id plus a random suffix; CloudFormation uses the property
    # (the serving stack's fixed <project>-endpoint, which scripts.invoke calls by default).
    from moto.sagemaker.models import FakeEndpoint

    PATCHES.set(FakeEndpoint, "cloudformation_name_type", staticmethod(lambda: "EndpointName"))


def _endpoint_invocations() -> None:
    # Gap: moto's InvokeEndpoint answers canned data for any name, deployed or not, and runs no
    # model. scripts.emulator.hosting routes it to local serving processes (see there).
    from scripts.emulator.hosting import install_invoke_route

    install_invoke_route()


def _update_endpoint() -> None:
    # Gap: moto has no UpdateEndpoint ("not yet implemented"), the call the pipeline's promote step
    # makes to move the endpoint to a new model. Here it checks what SageMaker checks (the
    # endpoint and the config exist, the endpoint is InService), then leaves the endpoint
    # Updating with the new config pending (PendingDeploymentSummary; EndpointConfigName stays
    # the serving one until the update is done, as on AWS). The local hosting runner
    # (scripts.emulator.hosting) starts the new model and finishes the update: InService on the
    # new config, or back on the old one with a FailureReason when the new model does not start.
    from moto.core.responses import ActionResult
    from moto.core.utils import utcnow
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.responses import SageMakerResponse

    def update_endpoint(self: Any) -> Any:
        name = self._get_param("EndpointName")
        config_name = self._get_param("EndpointConfigName")
        backend = self.sagemaker_backend
        backend.describe_endpoint(name)  # ValidationError: Could not find endpoint
        backend.describe_endpoint_config(config_name)  # ValidationError: Could not find endpoint configuration
        endpoint = backend.endpoints[name]
        if endpoint.endpoint_status != "InService":
            raise ValidationError(message=f'Cannot update in-progress endpoint "{endpoint.arn}".')
        now = utcnow()
        endpoint.endpoint_status = "Updating"
        endpoint.failure_reason = None
        endpoint.pending_deployment_summary = {"EndpointConfigName": config_name, "StartTime": now}
        deployment = self._get_param("DeploymentConfig")
        if deployment:
            endpoint.last_deployment_config = deployment
        endpoint.last_modified_time = now
        return ActionResult({"EndpointArn": endpoint.arn})

    PATCHES.set(SageMakerResponse, "update_endpoint", update_endpoint)


def _get_stack_output() -> None:
    # Gap: moto does not know Fn::GetStackOutput, the intrinsic CDK's "weak" cross-stack
    # references (@aws-cdk/core:defaultCrossStackReferences) compile to; it passes the dict
    # through as the property value. Resolve it as CloudFormation does at create/update time:
    # the named output of the named stack (Region defaults to the consuming stack's; RoleArn,
    # for cross-account reads, has no meaning in a single-account emulator).
    from moto.cloudformation import cloudformation_backends
    from moto.cloudformation import parsing
    from moto.cloudformation.exceptions import ValidationError

    original = parsing.clean_json

    def clean_json(resource_json: Any, resources_map: Any) -> Any:
        if isinstance(resource_json, dict) and "Fn::GetStackOutput" in resource_json:
            spec = original(resource_json["Fn::GetStackOutput"], resources_map)
            region = spec.get("Region") or resources_map._region_name
            backend = cloudformation_backends[resources_map._account_id][region]
            for stack in backend.stacks.values():
                if stack.name == spec["StackName"] or stack.stack_id == spec["StackName"]:
                    for output in stack.outputs or []:
                        if output["OutputKey"] == spec["OutputName"]:
                            return output["OutputValue"]
                    raise ValidationError(message=f"Fn::GetStackOutput: stack {spec['StackName']} has no output {spec['OutputName']}")
            raise ValidationError(message=f"Fn::GetStackOutput: stack {spec['StackName']} does not exist in {region}")
        return original(resource_json, resources_map)

    # clean_json recurses through the module global, so nested uses resolve too.
    PATCHES.set(parsing, "clean_json", clean_json)


def _iam_deletes() -> None:
    # Gap: moto's CloudFormation cannot delete a stack that attaches managed policies to a
    # role. AWS::IAM::ManagedPolicy has no delete handler (the policy stays, attached), and
    # AWS::IAM::Role's handler deletes inline policies but not attached managed ones
    # (ManagedPolicyArns), so the role delete fails with "must detach all policies first".
    # CloudFormation detaches both; so do these.
    from moto.iam.models import ManagedPolicy, Role, iam_backends
    from moto.utilities.utils import get_partition

    def delete_managed_policy(self: Any, account_id: str, region_name: str) -> None:
        backend = iam_backends[account_id][get_partition(region_name)]
        for entities, detach in (
            (backend.roles.values(), backend.detach_role_policy),
            (backend.users.values(), backend.detach_user_policy),
            (backend.groups.values(), backend.detach_group_policy),
        ):
            for entity in list(entities):
                if self.arn in entity.managed_policies:
                    detach(self.arn, entity.name)
        backend.managed_policies.pop(self.arn, None)

    original_role_delete = Role.delete_from_cloudformation_json.__func__  # type: ignore[attr-defined]

    def delete_role(cls: Any, resource_name: str, cfn: dict[str, Any], account_id: str, region_name: str) -> None:
        backend = iam_backends[account_id][get_partition(region_name)]
        for role in list(backend.roles.values()):
            if role.name == resource_name:
                for arn in list(role.managed_policies):
                    backend.detach_role_policy(arn, role.name)
        original_role_delete(cls, resource_name, cfn, account_id, region_name)

    PATCHES.set(ManagedPolicy, "delete", delete_managed_policy)
    PATCHES.set(Role, "delete_from_cloudformation_json", classmethod(delete_role))


def _non_empty_bucket_delete_fails() -> None:
    # Gap: moto's AWS::S3::Bucket delete handler silently keeps a bucket that still has
    # objects (the backend returns None instead of raising BucketNotEmpty), so the stack
    # delete "succeeds" and the bucket stays, depending on the order moto happens to delete
    # in. On AWS the delete fails until the bucket is empty. Raise, so that moto's delete
    # loop retries it after the auto-delete-objects custom resource has emptied it, and a
    # bucket nobody empties fails the destroy, as on AWS.
    from moto.s3.exceptions import BucketNotEmpty
    from moto.s3.models import FakeBucket, s3_backends
    from moto.utilities.utils import get_partition

    def delete(cls: Any, resource_name: str, cfn: dict[str, Any], account_id: str, region_name: str) -> None:
        backend = s3_backends[account_id][get_partition(region_name)]
        if resource_name in backend.buckets and backend.delete_bucket(resource_name) is None:
            raise BucketNotEmpty(resource_name)

    PATCHES.set(FakeBucket, "delete_from_cloudformation_json", classmethod(delete))


def _bucket_versioning_and_public_access_block() -> None:
    # Gap: moto's AWS::S3::Bucket handler applies only BucketEncryption and Tags; the
    # template's VersioningConfiguration and PublicAccessBlockConfiguration are dropped, so
    # the emulated buckets are unversioned and public-access-unblocked. Apply both, as
    # CloudFormation does. (Lifecycle rules, access logging, ownership controls and the
    # AWS::S3::BucketPolicy resources remain unemulated; the deploy report lists the latter.)
    from moto.s3.models import FakeBucket, s3_backends
    from moto.utilities.utils import get_partition

    original = FakeBucket.create_from_cloudformation_json.__func__  # type: ignore[attr-defined]

    def create(cls: Any, resource_name: str, cfn: dict[str, Any], account_id: str, region_name: str, **kw: Any) -> Any:
        bucket = original(cls, resource_name, cfn, account_id, region_name, **kw)
        props = cfn.get("Properties", {})
        backend = s3_backends[account_id][get_partition(region_name)]
        status = (props.get("VersioningConfiguration") or {}).get("Status")
        if status:
            backend.put_bucket_versioning(bucket.name, status)
        block = props.get("PublicAccessBlockConfiguration")
        if block:
            backend.put_public_access_block(bucket.name, {k: str(v).lower() for k, v in block.items()})
        return bucket

    PATCHES.set(FakeBucket, "create_from_cloudformation_json", classmethod(create))


def _executions_run_locally() -> None:
    # Gap: moto's Step Functions runs no state. An execution is RUNNING forever (or FAILED at once
    # when SF_EXECUTION_HISTORY_TYPE=FAILURE), StopExecution drops the error and cause it is
    # given, and GetExecutionHistory answers a canned four-event history for any execution. The
    # local executor (scripts.emulator.states) runs executions and records their outcome; here a
    # new execution always starts RUNNING for it, a stop keeps its error and cause (as
    # DescribeExecution shows them on AWS), and the history is the one the executor recorded.
    from moto.stepfunctions.models import Execution, StepFunctionBackend
    from moto.stepfunctions.responses import StepFunctionResponse

    original_init = Execution.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self.status = "RUNNING"

    PATCHES.set(Execution, "__init__", init)

    def stop_execution(self: Any) -> Any:
        from moto.core.responses import ActionResult

        arn = self._get_param("executionArn")
        execution = self.stepfunction_backend.stop_execution(arn)
        error, cause = self._get_param("error"), self._get_param("cause")
        if error is not None:
            execution.error = error
        if cause is not None:
            execution.cause = cause
        return ActionResult({"stopDate": execution.stop_date})

    PATCHES.set(StepFunctionResponse, "stop_execution", stop_execution)

    original_history = StepFunctionBackend.get_execution_history

    def get_execution_history(self: Any, execution_arn: str) -> dict[str, Any]:
        from scripts.emulator.states import HISTORIES

        original_history(self, execution_arn)  # ExecutionDoesNotExist for an unknown ARN
        history = HISTORIES.get(execution_arn)
        return {"events": list(history.events) if history is not None else []}

    PATCHES.set(StepFunctionBackend, "get_execution_history", get_execution_history)


def _simulate_principal_policy() -> None:
    # Gap: moto has no iam:SimulatePrincipalPolicy (a 500 for any call). SageMaker SDK v3 calls it
    # before every ModelTrainer job to check the execution role ("smoke test" actions, no
    # ResourceArns), and refuses the role when an action comes back denied. Evaluate the role's
    # identity policies as IAM's simulator does for a request without context values: an Allow
    # counts only when its Resource matches the simulated resource ("*" when none is given: a
    # statement scoped to ARNs does not match it) and its Condition holds without context (only
    # ...IfExists operators and Null=true do; the other keys are reported as MissingContextValues);
    # a matching Deny wins. Permissions boundaries, SCPs and resource policies are not simulated.
    import fnmatch
    import urllib.parse

    from moto.core.responses import ActionResult
    from moto.iam.responses import IamResponse

    def listed(value: Any) -> list[Any]:
        return value if isinstance(value, list) else [] if value is None else [value]

    def condition_holds(condition: dict[str, Any]) -> tuple[bool, list[str]]:
        missing: list[str] = []
        for operator, pairs in condition.items():
            for key, value in pairs.items():
                if operator.endswith("IfExists"):
                    continue
                if operator == "Null" and str(listed(value)[0]).lower() == "true":
                    continue
                missing.append(key)
        return not missing, missing

    def matches(patterns: list[str], value: str, *, case: bool) -> bool:
        return any(fnmatch.fnmatchcase(value if case else value.lower(), p if case else p.lower()) for p in patterns)

    def evaluate(statements: list[dict[str, Any]], action: str, resource: str) -> dict[str, Any]:
        allowed, denied, missing = False, False, []
        for statement in statements:
            if "Action" in statement and not matches(listed(statement["Action"]), action, case=False):
                continue
            if "NotAction" in statement and matches(listed(statement["NotAction"]), action, case=False):
                continue
            if "Resource" in statement and not matches(listed(statement["Resource"]), resource, case=True):
                continue
            if "NotResource" in statement and matches(listed(statement["NotResource"]), resource, case=True):
                continue
            holds, keys = condition_holds(statement.get("Condition") or {})
            missing += [k for k in keys if k not in missing]
            if not holds:
                continue
            if statement.get("Effect") == "Deny":
                denied = True
            elif statement.get("Effect") == "Allow":
                allowed = True
        decision = "explicitDeny" if denied else "allowed" if allowed else "implicitDeny"
        return {"EvalActionName": action, "EvalResourceName": resource, "EvalDecision": decision,
                "MatchedStatements": [], "MissingContextValues": [] if decision == "allowed" else missing}

    def document(text: Any) -> dict[str, Any]:
        if isinstance(text, dict):
            return text
        return json.loads(text if text.lstrip().startswith("{") else urllib.parse.unquote(text))

    def simulate_principal_policy(self: Any) -> Any:
        source = self._get_param("PolicySourceArn")
        actions = self._get_param("ActionNames", [])
        resources = self._get_param("ResourceArns") or ["*"]
        role = self.backend.get_role_by_arn(source)  # NoSuchEntity, as IAM answers, when there is none
        documents = [document(text) for text in role.policies.values()]
        for managed in role.managed_policies.values():
            version = next(v for v in managed.versions if v.version_id == managed.default_version_id)
            documents.append(document(version.document))
        statements = [s for d in documents for s in listed(d.get("Statement"))]
        results = [evaluate(statements, action, resource) for action in actions for resource in resources]
        return ActionResult({"EvaluationResults": results, "IsTruncated": False})

    PATCHES.set(IamResponse, "simulate_principal_policy", simulate_principal_policy)


def _placement_groups() -> None:
    # Gap: moto has no placement groups, in EC2 or in CloudFormation: a template with an
    # AWS::EC2::PlacementGroup (the cluster stack with more than one node, which packs its nodes
    # in a cluster placement group) fails to deploy on its Fn::GetAtt GroupName. Give the resource
    # a name (Ref and GroupName) and a delete, as CloudFormation does; moto's instances ignore the
    # PlacementGroupName they are given, so nothing is placed (the emulator has no network to place).
    from moto.cloudformation import parsing

    class PlacementGroup:
        """An AWS::EC2::PlacementGroup as CloudFormation shows it: a name, nothing else."""

        def __init__(self, name: str) -> None:
            self.group_name = name

        @property
        def physical_resource_id(self) -> str:
            return self.group_name

        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::EC2::PlacementGroup"

        @staticmethod
        def cloudformation_name_type() -> str:
            return "GroupName"

        @classmethod
        def has_cfn_attr(cls, attr: str) -> bool:
            return attr == "GroupName"

        def get_cfn_attribute(self, attr: str) -> str:
            from moto.cloudformation.exceptions import UnformattedGetAttTemplateException

            if attr == "GroupName":
                return self.group_name
            raise UnformattedGetAttTemplateException()

        @classmethod
        def create_from_cloudformation_json(cls, resource_name: str, cfn: dict[str, Any], account_id: str, region_name: str,
                                            **kw: Any) -> "PlacementGroup":  # fmt: skip
            return cls((cfn.get("Properties") or {}).get("GroupName") or resource_name)

        @classmethod
        def delete_from_cloudformation_json(cls, resource_name: str, cfn: dict[str, Any], account_id: str, region_name: str) -> None:
            return None

        def delete(self, account_id: str, region_name: str) -> None:
            return None

    original = parsing.resource_class_from_type

    def resource_class_from_type(resource_type: str) -> Any:
        if resource_type == PlacementGroup.cloudformation_type():
            return PlacementGroup
        return original(resource_type)

    PATCHES.set(parsing, "resource_class_from_type", resource_class_from_type)


RUN_COMMAND_RUNNER = "cluster job"
"""The :data:`LOCAL_RUNNERS` kind of the cluster's Command document (``scripts.emulator.cluster``)."""

NO_COMMAND_RUNNER = "The emulator has no local runner for document {document}: nothing ran (run this command on AWS)."
"""The output of every node of a command no local runner plays."""


def _commands_wait_for_a_runner() -> None:
    # Gap: moto's Run Command runs nothing: SendCommand records the command and reports it, and
    # every node's invocation, Success at once (exit 0, empty output); ListCommandInvocations and
    # CancelCommand do not exist. Here a command of the cluster's document (<project>-cluster-train)
    # stays InProgress, every node's invocation too, while the local runner
    # (scripts.emulator.cluster) plays it and records each node's status, exit code and output;
    # any other document, or the cluster's with no runner watching, is Failed on every node with
    # a line saying nothing ran. ListCommandInvocations answers from those records, and
    # CancelCommand turns a running command Cancelling (the runner ends its processes and records
    # it Cancelled, as SSM does), one that has not started Cancelled.
    from moto.core.responses import ActionResult
    from moto.core.utils import utcnow
    from moto.ssm.models import SimpleSystemManagerBackend
    from moto.ssm.responses import SimpleSystemManagerResponse

    from stacks.components.cluster_job_document import DOCUMENT_SUFFIX

    original_send = SimpleSystemManagerBackend.send_command

    def send_command(self: Any, **kwargs: Any) -> Any:
        command = original_send(self, **kwargs)
        now = utcnow()
        played = str(command.document_name or "").endswith(DOCUMENT_SUFFIX) and RUN_COMMAND_RUNNER in LOCAL_RUNNERS
        command.completed_count = 0
        command.local_runner = played
        command.status = command.status_details = "InProgress" if played else "Failed"
        for invocation in command.invocations:
            invocation.update(Status=command.status, StatusDetails=command.status, ResponseCode=-1 if played else 1,
                              PluginName=PLUGIN_OF_THE_CLUSTER_DOCUMENT if played else invocation["PluginName"],
                              ExecutionStartDateTime=now.isoformat(), ExecutionEndDateTime="", ExecutionElapsedTime="PT0S")  # fmt: skip
            if not played:
                invocation["StandardOutputContent"] = NO_COMMAND_RUNNER.format(document=command.document_name)
        if not played:
            command.completed_count = command.error_count = len(command.invocations)
        return command

    def list_command_invocations(self: Any) -> Any:
        command_id, instance_id = self._get_param("CommandId"), self._get_param("InstanceId")
        commands = [self.ssm_backend.get_command_by_id(command_id)] if command_id else list(self.ssm_backend._commands)
        found = []
        for command in commands:
            for invocation in command.invocations:
                if instance_id and invocation["InstanceId"] != instance_id:
                    continue
                plugin = {
                    "Name": invocation["PluginName"], "Status": invocation["Status"], "StatusDetails": invocation["StatusDetails"],
                    "ResponseCode": invocation["ResponseCode"], "Output": invocation.get("StandardOutputContent", "")[-2500:],
                }  # fmt: skip
                found.append({
                    "CommandId": command.command_id, "InstanceId": invocation["InstanceId"], "Comment": command.comment,
                    "DocumentName": command.document_name, "RequestedDateTime": command.requested_date_time,
                    "Status": invocation["Status"], "StatusDetails": invocation["StatusDetails"],
                    "CommandPlugins": [plugin],
                })  # fmt: skip
        return ActionResult({"CommandInvocations": found})

    def cancel_command(self: Any) -> Any:
        command = self.ssm_backend.get_command_by_id(self._get_param("CommandId"))
        if command.status in ("Pending", "InProgress"):
            played = getattr(command, "local_runner", False)
            command.status = command.status_details = "Cancelling" if played else "Cancelled"
            if not played:
                for invocation in command.invocations:
                    invocation.update(Status="Cancelled", StatusDetails="Cancelled")
        return ActionResult({})

    PATCHES.set(SimpleSystemManagerBackend, "send_command", send_command)
    PATCHES.set(SimpleSystemManagerResponse, "list_command_invocations", list_command_invocations)
    PATCHES.set(SimpleSystemManagerResponse, "cancel_command", cancel_command)


PLUGIN_OF_THE_CLUSTER_DOCUMENT = "ClusterJob"
"""The cluster document's one step (``mainSteps[0].name``): the plugin that names its output streams."""
