"""Synthesize the app in-process, exactly as app.py does, for assertions and snapshots."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from aws_cdk import App, Environment
from aws_cdk.assertions import Template

from stacks.components.policy import add_policy_packs
from stacks.config import CONTEXT_KEY, load_config
from stacks.platform import Platform, build_platform

ROOT = Path(__file__).resolve().parent.parent
TEST_ENV = Environment(account="123456789012", region="us-east-1")


def project_context() -> dict[str, Any]:
    """The context from cdk.json plus the committed cdk.context.json lookups."""
    context = dict(json.loads((ROOT / "cdk.json").read_text())["context"])
    context.update(json.loads((ROOT / "cdk.context.json").read_text()))
    return context


@dataclass
class Synth:
    """One synthesized app."""

    app: App
    platform: Platform
    outdir: Path

    def template(self, stack_id: str) -> Template:
        """Assertions template of a stack by construct id, which is its stack name (``gputrain-data``...)."""
        return Template.from_stack(self.app.node.find_child(stack_id))

    def template_json(self, stack_id: str) -> dict[str, Any]:
        """The raw template as written to the cloud assembly."""
        stack = self.app.node.find_child(stack_id)
        return json.loads((self.outdir / stack.template_file).read_text())

    def templates_by_stack_name(self) -> dict[str, dict[str, Any]]:
        """Every stack's raw template under its CloudFormation stack name (``gputrain-data``...),
        the name cross-stack references use."""
        return {
            self.app.node.find_child(sid).stack_name: self.template_json(sid)  # type: ignore[attr-defined]
            for sid in self.stack_ids
        }

    @property
    def stack_ids(self) -> list[str]:
        return [c.node.id for c in self.app.node.children if hasattr(c, "template_file")]

    def validation_report(self) -> dict[str, Any] | None:
        path = self.outdir / "validation-report.json"
        return json.loads(path.read_text()) if path.exists() else None


def synth(overrides: Mapping[str, Any] | None = None, *, outdir: Path, policy_packs: bool = True) -> Synth:
    """Build and synthesize the platform with ``gpu_training.<dotted>`` overrides.

    Args:
        overrides: e.g. ``{"cluster.node_count": 2}``.
        outdir: Where the cloud assembly is written.
        policy_packs: Add cdk-nag's packs (synth raises on an unacknowledged finding).
    """
    context = project_context()
    for key, value in (overrides or {}).items():
        context[f"{CONTEXT_KEY}.{key}"] = json.dumps(value)
    config = load_config(context)
    app = App(context=context, outdir=str(outdir))
    platform = build_platform(app, config, TEST_ENV)
    if policy_packs:
        add_policy_packs(app)
    app.synth()
    return Synth(app=app, platform=platform, outdir=outdir)


_cache: dict[str, Synth] = {}


def cached_synth(tmp_root: Path, overrides: Mapping[str, Any] | None = None) -> Synth:
    """Synthesize once per distinct override set within a test session."""
    key = json.dumps(overrides or {}, sort_keys=True)
    if key not in _cache:
        _cache[key] = synth(overrides, outdir=tmp_root / f"cdk.out.{len(_cache)}")
    return _cache[key]
