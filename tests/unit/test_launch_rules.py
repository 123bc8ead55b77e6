"""The rule language means in Python what its JSONata means: each node, evaluated both ways.

Every case is an expression of :mod:`stacks.components.launch_rules` over some variables: Python's
:meth:`~stacks.components.launch_rules.Expr.evaluate` must give what the reference JSONata
implementation gives for :meth:`~stacks.components.launch_rules.Expr.jsonata`, in particular where
the two languages differ (``$type`` of booleans, ``=`` across types, ``$string`` of numbers, ``$`` at
a final newline). Needs Node and the npm package ``jsonata`` (as ``test_training_job_jsonata``).
"""

from __future__ import annotations

import json
import subprocess

from stacks.components.launch_rules import (
    ITEM,
    KEY,
    BadItems,
    BadKeys,
    InTable,
    Joined,
    Lookup,
    Matches,
    Rule,
    Var,
    WholeNumber,
    contains,
    ends_with,
    eq,
    every_item,
    has_segment,
    key_count,
    le,
    length,
    starts_with,
    type_of,
)
from tests.unit.test_training_job_jsonata import NODE_ENV

EVALUATE = r"""
const jsonata = require("jsonata");
(async () => {
  const cases = JSON.parse(require("fs").readFileSync(0, "utf8"));
  const out = [];
  for (const c of cases) out.push(await jsonata(c.expression).evaluate({}, c.bindings));
  process.stdout.write(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
"""

X = Var("x")
VALUES = [None, True, False, 0, 1, 2.0, 1.5, 1e-5, 1e-7, 1e21, "", "1", "true", "a\n", [], [1, "a"], {}, {"a": 1e-7}]
STRINGS = ["", "gputrain-a1", "gputrain-a1\n", "gputrain-a_b", "s3://b/code/x.tar.gz", "s3://b/code/../x", "a..b", "ünï"]
CASES = [
    *((type_of(X), {"x": v}) for v in VALUES),
    *((eq(X, 1), {"x": v}) for v in VALUES),
    *((eq(X, True), {"x": v}) for v in VALUES),
    *((eq(X, ""), {"x": v}) for v in VALUES),
    *((WholeNumber(X), {"x": v}) for v in [0, 1, 2.0, 1.5, -3, 1e21]),
    *((length(X), {"x": s}) for s in STRINGS),
    *((Matches(X, "^gputrain\\-[a-zA-Z0-9]+(-+[a-zA-Z0-9]+)*$"), {"x": s}) for s in STRINGS),
    *((starts_with(X, "s3://b/code/"), {"x": s}) for s in STRINGS),
    *((ends_with(X, ".tar.gz"), {"x": s}) for s in STRINGS),
    *((contains(X, ".."), {"x": s}) for s in STRINGS),
    *((has_segment(X, ".."), {"x": s}) for s in STRINGS),
    (InTable(Var("t"), X), {"t": {"ml.a": {}}, "x": "ml.a"}),
    (InTable(Var("t"), X), {"t": {"ml.a": {}}, "x": "ml.b"}),
    (key_count(X), {"x": {"a": 1, "b": 2}}),
    (Joined(BadKeys(X, le(length(Lookup(X, KEY)), 1))), {"x": {"a": "1", "bb": "22", "c": "", "dd": "333"}}),
    (Joined(BadKeys(X, le(length(Lookup(X, KEY)), 1))), {"x": {"bb": "22"}}),
    (every_item(X, eq(type_of(ITEM), "string")), {"x": ["a", "b"]}),
    (every_item(X, eq(type_of(ITEM), "string")), {"x": ["a", 1]}),
    (every_item(X, eq(type_of(ITEM), "string")), {"x": []}),
    (BadItems(X, eq(type_of(ITEM), "string")), {"x": ["a", 1, 2]}),
]


def _jsonata(cases: list[dict]) -> list:
    result = subprocess.run(
        ["node", "-e", EVALUATE], input=json.dumps(cases), capture_output=True, text=True, env=NODE_ENV, timeout=60, check=True
    )
    return json.loads(result.stdout)


def test_every_node_evaluates_in_python_as_jsonata_evaluates_its_rendering():
    expected = _jsonata([{"expression": expr.jsonata(), "bindings": env} for expr, env in CASES])
    differences = [
        (expr.jsonata(), env, python, jsonata)
        for (expr, env), jsonata in zip(CASES, expected)
        if json.dumps(python := expr.evaluate(env)) != json.dumps(jsonata)
    ]
    assert differences == []


def test_a_reason_renders_values_as_jsonata_string_does():
    rule = Rule("x", eq(X, ""), ("x ", X, " is wrong, type ", type_of(X)))
    envs = [{"x": v} for v in VALUES]
    expected = _jsonata([{"expression": rule.reason_jsonata(), "bindings": env} for env in envs])
    assert [rule.reason_text(env) for env in envs] == expected
    assert rule.reason_text({"x": 1e-5}) == "x 0.00001 is wrong, type number"
