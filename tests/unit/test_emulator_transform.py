"""The emulator's batch transform runner, the parts that need no emulator: what a job asks, what
the container answers to ``GET /execution-parameters``, how the input is split and batched, and how
the answers are assembled (scripts.emulator.transform)."""

from __future__ import annotations

import concurrent.futures
import io
import json
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from scripts.emulator.data_processing import DataProcessing, JsonPath, RecordFailed
from scripts.emulator.transform import (
    InputObject,
    TransformFailed,
    TransformRequest,
    assemble,
    batches,
    execution_parameters,
    input_objects,
    invoke,
    split_records,
    transform_object,
)

MB = 1024 * 1024


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


def test_the_container_learns_what_the_job_set_and_sagemakers_defaults_fill_the_rest() -> None:
    request = TransformRequest.from_description(_job(Environment={"MY": "1"}))
    # BatchStrategy is the job's; the other two are left to the container's /execution-parameters.
    assert request.unsettled == ["MaxConcurrentTransforms", "MaxPayloadInMB"]
    assert request.batch_environment() == {"MY": "1", "SAGEMAKER_BATCH": "true", "SAGEMAKER_BATCH_STRATEGY": "MULTI_RECORD"}
    settled = request.settled(None)  # no answer: SageMaker's defaults
    assert (settled.max_payload_bytes, settled.max_concurrent, settled.batch_strategy) == (6 * MB, 1, "MultiRecord")
    assert settled.invocation_timeout == 600.0
    full = TransformRequest.from_description(_job(BatchStrategy="SingleRecord", MaxPayloadInMB=20, MaxConcurrentTransforms=4))
    assert full.unsettled == [] and full.settled({"MaxPayloadInMB": 1, "MaxConcurrentTransforms": 9}) == full
    assert full.batch_environment() == {
        "SAGEMAKER_BATCH": "true",
        "SAGEMAKER_MAX_PAYLOAD_IN_MB": "20",
        "SAGEMAKER_BATCH_STRATEGY": "SINGLE_RECORD",
        "SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": "4",
    }


def test_the_jobs_values_win_over_the_containers_answer_which_wins_over_the_defaults() -> None:
    answer = {"MaxConcurrentTransforms": 8, "BatchStrategy": "SINGLE_RECORD", "MaxPayloadInMB": 12}
    unset = TransformRequest.from_description(_job(BatchStrategy=None, MaxConcurrentTransforms=0))  # 0 is unset too
    assert unset.batch_environment() == {"SAGEMAKER_BATCH": "true"}
    settled = unset.settled(answer)
    assert (settled.max_concurrent, settled.batch_strategy, settled.max_payload_mb) == (8, "SingleRecord", 12)
    partly = TransformRequest.from_description(_job(MaxPayloadInMB=0)).settled({"MaxPayloadInMB": 12})
    assert (partly.max_concurrent, partly.batch_strategy, partly.max_payload_mb) == (1, "MultiRecord", 0)


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ({"MaxPayloadInMB": 101}, "MaxPayloadInMB 101; it must be a whole number of MB from 0 to 100"),
        ({"MaxPayloadInMB": "6"}, "MaxPayloadInMB '6'; it must be a whole number of MB"),
        ({"MaxConcurrentTransforms": 0}, "MaxConcurrentTransforms 0; it must be a whole number >= 1"),
        ({"MaxConcurrentTransforms": True}, "MaxConcurrentTransforms True"),
        ({"BatchStrategy": "EVERYTHING"}, "BatchStrategy 'EVERYTHING'; it must be SINGLE_RECORD or MULTI_RECORD"),
    ],
)
def test_an_answer_no_job_could_set_fails_the_job_in_one_line(answer: dict[str, Any], said: str) -> None:
    request = TransformRequest.from_description(_job(BatchStrategy=None))
    with pytest.raises(TransformFailed, match="^ClientError: the model container's GET /execution-parameters answered ") as refused:
        request.settled(answer)
    assert said in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        ({"TransformInput": {**_job()["TransformInput"], "SplitType": "RecordIO"}}, "SplitType RecordIO is not played"),
    ],
)
def test_what_the_runner_cannot_play_fails_the_job_before_anything_runs(overrides: dict[str, Any], said: str) -> None:
    with pytest.raises(TransformFailed, match="^ClientError: ") as refused:
        TransformRequest.from_description(_job(**overrides))
    assert said in str(refused.value) and "nothing ran" in str(refused.value)


def test_default_data_processing_asks_nothing() -> None:
    request = TransformRequest.from_description(_job(DataProcessing={"InputFilter": "$", "JoinSource": "None", "OutputFilter": "$"}))
    assert request.data_processing is None
    assert TransformRequest.from_description(_job(DataProcessing={"InputFilter": ""})).data_processing is None


def test_lines_are_records_and_an_unsplit_object_is_one() -> None:
    assert split_records(b"1,2\n\n3,4\r\n5,6", "Line") == [b"1,2", b"3,4", b"5,6"]
    assert split_records(b"1,2\n3,4\n", "None") == [b"1,2\n3,4\n"]


def test_multi_record_batches_fill_the_payload_limit_in_order() -> None:
    request = TransformRequest.from_description(_job(MaxPayloadInMB=1)).settled(None)
    record = b"x" * (300 * 1024)
    sent = list(batches([record] * 7, request, "s3://in/a.csv"))
    assert [(first, last) for first, last, _ in sent] == [(1, 3), (4, 6), (7, 7)]
    assert all(len(payload) <= 1024 * 1024 for _, _, payload in sent)
    assert sent[0][2] == b"\n".join([record] * 3) + b"\n"


def test_single_record_sends_each_record_alone() -> None:
    request = TransformRequest.from_description(_job(BatchStrategy="SingleRecord")).settled(None)
    assert list(batches([b"a", b"b"], request, "s3://in/a.csv")) == [(1, 1, b"a"), (2, 2, b"b")]


def test_a_record_over_the_payload_limit_fails_naming_it() -> None:
    request = TransformRequest.from_description(_job(MaxPayloadInMB=1)).settled(None)
    with pytest.raises(TransformFailed, match=r"^ClientError: s3://in/a.csv record 2 is 1048577 bytes, over MaxPayloadInMB \(1 MB\)"):
        list(batches([b"a", b"x" * (1024 * 1024 + 1)], request, "s3://in/a.csv"))
    # The limit the container chose is the one records are held to.
    answered = TransformRequest.from_description(_job()).settled({"MaxPayloadInMB": 1})
    with pytest.raises(TransformFailed, match=r"^ClientError: s3://in/b.csv record 3 is 1048577 bytes, over MaxPayloadInMB \(1 MB\)"):
        list(batches([b"a", b"b", b"x" * (MB + 1)], answered, "s3://in/b.csv"))


@pytest.mark.parametrize("seed", range(5))
def test_no_multi_record_payload_is_ever_over_the_limit_and_every_record_arrives_once_in_order(seed: int) -> None:
    request = TransformRequest.from_description(_job()).settled({"MaxPayloadInMB": 1})
    rng = random.Random(seed)
    # Sizes around the limit's edges: a record of exactly the limit, one a byte short, many small ones.
    sizes = [MB, MB - 1, MB - 2, 1] + [rng.choice([1, 2, 1000, 300_000, MB // 2, MB // 2 - 1]) for _ in range(40)]
    rng.shuffle(sizes)
    records = [bytes([97 + i % 26]) * size for i, size in enumerate(sizes)]
    sent = list(batches(records, request, "s3://in/a.csv"))
    assert all(len(payload) <= MB for _, _, payload in sent)
    assert [first for first, _, _ in sent] == [1] + [last + 1 for _, last, _ in sent[:-1]] and sent[-1][1] == len(records)
    assert [line for _, _, payload in sent for line in payload.split(b"\n") if line] == records


def test_the_containers_payload_limit_sizes_the_batches() -> None:
    record = b"1.0,2.0,3.0,4.0" + b"0" * 1000
    records = [record] * 3000  # ~3 MB
    default = list(batches(records, TransformRequest.from_description(_job()).settled(None), "s3://in/a.csv"))
    assert len(default) == 1  # SageMaker's 6 MB takes them all
    small = list(batches(records, TransformRequest.from_description(_job()).settled({"MaxPayloadInMB": 1}), "s3://in/a.csv"))
    assert len(small) == 3 and all(len(payload) <= MB for _, _, payload in small)


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


# --- the container's side of the conversation, played by a stub HTTP server ---------------------


@contextmanager
def _container(routes: dict[str, tuple[int, bytes]]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A loopback HTTP server answering ``routes`` (path -> status, body); yields its URL and the
    requests it saw (path, headers, body)."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: bytes = b"") -> None:
            seen.append({"path": self.path, "headers": dict(self.headers), "body": body})
            status, reply = routes.get(self.path, (404, b'{"error": "Not Found"}'))
            self.send_response(status)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._answer()

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            if self.headers.get("Transfer-Encoding") == "chunked":
                body = b""
                while size := int(self.rfile.readline().strip(), 16):
                    body += self.rfile.read(size)
                    self.rfile.readline()
                self.rfile.readline()
            else:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._answer(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_the_runner_asks_the_container_and_takes_its_answer() -> None:
    answer = {"MaxConcurrentTransforms": 4, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 2}
    with _container({"/execution-parameters": (200, json.dumps(answer).encode())}) as (url, seen):
        assert execution_parameters(url) == answer
    assert [request["path"] for request in seen] == ["/execution-parameters"]
    settled = TransformRequest.from_description(_job(BatchStrategy=None)).settled(answer)
    assert (settled.max_concurrent, settled.batch_strategy, settled.max_payload_bytes) == (4, "MultiRecord", 2 * MB)


def test_a_container_without_the_route_leaves_sagemakers_defaults() -> None:
    with _container({}) as (url, _):
        assert execution_parameters(url) is None
    with _container({"/execution-parameters": (503, b"starting")}) as (url, _):
        assert execution_parameters(url) is None


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]"])
def test_a_200_that_is_not_a_json_object_fails_the_job_in_one_line(body: bytes) -> None:
    said = r"^ClientError: the model container's GET /execution-parameters answered 200 with .*not a JSON object\.$"
    with _container({"/execution-parameters": (200, body)}) as (url, _), pytest.raises(TransformFailed, match=said):
        execution_parameters(url)


def test_a_payload_without_limit_is_streamed_chunked_and_a_limited_one_has_a_length() -> None:
    payload = b"1,2,3,4\n" * 300_000  # 2.4 MB: three chunks
    with _container({"/invocations": (200, b'{"ok": 1}')}) as (url, seen):
        unlimited = TransformRequest.from_description(_job(MaxPayloadInMB=0)).settled(None)
        assert invoke(url, payload, unlimited, "s3://in/a.csv", 1, 300_000) == b'{"ok": 1}'
        limited = TransformRequest.from_description(_job(MaxPayloadInMB=6)).settled(None)
        invoke(url, payload, limited, "s3://in/a.csv", 1, 300_000)
    assert seen[0]["headers"].get("Transfer-Encoding") == "chunked" and "Content-Length" not in seen[0]["headers"]
    assert seen[1]["headers"].get("Content-Length") == str(len(payload))
    assert seen[0]["body"] == seen[1]["body"] == payload
    assert seen[0]["headers"]["Content-Type"] == "text/csv" and seen[0]["headers"]["Accept"] == "application/json"


# --- DataProcessing: InputFilter, JoinSource, OutputFilter (scripts.emulator.data_processing) -----

ROW = ["id7", "0.5", "1.5", "2.5"]
DOC = {"id": 7, "features": [1, 2], "meta": {"x": 1, "y": 2}, "field1": {"child1": "a", "child2": "b", "child3": "c"}}


@pytest.mark.parametrize(
    ("path", "value", "selected"),
    [
        ("$", ROW, ROW),
        ("$[1:]", ROW, ["0.5", "1.5", "2.5"]),
        ("$[0,2]", ROW, ["id7", "1.5"]),
        ("$[0,-1]", ROW, ["id7", "2.5"]),
        ("$[1]", ROW, "0.5"),  # a single index selects the value itself
        ("$[1:2]", ROW, ["0.5", "1.5"]),  # the guide: a slice includes both ends
        ("$[:1]", ROW, ["id7", "0.5"]),
        ("$[-2:]", ROW, ["1.5", "2.5"]),
        ("$[0,2:]", ROW, ["id7", "1.5", "2.5"]),  # indexes and one range (the API's "$[0,5:]")
        ("$[1:9]", ROW, ["0.5", "1.5", "2.5"]),  # a slice stops at the last element
        ("$[*]", ROW, ROW),
        ("$.features", DOC, [1, 2]),
        ("$.features[0]", DOC, 1),
        ("$.meta.*", DOC, [1, 2]),
        ("$['id','features']", DOC, {"id": 7, "features": [1, 2]}),
        ("$['id', 'missing']", DOC, {"id": 7}),
        ("$.field1.['child1','child2']", DOC, {"child1": "a", "child2": "b"}),
    ],
)
def test_the_jsonpath_subset_selects_as_sagemaker_documents(path: str, value: Any, selected: Any) -> None:
    assert JsonPath.parse(path, "InputFilter").select(value, "InputFilter") == selected


@pytest.mark.parametrize(
    ("path", "value", "said"),
    [
        ("$[4]", ROW, 'InputFilter "$[4]": index 4 is outside the record\'s 4 element(s)'),
        ("$[0,-5]", ROW, "index -5 is outside"),
        ("$[5:]", ROW, 'InputFilter "$[5:]" selects nothing from'),
        ("$.label", DOC, 'InputFilter "$.label" selects nothing from'),
        ("$.features", ROW, "selects nothing"),
    ],
)
def test_a_filter_that_selects_nothing_fails_the_record(path: str, value: Any, said: str) -> None:
    with pytest.raises(RecordFailed) as failed:
        JsonPath.parse(path, "InputFilter").select(value, "InputFilter")
    assert said in str(failed.value)


def _processing(content_type: str = "text/csv", accept: str = "text/csv", split: str = "Line", assemble: str = "Line", **given: str) -> dict[str, Any]:
    return _job(
        TransformInput={**_job()["TransformInput"], "ContentType": content_type, "SplitType": split},
        TransformOutput={**_job()["TransformOutput"], "Accept": accept, "AssembleWith": assemble},
        DataProcessing=given,
    )


@pytest.mark.parametrize(
    ("job", "said"),
    [
        (
            _processing(OutputFilter="$['account_id','SageMakerOutput']"),
            'DataProcessing.OutputFilter "$[\'account_id\',\'SageMakerOutput\']" is not a JSONPath SageMaker accepts: unexpected "_"',
        ),
        (_processing(OutputFilter="$[0:2,246:]"), "only single range filters of format (eg: [1:5]) are supported; [0:2,246:] is not"),
        (_processing(InputFilter="$..id"), "DataProcessing.InputFilter \"$..id\" is not a JSONPath SageMaker accepts"),
        (_processing(InputFilter="features"), "it must start with $"),
        (_processing(InputFilter="$" + "[1]" * 21), "it is 64 characters, over 63"),
        (_processing(InputFilter="$.a['b.c']"), "no nested children"),
        (_processing(InputFilter="$[a]"), "[a] is not [*], ['name',...], [index,...] or [start:end]"),
        (_processing(JoinSource="Output"), 'DataProcessing.JoinSource "Output" is not None or Input'),
        (_processing(InputFilter="$.id"), 'DataProcessing.InputFilter "$.id" names a field, but its data is CSV'),
        (_processing(accept="application/json", JoinSource="Input", OutputFilter="$.id"), 'OutputFilter "$.id" names a field, but its data is CSV'),
        (_processing(split="None", assemble="None", InputFilter="$[1:]"), 'DataProcessing on text/csv needs TransformInput.SplitType Line, not "None"'),
        (
            _processing("application/json", "application/json", split="None", JoinSource="Input"),
            'needs TransformOutput.AssembleWith equal to SplitType ("Line" is not "None")',
        ),
        (_processing(accept="application/x-npy", InputFilter="$[1:]"), 'TransformOutput.Accept "application/x-npy" does not work with DataProcessing'),
        (_processing(content_type="application/x-npy", JoinSource="Input"), 'TransformInput.ContentType "application/x-npy" does not work'),
    ],
)
def test_data_processing_sagemaker_would_refuse_is_refused_in_one_line_when_the_job_is_read(job: dict[str, Any], said: str) -> None:
    with pytest.raises(TransformFailed, match="^ClientError: ") as refused:
        TransformRequest.from_description(job)
    message = str(refused.value)
    assert said in message and message.endswith("; nothing ran.") and "\n" not in message


def _dp(job: dict[str, Any]) -> DataProcessing:
    processing = TransformRequest.from_description(job).data_processing
    assert processing is not None
    return processing


def test_a_csv_row_is_filtered_joined_and_filtered_again_with_its_quoted_fields_kept() -> None:
    dp = _dp(_processing(InputFilter="$[1:]", JoinSource="Input", OutputFilter="$[0,-1]"))
    record = b'id7,"a, b","say ""hi""",3'
    assert dp.filter_input(record) == b'"a, b","say ""hi""",3'  # RFC 4180 quoting, as it came
    assert dp.finish(record, b"0.25,0.75") == b"id7,0.75"
    everything = _dp(_processing(JoinSource="Input"))
    assert everything.finish(record, b"0.25,0.75") == b'id7,"a, b","say ""hi""",3,0.25,0.75'
    # A header line is a record like any other: SageMaker has no header option.
    assert everything.finish(b"id,f0", b"p") == b"id,f0,p"


def test_a_json_answer_joined_to_a_csv_row_adds_its_values_as_columns() -> None:
    dp = _dp(_processing(accept="application/json", InputFilter="$[1:]", JoinSource="Input", OutputFilter="$[0,-2:]"))
    assert dp.finish(b"id7,1,2", b"[0.25,0.75]") == b"id7,0.25,0.75"
    assert _dp(_processing(accept="application/json", JoinSource="Input")).finish(b"id7,1", b'{"label":1}') == b'id7,1,"{""label"":1}"'


def test_a_json_record_gets_the_answer_under_sagemaker_output() -> None:
    given = {"InputFilter": "$.features", "JoinSource": "Input", "OutputFilter": "$['id','SageMakerOutput']"}
    dp = _dp(_processing("application/jsonlines", "application/json", **given))
    record = json.dumps({**DOC, "SageMakerOutput": "overwritten"}).encode()
    assert dp.filter_input(record) == b"[1,2]"
    assert json.loads(dp.finish(record, b'{"label":1}')) == {"id": 7, "SageMakerOutput": {"label": 1}}
    # A record that is not an object: the input goes under SageMakerInput.
    plain = _dp(_processing("application/json", "application/json", JoinSource="Input"))
    assert json.loads(plain.finish(b"[1,2]", b"[0.9]")) == {"SageMakerInput": [1, 2], "SageMakerOutput": [0.9]}
    # OutputFilter without a join reads the answer.
    only = _dp(_processing("application/json", "application/json", OutputFilter="$.predictions[0]"))
    assert only.finish(b"[1,2]", b'{"predictions":[[0.1,0.9]]}') == b"[0.1,0.9]"
    with pytest.raises(RecordFailed, match="the record is not JSON"):
        dp.filter_input(b"{not json")


def test_a_batch_answer_is_split_into_one_answer_per_record() -> None:
    dp = _dp(_processing(accept="application/json", JoinSource="Input"))
    assert dp.record_answers(b'{"predictions":[[0.1,0.9],[0.8,0.2]]}', 2) == [b"[0.1,0.9]", b"[0.8,0.2]"]
    assert dp.record_answers(b'{"predictions":[[0.1,0.9]]}', 1) == [b"[0.1,0.9]"]  # the same answer, however batched
    assert dp.record_answers(b"[0.1]\n[0.2]\n", 2) == [b"[0.1]", b"[0.2]"]  # JSON lines
    with pytest.raises(RecordFailed, match=r"answered 1 line\(s\) for 3 records; .*SageMaker needs one answer line per record"):
        dp.record_answers(b'{"predictions":[[0.1,0.9],[0.8,0.2]]}', 3)
    assert _dp(_processing(JoinSource="Input")).record_answers(b"1\n0\n", 2) == [b"1", b"0"]
    # SplitType None: the object is one record, and its whole answer is that record's.
    whole = _dp(_processing("application/json", "application/json", split="None", assemble="None", JoinSource="Input"))
    assert whole.record_answers(b'{"predictions":[1]}', 1) == [b'{"predictions":[1]}']


class _Objects:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803 - boto3's names
        return {"Body": io.BytesIO(self.body)}


def test_the_container_gets_the_filtered_records_and_the_output_is_each_rows_id_and_answer_in_order() -> None:
    job = _processing(accept="application/json", InputFilter="$[1:]", JoinSource="Input", OutputFilter="$[0,-1]")
    request = TransformRequest.from_description(job).settled(None)  # MultiRecord, 6 MB: one request
    answer = json.dumps({"predictions": [[0.1, 0.9], [0.8, 0.2], [0.5, 0.5]]}).encode()
    item = InputObject("in", "score/a.csv", "a.csv")
    with _container({"/invocations": (200, answer)}) as (url, seen), concurrent.futures.ThreadPoolExecutor(1) as pool:
        body, count = transform_object(_Objects(b"a,1,2\nb,3,4\nc,5,6\n"), url, item, request, pool)
        assert (body, count) == (b"a,0.9\nb,0.2\nc,0.5\n", 3)
        assert [request["body"] for request in seen] == [b"1,2\n3,4\n5,6\n"]
        with pytest.raises(TransformFailed, match=r"^ClientError: s3://in/score/a.csv records 1-4: the model container answered 1 line\(s\) for 4 records"):
            transform_object(_Objects(b"a,1,2\nb,3,4\nc,5,6\nd,7,8\n"), url, item, request, pool)
        with pytest.raises(TransformFailed, match=r"^ClientError: s3://in/score/a.csv record 2: InputFilter \"\$\[1:\]\" selects nothing"):
            transform_object(_Objects(b"a,1,2\nb\n"), url, item, request, pool)


def test_a_stop_request_sends_no_further_object_and_the_job_ends_stopped(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """StopTransformJob turns the job Stopping (scripts.emulator.gaps); the runner then sends no
    further object and the job ends Stopped, as teardown --stop-running waits for."""
    from types import SimpleNamespace

    from scripts.emulator import hosting, transform

    class Hosting:
        def __init__(self, **_: Any) -> None:
            self.terminated = False

        def start_model(self, *_: Any, **__: Any) -> Any:
            return SimpleNamespace(url="http://127.0.0.1:9", log_file=tmp_path / "none.log")

        def _terminate(self, hosted: Any) -> None:
            self.terminated = True

    sent: list[str] = []
    stop = threading.Event()

    def transform_object(s3: Any, url: str, item: InputObject, request: Any, pool: Any) -> tuple[bytes, int]:
        sent.append(item.key)
        stop.set()  # StopTransformJob arrives while the first object is transformed
        return b"answer\n", 1

    monkeypatch.setattr(hosting, "LocalHosting", Hosting)
    monkeypatch.setattr(transform, "input_objects", lambda s3, request: [InputObject("in", "score/a.csv", "a.csv"), InputObject("in", "score/b.csv", "b.csv")])
    monkeypatch.setattr(transform, "execution_parameters", lambda url: None)
    monkeypatch.setattr(transform, "transform_object", transform_object)
    sagemaker = SimpleNamespace(describe_transform_job=lambda TransformJobName: _job())
    written: list[str] = []
    s3 = SimpleNamespace(put_object=lambda Bucket, Key, Body, **_: written.append(Key))
    outcome = transform.run_transform_job(
        "t", sagemaker=sagemaker, s3=s3, log_sink=lambda lines: None, endpoint_url="http://127.0.0.1:9", region="us-east-1",
        work_dir=tmp_path, docker=None, on_event=lambda line: None, stop_requested=stop.is_set,
    )  # fmt: skip
    assert outcome.status == "Stopped" and sent == ["score/a.csv"] and written == ["scored/a.csv.out"]
