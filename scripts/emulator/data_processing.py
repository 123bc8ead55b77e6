"""SageMaker batch transform's ``DataProcessing``, done around the container as SageMaker does it.

The container never sees these settings: SageMaker filters each input record with ``InputFilter``
before batching, joins each record's answer with the record as it was read (``JoinSource`` Input),
and filters the joined (or plain) answer with ``OutputFilter``, record by record, in input order.
:mod:`scripts.emulator.transform` calls this module at those three points.

The rules, from SageMaker's developer guide ("Associate Prediction Results with Input Records",
batch-transform-data-processing) and API reference (``DataProcessing``) unless said otherwise:

- Content types: ``text/csv``, ``application/json`` and ``application/jsonlines``, for both
  ``ContentType`` and ``Accept``. A CSV row is a JSON array of its fields (RFC 4180, no embedded
  newlines, quoted fields allowed), so only index-based paths apply to CSV; CSV needs SplitType
  Line. A JSON record is a JSON value (one line for SplitType Line, the whole object for None).
- The JSONPath subset: ``$`` first, then ``.name``, ``.*``/``[*]``, ``['a','b']`` (also
  ``.['a','b']``; no dotted names inside the brackets), ``[1]``, ``[1,3,-1]`` (negative indexes
  count from the end), and one slice ``[start:end]`` per bracket, which may sit among indexes
  (``$[0,5:]``, the API's example; ``$[0:2,246:]`` is refused, as SageMaker refuses it with "only
  single range filters"). The guide says a slice includes both ends (``$[1:4]``: the second
  through fifth columns; ``[:5]``: the first through sixth); an omitted end is the last element.
  At most 63 characters; the characters are letters, digits and ``$ [ ] * . , : - '`` and space:
  anything else is refused as SageMaker's ValidationException refuses it ("Unexpected "_" in
  JsonPath", aws/aws-sdk#184). An index outside the record fails the record (the API: "you get an
  error"); a path that selects nothing fails the record too.
- What a path selects (as Jayway JsonPath, which the guide links): a path of names and single
  indexes gives the value itself; ``['a','b']`` gives an object of those keys; a wildcard, a slice
  or several indexes give an array of what they select.
- JoinSource Input: for JSON, an object record gets the answer under ``SageMakerOutput`` (an input
  key of that name is overwritten); any other record becomes ``{"SageMakerInput": record,
  "SageMakerOutput": answer}``. For CSV, the answer's columns are appended to the record's row.
  ``AssembleWith`` must equal ``SplitType``. The record joined is the one read, before InputFilter.
- OutputFilter selects from the joined record (or, without a join, from the answer read in the
  ``Accept`` format); the result is written as one CSV row or one compact JSON text per record.

Emulator rules where SageMaker documents none:

- A batch answer is split back into one answer per record by its lines (SageMaker's requirement
  for SplitType Line: one output line per input record); a JSON object ``{"predictions": [...]}``
  with one entry per record (the serve mode's, TensorFlow Serving's and SageMaker's built-in
  algorithms' batch answer) gives entry *i* to record *i*, for one record as for many. Any other
  count fails the job naming the records.
- A JSON answer joined to a CSV row adds its values as columns (an array: one column per element;
  anything else: one column); the guide's CSV join example has a CSV answer, which the serve mode,
  answering only JSON, never gives.
"""

from __future__ import annotations

import csv
import io
import json
import re
import string
from dataclasses import dataclass
from typing import Any, Callable, Mapping

CSV = "text/csv"
SUPPORTED_TYPES = ("text/csv", "application/json", "application/jsonlines")
"""The ``ContentType`` and ``Accept`` values DataProcessing works with."""
MAX_FILTER_LENGTH = 63
OPERATORS = "$[]*.,:-' "
"""The characters of a filter besides letters and digits (SageMaker's ValidationException lists them)."""
OUTPUT_KEY = "SageMakerOutput"
INPUT_KEY = "SageMakerInput"
_ALLOWED = set(string.ascii_letters + string.digits + OPERATORS)
_NAME = r"[A-Za-z0-9-]+"
_INDEX = re.compile(r"^-?\d+$")
_SLICE = re.compile(r"^(-?\d+)?:(-?\d+)?$")
_QUOTED = re.compile(r"^'([^']*)'$")
_SHOWN = 120


class DataProcessingRefused(Exception):
    """SageMaker would refuse the job when it is created; the message names the field and value (one line)."""


class RecordFailed(Exception):
    """One record cannot be processed; the caller names the object and record (one line)."""


def _mime(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


def _shown(data: bytes | str) -> str:
    text = " ".join((data.decode("utf-8", "replace") if isinstance(data, bytes) else data).split())
    return repr(text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "...")


# --- the JSONPath subset -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Names:
    names: tuple[str, ...]

    @property
    def definite(self) -> bool:
        return True  # one name: the value; several: one object of them

    def apply(self, node: Any) -> list[Any]:
        if not isinstance(node, dict):
            return []
        if len(self.names) == 1:
            return [node[self.names[0]]] if self.names[0] in node else []
        picked = {name: node[name] for name in self.names if name in node}
        return [picked] if picked else []


@dataclass(frozen=True)
class _Wildcard:
    definite = False

    def apply(self, node: Any) -> list[Any]:
        if isinstance(node, dict):
            return list(node.values())
        return list(node) if isinstance(node, list) else []


@dataclass(frozen=True)
class _Indexes:
    items: tuple[int | tuple[int | None, int | None], ...]

    @property
    def definite(self) -> bool:
        return len(self.items) == 1 and isinstance(self.items[0], int)

    def apply(self, node: Any) -> list[Any]:
        if not isinstance(node, list):
            return []
        size, picked = len(node), []
        for item in self.items:
            if isinstance(item, int):
                at = item + size if item < 0 else item
                if not 0 <= at < size:
                    raise RecordFailed(f"index {item} is outside the record's {size} element(s)")
                picked.append(node[at])
                continue
            start, end = item
            first = 0 if start is None else max(0, start + size if start < 0 else start)
            last = size - 1 if end is None else (end + size if end < 0 else end)
            picked.extend(node[first : min(last, size - 1) + 1])  # both ends included, as the guide says
        return picked


_Segment = _Names | _Wildcard | _Indexes


@dataclass(frozen=True)
class JsonPath:
    """One filter of SageMaker's JSONPath subset.

    Attributes:
        text: The filter as the job gave it.
        segments: What follows ``$``; empty for ``$`` (everything).
    """

    text: str
    segments: tuple[_Segment, ...]

    @classmethod
    def parse(cls, text: str, field: str) -> JsonPath:
        """The filter, or :class:`DataProcessingRefused` naming ``field`` and the text."""

        def refused(why: str) -> DataProcessingRefused:
            return DataProcessingRefused(f'DataProcessing.{field} "{text}" is not a JSONPath SageMaker accepts: {why}')

        if len(text) > MAX_FILTER_LENGTH:
            raise refused(f"it is {len(text)} characters, over {MAX_FILTER_LENGTH}")
        bad = next((char for char in text if char not in _ALLOWED), None)
        if bad is not None:
            raise refused(f'unexpected "{bad}"; the characters allowed are letters, digits and {OPERATORS.strip()!r} and space')
        if not text.startswith("$"):
            raise refused("it must start with $")
        segments: list[_Segment] = []
        rest = text[1:]
        while rest:
            if match := re.match(rf"^\.({_NAME}|\*)", rest):
                name = match.group(1)
                segments.append(_Wildcard() if name == "*" else _Names((name,)))
            elif match := re.match(r"^\.?\[([^\[\]]*)\]", rest):
                segments.append(_bracket(match.group(1), refused))
            else:
                raise refused(f"{rest!r} is not one of $, .name, .*, [*], ['name',...], [index,...], [start:end]")
            rest = rest[match.end() :]
        return cls(text, tuple(segments))

    @property
    def everything(self) -> bool:
        return not self.segments

    @property
    def by_index(self) -> bool:
        """Only indexes, slices and wildcards: what applies to a CSV row."""
        return not any(isinstance(segment, _Names) for segment in self.segments)

    def select(self, value: Any, field: str) -> Any:
        """What the filter selects from ``value``; :class:`RecordFailed` when that is nothing."""
        nodes, definite = [value], True
        for segment in self.segments:
            try:
                nodes = [found for node in nodes for found in segment.apply(node)]
            except RecordFailed as err:
                raise RecordFailed(f'{field} "{self.text}": {err}') from None
            definite = definite and segment.definite
        if not nodes:
            raise RecordFailed(f'{field} "{self.text}" selects nothing from {_shown(json.dumps(value))}')
        return nodes[0] if definite else nodes


def _bracket(inner: str, refused: Callable[[str], DataProcessingRefused]) -> _Segment:
    parts = [part.strip() for part in inner.split(",")]
    if parts == ["*"]:
        return _Wildcard()
    quoted = [_QUOTED.match(part) for part in parts]
    if all(quoted):
        names = tuple(match.group(1) for match in quoted if match)
        if any(not re.fullmatch(r"[A-Za-z0-9 -]+", name) for name in names):
            raise refused(f"[{inner}]: a bracketed name is letters, digits, - and spaces, with no nested children")
        return _Names(names)
    items: list[int | tuple[int | None, int | None]] = []
    for part in parts:
        if _INDEX.match(part):
            items.append(int(part))
        elif match := _SLICE.match(part.replace(" ", "")):
            items.append(tuple(None if bound is None else int(bound) for bound in match.groups()))  # type: ignore[arg-type]
        else:
            raise refused(f"[{inner}] is not [*], ['name',...], [index,...] or [start:end]")
    if sum(isinstance(item, tuple) for item in items) > 1:
        raise refused(f"only single range filters of format (eg: [1:5]) are supported; [{inner}] is not")
    return _Indexes(tuple(items))


# --- records in their formats ------------------------------------------------------------------


def csv_fields(line: bytes | str) -> list[str]:
    """One CSV row (RFC 4180: quoted fields, doubled quotes) as its fields."""
    text = line.decode("utf-8") if isinstance(line, bytes) else line
    try:
        rows = list(csv.reader([text.rstrip("\r\n")], strict=True))
    except csv.Error as err:
        raise RecordFailed(f"is not a CSV row (RFC 4180): {err}: {_shown(text)}") from None
    return rows[0] if rows else [""]


def csv_row(value: Any) -> bytes:
    """A selection as one CSV row: an array's elements as fields, anything else as one field."""
    cells = value if isinstance(value, list) else [value]
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow([cell if isinstance(cell, str) else _json(cell) for cell in cells])
    return out.getvalue().encode("utf-8")


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _json_value(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except ValueError as err:
        raise RecordFailed(f"{what} is not JSON ({err}): {_shown(data)}") from None


# --- the job's DataProcessing ------------------------------------------------------------------


@dataclass(frozen=True)
class DataProcessing:
    """A transform job's ``DataProcessing``, checked as SageMaker checks it.

    Attributes:
        input_filter: ``InputFilter``; None for ``$`` (the whole record).
        join: ``JoinSource`` Input.
        output_filter: ``OutputFilter``; None for ``$``.
        content_type: The job's ``ContentType`` (its media type).
        accept: The job's ``Accept`` (its media type).
        split_type: ``None`` or ``Line``.
    """

    input_filter: JsonPath | None
    join: bool
    output_filter: JsonPath | None
    content_type: str
    accept: str
    split_type: str

    @classmethod
    def from_job(
        cls, given: Mapping[str, Any] | None, *, content_type: str, accept: str, split_type: str, assemble_with: str
    ) -> DataProcessing | None:
        """The job's DataProcessing; None when it asks nothing (``$``, None, ``$``).

        Raises:
            DataProcessingRefused: what SageMaker would refuse, naming the field and its value.
        """
        given = given or {}
        join_source = given.get("JoinSource") or "None"
        if join_source not in ("None", "Input"):
            raise DataProcessingRefused(f'DataProcessing.JoinSource "{join_source}" is not None or Input')
        filters = {field: JsonPath.parse(given.get(field) or "$", field) for field in ("InputFilter", "OutputFilter")}
        if join_source == "None" and all(path.everything for path in filters.values()):
            return None
        for field, value in (("TransformInput.ContentType", content_type), ("TransformOutput.Accept", accept)):
            if _mime(value) not in SUPPORTED_TYPES:
                raise DataProcessingRefused(
                    f'{field} "{value}" does not work with DataProcessing; set it to one of {", ".join(SUPPORTED_TYPES)}'
                )
        if _mime(content_type) == CSV and split_type != "Line":
            raise DataProcessingRefused(f'DataProcessing on text/csv needs TransformInput.SplitType Line, not "{split_type}"')
        if join_source == "Input" and assemble_with != split_type:
            raise DataProcessingRefused(
                f'DataProcessing.JoinSource "Input" needs TransformOutput.AssembleWith equal to SplitType '
                f'("{assemble_with}" is not "{split_type}")'
            )
        processing = cls(
            input_filter=None if filters["InputFilter"].everything else filters["InputFilter"],
            join=join_source == "Input",
            output_filter=None if filters["OutputFilter"].everything else filters["OutputFilter"],
            content_type=_mime(content_type),
            accept=_mime(accept),
            split_type=split_type,
        )
        checked = (("InputFilter", processing.input_filter, processing.content_type), ("OutputFilter", processing.output_filter, processing.output_type))
        for field, path, data in checked:
            if path is not None and data == CSV and not path.by_index:
                raise DataProcessingRefused(
                    f'DataProcessing.{field} "{path.text}" names a field, but its data is CSV: only index-based paths apply (e.g. $[0], $[1:])'
                )
        return processing

    @property
    def output_type(self) -> str:
        """The format OutputFilter reads and the output is written in: the input's when joined, else the answer's."""
        return self.content_type if self.join else self.accept

    @property
    def per_record(self) -> bool:
        """Whether each record's answer is needed alone (to join it or filter it)."""
        return self.join or self.output_filter is not None

    def _read(self, record: bytes, media_type: str) -> Any:
        return csv_fields(record) if media_type == CSV else _json_value(record, "the record")

    def _write(self, value: Any, media_type: str) -> bytes:
        return csv_row(value) if media_type == CSV else _json(value).encode("utf-8")

    def filter_input(self, record: bytes) -> bytes:
        """What the container gets for this record."""
        if self.input_filter is None:
            return record
        value = self._read(record, self.content_type)
        return self._write(self.input_filter.select(value, "InputFilter"), self.content_type)

    def record_answers(self, answer: bytes, count: int) -> list[bytes]:
        """One answer per record of a request that carried ``count`` records (see the module's rules)."""
        predictions = None
        if self.accept != CSV and self.split_type == "Line":
            try:
                parsed = json.loads(answer)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict) and isinstance(parsed.get("predictions"), list) and len(parsed["predictions"]) == count:
                predictions = parsed["predictions"]
        if predictions is not None:
            return [_json(item).encode("utf-8") for item in predictions]
        if count == 1:
            return [answer.strip()]
        lines = [line for line in answer.splitlines() if line.strip()]
        if len(lines) != count:
            raise RecordFailed(
                f"the model container answered {len(lines)} line(s) for {count} records; to join or filter each record's answer, "
                'SageMaker needs one answer line per record (the emulator also takes {"predictions": [one per record]}): '
                f"{_shown(answer)}"
            )
        return lines

    def finish(self, record: bytes, answer: bytes) -> bytes:
        """The output line for one record (no newline): its answer, joined with the record as read when
        JoinSource is Input, then OutputFilter's selection of that."""
        if self.join:
            value = self._joined(record, answer)
        elif self.accept == CSV:
            value = csv_fields(answer)
        else:
            value = _json_value(answer, "the model container's answer")
        if self.output_filter is not None:
            value = self.output_filter.select(value, "OutputFilter")
        return self._write(value, self.output_type)

    def _joined(self, record: bytes, answer: bytes) -> Any:
        if self.content_type == CSV:
            if self.accept == CSV:
                return csv_fields(record) + csv_fields(answer)
            output = _json_value(answer, "the model container's answer")
            return csv_fields(record) + (output if isinstance(output, list) else [output])
        value = self._read(record, self.content_type)
        output = csv_fields(answer) if self.accept == CSV else _json_value(answer, "the model container's answer")
        if isinstance(value, dict):
            return {**value, OUTPUT_KEY: output}
        return {INPUT_KEY: value, OUTPUT_KEY: output}
