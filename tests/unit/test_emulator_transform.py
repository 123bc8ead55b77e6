"""The emulator's batch transform runner, the parts that need no emulator: what a job asks, how its
input is split and batched, and how the answers are assembled (scripts.emulator.transform)."""

from __future__ import annotations

from typing import Any

import pytest

from scripts.emulator.transform import (
    InputObject,
    TransformFailed,
    TransformRequest,
    assemble,
    batches,
    input_objects,
    split_records,
)


def _job(**overrides: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "TransformJobName": "t",
        "ModelName": "m",
        "TransformInput": {
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://in/score/"}},
            "ContentType": "text/csv",
            "SplitType": "Line",
        },
        "TransformOutput": {"S3OutputPath": "s3://out/scored", "Accept": "application/json", "AssembleWith": "Line"},
        "BatchStrategy": "MultiRecord",
    }
    job.update(overrides)
    return job


def test_the_request_reads_sagemakers_defaults_and_sets_the_batch_environment() -> None:
    request = TransformRequest.from_description(_job(Environment={"MY": "1"}))
    assert (request.max_payload_bytes, request.max_concurrent, request.invocation_timeout) == (6 * 1024 * 1024, 1, 600.0)
    assert request.batch_environment() == {
        "MY": "1",
        "SAGEMAKER_BATCH": "true",
        "SAGEMAKER_MAX_PAYLOAD_IN_MB": "6",
        "SAGEMAKER_BATCH_STRATEGY": "MULTI_RECORD",
        "SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": "1",
    }


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        ({"TransformInput": {**_job()["TransformInput"], "SplitType": "RecordIO"}}, "SplitType RecordIO is not played"),
        ({"DataProcessing": {"InputFilter": "$[1:]", "JoinSource": "None", "OutputFilter": "$"}}, "DataProcessing {'InputFilter': '$[1:]'}"),
        ({"DataProcessing": {"JoinSource": "Input"}}, "DataProcessing {'JoinSource': 'Input'}"),
    ],
)
def test_what_the_runner_cannot_play_fails_the_job_before_anything_runs(overrides: dict[str, Any], said: str) -> None:
    with pytest.raises(TransformFailed, match="^ClientError: ") as refused:
        TransformRequest.from_description(_job(**overrides))
    assert said in str(refused.value) and "nothing ran" in str(refused.value)


def test_default_data_processing_is_accepted() -> None:
    TransformRequest.from_description(_job(DataProcessing={"InputFilter": "$", "JoinSource": "None", "OutputFilter": "$"}))


def test_lines_are_records_and_an_unsplit_object_is_one() -> None:
    assert split_records(b"1,2\n\n3,4\r\n5,6", "Line") == [b"1,2", b"3,4", b"5,6"]
    assert split_records(b"1,2\n3,4\n", "None") == [b"1,2\n3,4\n"]


def test_multi_record_batches_fill_the_payload_limit_in_order() -> None:
    request = TransformRequest.from_description(_job(MaxPayloadInMB=1))
    record = b"x" * (300 * 1024)
    sent = list(batches([record] * 7, request, "s3://in/a.csv"))
    assert [(first, last) for first, last, _ in sent] == [(1, 3), (4, 6), (7, 7)]
    assert all(len(payload) <= 1024 * 1024 for _, _, payload in sent)
    assert sent[0][2] == b"\n".join([record] * 3) + b"\n"


def test_single_record_sends_each_record_alone() -> None:
    request = TransformRequest.from_description(_job(BatchStrategy="SingleRecord"))
    assert list(batches([b"a", b"b"], request, "s3://in/a.csv")) == [(1, 1, b"a"), (2, 2, b"b")]


def test_a_record_over_the_payload_limit_fails_naming_it() -> None:
    request = TransformRequest.from_description(_job(MaxPayloadInMB=1))
    with pytest.raises(TransformFailed, match=r"^ClientError: s3://in/a.csv record 2 is 1048577 bytes, over MaxPayloadInMB \(1 MB\)"):
        list(batches([b"a", b"x" * (1024 * 1024 + 1)], request, "s3://in/a.csv"))


def test_assemble_with_line_ends_every_answer_with_one_newline() -> None:
    assert assemble([b'{"a":1}', b'{"b":2}\n'], "Line") == b'{"a":1}\n{"b":2}\n'
    assert assemble([b"ab", b"cd"], "None") == b"abcd"


class _S3:
    def __init__(self, keys: list[str]) -> None:
        self.keys = keys

    def get_paginator(self, _: str) -> Any:
        keys = self.keys

        class Paginator:
            def paginate(self, Bucket: str, Prefix: str) -> list[dict[str, Any]]:  # noqa: N803 - boto3's names
                return [{"Contents": [{"Key": k} for k in keys if k.startswith(Prefix)]}]

        return Paginator()


def test_each_output_mirrors_the_key_below_the_input_prefix() -> None:
    s3 = _S3(["score/a.csv", "score/", "score/day=1/b.csv", "scores-other/c.csv"])
    request = TransformRequest.from_description(_job())
    assert input_objects(s3, request) == [InputObject("in", "score/a.csv", "a.csv"), InputObject("in", "score/day=1/b.csv", "day=1/b.csv")]
    one = TransformRequest.from_description(_job(TransformInput={**_job()["TransformInput"], "DataSource": {"S3DataSource": {"S3Uri": "s3://in/score/a.csv"}}}))
    assert input_objects(s3, one) == [InputObject("in", "score/a.csv", "a.csv")]
    empty = TransformRequest.from_description(_job(TransformInput={**_job()["TransformInput"], "DataSource": {"S3DataSource": {"S3Uri": "s3://in/none/"}}}))
    with pytest.raises(TransformFailed, match="no S3 objects under s3://in/none/"):
        input_objects(s3, empty)
