#!/usr/bin/env python3
"""CDK entry point: load config -> build stacks -> add policy packs -> synth.

The only place that reads the account, region and process environment.
"""

from __future__ import annotations

import os
import sys

from aws_cdk import App, Environment

from stacks.components.policy import add_policy_packs
from stacks.config import CONTEXT_KEY, ConfigError, PlatformConfig, load_config, platform_overrides
from stacks.platform import Platform, build_platform, stack_name

# Synthesis without AWS credentials (tests, CI, the local emulator) targets the emulator's
# account and region; cdk.context.json holds the lookups cached for it.
OFFLINE_ACCOUNT = "123456789012"
OFFLINE_REGION = "us-east-1"


def resolve_environment(app: App) -> Environment:
    """Account and region: ``-c account=/-c region=``, else the CLI's credentials, else offline."""
    account = app.node.try_get_context("account") or os.environ.get("CDK_DEFAULT_ACCOUNT")
    region = app.node.try_get_context("region") or os.environ.get("CDK_DEFAULT_REGION")
    if not account or not region:
        print(
            f"note: no AWS account/region in the environment; synthesizing for the offline "
            f"environment {OFFLINE_ACCOUNT}/{OFFLINE_REGION}",
            file=sys.stderr,
        )
    return Environment(account=account or OFFLINE_ACCOUNT, region=region or OFFLINE_REGION)


SERVING_ENABLED = f"{CONTEXT_KEY}.serving.enabled"


class PromotionRecordError(Exception):
    """The promotion record exists but cannot be read or used, or the settings contradict it (one line)."""


def promoted_source(config: PlatformConfig, context: dict, region: str) -> tuple[str, str] | None:
    """The model source (``("training_job_name", job)`` or ``("model_artifact_key", key)``) of the live
    model of the promotion record ``/<project>/serving/promotion`` (``scripts.promote``), read at every
    synth with the CLI's credentials (and ``AWS_ENDPOINT_URL``), so ``cdk deploy --all`` keeps the
    promoted model and ``cdk destroy --all`` removes its endpoint.

    ``None`` (the app as configured) when synthesizing offline (the CDK CLI sets
    ``CDK_DEFAULT_ACCOUNT`` only when it found credentials) or for another account than the
    credentials' (``-c account=``), when the command line turns serving off
    (``-c gpu_training.serving.enabled=false``), for ``scripts.promote``'s own deploy (it passes
    ``-c promote:deploy=true`` with the model it records once the endpoint serves it), when nothing
    was promoted, or when the configured model is the live one. Read live rather than cached in
    ``cdk.context.json``, which would go stale at the next promotion or rollback.

    Raises:
        PromotionRecordError: the record cannot be read, or ``serving.training_job_name`` /
            ``serving.model_artifact_key`` (``cdk.json`` or ``-c``) names another model than the live
            one: deploying it would move the endpoint off the recorded model without recording it,
            and the next plain deploy would silently move it back.
    """
    credentials_account = os.environ.get("CDK_DEFAULT_ACCOUNT")
    if not credentials_account:
        return None
    # -c account=<another account> (scripts.architecture's offline synth): the credentials' record is
    # not that account's.
    if context.get("account") and str(context["account"]) != credentials_account:
        return None
    if str(platform_overrides(context).get(SERVING_ENABLED, "")).strip().lower() == "false":
        return None
    from stacks.components.endpoint_spec import PROMOTE_CONTEXT, TEARDOWN_CONTEXT, context_flag, promotion_record_name

    if context_flag(context.get(PROMOTE_CONTEXT)):
        return None
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    from scripts.common import OperatorError
    from scripts.promote import ARTIFACT_TEMPLATE, PromotionRecord, artifact_key, source_job

    name = promotion_record_name(config.project_name)
    fix = f"grant ssm:GetParameter on {name}, or pass -c {SERVING_ENABLED}=false to leave the serving stack out"
    try:
        value = boto3.session.Session(region_name=region).client("ssm").get_parameter(Name=name)["Parameter"]["Value"]
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") == "ParameterNotFound":
            return None
        raise PromotionRecordError(f"cannot read the promotion record {name} ({err.response.get('Error', {}).get('Code')}): {fix}") from None
    except BotoCoreError as err:
        raise PromotionRecordError(f"cannot read the promotion record {name} ({err}): {fix}") from None
    try:
        record = PromotionRecord.from_json(value, f"the promotion record {name}")
    except OperatorError as err:
        raise PromotionRecordError(f"{err}, or pass -c {SERVING_ENABLED}=false") from None
    if record.live is None:
        return None
    live, live_key = record.live, artifact_key(record.live.model_data_url)
    serving = config.serving
    if serving.training_job_name or serving.model_artifact_key:
        if serving.model_key == live_key or context_flag(context.get(TEARDOWN_CONTEXT)):
            return None
        setting = "training_job_name" if serving.training_job_name else "model_artifact_key"
        value = serving.training_job_name or serving.model_artifact_key
        job = serving.training_job_name or source_job(serving.model_key)
        promote = (
            f"python -m scripts.promote {job}"
            if job
            else f"python -m scripts.promote JOB --artifact-key {serving.model_artifact_key} (JOB: the training job whose model it is)"
        )
        raise PromotionRecordError(
            f"serving.{setting}={value} is not the live model of the promotion record {name} ({live.job}, {live.model_data_url}): "
            f"deploying it would replace the live model without recording it, and the next deploy would move the endpoint back; "
            f"serve it with {promote}, or clear serving.{setting} (null in cdk.json, no -c) to keep serving {live.job}"
            " (to tear down meanwhile: python -m scripts.teardown --destroy)"
        )
    print(f"note: the serving stack serves {live.job}, the live model of the promotion record {name}", file=sys.stderr)
    if live_key == ARTIFACT_TEMPLATE.format(job=live.job):
        return "training_job_name", live.job
    return "model_artifact_key", live_key


class LeftOutStackError(Exception):
    """A project stack is deployed but not in this app, so ``cdk destroy --all`` would leave it (one line)."""


def _left_out(config: PlatformConfig, unit: str) -> str:
    """``<project>-<unit>`` is deployed but not in the app: why, and the fix."""
    name = stack_name(config, unit)
    if unit == "serving":
        why = "serving.enabled is false, and no live model of the promotion record was read"
        fix = "record its model with python -m scripts.promote JOB, or delete it with python -m scripts.teardown --stop-running --destroy"
    else:
        section = {"cluster": "cluster", "training": "training_job"}[unit]
        why = f"{section}.enabled is false"
        fix = f"pass -c {CONTEXT_KEY}.{section}.enabled=true to have it (npx cdk destroy {name} then removes it)"
    return f"{name} is deployed but not in this app ({why}), so cdk destroy --all would leave it running: {fix}"


def check_no_deployed_stack_left_out(config: PlatformConfig, platform: Platform, region: str) -> None:
    """Refuse an app that leaves out a compute stack the account has: ``cdk destroy --all`` would
    leave it running and ``cdk deploy --all`` would not update it (the CLI cannot tell the app
    which command it runs, so every command is refused until the app has the stack again).

    The app's stacks depend on settings (``cluster.enabled``, ``training_job.enabled``,
    ``serving.enabled`` and the promotion record), which a later command may not repeat. Read,
    like the promotion record, only with the CLI's credentials: one DescribeStacks per stack the
    app leaves out (none while every unit is in). A check that cannot be made is one warning line.

    Raises:
        LeftOutStackError: one line naming each such stack, why it is out, and the fix.
    """
    if not os.environ.get("CDK_DEFAULT_ACCOUNT"):
        return
    have = {stack.stack_name for stack in (platform.gpu_cluster, platform.training_job, platform.serving) if stack is not None}
    units = [unit for unit in ("cluster", "training", "serving") if stack_name(config, unit) not in have]
    if not units:
        return
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    cloudformation = boto3.session.Session(region_name=region).client("cloudformation")
    deployed = []
    for unit in units:
        name = stack_name(config, unit)
        try:
            stacks = cloudformation.describe_stacks(StackName=name)["Stacks"]
        except ClientError as err:
            if "does not exist" in str(err):
                continue
            cause = err.response.get("Error", {}).get("Code")
        except BotoCoreError as err:
            cause = str(err)
        else:
            if stacks and stacks[0]["StackStatus"] != "DELETE_COMPLETE":
                deployed.append(unit)
            continue
        print(f"warning: cannot check whether {name} is deployed ({cause}); if it is, cdk destroy --all leaves it", file=sys.stderr)
    if deployed:
        raise LeftOutStackError("; ".join(_left_out(config, unit) for unit in deployed))


def main(*, policy_packs: bool = True) -> int:
    """Synthesize the platform. ``policy_packs=False`` exists for the synth benchmark only."""
    app = App()
    context = app.node.get_all_context()
    try:
        config = load_config(context)
        env = resolve_environment(app)
        source = promoted_source(config, context, str(env.region))
        if source is not None:
            setting, value = source
            other = "model_artifact_key" if setting == "training_job_name" else "training_job_name"
            config = load_config(
                {
                    **context,
                    SERVING_ENABLED: "true",
                    f"{CONTEXT_KEY}.serving.{setting}": value,
                    f"{CONTEXT_KEY}.serving.{other}": "null",
                }
            )
    except ConfigError as err:
        print(f"error: invalid configuration: {err}", file=sys.stderr)
        return 2
    except PromotionRecordError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    platform = build_platform(app, config, env)
    try:
        check_no_deployed_stack_left_out(config, platform, str(env.region))
    except LeftOutStackError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if policy_packs:
        add_policy_packs(app)
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
