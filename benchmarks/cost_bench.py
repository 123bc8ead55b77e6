"""Benchmark 5: the cost estimator's figures for the configured platform, as table rows.

The baseline of the job cost is on-demand EC2 for the same instances, so the ratios show what
SageMaker's surcharge and spot do to the bill.
"""

from __future__ import annotations

import json
from pathlib import Path

from scripts import cost
from stacks.config import load_config

ROOT = Path(__file__).resolve().parent.parent


def run() -> list[dict]:
    cfg = load_config(json.loads((ROOT / "cdk.json").read_text())["context"])
    hours = cfg.training_job.max_runtime_seconds / 3600
    ec2 = cost.ec2_cluster(cfg, hours)
    sm = cost.sagemaker_job(cfg, hours)
    rows = []
    base = ec2[0].usd_per_hour if ec2 else None
    sm_row = cost.lookup(cfg.training_job.instance_type)
    sm_base = sm_row.on_demand_usd_per_hour * cfg.training_job.instance_count if sm_row else None
    for line, baseline in [*((line, base) for line in ec2), *((line, sm_base) for line in sm)]:
        rows.append({
            "benchmark": "cost", "metric": line.item, "value": f"${line.usd_per_hour:.3f}/h, ${line.usd_per_run:.2f}/job ({hours:g} h)",
            "ratio": f"{line.usd_per_hour / baseline:.2f} vs EC2 on-demand of the same instances" if baseline else "",
            "target": line.note,
        })
    idle = cost.standing(cfg, dataset_gb=100, artifacts_gb=50, image_gb=8)
    total = sum(line.usd_per_hour for line in idle)
    rows.append({
        "benchmark": "cost", "metric": "standing, no job running (100 GB data, 50 GB artifacts)",
        "value": f"${total * cost.HOURS_PER_MONTH:.2f}/month", "ratio": f"{total / base:.2f} of one EC2 node-hour per hour" if base else "",
        "target": "no compute: " + "; ".join(line.item for line in idle),
    })
    return rows
