#!/usr/bin/env python3
"""CDK entry point: load config -> build stacks -> add policy packs -> synth.

The only place that reads the account, region and process environment.
"""

from __future__ import annotations

import os
import sys

from aws_cdk import App, Environment

from stacks.components.policy import add_policy_packs
from stacks.config import ConfigError, load_config
from stacks.platform import build_platform

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


def main(*, policy_packs: bool = True) -> int:
    """Synthesize the platform. ``policy_packs=False`` exists for the synth benchmark only."""
    app = App()
    try:
        config = load_config(app.node.get_all_context())
    except ConfigError as err:
        print(f"error: invalid configuration: {err}", file=sys.stderr)
        return 2
    build_platform(app, config, resolve_environment(app))
    if policy_packs:
        add_policy_packs(app)
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
