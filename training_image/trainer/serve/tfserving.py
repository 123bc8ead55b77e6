"""TensorFlow Serving's REST predict contract, for any model's signatures.

What AWS's TensorFlow serving container does in front of TF Serving, and TF Serving itself:

- The body of ``/invocations`` becomes a TF Serving request as the container's
  ``tensorflow-serving.js`` makes it: ``application/json`` with ``"instances"``, ``"inputs"`` (or
  ``"examples"``, refused here) passes as is; JSON lines (``application/jsonlines`` and its
  aliases, or an ``application/json`` body that is not one JSON document but one per line) become
  one instance per line, and a one-line body is read as ``application/json`` (the container sends
  it down that path: ``[1, 2, 3]`` is one instance); any other JSON value becomes
  ``{"instances": value}`` (wrapped in a list unless it already is a list of lists);
  ``text/csv`` becomes one instance per line, a list when the line has several columns.
- TF Serving's request: ``{"signature_name": ..., "instances": [...]}`` (row format: one entry per
  example, a value when the signature has one input, else an object keyed by input name) or
  ``{"inputs": ...}`` (columnar: a batched value, or an object of batched values by input name).
  ``{"b64": "..."}`` is a binary value.
- TF Serving's answer: row format gives ``{"predictions": [...]}`` (per example a value when the
  signature has one output, else an object keyed by output name); columnar gives
  ``{"outputs": value}`` or ``{"outputs": {name: value}}``.

A fixed-shape input also takes each example as a flat row of the same number of values (a CSV
line for an image model): it is reshaped, where TF Serving would refuse it. Any other shape is
refused, even one with as many values (an NCHW image for an NHWC input): reshaping it would
scramble the values. JSON values are checked against the input's dtype as TF Serving checks them
(integers for an integer input and within its range, numbers for a float input, booleans for a
bool input, strings or ``{"b64": ...}`` for a string input), never coerced.

Beside JSON, ``application/x-npy`` (a NumPy ``.npy`` array, batch first) feeds a one-input
signature without a JSON text of the values (image batches), and ``Accept: application/x-npy``
answers a one-output signature with its array.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainer.serve.codec import CSV, JSON, JSON_LINES, RequestError, load_npy

ACCEPTED = (JSON, CSV, *JSON_LINES)
DEFAULT_SIGNATURE = "serving_default"


@dataclass(frozen=True)
class TensorSpec:
    """One named input or output of a signature.

    Attributes:
        shape: Dimensions, ``None`` where any size goes (the first is the batch).
        dtype: NumPy dtype name (``float32``, ``int64``, ``object`` for strings).
    """

    shape: tuple[int | None, ...]
    dtype: str


@dataclass(frozen=True)
class Signature:
    """What a signature takes and returns (names are TF Serving's keys)."""

    inputs: Mapping[str, TensorSpec]
    outputs: Mapping[str, TensorSpec]


@dataclass(frozen=True)
class PredictRequest:
    """A parsed TF Serving request.

    Attributes:
        signature_name: ``signature_name``, default ``serving_default``.
        tensors: One batched array per input name.
        row_format: ``instances`` (answer with ``predictions``) or ``inputs`` (``outputs``).
        rows: Examples in the request (the batch size), ``None`` for a columnar request whose
            inputs disagree on it.
        target: Which model version runs it (the server's servable key); empty: the default.
    """

    signature_name: str
    tensors: dict[str, np.ndarray]
    row_format: bool
    rows: int | None
    target: str = ""


def _reject_constant(name: str) -> float:
    raise RequestError(400, f"JSON body holds {name}; send finite numbers.")


def _loads(text: str, where: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError as err:
        raise _malformed(err, where) from None


def _malformed(err: ValueError, where: str) -> RequestError:
    """400 naming ``where`` (``the body``, ``line 3``) and where in it the parser stopped."""
    if isinstance(err, json.JSONDecodeError):
        at = f"column {err.colno}" if where.startswith("line ") else f"line {err.lineno} column {err.colno}"
        return RequestError(400, f"Malformed JSON in {where}: {err.msg} at {at}.")
    return RequestError(400, f"Malformed JSON in {where}: {err}".splitlines()[0])  # an integer literal over Python's digit limit


def _csv_value(field: str, line: int, column: int) -> Any:
    text = field.strip()
    try:
        value = float(text)
    except ValueError:
        return text.strip('"')  # a string feature, quoted or not, as the container quotes it
    if not math.isfinite(value):
        raise RequestError(400, f"CSV line {line} value {column} is {text}; values must be finite.")
    return int(value) if re.fullmatch(r"[+-]?\d+", text) else value


def to_tfs_request(body: bytes, content_type: str) -> dict[str, Any]:
    """A request body in any accepted content type as a TF Serving request object.

    Raises:
        RequestError: 415 for another content type, 400 for an empty, non-UTF-8 or malformed body.
    """
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime not in ACCEPTED:
        raise RequestError(
            415, f"Unsupported content type {content_type or '(none)'!r}; send application/json, application/jsonlines or text/csv."
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RequestError(400, f"Request body is not UTF-8 text (byte {err.start}).") from None
    if not text.strip():
        raise RequestError(400, "Empty request body; send at least one instance.")
    if mime == CSV:
        instances = []
        for number, line in enumerate(text.strip().splitlines(), start=1):
            if not line.strip():
                continue
            values = [_csv_value(f, number, c) for c, f in enumerate(line.split(","), start=1)]
            instances.append(values if len(values) > 1 else values[0])
        return {"instances": instances}
    # Lines as the container splits them (on "\n" only: a JSON string may hold U+2028).
    lines = [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]
    if mime in JSON_LINES and len(lines) > 1:
        return {"instances": [_loads(line, f"line {n}") for n, line in lines]}
    try:
        payload = json.loads(text, parse_constant=_reject_constant)
    except ValueError as err:
        # Not one document. A complete value followed by more is JSON values one per line. The
        # container tells them by a regular expression on the raw text ("]" or "}", then "[" or
        # "{"), which also matches inside a string ("see [1] {note}") and would wrap a one-line TF
        # Serving request in {"instances": ...} again: only a body that is not one document is lines.
        if len(lines) > 1 and isinstance(err, json.JSONDecodeError) and err.msg == "Extra data":
            return {"instances": [_loads(line, f"line {n}") for n, line in lines]}
        raise _malformed(err, "the body") from None
    # One document, whatever the JSON type says (one JSON line is one document too): the container
    # sends a one-line body down its application/json path (generic_json_request), so the line
    # [1, 2, 3] is one instance, {"x": ...} one named instance, {"instances": ...} a TF Serving request.
    if isinstance(payload, dict) and any(key in payload for key in ("instances", "inputs", "examples")):
        return payload
    if not (isinstance(payload, list) and payload and isinstance(payload[0], list)):
        payload = [payload]
    return {"instances": payload}


def _binary(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except ValueError:
            raise RequestError(400, "A {\"b64\": ...} value is not valid base64.") from None
    if isinstance(value, list):
        return [_binary(v) for v in value]
    return value


# What JSON values each kind of input takes, as TF Serving's JSON decoder checks them: integers
# only for an integer input, any number for a float input, booleans only for a bool input.
_INTEGERS = (int, np.integer)
_NUMBERS = (int, float, np.integer, np.floating)
_BOOLS = (bool, np.bool_)
_TEXT = (str, bytes)


def _category(dtype: str) -> str | None:
    """``int``, ``float``, ``bool`` or ``string`` for an input's dtype; None for others (complex)."""
    if dtype == "object":
        return "string"
    if dtype.startswith(("int", "uint")):
        return "int"
    if dtype.startswith(("float", "bfloat", "half")):
        return "float"
    if dtype in ("bool", "bool_"):
        return "bool"
    return None


def _takes(category: str, kind: type) -> bool:
    if issubclass(kind, _BOOLS):
        return category == "bool"
    if category == "int":
        return issubclass(kind, _INTEGERS)
    if category == "float":
        return issubclass(kind, _NUMBERS)
    if category == "string":
        return issubclass(kind, _TEXT)
    return False


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, (str, bytes)):
        return "string"
    if isinstance(value, dict):
        return "object"
    return "null" if value is None else type(value).__name__


def _json_shown(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _type_error(name: str, value: Any, dtype: str) -> RequestError:
    return RequestError(
        400, f"Input {name!r}: JSON Value: {_json_shown(value)} Type: {_json_type(value)} is not of expected type: {dtype}."
    )


def _range_error(name: str, objects: np.ndarray, dtype: str) -> RequestError:
    """The first value ``dtype`` cannot hold (found only on this error path, one by one)."""
    try:
        info: Any = np.iinfo(dtype) if _category(dtype) == "int" else np.finfo(dtype)
        low, high = (int(info.min), int(info.max)) if _category(dtype) == "int" else (float(info.min), float(info.max))
    except (TypeError, ValueError):
        return RequestError(400, f"Input {name!r} holds a value out of range for {dtype}.")
    for value in objects.flat:
        if not low <= value <= high:  # Python numbers: no cast to the dtype on the way
            return RequestError(400, f"Input {name!r}: JSON Value: {_json_shown(value)} is out of range for {dtype}.")
    return RequestError(400, f"Input {name!r} holds a value out of range for {dtype}.")


def _array(value: Any, name: str, spec: TensorSpec) -> np.ndarray:
    """A JSON value as the input's array, each value checked against the input's dtype first.

    TF Serving refuses a value of another JSON type than its input's (``1.7``, ``"3"`` or
    ``true`` for an integer input) instead of converting it, and so does this: the types present
    are found in one pass at C speed (the set of Python types in an object array), not per value
    in Python.
    """
    category = _category(spec.dtype)
    if category == "string":
        value = _binary(value)
    try:
        objects = np.asarray(value, dtype=object)
    except (TypeError, ValueError):
        raise RequestError(400, f"Input {name!r} must be a rectangular array of {spec.dtype} values.") from None
    kinds = set(map(type, objects.flat))
    if list in kinds or tuple in kinds:
        raise RequestError(400, f"Input {name!r} has rows of different lengths.")
    if category is None:
        return _shaped(_converted(objects, name, spec), name, spec)
    wrong = {kind for kind in kinds if not _takes(category, kind)}
    if wrong:
        offending = next(v for v in objects.flat if type(v) in wrong)
        raise _type_error(name, offending, spec.dtype)
    if category == "string":
        return _shaped(objects, name, spec)
    array = _converted(objects, name, spec)
    if category == "float":
        if not np.all(np.isfinite(array)):  # JSON holds no NaN or Infinity: a value beyond the dtype's range
            raise _range_error(name, objects, spec.dtype)
    return _shaped(array, name, spec)


def _converted(objects: np.ndarray, name: str, spec: TensorSpec) -> np.ndarray:
    try:
        with np.errstate(over="ignore"):
            return objects.astype(spec.dtype)
    except OverflowError:
        raise _range_error(name, objects, spec.dtype) from None
    except (TypeError, ValueError):
        raise RequestError(400, f"Input {name!r} must be a rectangular array of {spec.dtype} values.") from None


def _shaped(array: np.ndarray, name: str, spec: TensorSpec) -> np.ndarray:
    """``array`` when its shape fits the input's; a flat row per example is reshaped to a fixed shape.

    Only the flat-row form is reshaped: ``[examples, width]`` (or ``[examples]`` for width 1)
    where width is the product of the input's fixed dimensions. Any other shape, even one with as
    many values (an NCHW image for an NHWC input, a 3x2 for a 2x3), is refused as TF Serving
    refuses it: reshaping it would scramble the values.
    """
    expected = spec.shape
    if len(expected) == array.ndim and all(e is None or e == a for e, a in zip(expected, array.shape)):
        return array
    fixed = expected[1:]
    if array.ndim in (1, 2) and fixed and all(d is not None for d in fixed):
        width = math.prod(int(d) for d in fixed)  # type: ignore[arg-type]
        flat_rows = (array.ndim == 2 and array.shape[1] == width) or (array.ndim == 1 and width == 1)
        if flat_rows:
            return array.reshape((array.shape[0], *[int(d) for d in fixed]))  # type: ignore[arg-type]
    shown = tuple(-1 if d is None else d for d in expected)
    raise RequestError(
        400, f"Input {name!r} has shape {tuple(array.shape)} but the signature takes {shown} (-1: any size)."
    )


def from_npy(body: bytes, signatures: Mapping[str, Signature], signature_name: str = DEFAULT_SIGNATURE) -> PredictRequest:
    """An ``application/x-npy`` body as the batched value of a one-input signature (row format).

    Raises:
        RequestError: 400 for a body that is not a ``.npy`` array, a signature with several
            inputs, or an array that does not fit the input.
    """
    if signature_name not in signatures:
        raise RequestError(400, f"Signature {signature_name!r} is not in the model (it has: {', '.join(sorted(signatures))}).")
    signature = signatures[signature_name]
    if len(signature.inputs) != 1:
        raise RequestError(
            400, f"application/x-npy feeds one input; signature {signature_name!r} takes {', '.join(sorted(signature.inputs))}: send JSON."
        )
    array = load_npy(body)
    (name, spec), = signature.inputs.items()
    if array.ndim == 0 or array.shape[0] == 0:
        raise RequestError(400, f"The .npy array has shape {array.shape}; send a batch (first dimension: examples).")
    tensor = _shaped(_npy_cast(array, name, spec), name, spec)
    return PredictRequest(signature_name, {name: tensor}, True, int(tensor.shape[0]))


_NPY_KINDS = {"int": "iu", "float": "iuf", "bool": "b"}
"""The ``.npy`` dtype kinds each kind of input takes (as the JSON values it takes): no float array for
an integer input (truncated), no booleans for a number."""


def _npy_cast(array: np.ndarray, name: str, spec: TensorSpec) -> np.ndarray:
    """A ``.npy`` array as the input's dtype, refused (400) where the cast would change a value: a
    kind the input does not take, an integer out of the input's range, a float beyond it."""
    category = _category(spec.dtype)
    if category == "string":
        return array
    if array.dtype.kind not in _NPY_KINDS.get(category or "", "biuf"):
        raise RequestError(400, f"The .npy array has dtype {array.dtype}; input {name!r} takes {spec.dtype}.")
    if category == "int" and array.size and array.dtype != np.dtype(spec.dtype):
        info = np.iinfo(spec.dtype)
        low, high = int(array.min()), int(array.max())
        if low < info.min or high > info.max:
            value = low if low < info.min else high
            raise RequestError(400, f"Input {name!r}: the .npy array holds {value}, out of range for {spec.dtype}.")
    with np.errstate(over="ignore", invalid="ignore"):
        cast = array.astype(spec.dtype, copy=False)
    if category == "float" and array.dtype != cast.dtype and not np.array_equal(np.isfinite(array), np.isfinite(cast)):
        raise RequestError(400, f"Input {name!r}: the .npy array holds a value beyond {spec.dtype}'s range.")
    return cast


def npy_answer(outputs: Mapping[str, np.ndarray]) -> bytes:
    """``Accept: application/x-npy``: the one output's array as a ``.npy`` body.

    Raises:
        RequestError: 406 when the signature has several outputs.
    """
    import io

    if len(outputs) != 1:
        raise RequestError(406, f"application/x-npy answers one output; this signature has {', '.join(sorted(outputs))}: accept JSON.")
    buffer = io.BytesIO()
    np.save(buffer, next(iter(outputs.values())), allow_pickle=False)
    return buffer.getvalue()


def parse(request: Any, signatures: Mapping[str, Signature]) -> PredictRequest:
    """A TF Serving request object as one array per input of the named signature.

    Raises:
        RequestError: 400 naming the key, input or instance that does not fit the signature.
    """
    if not isinstance(request, dict):
        raise RequestError(400, 'The request must be a JSON object with "instances" or "inputs".')
    name = request.get("signature_name", DEFAULT_SIGNATURE)
    if name not in signatures:
        raise RequestError(
            400, f"Signature {name!r} is not in the model (it has: {', '.join(sorted(signatures))}); set signature_name."
        )
    signature = signatures[name]
    has = [k for k in ("instances", "inputs", "examples") if k in request]
    if has == ["examples"]:
        raise RequestError(400, '"examples" (the classify/regress APIs) is not served; send "instances" or "inputs".')
    if len(has) != 1:
        raise RequestError(400, 'Send exactly one of "instances" (row format) or "inputs" (columnar format).')
    names = sorted(signature.inputs)
    if "instances" in request:
        instances = request["instances"]
        if not isinstance(instances, list) or not instances:
            raise RequestError(400, '"instances" must be a non-empty list with one entry per example.')
        named = all(isinstance(i, dict) and not set(i) <= {"b64"} for i in instances)
        if len(names) > 1 and not named:
            raise RequestError(
                400, f"The signature takes {len(names)} inputs ({', '.join(names)}); each instance must be an object with them."
            )
        if named:
            columns: dict[str, list[Any]] = {n: [] for n in names}
            for index, instance in enumerate(instances, start=1):
                unknown = sorted(set(instance) - set(names))
                missing = [n for n in names if n not in instance]
                if unknown or missing:
                    what = f"unknown {', '.join(unknown)}" if unknown else f"missing {', '.join(missing)}"
                    raise RequestError(400, f"Instance {index} does not match the inputs ({', '.join(names)}): {what}.")
                for n in names:
                    columns[n].append(instance[n])
        else:
            columns = {names[0]: instances}
        tensors = {n: _array(columns[n], n, signature.inputs[n]) for n in names}
        return PredictRequest(name, tensors, True, len(instances))
    inputs = request["inputs"]
    if isinstance(inputs, dict) and not set(inputs) <= {"b64"}:
        unknown = sorted(set(inputs) - set(names))
        missing = [n for n in names if n not in inputs]
        if unknown or missing:
            what = f"unknown {', '.join(unknown)}" if unknown else f"missing {', '.join(missing)}"
            raise RequestError(400, f'"inputs" does not match the signature\'s inputs ({", ".join(names)}): {what}.')
    elif len(names) == 1:
        inputs = {names[0]: inputs}
    else:
        raise RequestError(400, f'The signature takes {len(names)} inputs ({", ".join(names)}); "inputs" must be an object.')
    tensors = {n: _array(inputs[n], n, signature.inputs[n]) for n in names}
    sizes = {t.shape[0] if t.ndim else None for t in tensors.values()}
    return PredictRequest(name, tensors, False, sizes.pop() if len(sizes) == 1 else None)


def _jsonable(array: np.ndarray) -> Any:
    if array.dtype == object or array.dtype.kind == "S":
        def text(value: Any) -> Any:
            if isinstance(value, bytes):
                try:
                    return value.decode("utf-8")
                except UnicodeDecodeError:
                    return {"b64": base64.b64encode(value).decode("ascii")}
            return value

        return np.vectorize(text, otypes=[object])(array).tolist() if array.size else array.tolist()
    return array.tolist()


def respond(request: PredictRequest, outputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """TF Serving's answer for ``outputs`` (one array per output name).

    Raises:
        RequestError: 500 when a row-format request's outputs do not all have the batch size.
    """
    if not request.row_format:
        if len(outputs) == 1:
            return {"outputs": _jsonable(next(iter(outputs.values())))}
        return {"outputs": {name: _jsonable(value) for name, value in outputs.items()}}
    rows = request.rows
    for name, value in outputs.items():
        if value.ndim == 0 or value.shape[0] != rows:
            raise RequestError(
                500, f"Output {name!r} has shape {tuple(value.shape)}, not one entry per instance ({rows}); "
                'send "inputs" (columnar format) for this signature.'
            )
    columns = {name: _jsonable(value) for name, value in outputs.items()}
    if len(columns) == 1:
        return {"predictions": next(iter(columns.values()))}
    return {"predictions": [{name: column[i] for name, column in columns.items()} for i in range(rows or 0)]}
