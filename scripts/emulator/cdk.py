"""The real CDK CLI (``node_modules/.bin/cdk``), run the way a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

ROOT = Path(__file__).resolve().parents[2]
CDK = ROOT / "node_modules" / ".bin" / "cdk"


class CdkError(RuntimeError):
    """A CDK CLI command exited non-zero; the message carries the tail of its output."""


@dataclass
class Cdk:
    """Runs CDK CLI commands against one environment.

    Attributes:
        env: Process environment (the emulator's endpoint and credentials, or the user's).
        context: ``-c key=value`` settings passed to every command.
        log_file: Full output of every command, appended.
        echo: Stream each line to stdout as it arrives (indented), besides the log.
    """

    env: Mapping[str, str]
    context: Mapping[str, str]
    log_file: Path
    echo: bool = False

    def _environment(self) -> dict[str, str]:
        env = dict(self.env)
        # The CLI runs on Node 24 from the virtualenv (scripts/bootstrap.sh), not the system's.
        venv_bin = str(Path(sys.executable).parent)
        env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
        env.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
        env.setdefault("CDK_DISABLE_VERSION_CHECK", "1")
        # The CLI asks before collecting telemetry or showing notices; neither helps a script.
        env.setdefault("CDK_DISABLE_CLI_TELEMETRY", "true")
        return env

    def run(self, args: Sequence[str], *, timeout: float = 600, cwd: Path = ROOT) -> str:
        """Run ``cdk <args> -c ...`` in ``cwd``; return its combined output or raise :class:`CdkError`."""
        context_args = [part for key, value in self.context.items() for part in ("-c", f"{key}={value}")]
        command = [str(CDK), *args, *context_args, "--no-notices", "--ci"]
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        lines: list[str] = []
        with self.log_file.open("a", encoding="utf-8") as log:
            log.write(f"\n$ {' '.join(command)}\n")
            log.flush()
            process = subprocess.Popen(
                command,
                cwd=cwd,
                env=self._environment(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
            )
            timer = threading.Timer(timeout, process.kill)
            timer.start()
            try:
                assert process.stdout is not None
                for line in process.stdout:
                    lines.append(line)
                    log.write(line)
                    if self.echo:
                        print(f"    {line.rstrip()}", flush=True)
                code = process.wait()
            finally:
                timer.cancel()
        output = "".join(lines)
        if code != 0:
            tail = "\n".join(output.strip().splitlines()[-25:])
            raise CdkError(f"cdk {args[0]} failed (exit {code}); last lines:\n{tail}\n(full log: {self.log_file})")
        return output

    def bootstrap(self, account: str, region: str, *, cwd: Path) -> str:
        """``cdk bootstrap aws://account/region`` (the default bootstrap stack, CDKToolkit).

        Run from ``cwd``, a directory without ``cdk.json``: with an explicit environment the
        CLI then bootstraps without synthesizing the app (which it would otherwise do into
        ./cdk.out, racing any other CLI in the checkout).
        """
        return self.run(["bootstrap", f"aws://{account}/{region}"], cwd=cwd)

    def synth(self, outdir: Path) -> str:
        """Synthesize every stack into ``outdir`` once; deploy and destroy then reuse it."""
        return self.run(["synth", "--quiet", "--output", str(outdir)])

    def deploy(self, stacks: Sequence[str], assembly: Path, outputs_file: Path) -> str:
        """``cdk deploy <stacks>`` (``--all`` when empty) from a synthesized assembly, no approval prompt."""
        return self.run(
            [
                "deploy",
                *(stacks or ["--all"]),
                "--app",
                str(assembly),
                "--require-approval",
                "never",
                "--outputs-file",
                str(outputs_file),
            ]
        )

    def destroy(self, stacks: Sequence[str], assembly: Path) -> str:
        """``cdk destroy <stacks> --force`` (``--all`` when empty) from the assembly the deploy used."""
        return self.run(["destroy", *(stacks or ["--all"]), "--force", "--app", str(assembly)])
