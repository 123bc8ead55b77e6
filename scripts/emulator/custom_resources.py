"""Local stand-ins for the Lambda functions behind CDK's custom resources.

Emulator gap: moto runs Lambda code only in Docker, and this machine has none, so the
functions CDK deploys for ``Custom::*`` resources never run: CloudFormation's Create event is
lost (the resource stays pending, and its effect, e.g. closing the default security group,
never happens) and moto sends no Delete event at all. Here the harness plays those functions:

* ``LambdaFunction.invoke`` is wrapped so that a CloudFormation custom-resource event goes to
  a Python provider below (any other invoke goes to moto as before);
* each provider does what CDK's handler does, through the emulated API with boto3, and PUTs
  its answer to the event's ResponseURL, as a handler would (the URL moto builds points at a
  Docker host name, so it is rewritten to this server);
* ``CustomModel`` gets the ``delete`` moto lacks, which sends the Delete event and waits for
  the provider, as CloudFormation does before it deletes what the resource depends on.

A custom resource type without a provider here is answered SUCCESS with a warning and
recorded in :data:`UNSERVED`, so the deploy report can say which effects are missing.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any, Callable

from scripts.emulator.patching import PATCHES

from botocore.exceptions import ClientError

log = logging.getLogger("scripts.emulator.custom_resources")

Event = dict[str, Any]
Provider = Callable[[Event, Any], dict[str, Any]]

_endpoint_url: str | None = None
_lock = threading.Lock()

SERVED: list[str] = []
"""``<stack logical id> <type> <RequestType>`` of every event a local provider answered."""

UNSERVED: list[str] = []
"""Custom resource types answered without a local provider (their effect did not happen)."""


_client_lock = threading.Lock()


def _client(service: str, event: Event) -> Any:
    # moto starts one thread per custom resource, all at once (a sandbox data stack has three
    # auto-delete buckets): one of them makes the client, the others wait for it and reuse it,
    # instead of each building its own while the deploy's check waits.
    with _client_lock:
        return _cached_client(service, _endpoint_url or "", event["StackId"].split(":")[3])


@functools.lru_cache(maxsize=None)
def _cached_client(service: str, endpoint_url: str, region: str) -> Any:
    # Making a boto3 client costs about a second on a busy 2-core machine; a Delete event is
    # answered while the stack delete waits, so each provider reuses one client per service.
    from scripts.emulator.aws import client

    return client(service, endpoint_url=endpoint_url, region=region)


# --- providers: one per CDK custom resource type the stacks use -------------------------------


def restrict_default_security_group(event: Event, ec2: Any) -> dict[str, Any]:
    """``Custom::VpcRestrictDefaultSG`` (``restrictDefaultSecurityGroup``): what CDK's handler does.

    Create revokes the default security group's two default rules (all traffic from itself,
    all traffic out); Delete puts them back so that the VPC deletes cleanly; Update moves the
    restriction when the group changes.
    """
    props = event["ResourceProperties"]
    group_id, account = props["DefaultSecurityGroupId"], props["Account"]

    def rules(group: str) -> tuple[dict[str, Any], dict[str, Any]]:
        ingress = {"GroupId": group, "IpPermissions": [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group, "UserId": account}]}]}
        egress = {"GroupId": group, "IpPermissions": [{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]}
        return ingress, egress

    def revoke(group: str) -> None:
        ingress, egress = rules(group)
        _tolerate(ec2.revoke_security_group_ingress, ingress)
        _tolerate(ec2.revoke_security_group_egress, egress)

    def authorize(group: str) -> None:
        ingress, egress = rules(group)
        _tolerate(ec2.authorize_security_group_ingress, ingress)
        _tolerate(ec2.authorize_security_group_egress, egress)

    kind = event["RequestType"]
    if kind == "Create":
        revoke(group_id)
    elif kind == "Update":
        old = event.get("OldResourceProperties", {}).get("DefaultSecurityGroupId")
        if old and old != group_id:
            authorize(old)
            revoke(group_id)
    elif kind == "Delete":
        authorize(group_id)
    return {}


def _tolerate(call: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    # The real handler is idempotent in practice (CloudFormation sends each event once); here a
    # rule that is already gone or already there, or a group deleted first, is not an error.
    try:
        call(**kwargs)
    except ClientError as err:
        code = err.response["Error"]["Code"]
        if code not in {"InvalidPermission.NotFound", "InvalidPermission.Duplicate", "InvalidGroup.NotFound"}:
            raise


def auto_delete_objects(event: Event, s3: Any) -> dict[str, Any]:
    """``Custom::S3AutoDeleteObjects`` (``auto_delete_objects=True``, sandbox mode).

    Like CDK's handler: on Delete, if the bucket still exists and carries the
    ``aws-cdk:auto-delete-objects=true`` tag, delete every object version and delete marker so
    the bucket itself can be deleted. Create and Update do nothing.
    """
    if event["RequestType"] != "Delete":
        return {}
    bucket = event["ResourceProperties"]["BucketName"]
    try:
        tags = s3.get_bucket_tagging(Bucket=bucket).get("TagSet", [])
    except ClientError as err:
        if err.response["Error"]["Code"] in {"NoSuchBucket", "NoSuchTagSet"}:
            return {}
        raise
    if not any(t["Key"] == "aws-cdk:auto-delete-objects" and t["Value"] == "true" for t in tags):
        return {}
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        doomed = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
        ]
        if doomed:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": doomed, "Quiet": True})
    return {}


PROVIDERS: dict[str, tuple[str, Provider]] = {
    "Custom::VpcRestrictDefaultSG": ("ec2", restrict_default_security_group),
    "Custom::S3AutoDeleteObjects": ("s3", auto_delete_objects),
}


# --- the protocol: event in, response PUT to ResponseURL --------------------------------------


def handle(event: Event, *, respond: bool = True) -> tuple[str, str]:
    """Run the provider for one CloudFormation event and PUT the response, as a handler would.

    Returns:
        ``(status, reason)`` as sent, or ``("UNDELIVERED", why)`` where the emulator no longer
        listens (a deploy that gave up waiting).
    """
    resource_type = event["ResourceType"]
    status, reason, data = "SUCCESS", "", {}
    entry = PROVIDERS.get(resource_type)
    try:
        if entry is None:
            log.warning("no local provider for %s: answered SUCCESS, its effect is missing", resource_type)
            with _lock:
                if resource_type not in UNSERVED:
                    UNSERVED.append(resource_type)
        else:
            service, provider = entry
            data = provider(event, _client(service, event))
            with _lock:
                SERVED.append(f"{event['LogicalResourceId']} {resource_type} {event['RequestType']}")
    except Exception as err:  # a handler reports any failure to CloudFormation, it does not crash
        log.exception("local provider for %s failed", resource_type)
        status, reason = "FAILED", f"{type(err).__name__}: {err}"
    if respond:
        body = {
            "Status": status,
            "Reason": reason or "served by scripts.emulator.custom_resources",
            "PhysicalResourceId": event.get("PhysicalResourceId") or f"{event['LogicalResourceId']}-{uuid.uuid4().hex[:8]}",
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "Data": data,
        }
        request = urllib.request.Request(_local_url(event["ResponseURL"]), data=json.dumps(body).encode(), method="PUT")
        request.add_header("Content-Type", "")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback URL built here
                response.read()
        except urllib.error.HTTPError as err:
            log.error("response to %s rejected: %s %s", event["ResponseURL"], err.code, err.read()[:500])
            raise
        except OSError as err:  # the emulator is gone (a deploy that gave up): nobody is left to answer
            log.error("response to %s not delivered: %s", event["ResponseURL"], err)
            return "UNDELIVERED", str(err)
    return status, reason


def _local_url(response_url: str) -> str:
    # moto builds the ResponseURL for a handler running in a Docker container
    # (http://host.docker.internal:5000/...); the provider runs here, so keep the path and query
    # and send it to this server.
    parts = urllib.parse.urlsplit(response_url)
    local = urllib.parse.urlsplit(_endpoint_url or "")
    return urllib.parse.urlunsplit((local.scheme, local.netloc, parts.path, parts.query, ""))


def _is_custom_resource_event(body: Any) -> bool:
    return isinstance(body, dict) and {"RequestType", "ResponseURL", "ResourceType", "StackId"} <= body.keys()


def install(*, endpoint_url: str) -> None:
    """Route custom-resource events to the local providers of the emulator at ``endpoint_url``."""
    global _endpoint_url
    _endpoint_url = endpoint_url
    SERVED.clear()
    UNSERVED.clear()
    _cached_client.cache_clear()

    from moto.awslambda.models import LambdaFunction
    from moto.cloudformation.custom_model import CustomModel

    original_invoke = LambdaFunction.invoke

    def invoke(self: Any, body: str, request_headers: Any, response_headers: Any) -> Any:
        event = json.loads(body) if isinstance(body, str) and body.startswith("{") else body
        if _is_custom_resource_event(event):
            handle(event)
            return b""
        return original_invoke(self, body, request_headers, response_headers)

    PATCHES.set(LambdaFunction, "invoke", invoke)

    original_create = CustomModel.create_from_cloudformation_json.__func__  # type: ignore[attr-defined]

    def create(cls: Any, resource_name: str, cfn: dict[str, Any], account_id: str, region_name: str, **kw: Any) -> Any:
        model = original_create(cls, resource_name, cfn, account_id, region_name, **kw)
        # Kept for the Delete event, which needs what the Create event carried.
        model.stack_id, model.resource_type = kw["StackId"], kw["ResourceType"]
        model.properties = cfn["Properties"]
        return model

    def delete(self: Any, account_id: str, region_name: str) -> None:
        props = getattr(self, "properties", None)
        if props is None:
            return
        event = {
            "RequestType": "Delete",
            "ServiceToken": props["ServiceToken"],
            "ResponseURL": f"{_endpoint_url}/cloudformation_{region_name}/cfnresponse?stack={self.stack_id}",
            "StackId": self.stack_id,
            "RequestId": str(uuid.uuid4()),
            "LogicalResourceId": self.logical_id,
            "PhysicalResourceId": self.physical_resource_id,
            "ResourceType": self.resource_type,
            "ResourceProperties": props,
        }
        # Called straight rather than through the function: moto deletes a stack's resources
        # in no dependency order, so the provider function may already be gone (on AWS it
        # outlives the resources that use it). Synchronous, because CloudFormation waits for
        # the Delete answer before deleting what the resource uses (the bucket it empties);
        # the answer is the return value, not a PUT: moto has already taken the stack out of
        # its list and would reject a response for it.
        status, reason = handle(event, respond=False)
        if status != "SUCCESS":
            raise RuntimeError(f"{self.resource_type} {self.logical_id}: Delete failed: {reason}")

    PATCHES.set(CustomModel, "create_from_cloudformation_json", classmethod(create))
    PATCHES.set(CustomModel, "delete", delete)

    from moto.cloudformation.models import Stack

    def verify_readiness(self: Any) -> None:
        # moto's version walks the template through the lazy resource map, which *creates* any
        # resource not made yet; a provider answering while a change set is still being applied
        # (answers are asynchronous, as on AWS) would then create resources twice. Only look at
        # what exists. Stacks deployed through change sets are already marked complete by moto.
        if self.status != "CREATE_IN_PROGRESS":
            return
        parsed = [r for r in self.resource_map._parsed_resources.values() if hasattr(r, "is_created")]
        if all(r.is_created() for r in parsed):
            self.mark_creation_complete()

    PATCHES.set(Stack, "verify_readiness", verify_readiness)
