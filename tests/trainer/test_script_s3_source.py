"""Script mode with an ``s3://`` submit directory and no ``code`` channel: downloaded unless the job is isolated.

The SageMaker SDK's default (no network isolation) uploads ``sourcedir.tar.gz`` and only names it;
AWS's containers download it. Here S3 is a moto server on loopback, reached through
``AWS_ENDPOINT_URL`` as the emulator reaches it.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Iterator

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.trainer.helpers import run_trainer
from tests.trainer.script_helpers import script_job

BUCKET = "sdk-default-bucket"
SCRIPT = "import os, sys\nopen(os.path.join(os.environ['SM_MODEL_DIR'], 'ran'), 'w').write(' '.join(sys.argv[1:]))\n"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
    client.create_bucket(Bucket=BUCKET)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        data = SCRIPT.encode()
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    client.put_object(Bucket=BUCKET, Key="job-1/source/sourcedir.tar.gz", Body=buffer.getvalue())
    client.put_object(Bucket=BUCKET, Key="job-2/code/train.py", Body=SCRIPT.encode())
    client.put_object(Bucket=BUCKET, Key="job-2/code/lib/helper.py", Body=b"X = 1\n")
    yield endpoint
    server.stop()


def _aws(endpoint: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}


def _job(base: Path, submit: str, isolated: bool | None) -> Path:
    script_job(base, submit, hyperparameters={"epochs": 2}, channels={})
    if isolated is not None:
        (base / "input" / "config" / "trainingjobconfig.json").write_text(json.dumps({"EnableNetworkIsolation": isolated}))
    return base


@pytest.mark.parametrize("isolated", [False, None], ids=["not-isolated", "unknown"])
def test_a_tarball_is_downloaded_when_the_job_is_not_isolated(tmp_path: Path, s3_endpoint: str, isolated: bool | None) -> None:
    base = _job(tmp_path / "opt-ml", f"s3://{BUCKET}/job-1/source/sourcedir.tar.gz", isolated)
    run = run_trainer(base, **_aws(s3_endpoint))
    assert run.returncode == 0, run.explain()
    assert (base / "model" / "ran").read_text() == "--epochs 2", "the downloaded script ran with its arguments"
    assert run.events("source-download")[0]["uri"] == f"s3://{BUCKET}/job-1/source/sourcedir.tar.gz"


def test_a_prefix_of_files_is_downloaded_as_the_source_directory(tmp_path: Path, s3_endpoint: str) -> None:
    base = _job(tmp_path / "opt-ml", f"s3://{BUCKET}/job-2/code", False)
    run = run_trainer(base, **_aws(s3_endpoint))
    assert run.returncode == 0, run.explain()
    assert (base / "model" / "ran").is_file()
    assert (base / "code-download" / "source" / "lib" / "helper.py").read_text() == "X = 1\n"


def test_a_failed_download_says_what_failed_and_what_isolation_would_need(tmp_path: Path, s3_endpoint: str) -> None:
    base = _job(tmp_path / "opt-ml", f"s3://{BUCKET}/job-9/source/sourcedir.tar.gz", None)
    run = run_trainer(base, **_aws(s3_endpoint))
    assert run.returncode == 9, run.explain()
    failure = run.failure or ""
    assert failure.startswith(f"Could not download sagemaker_submit_directory s3://{BUCKET}/job-9/source/sourcedir.tar.gz: "), failure
    assert "Not Found" in failure and "If this job runs with network isolation it cannot reach S3" in failure
    assert not (base / "model" / "model.keras").exists(), "never falls back to a built-in model"


def test_an_isolated_job_is_told_to_use_the_code_channel_without_trying(tmp_path: Path, s3_endpoint: str) -> None:
    base = _job(tmp_path / "opt-ml", f"s3://{BUCKET}/job-1/source/sourcedir.tar.gz", True)
    run = run_trainer(base, **_aws(s3_endpoint))
    assert run.returncode == 9, run.explain()
    assert "this job runs with network isolation and cannot read S3 itself: add an input channel named 'code'" in (run.failure or "")
    assert not (base / "code-download").exists(), "an isolated job does not try S3"
