// JSONata for the local Step Functions executor (scripts/emulator/states.py), one request per line.
//
// Request:  {"id": n, "value": <any JSON>, "bindings": {"states": {...}, "<variable>": ...}}
// Reply:    {"id": n, "ok": true, "value": <result>}            (a "{% %}" string evaluated anywhere in value)
//           {"id": n, "ok": true, "undefined": true}            (the whole value was one expression with no result)
//           {"id": n, "ok": false, "message": "..."}            (a JSONata error: States.QueryEvaluationError)
//
// The reference implementation (npm jsonata, the 2.0.6 that Step Functions implements) does the
// evaluation; the functions Step Functions adds to JSONata ($partition, $range, $hash, $random
// with a seed, $uuid, $parse) are bound here, and $eval is not available, as in Step Functions.
"use strict";
const crypto = require("crypto");
const readline = require("readline");
const jsonata = require("jsonata");

function seededRandom(seed) {
  // mulberry32 over a 32-bit hash of the seed: the same seed gives the same number.
  let h = 2166136261;
  for (const ch of String(seed)) h = Math.imul(h ^ ch.charCodeAt(0), 16777619);
  let t = (h += 0x6d2b79f5);
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}

const HASHES = { "MD5": "md5", "SHA-1": "sha1", "SHA-256": "sha256", "SHA-384": "sha384", "SHA-512": "sha512" };

const STEP_FUNCTIONS_FUNCTIONS = {
  partition: (array, size) => {
    const out = [];
    for (let i = 0; i < array.length; i += size) out.push(array.slice(i, i + size));
    return out;
  },
  range: (start, end, step) => {
    const out = [];
    const by = step === undefined ? 1 : step;
    if (by === 0) throw { code: "SF0001", message: "$range step must not be 0" };
    for (let v = start; by > 0 ? v <= end : v >= end; v += by) out.push(v);
    return out;
  },
  hash: (text, algorithm) => {
    if (!(algorithm in HASHES)) throw { code: "SF0002", message: `$hash algorithm must be one of ${Object.keys(HASHES).join(", ")}` };
    return crypto.createHash(HASHES[algorithm]).update(String(text)).digest("hex");
  },
  random: (seed) => (seed === undefined ? Math.random() : seededRandom(seed)),
  uuid: () => crypto.randomUUID(),
  parse: (text) => JSON.parse(text),
  eval: () => {
    throw { code: "SF0003", message: "$eval is not available in Step Functions: use $parse" };
  },
};

function isExpression(value) {
  return typeof value === "string" && value.startsWith("{%") && value.endsWith("%}");
}

async function evaluate(value, bindings) {
  if (isExpression(value)) {
    const expression = jsonata(value.slice(2, -2));
    for (const [name, fn] of Object.entries(STEP_FUNCTIONS_FUNCTIONS)) expression.registerFunction(name, fn);
    return await expression.evaluate(undefined, bindings);
  }
  if (Array.isArray(value)) {
    const out = [];
    for (const item of value) out.push(await evaluate(item, bindings));
    return out;
  }
  if (value && typeof value === "object") {
    const out = {};
    for (const [key, item] of Object.entries(value)) out[key] = await evaluate(item, bindings);
    return out;
  }
  return value;
}

function describe(err) {
  if (err && err.code) {
    const where = err.position !== undefined ? ` at position ${err.position}` : "";
    const token = err.token !== undefined ? ` (near '${err.token}')` : "";
    return `${err.code}: ${err.message}${where}${token}`;
  }
  return String(err && err.message ? err.message : err);
}

const lines = readline.createInterface({ input: process.stdin, terminal: false });
let queue = Promise.resolve();
lines.on("line", (line) => {
  queue = queue.then(async () => {
    let request;
    try {
      request = JSON.parse(line);
    } catch (err) {
      process.stdout.write(JSON.stringify({ id: null, ok: false, message: `bad request: ${err.message}` }) + "\n");
      return;
    }
    let reply;
    try {
      const result = await evaluate(request.value, request.bindings || {});
      reply = result === undefined ? { id: request.id, ok: true, undefined: true } : { id: request.id, ok: true, value: result };
    } catch (err) {
      reply = { id: request.id, ok: false, message: describe(err) };
    }
    process.stdout.write(JSON.stringify(reply) + "\n");
  });
});
