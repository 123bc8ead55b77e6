"""Sandbox mode on the emulator: ``delete_data_on_destroy=true`` makes destroy delete the data.

Only the data plane is deployed (it holds everything the setting changes), which keeps this
run short; the full lifecycle is in ``test_lifecycle.py``.
"""

from __future__ import annotations

from typing import Iterator

import pytest
from botocore.exceptions import ClientError

from scripts.emulator.lifecycle import Lifecycle, Options
from scripts.teardown_audit import KEPT

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    # The harness reports the resource types the emulator skips (Lifecycle.deploy_check).
    pytest.mark.filterwarnings("ignore:Tried to parse:UserWarning"),
]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lifecycle]:
    """Data plane deployed with delete_data_on_destroy, objects written, destroyed, audited."""
    lifecycle = Lifecycle(
        Options(work_dir=tmp_path_factory.mktemp("sandbox"), sandbox=True, stacks=("gputrain-data",), train=False)
    )
    try:
        lifecycle.start()
        lifecycle.bootstrap_and_synth()
        lifecycle.deploy()
        data = lifecycle.outputs[f"{lifecycle.config().project_name}-data"]
        s3 = lifecycle.client("s3")
        for bucket in (data["DatasetsBucketName"], data["ArtifactsBucketName"]):
            # Two versions of one object: the auto-delete handler must remove every version.
            s3.put_object(Bucket=bucket, Key="train/part-00000.csv", Body=b"f0,label\n1.0,0\n")
            s3.put_object(Bucket=bucket, Key="train/part-00000.csv", Body=b"f0,label\n2.0,1\n")
        lifecycle.destroy()
        lifecycle.audit()
        yield lifecycle
    finally:
        lifecycle.close()


def test_outputs_say_the_data_is_deleted_on_destroy(sandbox: Lifecycle) -> None:
    retention = sandbox.outputs[f"{sandbox.config().project_name}-data"]["DataRetention"]
    assert "DELETED" in retention


def test_datasets_and_artifacts_buckets_are_gone(sandbox: Lifecycle) -> None:
    data = sandbox.outputs[f"{sandbox.config().project_name}-data"]
    s3 = sandbox.client("s3")
    for bucket in (data["DatasetsBucketName"], data["ArtifactsBucketName"], data["AccessLogBucketName"]):
        with pytest.raises(ClientError) as err:
            s3.head_bucket(Bucket=bucket)
        assert err.value.response["Error"]["Code"] in {"404", "NoSuchBucket"}


def test_repository_is_gone(sandbox: Lifecycle) -> None:
    name = sandbox.outputs[f"{sandbox.config().project_name}-data"]["RepositoryName"]
    with pytest.raises(ClientError) as err:
        sandbox.client("ecr").describe_repositories(repositoryNames=[name])
    assert err.value.response["Error"]["Code"] == "RepositoryNotFoundException"


def test_audit_finds_nothing_kept_and_no_error(sandbox: Lifecycle) -> None:
    report = sandbox.audit_report
    assert report.ok, report.render()
    assert report.of(KEPT) == []
