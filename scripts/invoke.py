"""Send rows to the GPU endpoint and print its predictions.

Usage (from the repository root)::

    python -m scripts.invoke rows.csv                      # the project's endpoint (<project>-endpoint)
    python -m scripts.invoke --endpoint my-endpoint rows.json
    printf '0.1,0.2,0.3,0.4\\n' | python -m scripts.invoke -
    python -m scripts.invoke rows.csv --json               # the endpoint's JSON as it came

CSV (one row of features per line, no header, no label) or JSON (``{"instances": [[...]]}``, a
list of rows, or one row): by the file's extension, else by its first character. The file is
checked before anything is sent, so a bad file is one line naming the line or the JSON error
(exit 2, a usage mistake). Exit codes as for every script (common.py): 1 when the endpoint
refused the request or did not answer in time, 3 when it cannot be reached (missing endpoint,
still throttled or without a ready model after a few tries, no credentials).

An invocation is sent once: a request the model may have run (a timeout, a 500 or 503) is not sent
again (:func:`scripts.common.client_config`); only a refusal before the model saw it (throttling, a
model not ready yet) is tried again, a few times with growing waits.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from botocore.exceptions import ClientError, ReadTimeoutError

from scripts.common import (
    AWS_CREDENTIALS,
    EXIT_FAILED,
    INVOKE_READ_TIMEOUT_SECONDS,
    Aws,
    OperatorError,
    UsageError,
    add_common_arguments,
    error_code,
    error_message,
    help_epilog,
    load_platform_config,
    run,
)
from stacks.components.model_endpoint import endpoint_name, inference_component_name

JSON, CSV = "application/json", "text/csv"
# SageMaker real-time invocations accept at most 6 MB of payload.
MAX_PAYLOAD_BYTES = 6 * 1024 * 1024

INVOKE_ATTEMPTS = 5
"""Tries of an invocation refused before the model ran it (throttling, a model not ready)."""
RETRY_BASE_SECONDS = 1.0
"""First wait between two such tries; it doubles each time (with jitter), about 15 s in all."""
NOT_RUN = ("ThrottlingException", "TooManyRequestsException", "ModelNotReadyException")
"""Error codes of invocations SageMaker refused without running the model: safe to send again."""


def read_payload(source: str, content_type: Optional[str] = None) -> tuple[bytes, str]:
    """The body and content type to send, checked; raises UsageError (exit 2) naming what is wrong."""
    try:
        body = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as err:
        raise UsageError(f"cannot read {source}: {err.strerror or err}") from None
    where = "standard input" if source == "-" else source
    if len(body) > MAX_PAYLOAD_BYTES:
        raise UsageError(f"{where} is {len(body)} bytes, over SageMaker's 6 MB invocation limit: split it")
    text = body.decode("utf-8", errors="replace")
    if not text.strip():
        raise UsageError(f"{where} is empty: give at least one row of features")
    if content_type is None:
        suffix = Path(source).suffix.lower() if source != "-" else ""
        content_type = {".csv": CSV, ".json": JSON}.get(suffix) or (JSON if text.lstrip()[:1] in "[{" else CSV)
    if content_type == JSON:
        try:
            json.loads(text)
        except json.JSONDecodeError as err:
            raise UsageError(f"{where} is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}") from None
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            for column, field in enumerate(line.split(",") if line.strip() else [], start=1):
                try:
                    float(field)
                except ValueError:
                    raise UsageError(
                        f"{where} line {number} value {column} is {field.strip()[:30]!r}, not a number "
                        "(CSV rows are features only: no header, no label)"
                    ) from None
    return body, content_type


def invoke(aws: Aws, endpoint: str, body: bytes, content_type: str, component: Optional[str] = None) -> Any:
    """``InvokeEndpoint``; the answer's JSON value, or its text where it is not JSON (an ``inference.py``
    output handler's CSV). Throttling and a model not ready are tried again (:data:`INVOKE_ATTEMPTS`),
    nothing else. Every failure becomes one OperatorError line."""
    extra = {"InferenceComponentName": component} if component else {}
    runtime = aws.client("sagemaker-runtime")
    attempt = 0
    while True:
        attempt += 1
        try:
            response = runtime.invoke_endpoint(EndpointName=endpoint, ContentType=content_type, Accept=JSON, Body=body, **extra)
            break
        except ReadTimeoutError:
            raise OperatorError(
                f"{endpoint} did not answer within {INVOKE_READ_TIMEOUT_SECONDS} s (SageMaker gives a model 60 s); not sent "
                "again, since the model may have run it: send fewer rows per request, or see the endpoint's ModelLatency",
                EXIT_FAILED,
            ) from None
        except ClientError as err:
            code, message = error_code(err), error_message(err)
            # A ModelError is the model's own answer (it ran), whatever its message says: never sent again.
            not_run = code in NOT_RUN or (code != "ModelError" and "throttl" in message.lower())
            if not_run and attempt < INVOKE_ATTEMPTS:
                time.sleep(RETRY_BASE_SECONDS * 2 ** (attempt - 1) * random.uniform(0.5, 1.0))
                continue
            raise _invoke_error(aws, endpoint, err, attempt) from None
    answer = response["Body"].read()
    try:
        return json.loads(answer)
    except ValueError:
        # An inference.py output_handler may answer CSV or any other text: kept as it came.
        return answer.decode("utf-8", "replace")


def _invoke_error(aws: Aws, endpoint: str, err: ClientError, attempts: int) -> Exception:
    """The one line for a refused invocation (``err`` itself where no line fits: the caller's run() prints it)."""
    code, message = error_code(err), error_message(err)
    tries = f" ({attempts} tries)" if attempts > 1 else ""
    if code == "ModelNotReadyException":
        return OperatorError(
            f"{endpoint} has no model ready to serve{tries}: its instances are still starting or loading the model "
            "(minutes on a GPU after a deploy or a scale-out); retry later"
        )
    if code in ("ThrottlingException", "TooManyRequestsException") or (code != "ModelError" and "throttl" in message.lower()):
        return OperatorError(f"{endpoint} is throttling requests ({code}){tries}: retry later or raise serving.max_instances")
    if code == "ModelError":
        detail = err.response.get("OriginalMessage") or message
        try:
            detail = json.loads(detail).get("error", detail)
        except (ValueError, AttributeError):
            pass
        status = err.response.get("OriginalStatusCode", "?")
        return OperatorError(f"{endpoint} refused the request (HTTP {status}): {detail}", EXIT_FAILED)
    if code == "ValidationError" and "not found" in message.lower():
        return OperatorError(
            f"endpoint {endpoint} not found in {aws.region}: deploy it (serving.enabled, python -m scripts.promote JOB) "
            "or pass --endpoint"
        )
    return err


def render(answer: Any) -> str:
    """One line per row: the predicted class, its probability, all probabilities (the built-in
    classifier); any other model's TF Serving answer (``predictions`` or ``outputs``) as its JSON;
    another answer (an ``inference.py`` handler's list, or text) as it came."""
    if isinstance(answer, str):
        return answer.rstrip("\n")
    if not isinstance(answer, dict):
        return json.dumps(answer)
    predictions = answer.get("predictions")
    classifier = isinstance(predictions, list) and all(
        isinstance(p, dict) and "predicted_class" in p and "probabilities" in p for p in predictions
    )
    if not classifier:
        if isinstance(predictions, list):
            return "\n".join(f"row {i}: {json.dumps(p)}" for i, p in enumerate(predictions, start=1))
        return json.dumps(answer)
    lines = []
    for index, prediction in enumerate(predictions, start=1):
        probabilities = prediction["probabilities"]
        best = prediction["predicted_class"]
        shown = ", ".join(f"{p:.3f}" for p in probabilities)
        lines.append(f"row {index}: class {best} (p={probabilities[best]:.3f})  [{shown}]")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.invoke",
        description="Send rows to the GPU endpoint and print its predictions.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            "python -m scripts.invoke",
            [
                ("rows.csv", "one row of features per line, to <project>-endpoint"),
                ("--endpoint my-endpoint rows.json --json", "another endpoint; its JSON answer as it came"),
                ("-", "rows from standard input, e.g. printf '0.1,0.2,0.3,0.4\\n' | python -m scripts.invoke -"),
            ],
            credentials=AWS_CREDENTIALS,
            done="the predictions are printed",
            failed="the endpoint refused the request (its HTTP status and message are printed)",
        ),
    )
    parser.add_argument("file", help="CSV or JSON rows, or - for standard input")
    parser.add_argument("--endpoint", help="endpoint name (default: <project>-endpoint)")
    parser.add_argument(
        "--inference-component", help="component to invoke (default with serving.scale_to_zero: <project>-model)"
    )
    parser.add_argument("--content-type", choices=[CSV, JSON], help="default: from the extension or the first character")
    parser.add_argument("--json", action="store_true", help="print the endpoint's JSON answer")
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    body, content_type = read_payload(args.file, args.content_type)
    config = load_platform_config(args.context)
    name = args.endpoint or endpoint_name(config.project_name)
    component = args.inference_component
    if component is None and args.endpoint is None and config.serving.scale_to_zero:
        component = inference_component_name(config.project_name)
    answer = invoke(Aws.from_args(args), name, body, content_type, component)
    print(json.dumps(answer) if args.json and not isinstance(answer, str) else render(answer))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
