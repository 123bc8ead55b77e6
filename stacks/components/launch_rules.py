"""A small rule language: each launch rule is written once and both evaluated in Python and rendered to JSONata.

A rule's condition is a tree of :class:`Expr` nodes over the resolved launch values, named as the
workflow's variables (``job_name`` is ``$job_name``). :meth:`Expr.evaluate` computes it over a dict
of those values (a direct launch); :meth:`Expr.jsonata` writes the same condition for the state
machine. The nodes follow JSONata's semantics where Python's differ (``$type``, ``=`` across types,
``$string``, ``$`` in a regex), so the two verdicts and the two refusals are the same text.

Pure Python (no CDK import).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Mapping, Sequence, Union

from stacks.components.request_expressions import LaunchRules


class Expr:
    """A JSONata expression that Python can evaluate too."""

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        """The value over ``env`` (variable name -> value), as JSONata would compute it."""
        raise NotImplementedError

    def jsonata(self) -> str:
        """JSONata source over the workflow's variables."""
        raise NotImplementedError


def jsonata_type(value: Any) -> str:
    """JSONata's ``$type`` of a JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, Mapping) else "array"


def _js_number(number: float) -> str:
    """A number as JavaScript writes it (ECMA-262 ``Number::toString``) after JSONata's rounding to 15
    significant digits: ``2`` for 2.0, ``0.00001`` and ``1e-7``, where Python writes ``1e-05`` and ``1e-07``."""
    rounded = float(f"{number:.15g}")
    if rounded == 0:
        return "0"
    sign = "-" if rounded < 0 else ""
    shortest = Decimal(repr(abs(rounded))).as_tuple()
    digits = "".join(str(d) for d in shortest.digits)
    n = len(digits) + int(shortest.exponent)  # the value is 0.<digits> x 10^n
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{sign}{mantissa}e{'+' if n > 0 else '-'}{abs(n - 1)}"


def _to_json(value: Any) -> str:
    """``JSON.stringify(value)`` as JSONata's ``$string`` calls it (numbers as :func:`_js_number`)."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return _js_number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{_to_json(str(k))}:{_to_json(v)}" for k, v in value.items()) + "}"
    return "[" + ",".join(_to_json(v) for v in value) + "]"


def jsonata_string(value: Any) -> str:
    """JSONata's ``$string``: a string as is, anything else as compact JSON."""
    return value if isinstance(value, str) else _to_json(value)


@dataclass(frozen=True)
class Var(Expr):
    """A workflow variable (``$name``), or a loop variable of :class:`BadKeys`/:class:`BadItems`."""

    name: str

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return env[self.name]

    def jsonata(self) -> str:
        return f"${self.name}"


@dataclass(frozen=True)
class Lit(Expr):
    """A JSON literal."""

    value: Any

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return self.value

    def jsonata(self) -> str:
        return json.dumps(self.value)


Operand = Union[Expr, str, int, float, bool, None]


def _expr(value: Operand) -> Expr:
    return value if isinstance(value, Expr) else Lit(value)


@dataclass(frozen=True)
class Call(Expr):
    """A JSONata function of one value: ``$type``, ``$length`` (strings only), ``$count``, ``$keys``,
    ``$string``, ``$number`` (of a number, or a string that reads as one)."""

    function: str
    argument: Expr

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        value = self.argument.evaluate(env)
        if self.function == "type":
            return jsonata_type(value)
        if self.function == "length" and not isinstance(value, str):
            raise TypeError(f"$length of {jsonata_type(value)}: guard the rule with a type check")
        if self.function == "keys":
            return list(value)
        if self.function == "string":
            return jsonata_string(value)
        if self.function == "number":
            return value if jsonata_type(value) == "number" else float(value)
        return len(value)

    def jsonata(self) -> str:
        return f"${self.function}({self.argument.jsonata()})"


def type_of(value: Operand) -> Expr:
    """``$type(value)``."""
    return Call("type", _expr(value))


def length(value: Operand) -> Expr:
    """``$length(value)`` of a string."""
    return Call("length", _expr(value))


def count(value: Operand) -> Expr:
    """``$count(value)`` of an array."""
    return Call("count", _expr(value))


def string_of(value: Operand) -> Expr:
    """``$string(value)``."""
    return Call("string", _expr(value))


def number_of(value: Operand) -> Expr:
    """``$number(value)``: guard it, a string that does not read as a number is an error."""
    return Call("number", _expr(value))


def key_count(value: Operand) -> Expr:
    """``$count($keys(value))`` of an object."""
    return Call("count", Call("keys", _expr(value)))


_COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: jsonata_type(a) == jsonata_type(b) and a == b,
    "!=": lambda a, b: not (jsonata_type(a) == jsonata_type(b) and a == b),
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


@dataclass(frozen=True)
class Compare(Expr):
    """``left <op> right``; ``=`` holds only between values of the same JSONata type."""

    op: str
    left: Expr
    right: Expr

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return _COMPARISONS[self.op](self.left.evaluate(env), self.right.evaluate(env))

    def jsonata(self) -> str:
        return f"({self.left.jsonata()} {self.op} {self.right.jsonata()})"


def lt(left: Operand, right: Operand) -> Expr:
    """``left < right``."""
    return Compare("<", _expr(left), _expr(right))


def gt(left: Operand, right: Operand) -> Expr:
    """``left > right``."""
    return Compare(">", _expr(left), _expr(right))


def eq(left: Operand, right: Operand) -> Expr:
    """``left = right``."""
    return Compare("=", _expr(left), _expr(right))


def le(left: Operand, right: Operand) -> Expr:
    """``left <= right``."""
    return Compare("<=", _expr(left), _expr(right))


def ge(left: Operand, right: Operand) -> Expr:
    """``left >= right``."""
    return Compare(">=", _expr(left), _expr(right))


@dataclass(frozen=True)
class Logic(Expr):
    """``a and b and ...`` / ``a or b or ...``, short-circuit as in JSONata."""

    op: str
    parts: tuple[Expr, ...]

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        if self.op == "and":
            return all(part.evaluate(env) for part in self.parts)
        return any(part.evaluate(env) for part in self.parts)

    def jsonata(self) -> str:
        return "(" + f" {self.op} ".join(part.jsonata() for part in self.parts) + ")"


def all_of(*parts: Expr) -> Expr:
    """Every part holds."""
    return Logic("and", parts)


def any_of(*parts: Expr) -> Expr:
    """Some part holds."""
    return Logic("or", parts)


@dataclass(frozen=True)
class Not(Expr):
    """``$not(value)``."""

    value: Expr

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return not self.value.evaluate(env)

    def jsonata(self) -> str:
        return f"$not({self.value.jsonata()})"


@dataclass(frozen=True)
class IfElse(Expr):
    """``condition ? then : otherwise``."""

    condition: Expr
    then: Expr
    otherwise: Expr

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return self.then.evaluate(env) if self.condition.evaluate(env) else self.otherwise.evaluate(env)

    def jsonata(self) -> str:
        return f"({self.condition.jsonata()} ? {self.then.jsonata()} : {self.otherwise.jsonata()})"


@dataclass(frozen=True)
class Plus(Expr):
    """``left + right`` of numbers."""

    left: Expr
    right: Expr

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return self.left.evaluate(env) + self.right.evaluate(env)

    def jsonata(self) -> str:
        return f"({self.left.jsonata()} + {self.right.jsonata()})"


_ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {"*": lambda a, b: a * b, "%": lambda a, b: math.fmod(a, b)}


@dataclass(frozen=True)
class Arithmetic(Expr):
    """``left * right`` or ``left % right`` of numbers (``%`` as JavaScript's remainder: the sign of ``left``)."""

    op: str
    left: Expr
    right: Expr

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return _ARITHMETIC[self.op](self.left.evaluate(env), self.right.evaluate(env))

    def jsonata(self) -> str:
        return f"({self.left.jsonata()} {self.op} {self.right.jsonata()})"


def times(left: Operand, right: Operand) -> Expr:
    """``left * right``."""
    return Arithmetic("*", _expr(left), _expr(right))


def remainder(left: Operand, right: Operand) -> Expr:
    """``left % right``."""
    return Arithmetic("%", _expr(left), _expr(right))


@dataclass(frozen=True)
class DigitsOf(Expr):
    """``$replace($string(value), /[^0-9]/, '')``: the digits of a value, so a whole number the image reads
    in any of its spellings (``"+1_024"``, ``1024``) is one string ``$number`` reads."""

    value: Expr

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return re.sub(r"[^0-9]", "", jsonata_string(self.value.evaluate(env)))

    def jsonata(self) -> str:
        return f"$replace($string({self.value.jsonata()}), /[^0-9]/, '')"


@dataclass(frozen=True)
class WholeNumber(Expr):
    """``value`` is a number without a fraction."""

    value: Expr

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        value = self.value.evaluate(env)
        return jsonata_type(value) == "number" and value == math.floor(value)

    def jsonata(self) -> str:
        value = self.value.jsonata()
        return f"($type({value}) = 'number' and {value} = $floor({value}))"


@dataclass(frozen=True)
class Matches(Expr):
    """``$contains(value, /pattern/)`` of a string."""

    value: Expr
    pattern: str

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        # JavaScript's $ matches only at the very end; Python's also before a final newline.
        return re.search(re.sub(r"\$$", r"\\Z", self.pattern), self.value.evaluate(env)) is not None

    def jsonata(self) -> str:
        return f"$contains({self.value.jsonata()}, /{self.pattern}/)"


@dataclass(frozen=True)
class StringTest(Expr):
    """A test of a string against a literal: ``starts``, ``ends``, ``contains`` or ``segment`` (a ``/``-separated part)."""

    test: str
    value: Expr
    text: str

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        value = self.value.evaluate(env)
        if self.test == "starts":
            return value.startswith(self.text)
        if self.test == "ends":
            return value.endswith(self.text)
        if self.test == "contains":
            return self.text in value
        return self.text in value.split("/")

    def jsonata(self) -> str:
        value, text = self.value.jsonata(), json.dumps(self.text)
        if self.test == "starts":
            # Measured when the machine runs: at synth a bucket name is a token of another length.
            return f"($substring({value}, 0, $length({text})) = {text})"
        if self.test == "ends":
            return f"($substring({value}, -$length({text})) = {text})"
        if self.test == "contains":
            return f"$contains({value}, {text})"
        return f"{text} in $split({value}, '/')"


def starts_with(value: Operand, prefix: str) -> Expr:
    """The string ``value`` starts with ``prefix``."""
    return StringTest("starts", _expr(value), prefix)


def ends_with(value: Operand, suffix: str) -> Expr:
    """The string ``value`` ends with ``suffix``."""
    return StringTest("ends", _expr(value), suffix)


def contains(value: Operand, text: str) -> Expr:
    """The string ``value`` contains ``text``."""
    return StringTest("contains", _expr(value), text)


def has_segment(value: Operand, segment: str) -> Expr:
    """One ``/``-separated part of the string ``value`` is ``segment``."""
    return StringTest("segment", _expr(value), segment)


@dataclass(frozen=True)
class InTable(Expr):
    """``$exists($lookup(table, key))``: the string ``key`` names an entry of the object ``table``."""

    table: Expr
    key: Expr

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return self.key.evaluate(env) in self.table.evaluate(env)

    def jsonata(self) -> str:
        return f"$exists($lookup({self.table.jsonata()}, {self.key.jsonata()}))"


@dataclass(frozen=True)
class Lookup(Expr):
    """``$lookup(obj, key)``."""

    obj: Expr
    key: Expr

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return self.obj.evaluate(env)[self.key.evaluate(env)]

    def jsonata(self) -> str:
        return f"$lookup({self.obj.jsonata()}, {self.key.jsonata()})"


@dataclass(frozen=True)
class ArrayOf(Expr):
    """``[a, b, ...]``: an array of the values (an absent one left out, as JSONata does)."""

    items: tuple[Expr, ...]

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return [item.evaluate(env) for item in self.items]

    def jsonata(self) -> str:
        return "[" + ", ".join(item.jsonata() for item in self.items) + "]"


KEY = Var("k")
"""The key in a :class:`BadKeys` predicate."""
ITEM = Var("a")
"""The item in a :class:`BadItems` predicate."""


@dataclass(frozen=True)
class BadKeys(Expr):
    """The keys of the object ``obj`` whose entry fails ``ok`` (over :data:`KEY`), in order."""

    obj: Expr
    ok: Expr

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return [key for key in self.obj.evaluate(env) if not self.ok.evaluate({**env, KEY.name: key})]

    def jsonata(self) -> str:
        return f"$filter($keys({self.obj.jsonata()}), function({KEY.jsonata()}) {{$not({self.ok.jsonata()})}})"


@dataclass(frozen=True)
class BadItems(Expr):
    """The items of the array ``array`` that fail ``ok`` (over :data:`ITEM`), in order."""

    array: Expr
    ok: Expr

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return [item for item in self.array.evaluate(env) if not self.ok.evaluate({**env, ITEM.name: item})]

    def jsonata(self) -> str:
        return f"$filter({self.array.jsonata()}, function({ITEM.jsonata()}) {{$not({self.ok.jsonata()})}})"


def every_key(obj: Operand, ok: Expr) -> Expr:
    """Every entry of the object ``obj`` passes ``ok`` (over :data:`KEY`)."""
    return eq(count(BadKeys(_expr(obj), ok)), 0)


def every_item(array: Operand, ok: Expr) -> Expr:
    """Every item of the array ``array`` passes ``ok`` (over :data:`ITEM`)."""
    return eq(count(BadItems(_expr(array), ok)), 0)


@dataclass(frozen=True)
class Joined(Expr):
    """``$join(strings, ', ')``: for a reason that names the bad keys."""

    strings: Expr

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        return ", ".join(self.strings.evaluate(env))

    def jsonata(self) -> str:
        return f"$join({self.strings.jsonata()}, ', ')"


Reason = tuple[Union[str, Expr], ...]
"""Text and values (written as JSONata's ``$string`` writes them)."""


@dataclass(frozen=True)
class Rule:
    """One launch rule.

    Attributes:
        field: The option it checks (for readers and tests).
        condition: Holds for a valid launch; guards its own types, so it can be evaluated
            whatever the input holds.
        reason: Why the launch is refused when ``condition`` fails, and how to fix it.
        full_check_covers: The Python path checks this with a fuller check of its own, which refuses
            all this rule refuses and says more (the image's hyperparameter parser): it skips the rule.
    """

    field: str
    condition: Expr
    reason: Reason
    full_check_covers: bool = False

    def reason_text(self, env: Mapping[str, Any]) -> str:
        """The reason over ``env``."""
        return "".join(part if isinstance(part, str) else jsonata_string(part.evaluate(env)) for part in self.reason)

    def reason_jsonata(self) -> str:
        """The reason as a JSONata string expression."""
        return " & ".join(
            json.dumps(part) if isinstance(part, str) else f"$string({part.jsonata()})" for part in self.reason
        )


def problems(rules: Sequence[Rule], env: Mapping[str, Any]) -> list[str]:
    """The reasons of the rules that ``env`` breaks, in the table's order."""
    return [rule.reason_text(env) for rule in rules if not rule.condition.evaluate(env)]


def refusal(title: str, reasons: Sequence[str]) -> str:
    """``'<title>: <reason>; <reason>.'``, as :meth:`LaunchRules.refusal` writes it."""
    return f"{title}: {'; '.join(reasons)}."


def render_rules(rules: Sequence[Rule], title: str) -> LaunchRules:
    """The table as the workflow's :class:`LaunchRules`."""
    return LaunchRules(tuple((rule.condition.jsonata(), rule.reason_jsonata()) for rule in rules), title)
