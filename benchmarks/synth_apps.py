"""CDK apps the synth benchmark runs through the real CLI (``cdk synth --app ...``).

    python benchmarks/synth_apps.py minimal     # one S3 bucket: the baseline
    python benchmarks/synth_apps.py no-packs    # the platform without cdk-nag
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def minimal() -> int:
    from aws_cdk import App, Stack
    from aws_cdk import aws_s3 as s3

    app = App()
    stack = Stack(app, "Minimal")
    s3.Bucket(stack, "Bucket")
    app.synth()
    return 0


def main() -> int:
    which = sys.argv[1]
    if which == "minimal":
        return minimal()
    if which == "no-packs":
        import app

        return app.main(policy_packs=False)
    raise SystemExit(f"unknown app {which!r}: use minimal or no-packs")


if __name__ == "__main__":
    sys.exit(main())
