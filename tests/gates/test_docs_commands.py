"""Every command README.md and docs/ show works as written, or is checked against what exists.

Commands are taken from the pages' ``bash`` blocks and from inline code that starts with
``npx cdk``, ``cdk``, ``python -m scripts.`` or ``scripts/``. Running them would need AWS, so:

* ``npx cdk <verb> <stack>...``: the real CDK CLI (``cdk ls`` over a synthesized assembly) must
  select every stack named, and each ``-c gpu_training...`` override must load;
* ``python -m scripts.<tool> ...``: the tool's own argument parser must accept the command line
  (optional ``[...]`` parts included, each ``a|b`` alternative on its own), and every tool accepts
  ``--region``, ``--profile`` and ``-c`` as the README promises;
* ``scripts/*.sh`` and ``bash scripts/*.sh``: the script exists and its options are its parser's
  (for build-image.sh and docker-engine.sh: the options its ``--help`` shows);
* paths and pytest arguments exist;
* the image's own commands (docs/image.md, serving.md, pipeline.md): ``python -m trainer[.module]``
  through the trainer's parsers (``process`` arguments, the synthetic data generator's options),
  each leading ``NAME=value`` and ``docker run -e NAME=...`` a variable the image reads, ``docker
  build`` a folder with a Dockerfile and ``docker run`` an image a ``docker build`` shown tags,
  ``echo JSON > .../hyperparameters.json`` hyperparameters the trainer accepts, ``curl`` a route and
  a content type the serve mode answers.

A command no rule knows fails the test: a new kind of command needs a rule here.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

from stacks.config import CONTEXT_KEY, full_key, load_config
from tests.synth import ROOT, cached_synth, project_context

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
"""README.md and every page of docs/."""
TRAINING_IMAGE = ROOT / "training_image"
JOB = "gputrain-20260101-000000-abcd"
SKIPPED_PROGRAMS = {"export", "git", "mkdir", "source"}
"""Shell built-ins and tools outside the project: nothing of ours to check."""


def readme_commands(text: str) -> list[str]:
    """Every command line shown: bash blocks (one per line, split at ``&&``) and inline code."""
    commands: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                commands.extend(part.strip() for part in line.split("&&"))
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for span in re.findall(r"`([^`\n]+)`", prose):
        if re.match(r"((npx )?cdk (synth|deploy|destroy|diff|ls|context|bootstrap)\b|python -m scripts\.|(bash )?scripts/\S+\.sh)", span):
            commands.append(span.strip())
    return list(dict.fromkeys(commands))


COMMANDS = list(dict.fromkeys(c for page in PAGES for c in readme_commands(page.read_text(encoding="utf-8"))))


def _variants(tokens: list[str]) -> Iterator[list[str]]:
    """``[--spot|--on-demand]`` -> one command line per alternative; brackets of optional parts dropped."""
    choices = []
    for token in tokens:
        bare = token.strip("[]")
        if not bare:
            continue
        choices.append(bare.split("|") if bare.startswith("-") and "|" in bare else [bare])
    for picked in itertools.product(*choices):
        yield [JOB if t == "JOB" else t for t in picked]


class _Parsed(Exception):
    def __init__(self, namespace: argparse.Namespace) -> None:
        super().__init__()
        self.namespace = namespace


def parse_with_tool(module_name: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> argparse.Namespace:
    """``argv`` through the tool's real parser; nothing after parsing runs."""
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        raise _Parsed(original(self, args, namespace))

    module = importlib.import_module(module_name)
    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
        try:
            module.main(argv)
        except _Parsed as parsed:
            return parsed.namespace
        except SystemExit as exc:
            raise AssertionError(f"{module_name} refuses {argv}: exit {exc.code}") from None
    raise AssertionError(f"{module_name}.main never parsed its arguments")


@pytest.fixture(scope="module")
def assembly(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Every stack the README names: the serving stack exists only with serving enabled.
    serving = {"serving.enabled": True, "serving.training_job_name": JOB}
    return cached_synth(tmp_path_factory.mktemp("readme"), serving).outdir


def cdk_selects(assembly: Path, pattern: str) -> list[str]:
    """The stacks the real CDK CLI selects for ``pattern`` (``cdk ls <pattern>``)."""
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        [str(ROOT / "node_modules" / ".bin" / "cdk"), "ls", pattern, "--app", str(assembly)],
        cwd=assembly.parent, env=env, capture_output=True, text=True, timeout=120, check=True,
    )
    return result.stdout.split()


def check_cdk(tokens: list[str], assembly: Path) -> None:
    verb, rest = tokens[0], tokens[1:]
    assert verb in {"synth", "deploy", "destroy", "diff", "ls", "context", "bootstrap"}, f"unknown cdk verb {verb}"
    names: list[str] = []
    overrides: dict[str, str] = {}
    skip_next = False
    for i, token in enumerate(rest):
        if skip_next:
            skip_next = False
            continue
        if token in ("-c", "--context"):
            key, _, value = rest[i + 1].partition("=")
            assert full_key(key).startswith(CONTEXT_KEY + "."), key  # a setting, with or without its prefix
            overrides[key] = value
            skip_next = True
        elif token in ("--reset", "--app"):
            skip_next = True
        elif not token.startswith("-"):
            names.append(token)
    load_config({**project_context(), **overrides})  # raises ConfigError on a bad example
    if verb in ("context", "bootstrap"):
        return  # their arguments are context keys and environments, not stacks
    for name in names:
        assert name in cdk_selects(assembly, name), f"`cdk {verb} {name}` selects no stack"


def check_script(path: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    script = ROOT / path
    assert script.is_file(), f"{path} does not exist"
    if script.name == "run-local.sh":
        from scripts.emulator.cli import parse_args

        for variant in _variants(args):
            parse_args(variant)
    elif script.name == "bootstrap.sh":
        assert set(args) <= {"--deploy-only"}, args
    elif script.name == "test.sh":
        paths = [a for a in args if a.startswith("tests")]
        assert all((ROOT / p).exists() for p in paths), paths
    elif script.name in ("build-image.sh", "docker-engine.sh"):
        # --help prints the usage and exits before Docker is touched.
        usage = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True, timeout=30, check=True).stdout
        options = [a for a in args if a.startswith("-")]
        assert all(re.search(rf"(^|\s){re.escape(o)}\b", usage) for o in options), (options, usage)
    else:
        raise AssertionError(f"no rule for {path}")


def image_reads(name: str) -> bool:
    """Whether the image's code reads the environment variable ``name`` (its name as a string literal)."""
    sources = (path.read_text(encoding="utf-8") for path in (TRAINING_IMAGE / "trainer").rglob("*.py"))
    return any(re.search(rf"[\"']{re.escape(name)}[\"']", text) for text in sources)


def _trainer_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TRAINING_IMAGE))


def check_trainer(module: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m trainer [mode] ARGS`` or ``python -m trainer.<module> ARGS``, through the image's parsers."""
    _trainer_on_path(monkeypatch)
    if module == "trainer":
        mode, rest = (args[0], args[1:]) if args else ("train", [])
        assert mode in ("train", "serve", "process"), f"python -m trainer takes train, serve or process, not {mode}"
        if mode == "process":
            from trainer.process.options import parse

            parse(rest)  # raises ConfigError naming a bad argument
        else:
            assert rest == [], f"python -m trainer {mode} takes no arguments: {rest}"
        return
    parse_with_tool(module, args, monkeypatch)


def check_docker(tokens: list[str]) -> None:
    verb, rest = tokens[1], tokens[2:]
    if verb == "build":
        assert (ROOT / rest[-1] / "Dockerfile").is_file(), f"docker build {rest[-1]}: no Dockerfile there"
        return
    assert verb == "run", f"no rule for docker {verb}"
    built = {c.split()[c.split().index("-t") + 1] for c in COMMANDS if c.startswith("docker build") and " -t " in c}
    assert rest[-1] in built, f"docker run {rest[-1]}: no docker build shown tags that image ({sorted(built)})"
    for flag, value in zip(rest, rest[1:]):
        if flag == "-e":
            assert image_reads(value.split("=", 1)[0]), f"docker run -e {value}: the image reads no such variable"


def check_curl(tokens: list[str]) -> None:
    server = (TRAINING_IMAGE / "trainer" / "serve" / "server.py").read_text(encoding="utf-8")
    url = next(t for t in tokens[1:] if "localhost" in t or "127.0.0.1" in t)
    path = "/" + url.split("/", 1)[1]
    assert f'"{path}"' in server, f"curl {url}: the serve mode has no route {path}"
    for flag, value in zip(tokens, tokens[1:]):
        if flag == "-H" and value.lower().startswith("content-type:"):
            content_type = value.split(":", 1)[1].strip()
            served = "".join(p.read_text(encoding="utf-8") for p in (TRAINING_IMAGE / "trainer" / "serve").glob("*.py"))
            assert f'"{content_type}"' in served, f"curl: the serve mode does not take {content_type}"


def check_echo(tokens: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert tokens[-2] == ">", f"echo shown without a file: {tokens}"
    body = json.loads(tokens[1])
    if tokens[-1].endswith("/input/config/hyperparameters.json"):
        _trainer_on_path(monkeypatch)
        from trainer.contract.hyperparameters import parse_hyperparameters

        parse_hyperparameters(body)  # raises ConfigError naming a bad key or value


def check(command: str, assembly: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = shlex.split(command.removesuffix("&").strip())
    while tokens and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", tokens[0]):
        name = tokens.pop(0).split("=", 1)[0]
        assert image_reads(name), f"{command}: the image reads no variable {name}"
    if tokens[0] in SKIPPED_PROGRAMS:
        return
    if tokens[0] == "docker":
        return check_docker(tokens)
    if tokens[0] == "curl":
        return check_curl(tokens)
    if tokens[0] == "echo":
        return check_echo(tokens, monkeypatch)
    if tokens[:2] == ["npx", "cdk"]:
        return check_cdk(tokens[2:], assembly)
    if tokens[0] == "cdk":
        return check_cdk(tokens[1:], assembly)
    if tokens[0] == "bash":
        tokens = tokens[1:]
    if tokens[0].startswith("scripts/"):
        return check_script(tokens[0], tokens[1:], monkeypatch)
    if tokens[0] in ("python", ".venv/bin/python") and tokens[1] == "-m":
        module, args = tokens[2], tokens[3:]
        if module == "pytest":
            assert all((ROOT / a).exists() for a in args if not a.startswith("-")), args
            return
        if module == "trainer" or module.startswith("trainer."):
            return check_trainer(module, args, monkeypatch)
        assert module.startswith("scripts."), module
        for variant in _variants(args):
            parse_with_tool(module, variant, monkeypatch)
        return
    raise AssertionError(f"the docs show a command no rule covers: {command}")


def test_the_docs_show_the_commands_this_test_is_about():
    assert "npx cdk destroy gputrain-cluster" in COMMANDS and "npx cdk deploy gputrain-data" in COMMANDS
    assert any(c.startswith("python -m scripts.teardown_audit") for c in COMMANDS)
    assert "bash scripts/bootstrap.sh --deploy-only" in COMMANDS
    assert any(c.startswith("python -m scripts.cluster_job run") for c in COMMANDS)
    assert any(c.startswith("SAGEMAKER_BASE_DIR=") and "python -m trainer process" in c for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_docs_command(command, assembly, monkeypatch):
    check(command, assembly, monkeypatch)


def test_cdk_would_have_matched_nothing_for_a_name_that_is_not_a_stack(assembly):
    """The check is real: the construct ids the stacks had before select nothing."""
    assert cdk_selects(assembly, "GpuCluster") == []


DOCS_TOOLS = {"scripts.architecture", "scripts.config_reference"}
"""Tools that write the docs from the code: they read no AWS, so they take no --region or --profile."""
OPERATOR_TOOLS = sorted({c.split()[2] for c in COMMANDS if c.startswith("python -m scripts.")} - DOCS_TOOLS)


@pytest.mark.parametrize("module", OPERATOR_TOOLS)
def test_every_operator_tool_takes_region_profile_and_context(module, monkeypatch):
    required = {"scripts.stop": [JOB], "scripts.promote": [JOB], "scripts.invoke": ["-"], "scripts.cluster_job": ["list"]}.get(module, [])
    common = ["--region", "eu-west-1", "--profile", "ml", "-c", "training_job.instance_count=2"]
    namespace = parse_with_tool(module, [*required, *common], monkeypatch)
    assert (namespace.region, namespace.profile, namespace.context) == ("eu-west-1", "ml", ["training_job.instance_count=2"])


def test_commands_are_split_and_cleaned_as_a_shell_would_read_them():
    text = "```bash\nbash a.sh && export X=1   # comment\n# only a comment\n```\nsee `npx cdk ls` and `pip x`\n"
    assert readme_commands(text) == ["bash a.sh", "export X=1", "npx cdk ls"]
    assert list(_variants(["[--spot|--on-demand]", "[JOB]"])) == [["--spot", JOB], ["--on-demand", JOB]]


def test_the_emulator_options_the_docs_list_exist(capsys):
    from scripts.emulator.cli import parse_args

    text = (ROOT / "docs" / "local-emulator.md").read_text(encoding="utf-8")
    section = text.split("**Run the platform on a local AWS emulator**", 1)[1].split("**Run the tests**", 1)[0]
    options = {span.split()[0] for span in re.findall(r"`(-[^`]+)`", section)}
    assert {"--keep", "--sandbox", "--real-account", "--epochs", "-c"} <= options
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    usage = capsys.readouterr().out
    assert [o for o in sorted(options) if not re.search(rf"(^|[\s\[,]){re.escape(o)}\b", usage)] == []


@pytest.mark.parametrize(
    "command, says",
    [
        ("SAGEMAKER_BASE_DIRX=/tmp/job python -m trainer", "reads no variable SAGEMAKER_BASE_DIRX"),
        ("python -m trainer serve extra", "takes no arguments"),
        ("python -m trainer process --shards -1", "--shards"),
        ("docker run -e EXPECTED_GPUS=4 trainer:dev", "reads no such variable"),
        ("docker run trainer:other", "no docker build shown tags that image"),
        ("curl -s localhost:8080/predict", "no route /predict"),
        ("curl -s -H 'Content-Type: text/html' localhost:8080/invocations", "does not take text/html"),
        ("""echo '{"epoch": "3"}' > /tmp/job/input/config/hyperparameters.json""", "epoch"),
        ("python -m trainer.datasets.synthetic --format parquet", "refuses"),
    ],
)
def test_the_image_commands_rules_catch_a_wrong_command(command, says, monkeypatch):
    """The rules for the image's commands are real: each of these near misses is refused, saying why."""
    with pytest.raises(Exception, match=re.escape(says)):
        check(command, Path("unused"), monkeypatch)
