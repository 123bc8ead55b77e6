"""Values that are either decided now (Python) or by a state machine at run time (JSONata).

The SageMaker requests of the platform (CreateTrainingJob, CreateProcessingJob, the promotion's
CreateModel/CreateEndpointConfig) are each written once, as Python data in which every value that
a launch may override is either concrete or a :class:`Jsonata` expression. The helpers below
combine such values: with concrete inputs they compute the result in Python (a direct launch),
with an expression they emit the matching JSONata (the deployed workflow). :func:`render` turns
the result into what Step Functions reads (``"{% ... %}"`` strings in a JSONata-mode state).

Pure Python (no CDK import).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, Union


@dataclass(frozen=True)
class Jsonata:
    """A JSONata expression (without the ``{% %}`` delimiters) evaluated by Step Functions."""

    expression: str


Value = Union[Any, Jsonata]


def to_jsonata(value: Value) -> str:
    """JSONata source for ``value``; literals are written as JSON, which JSONata reads as is."""
    if isinstance(value, Jsonata):
        return f"({value.expression})"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(k)}: {to_jsonata(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(to_jsonata(v) for v in value) + "]"
    return json.dumps(value)


def when(condition: Union[bool, Jsonata], then: Value, otherwise: Value) -> Value:
    """``then`` if ``condition`` else ``otherwise``; a JSONata conditional for a run-time condition."""
    if isinstance(condition, Jsonata):
        return Jsonata(f"{to_jsonata(condition)} ? {to_jsonata(then)} : {to_jsonata(otherwise)}")
    return then if condition else otherwise


def greater_than(value: Union[int, Jsonata], limit: int) -> Union[bool, Jsonata]:
    """``value > limit``, decided now or by the state machine."""
    if isinstance(value, Jsonata):
        return Jsonata(f"{to_jsonata(value)} > {limit}")
    return value > limit


def append(first: Value, second: Value) -> Value:
    """List concatenation, now or by the state machine."""
    if isinstance(first, Jsonata) or isinstance(second, Jsonata):
        return Jsonata(f"$append({to_jsonata(first)}, {to_jsonata(second)})")
    return [*first, *second]


def merge(*parts: Value) -> Value:
    """Objects merged left to right (later keys win), now or by the state machine."""
    if any(isinstance(p, Jsonata) for p in parts):
        return Jsonata("$merge([" + ", ".join(to_jsonata(p) for p in parts) + "])")
    merged: dict[str, Any] = {}
    for part in parts:
        merged.update(part)
    return merged


def logical_and(*conditions: Union[bool, Jsonata]) -> Union[bool, Jsonata]:
    """``a and b``, decided now or by the state machine."""
    if any(isinstance(c, Jsonata) for c in conditions):
        return Jsonata(" and ".join(to_jsonata(c) for c in conditions))
    return all(conditions)


def concat(*parts: Union[str, Jsonata]) -> Union[str, Jsonata]:
    """String concatenation, now or by the state machine."""
    if any(isinstance(p, Jsonata) for p in parts):
        return Jsonata(" & ".join(to_jsonata(p) for p in parts))
    return "".join(parts)  # type: ignore[arg-type]


def map_items(mapping: Union[Mapping[str, Any], Jsonata], build: Callable[[Value, Value], Value]) -> Value:
    """``[build(key, value) for each entry]`` in the mapping's order, now or by the state machine.

    For an expression, ``build`` is called once with the JSONata variables ``$k`` and ``$v``;
    the array constructor around ``$each`` keeps a one-entry result an array (JSONata would
    otherwise unwrap a sequence of one).
    """
    if isinstance(mapping, Jsonata):
        item = to_jsonata(build(Jsonata("$k"), Jsonata("$v")))
        return Jsonata(f"[$each({to_jsonata(mapping)}, function($v, $k) {{{item}}})]")
    return [build(k, v) for k, v in mapping.items()]


Rule = tuple[str, str]
"""``(JSONata condition, JSONata reason when it is false)``: one launch option's check."""


def problem_list(rules: Sequence[Rule]) -> str:
    """JSONata: the reasons of the broken rules, in order; ``[]`` when every rule holds.

    A conditional without an else is undefined when its condition holds, and an array
    constructor leaves undefined out, so only the broken rules' reasons remain (and the array
    stays an array with one or no entry).
    """
    return "[" + ", ".join(f"$not({condition}) ? ({reason})" for condition, reason in rules) + "]"


def no_problems(variable: str) -> str:
    """A ``{% %}`` condition: the variable that :meth:`LaunchRules.problems` was assigned to is empty."""
    return "{% $count($" + variable + ") = 0 %}"


def refusal_cause(title: str, variable: str) -> str:
    """A ``{% %}`` string ``'<title>: <reason>; <reason>.'`` of the reasons held by ``variable``: a refusal's cause."""
    return "{% '" + title + ": ' & $join($" + variable + ", '; ') & '.' %}"


@dataclass(frozen=True)
class LaunchRules:
    """The checks a state machine applies to a launch's options before it sends the request.

    Each condition is written once into the workflow: a Pass state assigns :meth:`problems` to a
    variable, after the state that assigned the options the conditions read (a state's
    ``Assign`` sees the variables as they were when it started); then a Choice tests
    :func:`no_problems` of that variable, and the refusal's cause is :meth:`refusal` of it.

    Attributes:
        rules: Every option's :data:`Rule`.
        title: Start of the refusal's cause (holds no quote), e.g. ``"Invalid launch options"``.
    """

    rules: tuple[Rule, ...]
    title: str

    def problems(self) -> str:
        """A ``{% %}`` array of the broken rules' reasons (:func:`problem_list`), for a state's ``Assign``."""
        return "{% " + problem_list(self.rules) + " %}"

    def refusal(self, variable: str) -> str:
        """The refusal's cause, ``'<title>: <reason>; <reason>.'``, from ``variable`` holding :meth:`problems`."""
        return refusal_cause(self.title, variable)


def render(value: Value) -> Any:
    """The request as Step Functions reads it: every :class:`Jsonata` becomes ``"{% ... %}"``."""
    if isinstance(value, Jsonata):
        return "{% " + value.expression + " %}"
    if isinstance(value, Mapping):
        return {k: render(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [render(v) for v in value]
    return value
