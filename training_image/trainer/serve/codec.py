"""Request bodies to a float32 matrix, responses to JSON; every bad request is one 4xx line.

Accepted bodies (``Content-Type``):

- ``application/json``: TensorFlow Serving's ``{"instances": [[...], ...]}``, a plain list of
  rows ``[[...], ...]``, or one row ``[...]``. Values must be JSON numbers (no strings, booleans,
  NaN or Infinity).
- JSON lines (``application/jsonlines``, ``application/jsons``, ``application/x-jsonlines``, or an
  ``application/json`` body that is several JSON values, one per line): each line is any of the
  forms above, and the rows of every line are taken in order. This is what a batch transform with
  ``SplitType=Line`` and ``BatchStrategy=MultiRecord`` sends: many JSON records joined by newlines.
- ``text/csv``: one row per line, numbers only, no header and no label column.
- ``application/x-npy``: a NumPy ``.npy`` array (``np.save``), ``[rows, features]`` or one row;
  binary, so an image batch costs its bytes, not a JSON text of them. Object arrays are refused
  (no pickles are loaded).

The response is ``{"predictions": [{"predicted_class": 2, "probabilities": [...]}, ...]}``, one
entry per row in request order (a JSON lines request's rows included), on one line: it is the
answer for ``Accept: application/jsonlines`` too, as AWS's TensorFlow serving container answers
(TF Serving's document with its newlines removed), and batch transform takes entry *i* as the
answer of record *i*.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

JSON = "application/json"
CSV = "text/csv"
NPY = "application/x-npy"
JSON_LINES = ("application/jsonlines", "application/jsons", "application/x-jsonlines")
"""The JSON lines content types, for requests and ``Accept`` (the one definition for serve mode)."""
ACCEPTED_CONTENT_TYPES = (JSON, *JSON_LINES, CSV, NPY)
# Figures in an error message are cut so that a huge bad body cannot make a huge error line.
_SHOWN = 40


class RequestError(Exception):
    """A request the server refuses; its message is the whole response body's ``error`` line.

    Attributes:
        status: The HTTP status (4xx).
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _reject_constant(name: str) -> float:
    raise RequestError(400, f"JSON body holds {name}; every feature must be a finite number.")


def decode(body: bytes, content_type: str, num_features: int) -> np.ndarray:
    """Parses a request body into a ``[rows, num_features]`` float32 matrix.

    Raises:
        RequestError: 415 for an unsupported content type, 400 for an empty or malformed body or
            a row with the wrong number of features.
    """
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime not in ACCEPTED_CONTENT_TYPES:
        raise RequestError(
            415,
            f"Unsupported content type {content_type or '(none)'!r}; send application/json, application/jsonlines, text/csv or application/x-npy.",
        )
    if mime == NPY:
        return _npy_rows(body, num_features)
    if not body.strip():
        raise RequestError(400, "Empty request body; send at least one row of features.")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RequestError(400, f"Request body is not UTF-8 text (byte {err.start}).") from None
    rows = _csv_rows(text) if mime == CSV else _json_rows(text, lines=mime in JSON_LINES)
    if not rows:
        raise RequestError(400, "The request holds no rows; send at least one row of features.")
    for index, row in enumerate(rows, start=1):
        if len(row) != num_features:
            hint = " (send features only, no label column)" if len(row) == num_features + 1 else ""
            raise RequestError(
                400, f"Row {index} has {len(row)} values but the model takes {num_features} features{hint}."
            )
    with np.errstate(over="ignore"):
        matrix = np.asarray(rows, dtype=np.float32)
    if not np.all(np.isfinite(matrix)):
        # Finite in JSON or CSV, but beyond float32's range: the cast made it infinite.
        row, column = (int(i) for i in np.argwhere(~np.isfinite(matrix))[0])
        raise RequestError(
            400, f"Row {row + 1} value {column + 1} is {_shown(rows[row][column])}, beyond float32's range; every feature must be a finite float32 number."
        )
    return matrix


def load_npy(body: bytes) -> np.ndarray:
    """A ``.npy`` body as an array; 400 for anything else (pickled object arrays included)."""
    import io

    if not body:
        raise RequestError(400, "Empty request body; send an array saved with numpy.save.")
    try:
        array = np.load(io.BytesIO(body), allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise RequestError(400, f"The application/x-npy body is not a .npy array without pickles: {err}".splitlines()[0]) from None
    if not isinstance(array, np.ndarray):
        raise RequestError(400, "The application/x-npy body holds an archive (.npz); send one array saved with numpy.save.")
    return array


def _npy_rows(body: bytes, num_features: int) -> np.ndarray:
    array = load_npy(body)
    if array.dtype.kind not in "biuf":
        raise RequestError(400, f"The .npy array has dtype {array.dtype}; send numbers.")
    if array.ndim == 1:
        array = array.reshape(1, -1)
    if array.ndim > 2:
        array = array.reshape(array.shape[0], -1)  # images: one flattened row each
    if array.ndim != 2 or array.shape[0] == 0:
        raise RequestError(400, f"The .npy array has shape {array.shape}; send [rows, {num_features}].")
    if array.shape[1] != num_features:
        raise RequestError(400, f"The .npy array has {array.shape[1]} values per row but the model takes {num_features} features.")
    with np.errstate(over="ignore"):
        array = array.astype(np.float32, copy=False)
    if not np.all(np.isfinite(array)):  # after the cast: a float64 beyond float32's range is infinite now
        raise RequestError(
            400, "The .npy array holds NaN or infinity (or a value beyond float32's range); every feature must be a finite float32 number."
        )
    return array


def _json_rows(text: str, *, lines: bool) -> list[list[float]]:
    """The rows of a JSON body: one JSON document, else (JSON lines) one document per line.

    The whole body is tried as one document first, so a pretty-printed document spread over lines
    is still one document. It is read line by line only when it is not one document and either the
    content type says JSON lines (``lines``) or the parser found a complete value followed by more
    ("Extra data": records joined by newlines, as batch transform joins them).
    """
    try:
        return _payload_rows(_json_value(text), line=None)
    except _Malformed as whole:
        records = [(number, line) for number, line in enumerate(text.split("\n"), start=1) if line.strip()]
        if len(records) < 2 or not (lines or whole.extra_data):
            raise RequestError(400, f"Malformed JSON body: {whole}{whole.where(with_line=True)}.") from None
    rows: list[list[float]] = []
    for number, line in records:
        try:
            payload = _json_value(line)
        except _Malformed as err:
            raise RequestError(400, f"Malformed JSON on line {number}: {err}{err.where(with_line=False)}.") from None
        rows.extend(_payload_rows(payload, line=number))
    return rows


class _Malformed(Exception):
    """Text that is not one JSON document: the parser's reason, and where it stopped if it says."""

    def __init__(self, reason: str, position: tuple[int, int] | None = None, *, extra_data: bool = False) -> None:
        super().__init__(reason)
        self.position = position
        self.extra_data = extra_data

    def where(self, *, with_line: bool) -> str:
        if self.position is None:
            return ""
        line, column = self.position
        return f" at line {line} column {column}" if with_line else f" at column {column}"


def _json_value(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as err:
        raise _Malformed(err.msg, (err.lineno, err.colno), extra_data=err.msg == "Extra data") from None
    except ValueError as err:  # an integer literal over Python's digit limit
        raise _Malformed(str(err).splitlines()[0].rstrip(".")) from None


def _payload_rows(payload: Any, *, line: int | None) -> list[list[float]]:
    """The rows of one JSON value (a body, or one JSON line, named in errors by ``line``)."""
    on_line = "" if line is None else f" on line {line}"
    if isinstance(payload, dict):
        if "instances" not in payload:
            keys = ", ".join(sorted(map(str, payload))[:5]) or "none"
            raise RequestError(400, f'JSON object{on_line or " body"} needs an "instances" list of rows (got keys: {keys}).')
        payload = payload["instances"]
        where = f'"instances"{on_line}'
    else:
        where = "JSON body" if line is None else f"JSON line {line}"
    if not isinstance(payload, list):
        raise RequestError(400, f"{where} must be a list of rows, got {type(payload).__name__}.")
    if payload and not isinstance(payload[0], list):
        payload = [payload]  # one row sent as a flat list (a JSON line's usual form)
    rows = []
    for index, row in enumerate(payload, start=1):
        if not isinstance(row, list):
            named = f"Row {index} of the {where}" if line is None else f"Row {index} on line {line}"
            raise RequestError(400, f"{named} is {_shown(row)}, not a list of numbers.")
        for column, value in enumerate(row, start=1):
            if not _is_number(value):
                raise RequestError(400, f"Row {index}{on_line} value {column} is {_shown(value)}, not a number.")
        rows.append(row)
    return rows


def _is_number(value: Any) -> bool:
    # bool is an int subclass, and True is not a feature value anyone means to send.
    if type(value) not in (int, float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for any float
        return False


def _csv_rows(text: str) -> list[list[float]]:
    rows = []
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue  # a trailing newline or blank separator line is not a row
        row = []
        for column, field in enumerate(line.split(","), start=1):
            try:
                value = float(field)
            except ValueError:
                raise RequestError(
                    400, f"CSV line {line_number} value {column} is {_shown(field.strip())}, not a number (no header line)."
                ) from None
            if not math.isfinite(value):
                raise RequestError(400, f"CSV line {line_number} value {column} is {field.strip()}; values must be finite.")
            row.append(value)
        rows.append(row)
    return rows


def encode(probabilities: np.ndarray) -> bytes:
    """The response body for a batch of probability rows."""
    predictions = [
        {"predicted_class": int(np.argmax(row)), "probabilities": [round(float(p), 6) for p in row]}
        for row in probabilities
    ]
    return json.dumps({"predictions": predictions}, separators=(",", ":")).encode("utf-8")


def error_body(message: str) -> bytes:
    """``{"error": "<one line>"}``."""
    return json.dumps({"error": " ".join(message.split())}).encode("utf-8")
