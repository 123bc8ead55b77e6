"""``code/inference.py`` in ``model.tar.gz``: the user's request handlers, both of AWS's families.

Found at ``<model dir>/code/inference.py``, as AWS's TensorFlow serving container looks for it.
``code/`` and ``code/lib`` go on ``sys.path``. ``code/requirements.txt`` is installed at start-up
from wheels shipped in ``code/lib`` (offline: an endpoint may have no network), into a scratch
directory first on ``sys.path``; a requirement no wheel satisfies fails the start with one line
naming it. A ``code/lib`` without wheels holds packages unpacked, as AWS's container expects them:
``requirements.txt`` is then skipped with one warning line, as that container skips it
(``serve.py``: "loading modules in lib, ignoring requirements.txt").

- The serving container's family (``sagemaker-tensorflow-serving-container``'s
  ``python_service.py``): ``handler(data, context)``, or ``input_handler(data, context)`` whose
  result is POSTed to TF Serving's REST predict URI, and ``output_handler(response, context)``
  given that ``requests`` response. ``data`` is the request body stream (``data.read()``),
  ``context`` the container's ``Context`` tuple; ``context.rest_uri`` is this server's own
  ``/v1/models/<name>:predict``, so a ``handler`` can call it as it calls TF Serving there.
  The result is ``(body, content_type)``. These are called with exactly ``(data, context)`` (or
  ``(response, context)``), as ``python_service.py`` calls them: the toolkit's "one more argument"
  rule is the toolkit's.
- The inference toolkit's family (``sagemaker-inference-toolkit``'s ``transformer.py``):
  ``model_fn(model_dir)``, ``input_fn(input_data, content_type)``, ``predict_fn(data, model)``,
  ``output_fn(prediction, accept)``, or ``transform_fn(model, input_data, content_type, accept)``
  instead of the last three; each may take one more argument, the context (:class:`ToolkitContext`,
  the model server's context the toolkit passes: ``system_properties`` with ``model_dir`` and
  ``gpu_id``, ``request_processor``, request headers, response status and headers). ``input_data``
  is the body as ``bytes``, decoded to ``str`` only when the content type is exactly
  ``application/json`` or ``text/csv``, as the toolkit decodes it. A missing function gets a
  default. With ``model_fn`` (the user's model) they are the toolkit's
  (``default_inference_handler.py``): ``input_fn`` decodes JSON, CSV or ``.npy`` into a NumPy array
  (``decoder.decode``; any other type is 415), ``output_fn`` encodes the prediction as the first
  of ``Accept``'s JSON, CSV or ``.npy`` (``encoder.encode``; none of them is 406), and
  ``predict_fn`` calls the model (the toolkit has none: it raises). Without ``model_fn`` the
  platform loads the model and the defaults are the platform's: the body as a TF Serving request,
  that model's TF Serving answer, as JSON.

A handler that raises answers 500 (or the ``status_code`` 4xx/5xx its exception carries, as the
toolkit's ``BaseInferenceToolkitError`` does) with ``{"error": "<exception> (inference.py line N,
in fn)"}``, and the server keeps serving. So does a default that fails (the default predict on a
``model_fn`` model, the default JSON output); a body the default input refuses is its 400/415.
"""

from __future__ import annotations

import collections
import inspect
import io
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from trainer.contract.errors import SourceError
from trainer.logs import log
from trainer.serve.codec import CSV, JSON, NPY
from trainer.user_code import modules, source

CODE_DIR = "code"
LIB_DIR = "lib"
SCRIPT = "inference.py"
MODULE_NAME = "inference"
UTF8_TYPES = (JSON, CSV)
"""Content types whose body the inference toolkit's functions get as ``str`` (content_types.UTF8_TYPES,
compared with the whole header as the toolkit compares it); any other body is ``bytes``."""
SERVING_CONTAINER = "serving-container"
INFERENCE_TOOLKIT = "inference-toolkit"
# The serving container's request context (tfs_utils.parse_request), field for field.
Context = collections.namedtuple(
    "Context",
    "model_name, model_version, method, rest_uri, grpc_port, channel, "
    "custom_attributes, request_content_type, accept_header, content_length",
)


class RequestProcessor:
    """One request's headers and response status/headers, as the model server's ``RequestProcessor``."""

    def __init__(self, headers: dict[str, str]) -> None:
        self._headers = dict(headers)
        self._lower = {key.lower(): value for key, value in self._headers.items()}
        self.status_code = 200
        self.reason = ""
        self.response_headers: dict[str, str] = {}

    def get_request_property(self, key: str) -> str | None:
        return self._headers.get(key, self._lower.get(key.lower()))

    def get_request_properties(self) -> dict[str, str]:
        return dict(self._headers)

    def report_status(self, code: int, reason: str = "") -> None:
        self.status_code, self.reason = int(code), reason

    def get_response_status_code(self) -> int:
        return self.status_code

    def get_response_status_phrase(self) -> str:
        return self.reason

    def add_response_property(self, key: str, value: str) -> None:
        self.response_headers[key] = str(value)

    def get_response_headers(self) -> dict[str, str]:
        return dict(self.response_headers)

    def get_response_header(self, key: str) -> str | None:
        return self.response_headers.get(key)


class ToolkitContext:
    """The context the inference toolkit passes to ``model_fn`` and the functions that take one
    (the model server's ``Context``: one request per call here).

    Attributes:
        model_name: The served model's name.
        content_type: The request's content type (the default when it names none).
        accept: The request's ``Accept`` (the default when it names none or ``*/*``).
    """

    def __init__(
        self,
        *,
        model_dir: str,
        gpu_id: int | None,
        headers: dict[str, str] | None = None,
        content_type: str | None = None,
        accept: str | None = None,
        model_name: str = "model",
    ) -> None:
        self.model_name = model_name
        self.content_type = content_type
        self.accept = accept
        self._system_properties = {
            "model_dir": model_dir,
            "gpu_id": gpu_id,
            "batch_size": 1,
            "server_name": "trainer-serve",
            "server_version": None,
        }
        self._processor = RequestProcessor(headers or {})

    @property
    def system_properties(self) -> dict[str, Any]:
        return self._system_properties

    @property
    def request_processor(self) -> list[RequestProcessor]:
        return [self._processor]

    def get_request_id(self, idx: int = 0) -> str | None:
        return self._processor.get_request_property("X-Amzn-RequestId")

    def get_request_header(self, idx: int, key: str) -> str | None:
        return self._processor.get_request_property(key)

    def get_all_request_header(self, idx: int) -> dict[str, str]:
        return self._processor.get_request_properties()

    def set_response_content_type(self, idx: int, value: str) -> None:
        self._processor.add_response_property("Content-Type", value)

    def get_response_content_type(self, idx: int) -> str | None:
        return self._processor.get_response_header("Content-Type")

    def get_response_status(self, idx: int) -> tuple[int, str]:
        return self._processor.status_code, self._processor.reason

    def set_response_status(self, code: int = 200, phrase: str = "", idx: int = 0) -> None:
        self._processor.report_status(code, phrase)

    def set_response_header(self, idx: int, key: str, value: str) -> None:
        self._processor.add_response_property(key, value)


class HandlerError(Exception):
    """A request the user's handler failed; the message is one line with the user's file and line.

    Attributes:
        status: The HTTP status to answer (4xx/5xx).
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Reply:
    """What a handler answered: the body, its content type, and what a toolkit function set on the context."""

    body: bytes
    content_type: str
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


def _body_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(value, default=_json_default).encode("utf-8")


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "numpy"):
        return np.asarray(value.numpy()).tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class UserCode:
    """The imported ``inference.py`` and how to call it.

    Attributes:
        code_dir: ``<model dir>/code``.
        module: The imported module.
        family: :data:`SERVING_CONTAINER` or :data:`INFERENCE_TOOLKIT`.
        installed: Packages installed from ``code/lib``.
    """

    def __init__(self, code_dir: Path, module: Any, installed: tuple[str, ...]) -> None:
        self.code_dir = code_dir
        self.module = module
        self.installed = installed
        names = {n for n in ("handler", "input_handler", "output_handler") if callable(getattr(module, n, None))}
        toolkit = {n for n in ("model_fn", "input_fn", "predict_fn", "output_fn", "transform_fn") if callable(getattr(module, n, None))}
        if names and toolkit:
            raise SourceError(
                f"{SCRIPT} defines {', '.join(sorted(names))} (the serving container's handlers) and "
                f"{', '.join(sorted(toolkit))} (the inference toolkit's): keep one family."
            )
        if names and "handler" not in names and names != {"input_handler", "output_handler"}:
            raise SourceError(f"{SCRIPT} defines {', '.join(sorted(names))}: define both input_handler and output_handler, or handler.")
        if "transform_fn" in toolkit and toolkit & {"input_fn", "predict_fn", "output_fn"}:
            raise SourceError(f"{SCRIPT} defines transform_fn with input_fn, predict_fn or output_fn: use one or the other.")
        if not names and not toolkit:
            raise SourceError(
                f"{SCRIPT} defines no handler: define handler or input_handler/output_handler (TensorFlow serving "
                "container), or model_fn/input_fn/predict_fn/output_fn/transform_fn (inference toolkit)."
            )
        self.family = SERVING_CONTAINER if names else INFERENCE_TOOLKIT
        self.functions = names | toolkit
        self.model: Any = None

    @property
    def loads_own_model(self) -> bool:
        """``model_fn`` replaces the platform's model loading."""
        return "model_fn" in self.functions

    def _fail(self, err: Exception, stage: str) -> HandlerError:
        status = getattr(err, "status_code", None)
        status = status if isinstance(status, int) and 400 <= status <= 599 else 500
        return HandlerError(status, f"{stage} failed: {modules.describe_failure(err, self.code_dir)}")

    def _call(self, name: str, *args: Any, context: Any = None) -> Any:
        """The toolkit's rule: a function may take the listed arguments, or one more (the context)."""
        function: Callable[..., Any] = getattr(self.module, name)
        try:
            accepted = len(inspect.signature(function).parameters)
        except (TypeError, ValueError):
            accepted = len(args)
        if accepted == len(args) + 1:
            args = (*args, context)
        elif accepted != len(args):
            raise HandlerError(500, f"{SCRIPT}: {name} takes {accepted} arguments; the toolkit passes {len(args)} (or {len(args) + 1} with the context).")
        return self._call_direct(name, *args)

    def _call_direct(self, name: str, *args: Any) -> Any:
        """A serving-container handler, called with exactly ``args`` as ``python_service.py`` calls it
        (``handler(data, context)``): a signature such as ``(data, context, **kwargs)`` is the user's
        business, not a request for the context twice. The toolkit's functions end here too, once
        :meth:`_call` has chosen their arguments."""
        function: Callable[..., Any] = getattr(self.module, name)
        try:
            return function(*args)
        except HandlerError:
            raise
        except Exception as err:  # noqa: BLE001 - the user's failure, reported with their file and line
            raise self._fail(err, name) from err

    def _default(self, stage: str, run: Callable[[], Any]) -> Any:
        """A default the toolkit supplies for a function left out; its failure answers as a handler's does."""
        try:
            return run()
        except HandlerError:
            raise
        except Exception as err:  # noqa: BLE001 - e.g. the model_fn model refused the data: one line, not a traceback
            raise self._fail(err, stage) from err

    def load_model(self, model_dir: Path, gpu_id: int | None = None) -> None:
        """Runs ``model_fn(model_dir[, context])`` once at start-up; raises SourceError with the user's line."""
        context = ToolkitContext(model_dir=str(model_dir), gpu_id=gpu_id)
        try:
            self.model = self._call("model_fn", str(model_dir), context=context)
        except HandlerError as err:
            raise SourceError(f"{SCRIPT} {err}") from err

    def invoke(
        self,
        body: bytes,
        context: Any,
        default_predict: Callable[[Any], Any],
        post: Callable[[str, Any], Any],
    ) -> Reply:
        """One request through the user's handlers (called in a worker thread, never on the event loop).

        Args:
            body: The request body.
            context: The :data:`Context` (serving container) or :class:`ToolkitContext` (toolkit) of this request.
            default_predict: A TF Serving request object -> its answer (the platform's model).
            post: ``(rest_uri, data) -> requests.Response``, what ``input_handler``'s result is sent with.
        """
        if self.family == SERVING_CONTAINER:
            return self._serving_container(body, context, post)
        return self._toolkit(body, context, default_predict)

    def _serving_container(self, body: bytes, context: Any, post: Callable[[str, Any], Any]) -> Reply:
        data = io.BytesIO(body)
        if "handler" in self.functions:
            result = self._call_direct("handler", data, context)
        else:
            processed = self._call_direct("input_handler", data, context)
            response = self._default("POST to context.rest_uri", lambda: post(context.rest_uri, processed))
            result = self._call_direct("output_handler", response, context)
        if not (isinstance(result, tuple) and len(result) == 2):
            name = "handler" if "handler" in self.functions else "output_handler"
            raise HandlerError(500, f"{SCRIPT}: {name} returned {type(result).__name__}; return (body, content_type).")
        return Reply(_body_bytes(result[0]), str(result[1] or context.accept_header))

    def _toolkit(self, body: bytes, context: Any, default_predict: Callable[[Any], Any]) -> Reply:
        content_type = context.content_type
        accept = context.accept
        input_data: Any = body
        if content_type in UTF8_TYPES:
            try:
                input_data = body.decode("utf-8")
            except UnicodeDecodeError as err:
                raise HandlerError(400, f"Request body is not UTF-8 text (byte {err.start}).") from None
        model = self.model
        if "transform_fn" in self.functions:
            result = self._call("transform_fn", model, input_data, content_type, accept, context=context)
        else:
            # With model_fn the defaults are the toolkit's (a NumPy array in, the encoding Accept asks
            # for out); without it the platform loaded the model and its TF Serving contract applies.
            toolkit_defaults = self.loads_own_model
            if "input_fn" in self.functions:
                data = self._call("input_fn", input_data, content_type, context=context)
            elif toolkit_defaults:
                data = toolkit_decode(input_data, content_type)
            else:
                data = _default_input(body, content_type)
            if "predict_fn" in self.functions:
                prediction = self._call("predict_fn", data, model, context=context)
            else:
                prediction = self._default(
                    "predict_fn (default)", lambda: default_predict(data) if model is None else _predict_with(model, data)
                )
            if "output_fn" in self.functions:
                result = self._call("output_fn", prediction, accept, context=context)
            elif toolkit_defaults:
                result = self._default("output_fn (default)", lambda: toolkit_encode(prediction, accept))
            else:
                result = self._default(
                    "output_fn (default)", lambda: (json.dumps(prediction, default=_json_default), "application/json")
                )
        content = accept
        if isinstance(result, tuple):
            result, content = result[0], result[1]
        processor = context.request_processor[0]
        status = processor.status_code if 200 <= processor.status_code <= 599 else 200
        headers = {k: v for k, v in processor.response_headers.items() if k.lower() != "content-type"}
        try:
            return Reply(_body_bytes(result), str(content), status, headers)
        except TypeError as err:
            raise HandlerError(500, f"{SCRIPT}: the response is not bytes, text or JSON: {err}.") from None


def _default_input(body: bytes, content_type: str) -> Any:
    """The default input_fn: the body as a TF Serving request; a body it refuses is that 4xx."""
    from trainer.serve import tfserving
    from trainer.serve.codec import RequestError

    try:
        return tfserving.to_tfs_request(body, content_type)
    except RequestError as err:
        raise HandlerError(err.status, str(err)) from None


TOOLKIT_DECODED = (JSON, CSV, NPY)
"""What the toolkit's default input_fn decodes (``decoder._decoder_map``; ``.npz`` needs SciPy, not in the image)."""
TOOLKIT_ENCODED = (JSON, CSV, NPY)
"""What the toolkit's default output_fn encodes (``encoder.SUPPORTED_CONTENT_TYPES``)."""


def _media_type(header: str) -> str:
    return header.split(";", 1)[0].strip().lower()


def toolkit_decode(input_data: Any, content_type: str) -> Any:
    """The inference toolkit's default ``input_fn`` (``decoder.decode``): JSON -> ``np.array(json.loads(...))``,
    CSV -> ``np.genfromtxt(..., delimiter=",")``, ``.npy`` -> the array (without pickles).

    Raises:
        HandlerError: 415 for another content type (the toolkit's UnsupportedFormatError), 400 for a
            body that is not what its type says.
    """
    mime = _media_type(content_type or "")
    if mime not in TOOLKIT_DECODED:
        raise HandlerError(
            415,
            f"Content type {content_type or '(none)'!r} is not decoded by the inference toolkit's default input_fn "
            f"(it takes {', '.join(TOOLKIT_DECODED)}); send one of them or define input_fn in {SCRIPT}.",
        )
    try:
        if mime == NPY:
            return np.load(io.BytesIO(_body_bytes(input_data)), allow_pickle=False)
        text = input_data.decode("utf-8") if isinstance(input_data, (bytes, bytearray)) else input_data
        if mime == JSON:
            return np.array(json.loads(text))
        return np.genfromtxt(io.StringIO(text), delimiter=",")
    except (ValueError, OSError, EOFError, UnicodeDecodeError) as err:
        reason = " ".join(str(err).split())[:200]
        raise HandlerError(400, f"The default input_fn could not decode the {mime} body: {type(err).__name__}: {reason}") from None


def toolkit_encode(prediction: Any, accept: str) -> tuple[bytes, str]:
    """The inference toolkit's default ``output_fn``: the first type in ``Accept`` it encodes
    (``encoder.encode``: JSON, CSV with ``np.savetxt``, ``.npy`` with ``np.save``).

    Raises:
        HandlerError: 406 when ``Accept`` names none of them (the toolkit's UnsupportedFormatError).
    """
    for mime in (_media_type(part) for part in accept.split(",")):
        if mime == JSON:
            return json.dumps(prediction, default=_json_default).encode("utf-8"), JSON
        if mime == CSV:
            stream = io.StringIO()
            np.savetxt(stream, prediction, delimiter=",", fmt="%s")
            return stream.getvalue().encode("utf-8"), CSV
        if mime == NPY:
            buffer = io.BytesIO()
            np.save(buffer, prediction)
            return buffer.getvalue(), NPY
    raise HandlerError(
        406,
        f"Accept {accept!r} is not encoded by the inference toolkit's default output_fn (it answers "
        f"{', '.join(TOOLKIT_ENCODED)}); accept one of them or define output_fn in {SCRIPT}.",
    )


def _predict_with(model: Any, data: Any) -> Any:
    """The default predict_fn for a model the user's model_fn returned (a Keras model or a callable).

    The toolkit has none (its default raises NotImplementedError); this one feeds the decoded array
    to ``model.predict`` or ``model(...)``. A TF Serving request object (JSON decoded by the toolkit
    into a 0-d object array holding the dict) gives its ``instances`` or ``inputs``.
    """
    if isinstance(data, np.ndarray) and data.dtype == object and data.ndim == 0:
        data = data.item()
    if isinstance(data, dict) and ("instances" in data or "inputs" in data):
        data = data.get("instances", data.get("inputs"))
    array = np.asarray(data, dtype=np.float32)
    outputs = model.predict(array, verbose=0) if hasattr(model, "predict") else model(array)
    return {"predictions": np.asarray(outputs).tolist()}


def load(model_dir: Path) -> UserCode | None:
    """Installs ``code/requirements.txt`` from the wheels in ``code/lib`` (skipped, with a warning, when
    ``code/lib`` holds no wheels) and imports ``code/inference.py``; None without one.

    Raises:
        SourceError: a requirement no shipped wheel satisfies, an import that fails (the user's
            file and line), or handlers that do not form one family.
    """
    code_dir = model_dir / CODE_DIR
    script = code_dir / SCRIPT
    if not script.is_file():
        return None
    lib = code_dir / LIB_DIR
    search = [code_dir, lib]
    installed: tuple[str, ...] = ()
    if (code_dir / source.REQUIREMENTS_FILE).is_file():
        if lib.is_dir() and not any(lib.glob("*.whl")):
            # AWS's container: a lib/ holds the packages unpacked and requirements.txt is not installed.
            log(
                "serve-requirements-skipped",
                warning=repr(f"loading modules in {lib}, ignoring {source.REQUIREMENTS_FILE} (lib/ holds no wheels to install it from)"),
            )
        else:
            # The model directory may be read-only (SageMaker mounts it so): install beside it.
            site_dir = Path(tempfile.mkdtemp(prefix="serve-code-packages-"))
            installed = source.install_requirements(code_dir, site_dir, wheel_dirs=[lib])
            search.insert(0, site_dir)
    module = modules.import_file(script, MODULE_NAME, search)
    user_code = UserCode(code_dir, module, installed)
    log("serve-user-code", script=str(script), family=user_code.family, functions=",".join(sorted(user_code.functions)), installed=",".join(installed) or "none")
    return user_code
