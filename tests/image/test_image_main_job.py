"""The README's ``scripts/run-local.sh --containers``: the main job with every job and endpoint in a
container of the built image, and no container left behind."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.image import containers
from tests.trainer.helpers import ROOT

pytestmark = [pytest.mark.image, pytest.mark.slow, pytest.mark.integration]


def _left_behind(label: str) -> tuple[list[str], list[str]]:
    """Names of the containers and of the networks that carry ``label``."""
    left = containers.docker("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}")
    networks = containers.docker("network", "ls", "--filter", f"label={label}", "--format", "{{.Name}}")
    return left.stdout.split(), networks.stdout.split()


def test_run_local_containers_trains_and_serves_in_the_image_and_leaves_no_container(image, tmp_path) -> None:
    run = subprocess.run(
        ["bash", "scripts/run-local.sh", "--containers", "--work-dir", str(tmp_path / "run")],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,
    )
    out = run.stdout
    assert run.returncode == 0, f"exit {run.returncode}\n{out[-6000:]}\n{run.stderr[-3000:]}"
    assert f"--containers: jobs and endpoints run in containers of {image.tag}" in out
    assert re.search(r"job gputrain-\S+: Completed after", out), out[-4000:]
    assert re.search(rf"endpoint gputrain-endpoint: {re.escape(image.tag)} serve \(container gputrain-emu-\S+\) healthy", out), out[-4000:]
    accuracy = float(re.search(r"held-out accuracy ([0-9.]+)", out).group(1))  # type: ignore[union-attr]
    assert accuracy >= 0.8, out[-4000:]
    assert "=> OK: 0 error(s)" in out
    # The training container's own lines reached the job's log (the trainer's config line comes first).
    (log,) = (tmp_path / "run" / "jobs").glob("gputrain-*/container.log")
    assert log.read_text().startswith("[trainer] config model=\"mlp\"")
    # This run's containers and networks (another run's may be running beside it) carry its label.
    label = re.search(r"each is labelled (gputrain-emu\.run=[0-9a-f]+)", out).group(1)  # type: ignore[union-attr]
    left, networks = _left_behind(label)
    assert left == [], "a container outlived its job or endpoint"
    assert networks == [], "a job's network outlived it"
