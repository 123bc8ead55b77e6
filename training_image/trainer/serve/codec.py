"""Request bodies to a float32 matrix, responses to JSON; every bad request is one 4xx line.

Accepted bodies (``Content-Type``):

- ``application/json``: TensorFlow Serving's ``{"instances": [[...], ...]}``, a plain list of
  rows ``[[...], ...]``, or one row ``[...]``. Values must be JSON numbers (no strings, booleans,
  NaN or Infinity).
- ``text/csv``: one row per line, numbers only, no header and no label column.
- ``application/x-npy``: a NumPy ``.npy`` array (``np.save``), ``[rows, features]`` or one row;
  binary, so an image batch costs its bytes, not a JSON text of them. Object arrays are refused
  (no pickles are loaded).

The response is ``application/json``: ``{"predictions": [{"predicted_class": 2,
"probabilities": [...]}, ...]}``, one entry per row in request order.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

JSON = "application/json"
CSV = "text/csv"
NPY = "application/x-npy"
ACCEPTED_CONTENT_TYPES = (JSON, CSV, NPY)
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
            415, f"Unsupported content type {content_type or '(none)'!r}; send application/json, text/csv or application/x-npy."
        )
    if mime == NPY:
        return _npy_rows(body, num_features)
    if not body.strip():
        raise RequestError(400, "Empty request body; send at least one row of features.")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RequestError(400, f"Request body is not UTF-8 text (byte {err.start}).") from None
    rows = _json_rows(text) if mime == JSON else _csv_rows(text)
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


def _json_rows(text: str) -> list[list[float]]:
    try:
        payload = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as err:
        raise RequestError(400, f"Malformed JSON body: {err.msg} at line {err.lineno} column {err.colno}.") from None
    except ValueError as err:  # an integer literal over Python's digit limit
        raise RequestError(400, f"Malformed JSON body: {err}".splitlines()[0]) from None
    if isinstance(payload, dict):
        if "instances" not in payload:
            keys = ", ".join(sorted(map(str, payload))[:5]) or "none"
            raise RequestError(400, f'JSON object body needs an "instances" list of rows (got keys: {keys}).')
        payload = payload["instances"]
        where = '"instances"'
    else:
        where = "JSON body"
    if not isinstance(payload, list):
        raise RequestError(400, f"{where} must be a list of rows, got {type(payload).__name__}.")
    if payload and all(_is_number(v) for v in payload):
        payload = [payload]  # one row sent as a flat list
    rows = []
    for index, row in enumerate(payload, start=1):
        if not isinstance(row, list):
            raise RequestError(400, f"Row {index} of the {where} is {_shown(row)}, not a list of numbers.")
        for column, value in enumerate(row, start=1):
            if not _is_number(value):
                raise RequestError(400, f"Row {index} value {column} is {_shown(value)}, not a number.")
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
