"""Runs a JSONata-mode state machine definition with scripted task results (no AWS).

Every ``{% %}`` expression is evaluated by the reference JSONata implementation (npm ``jsonata``,
the language Step Functions implements), with Step Functions' bindings: ``$states.input``,
``$states.result``, ``$states.errorOutput``, ``$states.context``, the assigned variables and
``$parse``. Semantics followed (Step Functions developer guide, "Transforming data with
JSONata" and "Passing data between states with variables"):

- a state's ``Assign`` and ``Output`` are evaluated with the variables as they were when the
  state started, then the variables are assigned;
- a Task evaluates ``Arguments``; its result is ``$states.result``; its default output is the result;
- a Catch that matches (``States.ALL`` or the error's name) evaluates its ``Assign``/``Output``
  with ``$states.errorOutput`` (``{Error, Cause}``), whose default output is that error output;
- an expression that returns nothing, or that raises (``$error``, ``$parse`` of a non-JSON text),
  fails the state with Step Functions' ``States.QueryEvaluationError``; in a Task's result
  ``Assign``/``Output`` its ``Catch`` takes it like a task's own error;
- a Choice takes the first rule whose ``Condition`` is true, else ``Default``; Pass and Choice
  pass their input on unless ``Output`` says otherwise.

A task's outcome comes from the script: ``{"result": {...}}`` or ``{"error": ..., "cause": ...}``,
in order per state name (a state run more often than scripted reuses its last outcome). The run
returns the path, every task's evaluated ``Arguments``, and the end (``Succeed`` output, or
``Fail`` error and cause).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Mapping

ROOT = Path(__file__).resolve().parent.parent.parent
NODE_PATHS = [p for p in (os.environ.get("JSONATA_NODE_PATH"), str(ROOT / "node_modules")) if p]

SIMULATOR = r"""
const jsonata = require("jsonata");
const bindingsBase = { parse: (s) => JSON.parse(s) };
async function ev(value, bindings) {
  if (typeof value === "string" && value.startsWith("{%") && value.endsWith("%}")) {
    const r = await jsonata(value.slice(2, -2)).evaluate({}, { ...bindingsBase, ...bindings });
    // Step Functions fails the state (States.QueryEvaluationError) when an expression returns nothing.
    if (r === undefined) throw new Error("States.QueryEvaluationError: returned nothing: " + value.slice(0, 200));
    return r;
  }
  if (Array.isArray(value)) { const out = []; for (const v of value) out.push(await ev(v, bindings)); return out; }
  if (value && typeof value === "object") {
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = await ev(v, bindings);
    return out;
  }
  return value;
}
async function assign(block, vars, bindings) {
  if (!block) return vars;
  const values = await ev(block, bindings);
  return { ...vars, ...values };
}
async function run(definition, execution) {
  const states = definition.States;
  let name = definition.StartAt, input = execution.input, vars = {};
  const context = { Execution: { Id: "arn:aws:states:us-east-1:123456789012:execution:machine:" + execution.name,
                                 Name: execution.name, Input: execution.input } };
  const calls = {}, path = [], tasks = [];
  for (let step = 0; step < 500; step++) {
    const s = states[name];
    if (!s) throw new Error("no state " + name);
    path.push(name);
    const bind = (extra) => ({ ...vars, states: { input, context, ...extra } });
    if (s.Type === "Pass") {
      const output = s.Output !== undefined ? await ev(s.Output, bind({})) : input;
      vars = await assign(s.Assign, vars, bind({}));
      input = output; name = s.Next;
    } else if (s.Type === "Choice") {
      let next = s.Default;
      for (const rule of s.Choices) {
        if (await ev(rule.Condition, bind({})) === true) { next = rule.Next; break; }
      }
      if (next === undefined) throw new Error("no choice matched in " + name);
      name = next;
    } else if (s.Type === "Wait") {
      name = s.Next;
    } else if (s.Type === "Task") {
      const args = await ev(s.Arguments, bind({}));
      tasks.push({ state: name, resource: s.Resource, arguments: args });
      const script = execution.script[name] || [];
      const n = calls[name] = (calls[name] || 0) + 1;
      let outcome = script.length ? script[Math.min(n, script.length) - 1] : { result: {} };
      let output, assigned;
      if (outcome.error === undefined) {
        // The result's Output and Assign: an evaluation error fails the task (catchable).
        const b = bind({ result: outcome.result });
        try {
          output = s.Output !== undefined ? await ev(s.Output, b) : outcome.result;
          assigned = await assign(s.Assign, vars, b);
        } catch (e) {
          outcome = { error: "States.QueryEvaluationError", cause: String(e.message || e) };
        }
      }
      if (outcome.error !== undefined) {
        const errorOutput = { Error: outcome.error, Cause: outcome.cause };
        const catcher = (s.Catch || []).find((c) => c.ErrorEquals.includes("States.ALL") || c.ErrorEquals.includes(outcome.error));
        if (!catcher) return { path, tasks, end: "Fail", error: outcome.error, cause: outcome.cause, uncaught: true };
        const b = bind({ errorOutput });
        const output = catcher.Output !== undefined ? await ev(catcher.Output, b) : errorOutput;
        vars = await assign(catcher.Assign, vars, b);
        input = output; name = catcher.Next;
      } else {
        vars = assigned;
        input = output;
        if (s.End) return { path, tasks, end: "End", output };
        name = s.Next;
      }
    } else if (s.Type === "Succeed") {
      const output = s.Output !== undefined ? await ev(s.Output, bind({})) : input;
      return { path, tasks, end: "Succeed", output, variables: vars };
    } else if (s.Type === "Fail") {
      return { path, tasks, end: "Fail", error: await ev(s.Error, bind({})), cause: await ev(s.Cause, bind({})), variables: vars };
    } else throw new Error("unsupported state type " + s.Type);
  }
  throw new Error("no end after 500 states");
}
(async () => {
  const doc = JSON.parse(require("fs").readFileSync(0, "utf8"));
  const results = [];
  for (const execution of doc.executions) results.push(await run(doc.definition, execution));
  process.stdout.write(JSON.stringify(results));
})().catch((e) => { console.error(e); process.exit(1); });
"""

VALIDATOR = r"""
const jsonata = require("jsonata");
const aslValidator = require("asl-validator");
const doc = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = [];
for (const definition of doc.definitions) {
  const { isValid, errorsText } = aslValidator(definition, { checkPaths: true, checkArn: true });
  const bad = [];
  (function walk(value, where) {
    if (typeof value === "string" && value.startsWith("{%")) {
      if (!value.endsWith("%}")) { bad.push(where + ": unterminated"); return; }
      try { jsonata(value.slice(2, -2)); } catch (e) { bad.push(where + ": " + e.message); }
    } else if (Array.isArray(value)) value.forEach((v, i) => walk(v, where + "[" + i + "]"));
    else if (value && typeof value === "object") for (const [k, v] of Object.entries(value)) walk(v, where + "." + k);
  })(definition, "$");
  out.push({ valid: isValid, errors: isValid ? "" : errorsText("\n"), jsonata_errors: bad });
}
process.stdout.write(JSON.stringify(out));
"""


def node_env(*packages: str) -> dict[str, str] | None:
    """Environment for ``node`` with ``packages`` resolvable, or ``None`` when missing."""
    if shutil.which("node") is None:
        return None
    for path in NODE_PATHS:
        if all((Path(path) / p / "package.json").exists() for p in packages):
            return {**os.environ, "NODE_PATH": path}
    return None


def _node(script: str, document: Mapping[str, Any], env: dict[str, str]) -> Any:
    result = subprocess.run(
        ["node", "-e", script], input=json.dumps(document), capture_output=True, text=True, env=env, timeout=120
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-4000:])
    return json.loads(result.stdout)


def simulate(definition: Mapping[str, Any], executions: list[dict[str, Any]], env: dict[str, str]) -> list[dict[str, Any]]:
    """Run each ``{"input", "name", "script"}`` execution through ``definition``."""
    return _node(SIMULATOR, {"definition": definition, "executions": executions}, env)


def validate(definitions: list[Mapping[str, Any]], env: dict[str, str]) -> list[dict[str, Any]]:
    """asl-validator's verdict on each definition, plus every ``{% %}`` expression compiled by jsonata."""
    return _node(VALIDATOR, {"definitions": definitions}, env)
