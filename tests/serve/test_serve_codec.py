"""The built-in classifier's request decoding: JSON lines bodies, as batch transform sends them.

A transform job with ``SplitType=Line`` and ``BatchStrategy=MultiRecord`` joins its JSON records
with newlines into one request (``ContentType`` ``application/json`` or a JSON lines type); every
record's rows must come back as rows, in order, and a bad record must be named by its line.
"""

from __future__ import annotations

import pytest

from trainer.serve import codec, handlers, tfserving


@pytest.mark.parametrize("content_type", ["application/json", "application/jsonlines", "application/jsons", "application/x-jsonlines; charset=utf-8"])
def test_json_lines_are_one_row_per_line_in_order(content_type):
    rows = codec.decode(b"[1,2,3]\n[4,5,6]\n[7,8,9]\n", content_type, 3)
    assert rows.tolist() == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]


def test_each_line_takes_every_form_one_document_takes():
    body = b'{"instances": [[1, 2, 3], [4, 5, 6]]}\r\n[[7, 8, 9]]\n\n  [0, 0, 1]  \n'
    assert codec.decode(body, "application/json", 3).tolist() == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [0, 0, 1]]


@pytest.mark.parametrize("content_type", ["application/json", "application/jsonlines"])
def test_one_document_over_several_lines_is_still_one_document(content_type):
    body = b'{\n  "instances": [\n    [1, 2, 3],\n    [4, 5, 6]\n  ]\n}\n'
    assert codec.decode(body, content_type, 3).tolist() == [[1, 2, 3], [4, 5, 6]]


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (b"[1,2,3]\n[4,5,\n[7,8,9]\n", "application/json", "Malformed JSON on line 2: Expecting value at column 6."),
        (b"[1,2\n[3,4,5]\n", "application/jsonlines", "Malformed JSON on line 1: Expecting ',' delimiter at column 5."),
        (b"[1,2,3]\n\n[4,'x',6]\n", "application/json", "Malformed JSON on line 3: Expecting value at column 4."),
        (b'[1,2,3]\n[4,"x",6]\n', "application/json", "Row 1 on line 2 value 2 is 'x', not a number."),
        (b'[1,2,3]\n{"rows": [[4,5,6]]}\n', "application/json", 'JSON object on line 2 needs an "instances" list of rows (got keys: rows).'),
        (b'[1,2,3]\n{"instances": 5}\n', "application/json", '"instances" on line 2 must be a list of rows, got int.'),
        (b'[1,2,3]\n"4,5,6"\n', "application/jsonlines", "JSON line 2 must be a list of rows, got str."),
        (b"[1,2,3]\n[4,5]\n", "application/json", "Row 2 has 2 values but the model takes 3 features."),
        # Pretty-printed, with a comma missing: the whole body's error, not a line's.
        (b"[\n [1,2,3],\n [4,5,6]\n [7,8,9]\n]\n", "application/json", "Malformed JSON body: Expecting ',' delimiter at line 4 column 2."),
        # Two values on one line are no JSON lines body.
        (b"[1,2,3] [4,5,6]", "application/json", "Malformed JSON body: Extra data at line 1 column 9."),
    ],
    ids=["json-bad-line", "jsonlines-bad-first-line", "line-number-counts-blank-lines", "string-value", "object-without-instances",
         "instances-not-a-list", "line-not-a-list", "wrong-width", "pretty-printed-malformed", "two-values-one-line"],
)
def test_a_bad_json_line_is_a_400_naming_its_line(body, content_type, message):
    with pytest.raises(codec.RequestError) as refused:
        codec.decode(body, content_type, 3)
    assert (refused.value.status, str(refused.value)) == (400, message)


def test_json_lines_types_have_one_definition_for_every_reader():
    assert codec.JSON_LINES == ("application/jsonlines", "application/jsons", "application/x-jsonlines")
    assert set(codec.JSON_LINES) <= set(codec.ACCEPTED_CONTENT_TYPES)
    assert tfserving.JSON_LINES is codec.JSON_LINES and set(codec.JSON_LINES) <= set(tfserving.ACCEPTED)
    # The inference toolkit decodes only application/json and text/csv: JSON lines reach input_fn as bytes.
    assert handlers.UTF8_TYPES == (codec.JSON, codec.CSV) and not set(codec.JSON_LINES) & set(handlers.UTF8_TYPES)


def test_other_content_types_are_still_415_naming_json_lines():
    with pytest.raises(codec.RequestError) as refused:
        codec.decode(b"[1,2,3]", "application/xml", 3)
    assert refused.value.status == 415
    assert str(refused.value) == (
        "Unsupported content type 'application/xml'; send application/json, application/jsonlines, text/csv or application/x-npy."
    )
