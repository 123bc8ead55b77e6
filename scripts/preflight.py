"""Before a deploy: can this account and region run the configured platform?

Usage (from the repository root)::

    python -m scripts.preflight
    python -m scripts.preflight -c training_job.instance_count=4 --region us-west-2

Checks, printed as a table (OK / WARN / FAIL) followed by what to fix:

- the account and region (STS);
- the GPU instance types (the cluster's, and the training job's without ``ml.``) are offered in
  the region and in each availability zone the VPC uses (``DescribeInstanceTypeOfferings``; for
  SageMaker this is a proxy: SageMaker has no per-AZ offering API);
- EC2 vCPU quotas for G/VT and P instances, on-demand and spot, against the cluster's need;
- SageMaker quotas for the training instance type, on-demand and spot, against the job's need;
- each interface endpoint of ``network.interface_endpoints`` is offered in every availability zone
  the VPC uses (``DescribeVpcEndpointServices``: zone names map to different zones in each account,
  and an endpoint in a zone without the service fails the data stack's deploy and rolls it back);
- the Deep Learning AMI SSM parameter of the cluster resolves;
- the CDK bootstrap stack's version parameter exists (``--qualifier``).

Exit 0 when nothing FAILs, 1 otherwise (3 when the checks cannot run at all, e.g. no credentials).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

from botocore.exceptions import ClientError

from scripts.common import (
    AWS_CREDENTIALS,
    EXIT_FAILED,
    EXIT_OK,
    Deployment,
    add_common_arguments,
    error_code,
    error_message,
    help_epilog,
    parse_operator_args,
    print_table,
    project_context,
    run,
)
from stacks.gpu_instances import SAGEMAKER_PREFIX, lookup

EC2_VCPU_QUOTAS = {
    ("G", "on-demand"): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("P", "on-demand"): ("L-417A185B", "Running On-Demand P instances"),
    ("G", "spot"): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ("P", "spot"): ("L-7212CCBC", "All P Spot Instance Requests"),
}
"""EC2 vCPU quotas (service code ``ec2``) by quota family and purchase option."""

DLAMI_PARAMETER = "/aws/service/deeplearning/ami/x86_64/{flavour}/latest/ami-id"
DEFAULT_QUALIFIER = "hnb659fds"

OK, WARN, FAIL = "OK", "WARN", "FAIL"


@dataclass(frozen=True)
class Check:
    """One row of the report.

    Attributes:
        name: What was checked.
        detail: What was found.
        result: ``OK``, ``WARN`` or ``FAIL``.
        fix: What to do about a WARN or FAIL.
    """

    name: str
    detail: str
    result: str
    fix: str = ""


def configured_azs(deployment: Deployment) -> list[str]:
    """The AZs the VPC uses: those CDK cached for this account/region, else the first available ones."""
    aws, max_azs = deployment.aws, deployment.config.network.max_azs
    cached = project_context().get(f"availability-zones:account={aws.account()}:region={aws.region}")
    if cached:
        return list(cached)[:max_azs]
    zones = aws.client("ec2").describe_availability_zones(
        Filters=[{"Name": "state", "Values": ["available"]}, {"Name": "zone-type", "Values": ["availability-zone"]}]
    )["AvailabilityZones"]
    return sorted(z["ZoneName"] for z in zones)[:max_azs]


def check_account(deployment: Deployment) -> Check:
    account = deployment.aws.account()
    return Check("account and region", f"account {account}, region {deployment.aws.region}", OK)


def check_offerings(deployment: Deployment, ec2_type: str, purpose: str, azs: Sequence[str]) -> list[Check]:
    """``ec2_type`` offered in the region and in every AZ of ``azs``."""
    ec2 = deployment.aws.client("ec2")
    region = deployment.aws.region
    by_region = ec2.describe_instance_type_offerings(
        LocationType="region", Filters=[{"Name": "instance-type", "Values": [ec2_type]}]
    )["InstanceTypeOfferings"]
    checks = [
        Check(
            f"{ec2_type} in {region} ({purpose})",
            "offered" if by_region else "not offered",
            OK if by_region else FAIL,
            "" if by_region else f"choose a region that offers {ec2_type}, or another GPU type",
        )
    ]
    offered_azs = {
        o["Location"]
        for o in ec2.describe_instance_type_offerings(
            LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [ec2_type]}]
        )["InstanceTypeOfferings"]
    }
    for az in azs:
        ok = az in offered_azs
        checks.append(
            Check(
                f"{ec2_type} in {az} ({purpose})",
                "offered" if ok else "not offered",
                OK if ok else FAIL,
                "" if ok else f"{ec2_type} is not offered in {az}: pick other AZs (network.max_azs) or another type",
            )
        )
    return checks


def check_endpoint_services(deployment: Deployment, azs: Sequence[str]) -> list[Check]:
    """Each configured interface endpoint's service is offered in every zone of ``azs`` (the data stack
    puts one endpoint interface in each zone's Training subnet)."""
    ec2, region = deployment.aws.client("ec2"), deployment.aws.region
    fix_zones = "pick zones that offer it (network.max_azs), or drop it from network.interface_endpoints"
    checks = []
    for name in deployment.config.network.interface_endpoints:
        service = f"com.amazonaws.{region}.{name}"
        try:
            details = ec2.describe_vpc_endpoint_services(ServiceNames=[service])["ServiceDetails"]
        except ClientError as err:
            if error_code(err) != "InvalidServiceName":
                raise
            details = []
        if not details:
            checks.append(Check(f"endpoint {name}", f"{service} not offered in {region}", FAIL, f"drop {name} from network.interface_endpoints"))
            continue
        missing = [az for az in azs if az not in details[0].get("AvailabilityZones", [])]
        checks.append(
            Check(
                f"endpoint {name}",
                f"not in {', '.join(missing)}" if missing else f"offered in {', '.join(azs)}",
                FAIL if missing else OK,
                f"the data stack's {name} endpoint cannot go into {', '.join(missing)}: {fix_zones}" if missing else "",
            )
        )
    return checks


def service_quota(deployment: Deployment, service: str, code: str) -> tuple[Optional[float], str]:
    """Applied value of a quota, else its default; ``(None, why)`` when neither can be read."""
    client = deployment.aws.client("service-quotas")
    why = "not found"
    for call in (client.get_service_quota, client.get_aws_default_service_quota):
        try:
            return float(call(ServiceCode=service, QuotaCode=code)["Quota"]["Value"]), ""
        except ClientError as err:
            if error_code(err) != "NoSuchResourceException":
                why = f"{error_code(err)}: {error_message(err)[:80]}"
    return None, why


def sagemaker_quotas(deployment: Deployment) -> dict[str, float]:
    """SageMaker quotas by name: applied values, completed with the defaults."""
    client = deployment.aws.client("service-quotas")
    quotas: dict[str, float] = {}
    for operation in ("list_aws_default_service_quotas", "list_service_quotas"):  # applied values win
        try:
            for page in client.get_paginator(operation).paginate(ServiceCode="sagemaker"):
                quotas.update({q["QuotaName"]: float(q["Value"]) for q in page["Quotas"]})
        except ClientError:
            continue
    return quotas


def _quota_check(name: str, need: int, have: Optional[float], fix: str, why: str = "not found") -> Check:
    if have is None:
        detail = f"need {need}, quota unreadable ({why})"
        return Check(name, detail, WARN if need == 0 else FAIL, fix if need else "")
    ok = have >= need
    detail = f"need {need}, quota {have:g}" + ("" if need else " (not used by this config)")
    return Check(name, detail, OK if ok else FAIL, "" if ok else fix)


def check_ec2_quotas(deployment: Deployment) -> list[Check]:
    """vCPU quotas of both GPU families, on-demand and spot, against the cluster's nodes."""
    cluster = deployment.config.cluster
    need: dict[tuple[str, str], int] = {key: 0 for key in EC2_VCPU_QUOTAS}
    if cluster.enabled:
        row = lookup(cluster.instance_type)
        if row is not None:
            need[(row.quota_family, "on-demand")] = row.vcpus * cluster.node_count
    checks = []
    for (family, option), (code, title) in EC2_VCPU_QUOTAS.items():
        have, why = service_quota(deployment, "ec2", code)
        checks.append(
            _quota_check(
                f"EC2 vCPUs: {title}",
                need[(family, option)],
                have,
                f"request ec2 quota {code} >= {need[(family, option)]} vCPUs in Service Quotas",
                why,
            )
        )
    return checks


def check_sagemaker_quotas(deployment: Deployment) -> list[Check]:
    """Training-instance quotas for the configured type and count (spot only when spot is on)."""
    job = deployment.config.training_job
    if not job.enabled:
        return []
    quotas = sagemaker_quotas(deployment)
    checks = []
    for kind, needed in (("training job usage", True), ("spot training job usage", job.use_spot)):
        name = f"{job.instance_type} for {kind}"
        need = job.instance_count if needed else 0
        checks.append(
            _quota_check(
                f"SageMaker: {name}",
                need,
                quotas.get(name),
                f"request the SageMaker quota '{name}' >= {need} in Service Quotas",
            )
        )
    return checks


def check_dlami(deployment: Deployment) -> list[Check]:
    """The cluster's DLAMI parameter resolves to an AMI id."""
    cluster = deployment.config.cluster
    if not cluster.enabled:
        return []
    if cluster.pinned_dlami is not None:
        return [check_pinned_dlami(deployment, cluster.pinned_dlami.ami_id)]
    name = DLAMI_PARAMETER.format(flavour=cluster.dlami_flavour)
    try:
        value = deployment.aws.client("ssm").get_parameter(Name=name)["Parameter"]["Value"]
    except ClientError as err:
        if error_code(err) != "ParameterNotFound":
            raise
        return [Check("DLAMI parameter", f"{name} not found", FAIL, "check cluster.dlami_flavour against the DLAMI release notes")]
    return [Check("DLAMI parameter", f"{name} = {value}", OK)]


def check_pinned_dlami(deployment: Deployment, ami_id: str) -> Check:
    """``cluster.pinned_dlami`` names an AMI this account can launch in this region."""
    region = deployment.aws.region
    try:
        images = deployment.aws.client("ec2").describe_images(ImageIds=[ami_id])["Images"]
    except ClientError as err:
        if not error_code(err).startswith("InvalidAMIID"):
            raise
        images = []
    if not images:
        return Check(
            "pinned DLAMI", f"{ami_id} not found in {region}", FAIL,
            "AMI ids differ per region: take the id for this region from the DLAMI release notes (cluster.pinned_dlami.ami_id)",
        )
    return Check("pinned DLAMI", f"{ami_id} = {images[0].get('Name', '?')}", OK)


def check_bootstrap(deployment: Deployment, qualifier: str) -> Check:
    """The CDK bootstrap version parameter exists (``cdk bootstrap`` has been run)."""
    name = f"/cdk-bootstrap/{qualifier}/version"
    try:
        version = deployment.aws.client("ssm").get_parameter(Name=name)["Parameter"]["Value"]
    except ClientError as err:
        if error_code(err) not in ("ParameterNotFound", "AccessDeniedException"):
            raise
        return Check(
            "CDK bootstrap",
            f"{name} not found",
            FAIL,
            f"run: npx cdk bootstrap aws://{deployment.aws.account()}/{deployment.aws.region}",
        )
    return Check("CDK bootstrap", f"version {version} ({name})", OK)


def run_checks(deployment: Deployment, *, qualifier: str = DEFAULT_QUALIFIER) -> list[Check]:
    """Every check, in report order."""
    config = deployment.config
    checks = [check_account(deployment)]
    azs = configured_azs(deployment)
    types: dict[str, str] = {}
    if config.cluster.enabled:
        types[config.cluster.instance_type] = "cluster"
    if config.training_job.enabled:
        ec2_type = config.training_job.instance_type.removeprefix(SAGEMAKER_PREFIX)
        types[ec2_type] = f"{types[ec2_type]} + training job" if ec2_type in types else "training job"
    for ec2_type, purpose in types.items():
        checks.extend(check_offerings(deployment, ec2_type, purpose, azs))
    checks.extend(check_endpoint_services(deployment, azs))
    checks.extend(check_ec2_quotas(deployment))
    checks.extend(check_sagemaker_quotas(deployment))
    checks.extend(check_dlami(deployment))
    checks.append(check_bootstrap(deployment, qualifier))
    return checks


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.preflight",
        description="Check the account and region before a deploy: GPU offerings per AZ, interface endpoints per AZ, "
        "EC2 and SageMaker quotas, the DLAMI, the CDK bootstrap.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            "python -m scripts.preflight",
            [
                ("", "the configuration in cdk.json, in your credentials' region"),
                ("-c gpu_training.training_job.instance_count=4 --region us-west-2", "a bigger job, in another region"),
            ],
            credentials=AWS_CREDENTIALS,
            done="no check FAILs (WARN lines may still say what to fix)",
            failed="a check FAILs (each is printed with what to fix)",
        ),
    )
    parser.add_argument("--qualifier", default=DEFAULT_QUALIFIER, help="CDK bootstrap qualifier (default hnb659fds)")
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, deployment = parse_operator_args(build_parser(), argv)
    checks = run_checks(deployment, qualifier=args.qualifier)
    print_table([[c.result, c.name, c.detail] for c in checks], ["RESULT", "CHECK", "DETAIL"])
    problems = [c for c in checks if c.result != OK and c.fix]
    if problems:
        print("\nto fix:")
        for c in problems:
            print(f"  - [{c.result}] {c.name}: {c.fix}")
    return EXIT_FAILED if any(c.result == FAIL for c in checks) else EXIT_OK


if __name__ == "__main__":
    sys.exit(run(main))
