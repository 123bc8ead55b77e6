"""Every operator CLI's ``--help`` ends with examples that run, the credentials it needs and its
exit codes (:func:`scripts.common.help_epilog`), and usage mistakes exit 2 everywhere.

Nothing here reaches AWS: ``--help`` and a bad command line stop before any client is made.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import runpy
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from scripts.common import AWS_CREDENTIALS, USAGE_EXIT, run

ROOT = Path(__file__).resolve().parents[2]

CLIS = {
    "scripts.launch": "scripts.launch",
    "scripts.watch": "scripts.watch",
    "scripts.stop": "scripts.stop",
    "scripts.cluster_job": "scripts.cluster_job",
    "scripts.list_jobs": "scripts.list_jobs",
    "scripts.promote": "scripts.promote",
    "scripts.invoke": "scripts.invoke",
    "scripts.preflight": "scripts.preflight",
    "scripts.sdk_config": "scripts.sdk_config",
    "scripts.teardown": "scripts.teardown",
    "scripts.teardown_audit": "scripts.teardown_audit",
    "scripts.cost": "scripts.cost",
    "scripts.security_report": "scripts.security_report",
    "scripts.iam_check": "scripts.iam_check",
    "scripts.config_reference": "scripts.config_reference",
    "scripts.architecture": "scripts.architecture",
    "scripts.emulator": "scripts.emulator.cli",
}
"""``python -m`` name -> the module whose ``main(argv)`` it runs."""
OFFLINE = {"scripts.cost", "scripts.security_report", "scripts.iam_check", "scripts.config_reference",
           "scripts.architecture", "scripts.emulator"}
"""The CLIs that call no AWS API (the emulator brings its own)."""
LIBRARIES = {"scripts.common", "scripts.epochs", "scripts.pipeline", "scripts.source_code"}
"""Modules under scripts/ that are no command."""


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


def cli_parser(name: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser ``main`` builds (stopped at its ``parse_args``, before anything else runs)."""

    def capture(self: argparse.ArgumentParser, *_: object, **__: object) -> None:
        raise _Captured(self)

    module = importlib.import_module(CLIS[name])
    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", capture)
        with pytest.raises(_Captured) as captured:
            module.main([])
    return captured.value.parser


def help_text(name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    """``python -m <name> --help``, in this process: what ``-m`` runs, the ``__main__`` guard included."""
    monkeypatch.setattr(sys, "argv", [name, "--help"])
    with warnings.catch_warnings(), pytest.raises(SystemExit) as exc:
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module was imported before
        runpy.run_module(name, run_name="__main__", alter_sys=True)
    assert exc.value.code in (0, None)
    return capsys.readouterr().out


def section(text: str, title: str) -> list[str]:
    """The lines of the epilog section ``title:`` up to the next blank line."""
    lines = text.split(f"\n{title}:", 1)[1].split("\n\n", 1)[0].splitlines()
    return [line for line in lines if line.strip()]


@pytest.mark.parametrize("name", sorted(CLIS))
def test_help_ends_with_examples_credentials_and_exit_codes(name, monkeypatch, capsys):
    text = help_text(name, monkeypatch, capsys)
    parser = cli_parser(name, monkeypatch)
    assert text.startswith(f"usage: {parser.prog}")
    # The epilog is the end of the help, in this order.
    assert text.index("\nexamples:") < text.index("\ncredentials: ") < text.index("\nexit codes:")
    assert text.rstrip().endswith(section(text, "exit codes")[-1].rstrip())

    credentials = " ".join(text.split("\ncredentials: ", 1)[1].split("\n\n", 1)[0].split())
    if name in OFFLINE:
        assert credentials.startswith("none: ")
    else:
        assert credentials.startswith(" ".join(AWS_CREDENTIALS.split())) and "AWS_ENDPOINT_URL" in credentials

    codes = {}
    for line in section(text, "exit codes"):
        match = re.match(r"  (\d+) +(.*)", line)
        if match:
            codes[int(match.group(1))] = match.group(2)
        else:  # a wrapped meaning
            codes[max(codes)] += " " + line.strip()
    assert codes[0] and codes[2] == USAGE_EXIT
    if name in OFFLINE:  # no AWS: 3 is a configuration problem, or never happens
        assert codes.get(3, "configuration").startswith("configuration")
    else:
        assert codes[3].startswith("AWS or configuration: no credentials or region")


@pytest.mark.parametrize("name", sorted(CLIS))
def test_every_example_is_a_command_line_the_cli_accepts(name, monkeypatch, capsys):
    parser = cli_parser(name, monkeypatch)
    text = help_text(name, monkeypatch, capsys)
    lines = section(text, "examples")
    commands = [line.strip() for line in lines if not line.strip().startswith("#")]
    comments = [line.strip() for line in lines if line.strip().startswith("# ")]
    assert 2 <= len(commands) <= 3 and len(comments) == len(commands), lines
    prog = shlex.split(parser.prog)
    for command in commands:
        tokens = shlex.split(command)
        assert tokens[: len(prog)] == prog, command
        argv = tokens[len(prog):]
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            raise AssertionError(f"{name} refuses its own example {command!r}: {capsys.readouterr().err}") from exc
        if name == "scripts.emulator":  # its checks after parsing are pure: run them too
            from scripts.emulator.cli import parse_args

            parse_args(argv)


@pytest.mark.parametrize("name", sorted(CLIS))
def test_an_unknown_option_exits_2(name, capsys):
    required = {"scripts.stop": ["gputrain-x"], "scripts.invoke": ["-"], "scripts.promote": ["--show"],
                "scripts.cluster_job": ["status", "gputrain-x"]}.get(name, [])  # fmt: skip
    with pytest.raises(SystemExit) as exc:
        importlib.import_module(CLIS[name]).main([*required, "--no-such-option"])
    assert exc.value.code == 2
    assert "error: unrecognized arguments: --no-such-option" in capsys.readouterr().err


def test_the_list_is_every_command_and_no_library():
    """A new CLI joins the list (and so these tests); a library is not run as one."""
    mains = {f"scripts.{p.stem}" for p in (ROOT / "scripts").glob("*.py") if re.search(r"^def main\(", p.read_text(), re.M)}
    assert mains | {"scripts.emulator"} == set(CLIS)
    modules = {f"scripts.{p.stem}" for p in (ROOT / "scripts").glob("*.py") if p.stem != "__init__"}
    assert modules - mains == LIBRARIES


def test_the_docs_name_as_commands_only_the_clis():
    docs = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    named = {m for doc in docs for m in re.findall(r"python -m (scripts\.[a-z_.]*[a-z_])", (ROOT / doc).read_text(encoding="utf-8"))}
    assert named and named <= set(CLIS), named - set(CLIS)
    scripts_readme = (ROOT / "scripts" / "README.md").read_text(encoding="utf-8")
    assert all(f"`{m.split('.')[1]}.py`" in scripts_readme for m in LIBRARIES)


# --- usage mistakes exit 2 -------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, argv",
    [
        ("scripts.list_jobs", []),
        ("scripts.stop", ["gputrain-x"]),
        ("scripts.promote", ["--show"]),
        ("scripts.preflight", []),
        ("scripts.teardown", []),
        ("scripts.teardown_audit", []),
        ("scripts.cost", []),
        ("scripts.security_report", []),
    ],
)
def test_a_malformed_context_override_is_a_usage_mistake(name, argv, capsys):
    assert run(importlib.import_module(CLIS[name]).main, [*argv, "-c", "training_job.instance_count"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: context override 'training_job.instance_count' is not KEY=VALUE") and err.count("\n") == 1


def test_a_usage_mistake_exits_2_as_a_real_command():
    result = subprocess.run(
        [sys.executable, "-m", "scripts.cost", "-c", "cluster.node_count"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("error: context override 'cluster.node_count' is not KEY=VALUE")


# --- scripts.iam_check as a command -------------------------------------------------------------


def _assembly(path: Path, statement: dict) -> Path:
    """A cloud assembly with one stack holding one role whose policy has ``statement``."""
    path.mkdir()
    template = {
        "Resources": {
            "Role": {
                "Type": "AWS::IAM::Role",
                "Properties": {
                    "AssumeRolePolicyDocument": {
                        "Version": "2012-10-17",
                        "Statement": [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}],
                    },
                    "Policies": [{"PolicyName": "p", "PolicyDocument": {"Version": "2012-10-17", "Statement": [statement]}}],
                },
            }
        }
    }
    (path / "demo.template.json").write_text(json.dumps(template))
    manifest = {"artifacts": {"Demo": {"type": "aws:cloudformation:stack", "properties": {"templateFile": "demo.template.json", "stackName": "demo"}}}}
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def test_iam_check_passes_a_clean_assembly_and_fails_a_finding(tmp_path, capsys):
    from scripts import iam_check

    clean = _assembly(tmp_path / "clean", {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::bucket/*"})
    assert run(iam_check.main, [str(clean)]) == 0
    assert capsys.readouterr().out == "IAM check: 2 statements in 1 templates, 0 finding(s)\n"

    bad = _assembly(tmp_path / "bad", {"Effect": "Allow", "Action": "s3:GetObjekt", "Resource": "arn:aws:s3:::bucket/*"})
    assert run(iam_check.main, [str(bad)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("demo/Role/Policies[0].PolicyDocument[0]: unknown-action: ") and "s3:GetObjekt" in out[0]
    assert out[-1] == "IAM check: 2 statements in 1 templates, 1 finding(s)"


def test_iam_check_without_an_assembly_is_one_line_and_exit_2(tmp_path, capsys):
    from scripts import iam_check

    assert run(iam_check.main, [str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'nothing'} is no cloud assembly") and "npx cdk synth" in err and err.count("\n") == 1
