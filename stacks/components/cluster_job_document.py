"""The cluster's SSM Command document: one training job on every node, through Run Command.

What the document says, without CDK (``scripts.cluster_job`` imports it); ``GpuCluster`` declares it.

A cluster job is one ``SendCommand`` of ``<project>-cluster-train`` to the cluster's nodes. The
document is schema 2.2 with typed parameters only: every value is checked by SSM against its
``allowedPattern``/``allowedValues`` before any node sees it, and reaches the node's shell as an
``SSM_<name>`` environment variable (``interpolationType: ENV_VAR``), never as text spliced into
a command. The one step writes ``node_boot/cluster_job.sh`` (the repository's file as it is) to a
temporary file and runs it with bash; that script sources the node's
``bootstrap.sh`` for the settings and the steps boot already has (image pull, the user's code,
the container's options), so the container contract is written once.

:data:`PARAMETERS` is the one definition of the parameters: the document is rendered from it and
``scripts.cluster_job`` checks a request against the same patterns before calling AWS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from pathlib import Path

from stacks.components import hyperparameter_rules
from stacks.config import USER_CODE_PREFIX

DOCUMENT_SUFFIX = "-cluster-train"
"""The document is ``<project>-cluster-train``."""
JOB_SCRIPT = Path(__file__).resolve().parent / "node_boot" / "cluster_job.sh"
"""The job's script, next to the boot files whose ``bootstrap.sh`` it sources on the node."""
EXECUTION_TIMEOUT_SECONDS = 172_800
"""The step's ``timeoutSeconds``: the longest Run Command allows (48 h)."""
MAX_RUNTIME_LIMIT_SECONDS = 169_200
"""The longest ``MaxRuntimeSeconds`` (47 h): the execution timeout less an hour for the GPU check,
the downloads and the uploads around the container (``cluster_job.sh``'s ``MAX_RUNTIME_LIMIT``)."""
DEFAULT_MAX_RUNTIME_SECONDS = 86_400
STOP_GRACE_SECONDS = 120
"""How long a stopped container has to write its checkpoint (``docker stop --time``)."""
UPLOAD_MARGIN_SECONDS = 300
"""How long a stopped job's nodes may take, after the container's stop grace, to upload its checkpoints,
model and outputs and end."""
STOP_ACTION_WAIT_SECONDS = 2 * (STOP_GRACE_SECONDS + UPLOAD_MARGIN_SECONDS)
"""How long, from its start, the ``stop`` action waits on a node for the run's uploads (``cluster_job.sh``'s
``STOP_ACTION_WAIT``): the run's own stop and uploads, then, where the run was cancelled after that bound
(``scripts.cluster_job``'s ``STOP_WAIT_SECONDS``, the first half), its guard's."""
SOURCE_CODE_KEYS = f"{USER_CODE_PREFIX}cluster-*/sourcedir.tar.gz"
"""Where ``scripts.cluster_job run --source-dir`` uploads a job's code (``code/cluster-<job>/sourcedir.tar.gz``):
what the operators' policy may write."""
_EOF = "GPUTRAIN_JOB_EOF"

# One character of a JSON string as json.dumps writes it: anything but a quote, a backslash or a
# control character (a raw newline would end the object's line), or an escape (\" \\ \n, \u00e9 for é).
# SageMaker takes any value (HyperParameterValue: .*, at most 2500) and any key (at most 256): so does
# the node, where the object reaches the shell only as SSM_Hyperparameters and is written with
# printf '%s' (data, never interpreted); only the object's shape is checked.
_JSON_CHAR = r'(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))'
_HYPERPARAMETER_KEY = _JSON_CHAR + "{1,256}"
_HYPERPARAMETER_VALUE = _JSON_CHAR + "{0,2500}"
_ENTRY = f'"{_HYPERPARAMETER_KEY}": "{_HYPERPARAMETER_VALUE}"'
# SageMaker's ChannelName ([A-Za-z0-9.-_]{1,64}) less a leading dot: the name is a directory under
# input/data on the node (never . or ..; cluster_job.sh checks it again).
CHANNEL_NAME = r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}"
_CHANNEL = CHANNEL_NAME + r"=[A-Za-z0-9_./-]{0,900}"
_TAG_FIRST, _TAG_REST = "A-Za-z0-9_", "A-Za-z0-9_.-"
_MUTABLE_TAG = "latest"


def _tag_pattern() -> str:
    """The config's ``image.tag`` rule (a Docker tag: ``[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}``) less ``latest`` in
    any case, which the config refuses: RE2 has no look-ahead, so a six-character tag is spelled out as
    one that differs from ``latest`` at some position."""

    def unlike(letter: str, chars: str) -> str:
        return f"[{chars.replace('a-z', _except('a-z', letter.lower())).replace('A-Z', _except('A-Z', letter.upper()))}]"

    def like(letter: str) -> str:
        return f"[{letter.upper()}{letter.lower()}]"

    six = [
        "".join(like(c) for c in _MUTABLE_TAG[:i])
        + unlike(letter, _TAG_FIRST if i == 0 else _TAG_REST)
        + (f"[{_TAG_REST}]{{{5 - i}}}" if i < 5 else "")
        for i, letter in enumerate(_MUTABLE_TAG)
    ]
    return rf"^([{_TAG_FIRST}][{_TAG_REST}]{{0,4}}|[{_TAG_FIRST}][{_TAG_REST}]{{6,127}}|{'|'.join(six)})?$"


def _except(letters: str, letter: str) -> str:
    """A range such as ``a-z`` without ``letter``: ``a-km-z``."""
    first, last = letters[0], letters[-1]
    before = f"{first}-{chr(ord(letter) - 1)}" if letter > first else ""
    after = f"{chr(ord(letter) + 1)}-{last}" if letter < last else ""
    return before + after


@dataclass(frozen=True)
class Parameter:
    """One typed parameter of the document.

    Attributes:
        name: The parameter (``SSM_<name>`` on the node).
        description: What it is, as the console shows it.
        default: Its value when a request leaves it out; ``None``: required.
        pattern: ``allowedPattern`` (RE2 and Python ``re`` alike), or ``None`` with ``values``.
        values: ``allowedValues``, or ``None`` with ``pattern``.
        rule: What ``pattern`` allows, in words, for a refusal where the pattern is too long to read
            in one line; ``None``: the refusal quotes the pattern.
    """

    name: str
    description: str
    default: Optional[str]
    pattern: Optional[str] = None
    values: Optional[tuple[str, ...]] = None
    rule: Optional[str] = None

    def document(self) -> dict[str, Any]:
        """The parameter as the document declares it."""
        declared: dict[str, Any] = {"type": "String", "description": self.description, "interpolationType": "ENV_VAR"}
        if self.default is not None:
            declared["default"] = self.default
        if self.pattern is not None:
            declared["allowedPattern"] = self.pattern
        if self.values is not None:
            declared["allowedValues"] = list(self.values)
        return declared

    def refusal(self, value: str) -> Optional[str]:
        """Why SSM would refuse ``value`` for this parameter, or ``None``."""
        if self.values is not None and value not in self.values:
            return f"{self.name} must be one of {', '.join(self.values)}, not {value!r}"
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            return f"{self.name} {value[:80]!r} is not {self.rule}" if self.rule else f"{self.name} {value[:80]!r} does not match {self.pattern}"
        return None


PARAMETERS: tuple[Parameter, ...] = (
    Parameter("Action", "run: start the job on this node; stop: SIGTERM into the node's job container.", "run",
              values=("run", "stop")),
    Parameter("JobName", "The job: names its container, its outputs and its checkpoints (a rerun resumes).", None,
              pattern=r"^[a-z0-9](-?[a-z0-9]){0,62}$"),
    Parameter("Hyperparameters", "SageMaker's hyperparameters: a flat JSON object of strings, as json.dumps writes it.",
              "{}", pattern=rf"^\{{({_ENTRY}(, {_ENTRY}){{0,99}})?\}}$",
              rule='a flat JSON object of strings as json.dumps writes it ({"key": "value", "key2": "value2"}): at most 100 '
              "entries, keys of 1-256 and values of at most 2500 characters, a newline or other control character only "
              "escaped (\\n)"),
    Parameter("Channels", "Comma-separated NAME=PREFIX: channel NAME is synced from PREFIX in the datasets bucket.", "",
              pattern=rf"^({_CHANNEL}(,{_CHANNEL}){{0,19}})?$",
              rule="comma-separated NAME=PREFIX, at most 20: NAME 1-64 letters, digits, _ . - (not . first), PREFIX "
              "at most 900 letters, digits, _ . / -"),
    Parameter("CodeKey", f"Script mode: a sourcedir.tar.gz under {USER_CODE_PREFIX} in the artifacts bucket.", "",
              pattern=rf"^({re.escape(USER_CODE_PREFIX)}[A-Za-z0-9_.!*'()/-]{{1,1000}})?$"),
    Parameter("EntryPoint", "Script mode: the script in CodeKey to run (sagemaker_program).", "",
              pattern=r"^(([A-Za-z0-9_-][A-Za-z0-9_.-]*/){0,16}[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254})?$"),
    Parameter("MaxRuntimeSeconds", f"Stop the container (SIGTERM) after this long; at most {MAX_RUNTIME_LIMIT_SECONDS}.",
              str(DEFAULT_MAX_RUNTIME_SECONDS), pattern=r"^[1-9][0-9]{0,5}$"),
    Parameter("ImageTag", "This job's image: <repository>:<ImageTag>, pulled first (never latest); empty: the node's own.",
              "", pattern=_tag_pattern(), rule="a versioned image tag (letters, digits, _ . -; at most 128; not . or - "
              "first): never latest, which is mutable"),
)  # fmt: skip


def document_name(project_name: str) -> str:
    """``<project>-cluster-train``."""
    return f"{project_name}{DOCUMENT_SUFFIX}"


def job_commands(*, datasets_s3_uri: str, artifacts_s3_uri: str) -> list[str]:
    """The step's ``runCommand``: POSIX sh (Run Command's shell) that runs the job script with bash.

    The script goes through a temporary file rather than bash's standard input, which the job's
    own commands (``docker login --password-stdin``) read.
    """
    script = JOB_SCRIPT.read_text(encoding="utf-8").splitlines()
    return [
        "set -eu",
        f"export JOB_DATASETS_S3_URI='{datasets_s3_uri}' JOB_ARTIFACTS_S3_URI='{artifacts_s3_uri}'",
        "job_script=$(mktemp /tmp/gputrain-job.XXXXXX)",
        f"cat >\"$job_script\" <<'{_EOF}'",
        *script,
        _EOF,
        'exec /bin/bash "$job_script"',
    ]


def document_content(*, datasets_s3_uri: str, artifacts_s3_uri: str) -> dict[str, Any]:
    """The document (schema 2.2) for buckets at these ``s3://<bucket>/`` URIs."""
    return {
        "schemaVersion": "2.2",
        "description": (
            "gputrain cluster job: on every node, the GPU check, then the training image with every GPU and the "
            "job laid out as SageMaker lays it out (channels from S3 first; model, outputs and checkpoints back after)."
        ),
        "parameters": {p.name: p.document() for p in PARAMETERS},
        "mainSteps": [
            {
                "action": "aws:runShellScript",
                "name": "ClusterJob",
                "precondition": {"StringEquals": ["platformType", "Linux"]},
                "inputs": {
                    "timeoutSeconds": str(EXECUTION_TIMEOUT_SECONDS),
                    "runCommand": job_commands(datasets_s3_uri=datasets_s3_uri, artifacts_s3_uri=artifacts_s3_uri),
                },
            }
        ],
    }


def request_refusals(parameters: dict[str, str]) -> list[str]:
    """What SSM would refuse in a request's parameters (unknown names included), in one line each."""
    known = {p.name: p for p in PARAMETERS}
    refusals = [f"unknown parameter {name}" for name in parameters if name not in known]
    refusals += [r for name, value in parameters.items() if name in known and (r := known[name].refusal(value))]
    return refusals


def hyperparameter_problems(hyperparameters: dict[str, str], *, user_script: bool, node_count: int, gpus_per_node: int) -> list[str]:
    """What the image would refuse of a cluster job's hyperparameters (:func:`hyperparameter_rules.problems`):
    the same rules as a SageMaker launch, the nodes as its instances."""
    return hyperparameter_rules.problems(
        hyperparameters, user_script=user_script, instance_count=node_count, gpus_per_instance=gpus_per_node
    )
