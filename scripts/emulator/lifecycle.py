"""The main job, phase by phase: deploy -> train -> destroy, then audit what is left.

:class:`Lifecycle` is used by the command line (``python -m scripts.emulator``) and by the
integration tests, which run the same phases and assert between them. Each phase prints one
line when it starts and one when it ends, with its own time and the time since the start.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import boto3
from botocore.exceptions import ClientError

from scripts.emulator.cdk import Cdk

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_WORK_DIR = ROOT / ".work" / "emulator"


@dataclass(frozen=True)
class Options:
    """How to run the lifecycle.

    Attributes:
        real_account: Deploy to the account and region of the current AWS credentials: no
            emulator, no local runner (SageMaker trains the job).
        sandbox: Deploy with ``delete_data_on_destroy=true``: destroy deletes buckets, key and
            repository too, and the audit expects them gone.
        keep: Stop after the summary: leave everything deployed (and the emulator running
            until Ctrl-C) for exploration.
        stacks: Stacks to deploy by name (``gputrain-data``...); empty for every stack (``--all``).
        context: Extra ``gpu_training.*`` context settings (``{"gpu_training.x": "1"}``).
        epochs: Epochs of the launched job (a hyperparameter override at launch).
        examples: Rows of the synthetic dataset.
        features: Feature columns of the synthetic dataset.
        classes: Classes of the synthetic dataset.
        train: Upload data, launch and train; ``False`` stops after deploy (destroy still runs).
        work_dir: Run files: CDK assembly and logs, dataset, each job's ``/opt/ml`` tree.
        port: Emulator port; ``None`` picks a free one.
        job_timeout_seconds: Longest the run waits for the training job.
        echo_cdk: Stream the CDK CLI's output instead of only logging it.
        user_script: Train the example user script (training_image/examples/keras_image_classifier,
            SageMaker script mode) on a synthetic image dataset instead of the built-in MLP on CSV rows.
        serve: After training, serve the model on the endpoint and invoke it (with ``train``).
        pipeline: Instead of one training job, the pipeline from raw data: process -> train,
            serve that model, then process -> train -> promote on fresh raw data and invoke
            the promoted model (see :meth:`Lifecycle.run_pipeline`).
        cluster: Instead of one SageMaker job, jobs on the two-node GPU cluster through
            ``python -m scripts.cluster_job`` (see :meth:`Lifecycle.run_cluster_jobs`).
        containers: Run every job and endpoint in Docker, in containers of the training image
            built by ``scripts/build-image.sh`` (as SageMaker does), instead of as this machine's
            processes playing the image (emulator only).
    """

    real_account: bool = False
    sandbox: bool = False
    keep: bool = False
    stacks: Sequence[str] = ()
    context: Mapping[str, str] = field(default_factory=dict)
    epochs: int = 2
    examples: int = 2000
    features: int = 16
    classes: int = 4
    train: bool = True
    work_dir: Path = DEFAULT_WORK_DIR
    port: int | None = None
    job_timeout_seconds: float = 900
    echo_cdk: bool = False
    user_script: bool = False
    serve: bool = True
    pipeline: bool = False
    cluster: bool = False
    containers: bool = False


@dataclass
class Phase:
    """One timed phase."""

    name: str
    seconds: float
    ok: bool


class Progress:
    """Prints phase start/end lines with elapsed time and keeps the phase times."""

    def __init__(self, out: Callable[[str], None] = print) -> None:
        self.out = out
        self.started = time.monotonic()
        self.phases: list[Phase] = []

    def say(self, message: str) -> None:
        """One indented detail line under the current phase."""
        self.out(f"           {message}")

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase; the end line says ok or FAILED."""
        start = time.monotonic()
        self.out(f"[{start - self.started:7.1f}s] >> {name}")
        ok = False
        try:
            yield
            ok = True
        finally:
            seconds = time.monotonic() - start
            self.phases.append(Phase(name, seconds, ok))
            status = "done" if ok else "FAILED"
            self.out(f"[{time.monotonic() - self.started:7.1f}s] {'ok' if ok else '!!'} {name}: {status} in {seconds:.1f}s")

    def table(self) -> str:
        """Phase times, one per line, and the total."""
        lines = [f"  {p.name:<32} {p.seconds:7.1f}s{'' if p.ok else '  FAILED'}" for p in self.phases]
        lines.append(f"  {'total':<32} {time.monotonic() - self.started:7.1f}s")
        return "\n".join(lines)


@dataclass
class DeployCheck:
    """What the emulator did with each template resource.

    Attributes:
        skipped_types: Resource types the emulator skipped (unsupported), with counts.
        missing: ``stack/logical id (type)`` of supported resources that were not created.
        custom_resources: Custom resources answered by a local provider.
        unserved_custom_resources: Custom resource types with no local provider.
        unsignalled: ``stack/logical id`` of resources whose CreationPolicy the emulator
            did not wait for.
    """

    skipped_types: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    custom_resources: list[str] = field(default_factory=list)
    unserved_custom_resources: list[str] = field(default_factory=list)
    unsignalled: list[str] = field(default_factory=list)


@dataclass
class PipelineRun:
    """One execution of ``<project>-pipeline`` and what it made.

    Attributes:
        execution: DescribeExecution of the ended execution.
        output: Its output (SUCCEEDED).
        launch_output: What ``scripts.launch --pipeline`` printed.
        watch_output: What ``scripts.watch --execution`` printed while following it.
        processing_job: DescribeProcessingJob of its processing job.
        training_job: DescribeTrainingJob of its training job.
        seconds: From launch to the end of the execution.
    """

    execution: dict[str, Any]
    output: dict[str, Any]
    launch_output: str
    watch_output: str
    processing_job: dict[str, Any]
    training_job: dict[str, Any]
    seconds: float


def _stopped(outcome: Any) -> bool:
    """A cluster job's outcome (the emulator's) is a stop's: the document's stop action, not a cancel,
    gives every container SIGTERM; each exits 143 with its checkpoint, and the run uploads and ends by
    itself (Failed, as a non-zero exit reads in SSM), as :func:`scripts.cluster_job.stopped_by_sigterm` judges SSM's."""
    from scripts.cluster_job import STOPPED_EXIT

    return bool(outcome.status == "Failed" and {code for _, code in outcome.nodes.values()} == {STOPPED_EXIT})


SCRIPT_TIMEOUT_SECONDS = 1800.0
"""Longest run of one operator script: the longest the main job runs (a pipeline's launch and
watch) take minutes; a script that hangs on the emulator fails the run instead of holding it."""


def _text(output: str | bytes | None) -> str:
    """What a killed process had printed (``TimeoutExpired`` holds bytes even in text mode)."""
    if isinstance(output, bytes):
        return output.decode("utf-8", "replace")
    return output or ""


class Lifecycle:
    """One run of the platform lifecycle (emulator or real account)."""

    def __init__(self, options: Options, *, out: Callable[[str], None] = print) -> None:
        self.options = options
        self.progress = Progress(out)
        self.work_dir = options.work_dir
        self.emulator: Any = None
        self.runner: Any = None
        self.states: Any = None
        self.cluster: Any = None
        self.execution: dict[str, Any] = {}
        self.env: dict[str, str] = {}
        self.cdk: Cdk | None = None
        self.assembly = self.work_dir / "cdk.out"
        self.outputs: dict[str, dict[str, str]] = {}
        self.deploy_check = DeployCheck()
        self.job_name: str | None = None
        self.job: dict[str, Any] = {}
        self.audit_report: Any = None
        self.destroyed = False
        self.account = ""
        self.region = ""
        # Serving (after training): deployed by scripts.promote, checked as the main deploy is.
        self.hosting: Any = None
        self.docker: Any = None
        self.serving_deploy_check = DeployCheck()
        self.endpoint_name: str | None = None
        self.predictions: list[dict[str, Any]] = []
        self.heldout_accuracy: float | None = None
        # The pipeline (raw data -> shards -> model -> endpoint).
        self.raw_uris: list[str] = []
        self.pipeline_runs: list[PipelineRun] = []
        # Jobs on the GPU cluster (--cluster): each run's outcome, in order.
        self.cluster_outcomes: list[tuple[str, Any]] = []

    # --- helpers -------------------------------------------------------------------------------

    @property
    def context(self) -> dict[str, str]:
        """``-c`` settings for every CDK command."""
        context = dict(self.options.context)
        if self.options.sandbox:
            context["gpu_training.delete_data_on_destroy"] = "true"
        return context

    def config(self) -> Any:
        """The platform config the CDK app will see (cdk.json + cdk.context.json + ``context``)."""
        from stacks.config import load_config

        context = dict(json.loads((ROOT / "cdk.json").read_text())["context"])
        context.update(json.loads((ROOT / "cdk.context.json").read_text()))
        context.update(self.context)
        return load_config(context)

    def session(self) -> boto3.session.Session:
        """A boto3 session for the target: the emulator's dummy credentials, or the user's."""
        if self.emulator is None:
            return boto3.session.Session()
        return boto3.session.Session(
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=self.env["AWS_SESSION_TOKEN"],
            region_name=self.region,
        )

    def client(self, service: str) -> Any:
        """A boto3 client for the target: the emulator's endpoint, or AWS."""
        endpoint = self.emulator.endpoint_url if self.emulator else None
        return self.session().client(service, endpoint_url=endpoint, region_name=self.region)

    def run_script(self, module: str, *args: str, timeout: float = SCRIPT_TIMEOUT_SECONDS) -> str:
        """Run an operator script (``python -m scripts.<module>``) on the target; return its stdout.

        Raises:
            RuntimeError: it exited non-zero, or ran past ``timeout`` seconds and was killed (its
                output is in ``<work dir>/<module>.log``).
        """
        command = [sys.executable, "-m", f"scripts.{module}", *args]
        for key, value in self.context.items():
            command += ["-c", f"{key}={value}"]
        log = self.work_dir / f"{module}.log"
        try:
            result = subprocess.run(command, cwd=ROOT, env=self.env, capture_output=True, text=True, check=False, timeout=timeout)
        except subprocess.TimeoutExpired as expired:
            printed = "".join(_text(part) for part in (expired.stdout, expired.stderr))
            with log.open("a", encoding="utf-8") as handle:
                handle.write(f"$ {' '.join(command[1:])}\n{printed}[killed after {timeout:.0f} s]\n")
            raise RuntimeError(
                f"python -m scripts.{module} {' '.join(args)} did not end in {timeout:.0f} s and was killed (its output: {log})"
            ) from None
        with log.open("a", encoding="utf-8") as handle:
            handle.write(f"$ {' '.join(command[1:])}\n{result.stdout}{result.stderr}")
        if result.returncode != 0:
            detail = (result.stdout.strip() + "\n" + result.stderr.strip()).strip()
            raise RuntimeError(f"python -m scripts.{module} {' '.join(args)} exited {result.returncode}:\n{detail}")
        return result.stdout

    def _fresh_work_dir(self) -> None:
        # Each run starts from an empty work directory; only one this harness made (it holds
        # the marker) or an empty one is ever cleared, whatever --work-dir says.
        marker = self.work_dir / ".scripts-emulator-run"
        if self.work_dir.exists() and any(self.work_dir.iterdir()):
            if not marker.exists():
                raise RuntimeError(f"--work-dir {self.work_dir} is not empty and was not made by this harness: pick another")
            shutil.rmtree(self.work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        marker.write_text("scratch space of python -m scripts.emulator; cleared at the start of each run\n")

    # --- phases --------------------------------------------------------------------------------

    def check_launch(self) -> None:
        """Before anything starts: the job's launch options and hyperparameters, as the launch
        script and the training entrypoint will check them after the deploy."""
        from scripts.emulator import launching

        with self.progress.phase("check launch options"):
            hyperparameters = launching.check(self, user_script=self.options.user_script)
            self.progress.say("hyperparameters: " + ", ".join(f"{k}={v}" for k, v in sorted(hyperparameters.items())))

    def start(self) -> None:
        """Start the emulator (or resolve the real account) and prepare the work directory."""
        self._fresh_work_dir()
        if self.options.real_account:
            with self.progress.phase("resolve AWS account"):
                self.env = dict(os.environ)
                session = boto3.session.Session()
                identity = session.client("sts").get_caller_identity()
                self.account, self.region = identity["Account"], session.region_name or "us-east-1"
                self.progress.say(f"account {self.account}, region {self.region} ({identity['Arn']})")
        else:
            if self.options.containers:
                self._build_image()
            with self.progress.phase("emulator start"):
                from scripts.emulator import server

                self.emulator = server.start(log_file=self.work_dir / "moto.log", port=self.options.port)
                self.account, self.region = server.ACCOUNT, server.REGION
                self.env = self.emulator.environ(os.environ)
                seeded = server.seed_cached_lookups(ROOT / "cdk.context.json")
                self.progress.say(f"moto {_moto_version()} at {self.emulator.endpoint_url} (log: {self.emulator.log_file})")
                for name, value in seeded.items():
                    self.progress.say(f"seeded public SSM parameter {name} = {value} (registered as an image)")
                if self.options.containers:
                    from scripts.emulator.docker_hosts import IMAGE_TAG, DockerHosts

                    self.docker = DockerHosts.open(IMAGE_TAG, self.emulator.port)
                    self.progress.say(
                        f"--containers: jobs and endpoints run in containers of {IMAGE_TAG}; containers reach the emulator at "
                        f"{self.docker.endpoint_url} (relayed from {self.docker.gateway}); each is labelled {self.docker.label}"
                    )
                if self.options.train:
                    from scripts.emulator.sagemaker import LocalSageMaker

                    self.runner = LocalSageMaker(
                        endpoint_url=self.emulator.endpoint_url,
                        region=self.region,
                        account=self.account,
                        work_dir=self.work_dir / "jobs",
                        timeout_seconds=self.options.job_timeout_seconds,
                        on_event=self.progress.say,
                        docker=self.docker,
                    )
                    self.runner.start()
                    from scripts.emulator.cluster import LocalCluster

                    self.cluster = LocalCluster(
                        endpoint_url=self.emulator.endpoint_url,
                        region=self.region,
                        account=self.account,
                        work_dir=self.work_dir / "cluster-jobs",
                        timeout_seconds=self.options.job_timeout_seconds,
                        on_event=self.progress.say,
                        docker=self.docker,
                    )
                    self.cluster.start()
                    from scripts.emulator.states import LocalStepFunctions

                    self.states = LocalStepFunctions(
                        endpoint_url=self.emulator.endpoint_url,
                        region=self.region,
                        account=self.account,
                        on_event=self.progress.say,
                    )
                    self.states.start()
        self.cdk = Cdk(env=self.env, context=self.context, log_file=self.work_dir / "cdk.log", echo=self.options.echo_cdk)

    def _build_image(self) -> None:
        """``scripts/build-image.sh`` (seconds from Docker's layer cache): the image ``--containers`` runs."""
        from scripts.emulator.docker_hosts import IMAGE_TAG

        log = self.work_dir / "build-image.log"
        with self.progress.phase("image (scripts/build-image.sh)"):
            built = subprocess.run(
                ["bash", str(ROOT / "scripts" / "build-image.sh"), "--tag", IMAGE_TAG],
                capture_output=True, text=True, check=False, env={**os.environ, "BUILD_IMAGE_LOG": str(log)},
            )
            lines = [line for line in built.stdout.splitlines() + built.stderr.splitlines() if line.strip()]
            if built.returncode != 0:
                raise RuntimeError(f"--containers: scripts/build-image.sh failed: {lines[-1] if lines else built.returncode} (log: {log})")
            self.progress.say(lines[-1] if lines else f"{IMAGE_TAG} built")

    def bootstrap_and_synth(self) -> None:
        """``cdk bootstrap`` and ``cdk synth`` (once, reused by deploy and destroy), side by side."""
        assert self.cdk is not None
        with self.progress.phase("cdk bootstrap + synth"):
            import concurrent.futures

            # Independent CLI processes: bootstrap talks to the target, synth runs the app and
            # cdk-nag. Running them together saves the shorter one's time.
            with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
                bootstrapper = dataclasses.replace(self.cdk, log_file=self.work_dir / "cdk-bootstrap.log", echo=False)
                boot = pool.submit(bootstrapper.bootstrap, self.account, self.region, cwd=self.work_dir)
                synth = pool.submit(self.cdk.synth, self.assembly)
                boot.result()
                synth.result()
            stacks = json.loads((self.assembly / "manifest.json").read_text())["artifacts"]
            names = [a["properties"].get("stackName", k) for k, a in stacks.items() if a.get("type") == "aws:cloudformation:stack"]
            self.progress.say(f"bootstrapped aws://{self.account}/{self.region}; synthesized {', '.join(names)}")

    def preflight(self) -> None:
        """``python -m scripts.preflight``: quotas, instance offerings, DLAMI, bootstrap (real account only).

        Not run on the emulator: moto's Service Quotas knows none of the GPU quotas (GetServiceQuota
        fails), and an emulated quota would prove nothing about the account that matters.
        """
        with self.progress.phase("preflight"):
            for line in self.run_script("preflight").splitlines():
                self.progress.say(line)

    def deploy(self) -> None:
        """``cdk deploy`` every stack (or the chosen ones) and check what the target made of it."""
        assert self.cdk is not None
        with self.progress.phase("cdk deploy"):
            self.cdk.deploy(self.options.stacks, self.assembly, self.work_dir / "outputs.json")
            self._read_outputs()
            if self.emulator is not None:
                self.deploy_check = self._check_emulated_deploy(self._assembly_templates(), main_deploy=True)
            for stack, values in self.outputs.items():
                self.progress.say(f"{stack}: {len(values)} outputs")

    def _read_outputs(self) -> None:
        # DescribeStacks rather than --outputs-file: the same call works for every stack that
        # exists, whoever deployed it.
        cloudformation = self.client("cloudformation")
        project = self.config().project_name
        self.outputs = {}
        for page in cloudformation.get_paginator("describe_stacks").paginate():
            for stack in page["Stacks"]:
                if stack["StackName"].startswith(f"{project}-") and stack["StackStatus"] != "DELETE_COMPLETE":
                    self.outputs[stack["StackName"]] = {
                        o["OutputKey"]: o["OutputValue"]
                        for o in stack.get("Outputs") or []
                        if not o["OutputKey"].startswith("PublishOutput")
                    }

    def _assembly_templates(self) -> dict[str, dict[str, Any]]:
        """The main deploy's templates by stack name: every stack of its assembly, or ``options.stacks``."""
        manifest = json.loads((self.assembly / "manifest.json").read_text())["artifacts"]
        templates = {}
        for artifact_id, artifact in manifest.items():
            if artifact.get("type") != "aws:cloudformation:stack":
                continue
            if self.options.stacks and artifact_id not in self.options.stacks:
                continue
            stack_name = artifact["properties"].get("stackName", artifact_id)
            templates[stack_name] = json.loads((self.assembly / artifact["properties"]["templateFile"]).read_text())
        return templates

    def _deployed_templates(self, stacks: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The templates CloudFormation holds for ``stacks``: what a CLI run from an assembly this
        harness never sees (``scripts.promote``'s deploy) submitted."""
        cloudformation = self.client("cloudformation")
        templates = {}
        for stack in stacks:
            body = cloudformation.get_template(StackName=stack)["TemplateBody"]
            templates[stack] = body if isinstance(body, dict) else json.loads(body)  # botocore decodes JSON bodies
        return templates

    def _check_emulated_deploy(self, templates: Mapping[str, dict[str, Any]], *, main_deploy: bool = False) -> DeployCheck:
        """Compare every template (by stack name) with what the emulator created; wait for custom resources.

        The main deploy checks its assembly's templates (:meth:`_assembly_templates`; custom
        resource providers' records are its own); the serving phase the template that
        ``scripts.promote``'s deploy left in CloudFormation (:meth:`_deployed_templates`).

        Emulator gap: moto applies a change set inside the ExecuteChangeSet call and reports
        the stack complete even when a resource handler raised half-way, so a green
        ``cdk deploy`` proves little. Each template's resources are checked here: a type moto
        does not support is listed as skipped (known gap), a supported one that is missing fails
        the deploy.
        """
        from moto.cloudformation.parsing import resource_class_from_type

        from scripts.emulator import custom_resources

        cloudformation = self.client("cloudformation")
        check = DeployCheck()
        # Custom resources answer from moto's threads; on a loaded 2-core machine (two test
        # workers) a minute, not seconds, before one that never answers is reported.
        deadline = time.monotonic() + 60
        for stack_name, template in templates.items():
            while True:
                created = {
                    r["LogicalResourceId"]: r
                    for r in cloudformation.list_stack_resources(StackName=stack_name)["StackResourceSummaries"]
                }
                pending = self._pending_custom_resources(stack_name)
                if not pending or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            for logical_id, resource in template.get("Resources", {}).items():
                resource_type = resource["Type"]
                if logical_id in created:
                    if "CreationPolicy" in resource:
                        check.unsignalled.append(f"{stack_name}/{logical_id}")
                    continue
                condition = resource.get("Condition")
                if condition is not None:
                    continue  # a conditional resource may rightly be absent
                with _quiet_moto():
                    supported = resource_class_from_type(resource_type) is not None
                if supported:
                    check.missing.append(f"{stack_name}/{logical_id} ({resource_type})")
                else:
                    check.skipped_types[resource_type] = check.skipped_types.get(resource_type, 0) + 1
            for logical_id in pending:
                check.missing.append(f"{stack_name}/{logical_id} (custom resource never answered)")
        # The providers' records cover the whole run: they belong to the main deploy's check.
        check.custom_resources = list(custom_resources.SERVED) if main_deploy else []
        check.unserved_custom_resources = list(custom_resources.UNSERVED) if main_deploy else []
        skipped = ", ".join(f"{t} x{n}" for t, n in sorted(check.skipped_types.items()))
        if skipped:
            self.progress.say(f"skipped by the emulator (unsupported types, known gap): {skipped}")
        for entry in check.custom_resources:
            self.progress.say(f"custom resource served by a local provider: {entry}")
        for resource_type in check.unserved_custom_resources:
            self.progress.say(f"WARNING custom resource {resource_type} has no local provider: its effect is missing")
        # Emulator gap: moto neither waits for a CreationPolicy's signals nor implements
        # SignalResource; its instances never boot, so the nodes' GPU health check (which
        # signals on AWS) cannot run. Nothing to play here: the resource is simply created.
        for entry in check.unsignalled:
            self.progress.say(f"CreationPolicy not enforced by the emulator (instances do not boot): {entry}")
        if check.missing:
            raise RuntimeError(
                "the emulator reported success but did not create: " + "; ".join(check.missing)
                + f" (see {self.emulator.log_file})"
            )
        return check

    def _pending_custom_resources(self, stack_name: str) -> list[str]:
        from moto.cloudformation import cloudformation_backends

        backend = cloudformation_backends[self.account][self.region]
        for stack in backend.stacks.values():
            if stack.name == stack_name:
                return [logical_id for logical_id, cr in stack.custom_resources.items() if not cr.is_created()]
        return []

    def upload_dataset(self, *, images: bool | None = None) -> None:
        """Write a small synthetic dataset with the trainer's generator; upload it to each channel.

        Args:
            images: A directory of PNG files per class (what the example user script reads)
                instead of CSV rows; default ``options.user_script``.
        """
        images = self.options.user_script if images is None else images
        with self.progress.phase("dataset upload"):
            config = self.config()
            data = self.outputs[f"{config.project_name}-data"]
            bucket = data["DatasetsBucketName"]
            local = self.work_dir / ("images" if images else "dataset")
            shape = ["--format", "image-dir", "--encoding", "png", "--image", "16x16x3"] if images else ["--format", "csv", "--features", str(self.options.features), "--shards", "2"]
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "trainer.datasets.synthetic",
                    *shape,
                    "--out",
                    str(local),
                    "--examples",
                    str(min(self.options.examples, 400) if images else self.options.examples),
                    "--classes",
                    str(self.options.classes),
                ],
                cwd=ROOT / "training_image",
                check=True,
                capture_output=True,
                text=True,
            )
            s3 = self.client("s3")
            files = sorted(p for p in local.rglob("*") if p.is_file())
            for channel, prefix in config.training_job.channels.items():
                for path in files:
                    s3.upload_file(str(path), bucket, f"{prefix}{path.relative_to(local).as_posix()}")
                kind = "PNG images in class directories" if images else "CSV files"
                self.progress.say(f"channel {channel}: {len(files)} {kind} -> s3://{bucket}/{prefix}")

    def launch(self, *, user_script: bool | None = None) -> None:
        """Start a training job with the operator's launch script (the example user script if asked)."""
        user_script = self.options.user_script if user_script is None else user_script
        with self.progress.phase("launch training job"):
            from scripts.emulator import launching

            self.job_name = launching.launch(self, user_script=user_script)
            self.progress.say(f"training job {self.job_name} created")

    def train(self) -> None:
        """Wait for the job: the local runner trains it (emulator) or SageMaker does (AWS)."""
        assert self.job_name is not None
        with self.progress.phase("train (local SageMaker runner)" if self.runner else "train (SageMaker)"):
            sagemaker = self.client("sagemaker")
            deadline = time.monotonic() + self.options.job_timeout_seconds
            last = ""
            while True:
                try:
                    job = sagemaker.describe_training_job(TrainingJobName=self.job_name)
                except ClientError as err:
                    # Through the workflow the job appears once the execution has checked the
                    # launch options; an execution that failed before creating it says why.
                    if "could not find" not in str(err).lower() or time.monotonic() > deadline:
                        raise
                    execution = self._training_execution()
                    if execution and execution["status"] != "RUNNING":
                        raise RuntimeError(
                            f"workflow execution {self.job_name} {execution['status']} before creating its job: "
                            f"{execution.get('error', '')}: {execution.get('cause', '')}"
                        ) from None
                    time.sleep(1 if self.emulator else 5)
                    continue
                state = f"{job['TrainingJobStatus']}/{job.get('SecondaryStatus', '')}"
                if state != last and self.emulator is None:
                    self.progress.say(f"job {self.job_name}: {state}")
                last = state
                if job["TrainingJobStatus"] in {"Completed", "Failed", "Stopped"}:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"training job {self.job_name} still {state} after {self.options.job_timeout_seconds:.0f}s")
                time.sleep(1 if self.emulator else 30)
            self.job = job
            if job["TrainingJobStatus"] != "Completed":
                raise RuntimeError(f"training job {self.job_name} {job['TrainingJobStatus']}: {job.get('FailureReason', '')}")
            self.execution = self._wait_training_execution(deadline)
            if self.execution:
                self.progress.say(
                    f"workflow execution {self.job_name}: {self.execution['status']} "
                    f"(output {self.execution.get('output', '')[:200]})"
                )
                if self.execution["status"] != "SUCCEEDED":
                    raise RuntimeError(
                        f"workflow execution {self.job_name} {self.execution['status']}: "
                        f"{self.execution.get('error', '')}: {self.execution.get('cause', '')}"
                    )

    def _training_execution(self) -> dict[str, Any] | None:
        """The training workflow's execution named after the job (``None`` for a direct launch)."""
        training = self.outputs.get(f"{self.config().project_name}-training") or {}
        machine = training.get("StateMachineArn")
        if not machine or self.job_name is None:
            return None
        arn = machine.replace(":stateMachine:", ":execution:", 1) + f":{self.job_name}"
        try:
            return dict(self.client("stepfunctions").describe_execution(executionArn=arn))
        except ClientError:
            return None

    def _wait_training_execution(self, deadline: float) -> dict[str, Any]:
        # The job has ended; the workflow notices at its next poll and ends too.
        while True:
            execution = self._training_execution()
            if execution is None or execution["status"] != "RUNNING" or time.monotonic() > deadline:
                return execution or {}
            time.sleep(0.5 if self.emulator else 15)

    def summary(self) -> str:
        """Stack outputs, job outcome, final metrics, artifact location."""
        lines = ["", "=" * 100, "SUMMARY", "=" * 100]
        for stack, values in self.outputs.items():
            lines.append(f"stack {stack}")
            for key, value in values.items():
                lines.append(f"  {key:<26} {value}")
        if self.job:
            lines.append(f"training job {self.job['TrainingJobName']}: {self.job['TrainingJobStatus']}")
            if self.job.get("FailureReason"):
                lines.append(f"  failure reason   {self.job['FailureReason']}")
            for metric in self.job.get("FinalMetricDataList") or []:
                lines.append(f"  {metric['MetricName']:<26} {metric['Value']:.6g}")
            artifact = (self.job.get("ModelArtifacts") or {}).get("S3ModelArtifacts")
            if artifact:
                lines.append(f"  model artifact             {artifact}")
            if self.runner and self.job_name in self.runner.outcomes:
                outcome = self.runner.outcomes[self.job_name]
                lines.append(f"  container log              {outcome.log_file}")
        for job, outcome in self.cluster_outcomes:
            nodes = ", ".join(f"{node} {status} (exit {code})" for node, (status, code) in sorted(outcome.nodes.items()))
            status = "stopped (every container exited 143 with its checkpoint)" if _stopped(outcome) else outcome.status
            lines.append(f"cluster job {job}: {status}: {nodes}")
        for run in self.pipeline_runs:
            lines.append(f"pipeline execution {run.execution['name']}: {run.execution['status']} in {run.seconds:.1f}s")
            for key, value in run.output.items():
                if value is not None:
                    lines.append(f"  {key:<26} {value}")
        if self.emulator and self.deploy_check.skipped_types:
            skipped = ", ".join(sorted(self.deploy_check.skipped_types))
            lines.append(f"emulator skipped (unsupported resource types): {skipped}")
        lines.append("phase times")
        lines.append(self.progress.table())
        text = "\n".join(lines)
        self.progress.out(text)
        return text

    def destroy(self) -> None:
        """The documented teardown (docs/teardown-and-cost.md): ``python -m scripts.teardown --stop-running --destroy``.

        It stops running jobs and workflow executions (which CloudFormation cannot), deletes
        endpoints no stack owns, the serving stack (deployed by ``scripts.promote``, so outside
        the main assembly), runs ``cdk destroy --all`` and deletes the pipeline's leftover
        models and configs. A run limited to some stacks (``--stacks``) destroys those from its
        assembly instead, after the serving stack.
        """
        assert self.cdk is not None
        with self.progress.phase("cdk destroy"):
            if self.options.stacks:
                self._destroy_serving()
                self.cdk.destroy(self.options.stacks, self.assembly)
            else:
                for line in self.run_script("teardown", "--stop-running", "--destroy", "--interval", "1").splitlines():
                    self.progress.say(f"scripts.teardown --stop-running --destroy: {line}")
            if self.hosting is not None:
                self.hosting.stop()
                self.progress.say("local serving process stopped")
            self.destroyed = True

    # --- serving (after training) --------------------------------------------------------------

    def deploy_endpoint(self) -> None:
        """Serve the trained job's model the way a user does: ``python -m scripts.promote JOB``.

        The script checks the job, deploys ``<project>-serving`` with ``serving.training_job_name``
        set to the job (the real CDK CLI) and writes the promotion record, which the app reads at
        every synth: a later plain ``npx cdk destroy --all`` (``--keep``, then the documented
        teardown) has the serving stack and removes the endpoint. The deploy is then checked as
        strictly as the main one (:meth:`_check_promotion`). On the emulator a local process then
        plays SageMaker hosting: the real serving mode on the extracted model
        (:mod:`scripts.emulator.hosting`).
        """
        assert self.cdk is not None and self.job_name is not None
        with self.progress.phase("promote + deploy endpoint"):
            for line in self.run_script("promote", self.job_name).splitlines():
                self.progress.say(f"scripts.promote: {line}")
            self._read_outputs()
            self._check_promotion(self.job_name)
            project = self.config().project_name
            self.endpoint_name = self.outputs[f"{project}-serving"]["EndpointName"]
            endpoint = self.client("sagemaker").describe_endpoint(EndpointName=self.endpoint_name)
            self.progress.say(f"endpoint {self.endpoint_name}: {endpoint['EndpointStatus']} ({endpoint['EndpointConfigName']})")
            if self.emulator is not None:
                from scripts.emulator.hosting import LocalHosting

                self.hosting = LocalHosting(
                    endpoint_url=self.emulator.endpoint_url,
                    region=self.region,
                    work_dir=self.work_dir / "endpoints",
                    on_event=self.progress.say,
                    docker=self.docker,
                )
                self.hosting.serve(self.endpoint_name)

    def _check_promotion(self, job: str) -> None:
        """After ``scripts.promote JOB`` exited 0: what it deployed and recorded is what it said.

        On the emulator every resource of the serving template the CLI deployed exists (the
        main deploy's check, :meth:`_check_emulated_deploy`, on the template CloudFormation holds:
        the script synthesizes into an assembly of its own). On either target the stack serves
        the job's model and the promotion record names the job live.
        """
        from scripts.promote import PromotionRecord
        from stacks.components.endpoint_spec import promotion_record_name

        project = self.config().project_name
        serving = f"{project}-serving"
        if serving not in self.outputs:
            raise RuntimeError(f"scripts.promote {job} exited 0 but there is no stack {serving}")
        if self.emulator is not None:
            self.serving_deploy_check = self._check_emulated_deploy(self._deployed_templates([serving]))
        model = self.client("sagemaker").describe_training_job(TrainingJobName=job)["ModelArtifacts"]["S3ModelArtifacts"]
        served = self.outputs[serving].get("ModelDataUrl")
        if served != model:
            raise RuntimeError(f"scripts.promote {job} exited 0 but {serving} serves {served}, not {model}")
        name = promotion_record_name(project)
        record = PromotionRecord.from_json(self.client("ssm").get_parameter(Name=name)["Parameter"]["Value"], name)
        live = record.live.job if record.live else "nothing"
        if live != job:
            raise RuntimeError(f"scripts.promote {job} exited 0 but the promotion record {name} names {live} live")
        self.progress.say(f"promotion record {name}: {job} live")

    def promote(self, *args: str, timeout: float = 600) -> str:
        """``python -m scripts.promote <args>`` for real (``JOB`` or ``--rollback``): the job checks,
        ``cdk deploy <project>-serving`` with the real CLI, the promotion record. Returns the
        script's output once local hosting serves the endpoint's new config (CloudFormation's
        update, which the emulator plays by recreating the endpoint on the new config)."""
        assert self.endpoint_name is not None and self.hosting is not None
        with self.progress.phase(f"scripts.promote {' '.join(args)}"):
            output = self.run_script("promote", *args)
            for line in output.splitlines():
                self.progress.say(f"scripts.promote: {line}")
            self._read_outputs()
            config = self.client("sagemaker").describe_endpoint(EndpointName=self.endpoint_name)["EndpointConfigName"]
            deadline = time.monotonic() + timeout
            while self.hosting.hosted[self.endpoint_name].config_name != config:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"local hosting never moved {self.endpoint_name} to {config}")
                time.sleep(0.5)
            return output

    def cdk_destroy_all(self) -> str:
        """The documented plain ``npx cdk destroy --all``: the real CLI synthesizes the app, which
        reads the promotion record with the CLI's credentials (the emulator's), so a promoted
        serving stack is in the app and goes with the rest. It synthesizes into the run's work
        directory, not the checkout's ./cdk.out, where another CLI may be. Returns the CLI's output."""
        assert self.cdk is not None
        with self.progress.phase("npx cdk destroy --all"):
            return self.cdk.run(
                ["destroy", "--all", "--force", "--output", str(self.work_dir / "cdk.out.destroy")], timeout=1200
            )

    def invoke_endpoint(self, rows: int = 200) -> float | None:
        """Held-out rows through ``scripts.invoke`` and the endpoint; prints predictions and accuracy.

        The held-out rows come from the same generator, seed and class centroids as the training
        data (a third shard after the two that were uploaded), so they are new examples of the
        same task. Returns the accuracy, or ``None`` when ``--examples`` is odd (no exact split).
        """
        assert self.endpoint_name is not None
        with self.progress.phase("invoke endpoint (held-out rows)"):
            features_file, labels = self._heldout_rows(rows)
            output = self.run_script("invoke", "--endpoint", self.endpoint_name, str(features_file), "--json")
            self.predictions = json.loads(output)["predictions"]
            for index, prediction in enumerate(self.predictions[:5], start=1):
                probabilities = ", ".join(f"{p:.3f}" for p in prediction["probabilities"])
                truth = f" (label {labels[index - 1]})" if labels else ""
                self.progress.say(f"row {index}: class {prediction['predicted_class']}{truth}  [{probabilities}]")
            if labels:
                correct = sum(int(p["predicted_class"] == label) for p, label in zip(self.predictions, labels))
                self.heldout_accuracy = correct / len(labels)
                self.progress.say(
                    f"held-out accuracy {self.heldout_accuracy:.3f} ({correct}/{len(labels)} rows, "
                    f"python -m scripts.invoke -> {self.endpoint_name})"
                )
        return self.heldout_accuracy

    def _heldout_rows(self, rows: int) -> tuple[Path, list[int]]:
        local = self.work_dir / "heldout"
        if self.options.examples % 2:
            raise RuntimeError("held-out rows need an even --examples (the training data is two equal shards)")
        self._synthetic_rows(local, shards=3)
        lines = (local / "part-00002.csv").read_text(encoding="utf-8").splitlines()[1 : rows + 1]  # no header
        features = [line.rsplit(",", 1)[0] for line in lines]
        labels = [int(line.rsplit(",", 1)[1]) for line in lines]
        path = local / "heldout-features.csv"
        path.write_text("\n".join(features) + "\n", encoding="utf-8")
        return path, labels

    # --- jobs on the GPU cluster: scripts.cluster_job -------------------------------------------

    CLUSTER_JOB = "mlp-1"
    CLUSTER_LONG_EPOCHS = 5000
    """Epochs of the first run: it runs until it is stopped."""

    def run_cluster_jobs(self) -> None:
        """The operator's cluster-job loop with ``python -m scripts.cluster_job``: a job on every node of
        the cluster, its status and logs, a second job refused while it runs, a stop (SIGTERM: a
        checkpoint, exit 143 on every node), and the same job run again, resumed from its checkpoint
        and followed to its end with ``scripts.watch --cluster``. On the emulator the local cluster
        runner plays the document on each node (scripts/emulator/cluster.py)."""
        job, channel = self.CLUSTER_JOB, "--channel=train=train/"
        with self.progress.phase("cluster job: run, status, logs"):
            started = self.run_script("cluster_job", "run", job, "--hp", f"epochs={self.CLUSTER_LONG_EPOCHS}", channel)
            command = re.search(r"command (\S+) to (\d+) node", started)
            if command is None:
                raise RuntimeError(f"scripts.cluster_job run printed no command: {started}")
            self.progress.say(f"$ python -m scripts.cluster_job run {job} --hp epochs={self.CLUSTER_LONG_EPOCHS} {channel}")
            self.progress.say(started.splitlines()[0])
            epoch = self._first_cluster_epoch(job)
            self.progress.say(f"node-0: {epoch}")
            for line in self.run_script("cluster_job", "status", job).splitlines():
                self.progress.say(line)
        with self.progress.phase("cluster job: a second job refused while it runs"):
            try:
                self.run_script("cluster_job", "run", "other-1", "--hp", "epochs=1", channel)
            except RuntimeError as err:
                refusal = next((line for line in str(err).splitlines() if "refused:" in line), "")
                if "is running" not in refusal:
                    raise
                self.progress.say(refusal.strip())
            else:
                raise RuntimeError("a second cluster job was accepted while one ran")
        with self.progress.phase("cluster job: stop"):
            self.progress.say(self.run_script("cluster_job", "stop", job).strip().splitlines()[0])
            stopped = self.cluster.wait(command.group(1), self.options.job_timeout_seconds) if self.cluster else None
            if stopped is not None:
                self.cluster_outcomes.append((job, stopped))
                said = "stopped" if _stopped(stopped) else stopped.status
                self.progress.say(f"{job}: {said} ({', '.join(f'{n} exit {c}' for n, (_, c) in sorted(stopped.nodes.items()))})")
                if said != "stopped":
                    raise RuntimeError(f"cluster job {job} ended {stopped.status} after its stop: {stopped.failure or ''}")
        with self.progress.phase("cluster job: resumed to its end"):
            completed = max(int(e) for e in re.findall(r"\[metrics\] epoch=(\d+)", self.run_script("cluster_job", "logs", job, "--node", "node-0")))
            epochs = completed + self.options.epochs
            started = self.run_script("cluster_job", "run", job, "--hp", f"epochs={epochs}", channel)
            rerun = re.search(r"command (\S+) to", started)
            self.progress.say(f"$ python -m scripts.cluster_job run {job} --hp epochs={epochs} {channel}  (completed: {completed})")
            watched = self.run_script("watch", "--cluster", job, "--interval", "1", "--no-logs")
            epochs = [line.strip() for line in watched.splitlines() if line.startswith("  epoch ")]
            for line in [*epochs[-1:], *(line.strip() for line in watched.splitlines() if line.startswith("  node-"))]:
                self.progress.say(line)
            logs = self.run_script("cluster_job", "logs", job, "--node", "node-0")
            resumed = next((line for line in logs.splitlines() if "[trainer] resume" in line), None)
            if resumed is None:
                raise RuntimeError(f"cluster job {job} did not resume from its checkpoint:\n{logs[-2000:]}")
            self.progress.say(resumed)
            if self.cluster and rerun:
                self.cluster_outcomes.append((job, self.cluster.wait(rerun.group(1), self.options.job_timeout_seconds)))

    def _first_cluster_epoch(self, job: str) -> str:
        """The chief's first ``[metrics]`` line of the running job (a checkpoint is written by then)."""
        deadline = time.monotonic() + self.options.job_timeout_seconds
        while time.monotonic() < deadline:
            for line in self.run_script("cluster_job", "logs", job, "--node", "node-0").splitlines():
                if "[metrics] epoch=" in line:
                    return line.split(": ", 1)[1]
            time.sleep(1)
        raise RuntimeError(f"no epoch of cluster job {job} completed within {self.options.job_timeout_seconds:.0f}s")

    # --- the pipeline: raw data -> shards -> model -> endpoint -----------------------------------

    def upload_raw_data(self, runs: int = 2) -> list[str]:
        """Raw CSV rows (``trainer.datasets.synthetic``) under the datasets bucket's raw prefix, one folder per run.

        The generator writes three shards of ``examples / 2`` rows from one seed (so one set of
        class centroids): shard ``i`` is run ``i+1``'s raw data, and the third shard is the
        held-out rows :meth:`invoke_endpoint` sends, so every run learns the same task from rows
        the other has not seen.
        """
        with self.progress.phase("raw data upload"):
            config = self.config()
            bucket = self.outputs[f"{config.project_name}-data"]["DatasetsBucketName"]
            local = self.work_dir / "raw"
            self._synthetic_rows(local, shards=3)
            s3 = self.client("s3")
            self.raw_uris = []
            for run in range(runs):
                prefix = f"{config.processing.input_prefix}run-{run + 1}/"
                s3.upload_file(str(local / f"part-{run:05d}.csv"), bucket, f"{prefix}part-{run:05d}.csv")
                self.raw_uris.append(f"s3://{bucket}/{prefix}")
                self.progress.say(f"raw CSV rows ({self.options.examples // 2}) -> s3://{bucket}/{prefix}")
        return self.raw_uris

    def run_pipeline(self, raw_uri: str, *, promote: bool) -> PipelineRun:
        """``scripts.launch --pipeline`` on ``raw_uri``, followed to its end with ``scripts.watch --execution``.

        On the emulator the local Step Functions executor runs the deployed pipeline's
        definition; the local runner plays its processing job (``python -m trainer process``)
        and training job, and local hosting plays the promotion's UpdateEndpoint.
        """
        steps = "process -> train -> promote" if promote else "process -> train"
        with self.progress.phase(f"pipeline: {steps}"):
            started = time.monotonic()
            arguments = [
                "--pipeline",
                "--input-uri", raw_uri,
                "--process-arg=--shards", "--process-arg=2",
                "--hp", f"epochs={self.options.epochs}",
                # The transform keeps a tenth of the rows for validation: smaller batches give the
                # model as many steps as the one-job flow on its 2000 rows.
                "--hp", "batch_size=64",
            ]
            if promote:
                arguments.append("--promote")
            from scripts.emulator.launching import spend_consent

            arguments += spend_consent(self)
            launched = self.run_script("launch", *arguments)
            self.progress.say(f"$ python -m scripts.launch {' '.join(arguments)}")
            arn = next(line.split(": ", 1)[1] for line in launched.splitlines() if line.startswith("execution: "))
            for line in launched.splitlines():
                if line.startswith(("processing job:", "training job:", "model:")):
                    self.progress.say(line)
            try:
                watched = self.run_script("watch", "--execution", arn, "--interval", "1")
                watch_error = None
            except RuntimeError as err:  # watch exits 1 with the named failure
                watched, watch_error = str(err), err
            execution = dict(self.client("stepfunctions").describe_execution(executionArn=arn))
            self.progress.say(f"$ python -m scripts.watch --execution {execution['name']} -> {execution['status']}")
            if watch_error is not None or execution["status"] != "SUCCEEDED":
                raise RuntimeError(
                    f"pipeline execution {execution['name']} {execution['status']}: "
                    f"{execution.get('error', '')}: {execution.get('cause', '')}"
                )
            output = json.loads(execution.get("output") or "{}")
            sagemaker = self.client("sagemaker")
            run = PipelineRun(
                execution=execution,
                output=output,
                launch_output=launched,
                watch_output=watched,
                processing_job=dict(sagemaker.describe_processing_job(ProcessingJobName=output["processing_job"])),
                training_job=dict(sagemaker.describe_training_job(TrainingJobName=output["training_job"])),
                seconds=time.monotonic() - started,
            )
            for key, value in output.items():
                if value is not None:
                    self.progress.say(f"{key}: {value}")
            self.pipeline_runs.append(run)
            # The pipeline's training job is the run's job (deploy_endpoint promotes it; the summary reads it).
            self.job_name, self.job = output["training_job"], run.training_job
        return run

    def check_promoted(self) -> str:
        """After a promoting run: the endpoint serves the run's endpoint config, and local hosting its model."""
        assert self.endpoint_name is not None and self.pipeline_runs
        with self.progress.phase("check promoted endpoint"):
            output = self.pipeline_runs[-1].output
            endpoint = self.client("sagemaker").describe_endpoint(EndpointName=self.endpoint_name)
            if endpoint["EndpointStatus"] != "InService" or endpoint["EndpointConfigName"] != output["endpoint_config"]:
                raise RuntimeError(
                    f"endpoint {self.endpoint_name} is {endpoint['EndpointStatus']} on {endpoint['EndpointConfigName']}, "
                    f"not InService on {output['endpoint_config']}"
                )
            if self.hosting is not None:
                hosted = self.hosting.hosted[self.endpoint_name]
                if hosted.model_data_url != output["model_uri"]:
                    raise RuntimeError(f"local hosting serves {hosted.model_data_url}, not the promoted {output['model_uri']}")
            self.progress.say(f"endpoint {self.endpoint_name}: InService on {endpoint['EndpointConfigName']} ({output['model_uri']})")
            self._check_recorded(output["training_job"], output["model_uri"])
            return str(endpoint["EndpointConfigName"])

    def _check_recorded(self, job: str, model_uri: str) -> None:
        """The pipeline's promotion is in the promotion record, as ``scripts.promote``'s is: the
        promoted job live, the one it replaced first among the previous ones, tagged as the project's,
        so the app (a later ``cdk deploy``) serves it too."""
        from scripts.promote import PromotionRecord
        from stacks.components.endpoint_spec import promotion_record_name

        project = self.config().project_name
        name = promotion_record_name(project)
        ssm = self.client("ssm")
        versions = ssm.get_parameter_history(Name=name)["Parameters"]
        record = PromotionRecord.from_json(versions[-1]["Value"], name)
        before = PromotionRecord.from_json(versions[-2]["Value"], name) if len(versions) > 1 else PromotionRecord()
        if record.live is None or (record.live.job, record.live.model_data_url) != (job, model_uri):
            raise RuntimeError(f"the pipeline promoted {job} but the promotion record {name} names {record.live} live")
        replaced = before.live.job if before.live else None
        if replaced and replaced != job and (not record.previous or record.previous[0].job != replaced):
            raise RuntimeError(f"the promotion record {name} does not keep {replaced}, which {job} replaced, as the newest previous model")
        tags = {t["Key"]: t["Value"] for t in ssm.list_tags_for_resource(ResourceType="Parameter", ResourceId=name)["TagList"]}
        if tags.get("Project") != project:
            raise RuntimeError(f"the promotion record {name} is not tagged Project={project}: {tags}")
        self.progress.say(f"promotion record {name}: {job} live, {replaced or 'nothing'} previous (version {versions[-1]['Version']})")

    def _synthetic_rows(self, local: Path, *, shards: int) -> None:
        # The trainer's generator, one seed: the same rows for the same arguments.
        subprocess.run(
            [
                sys.executable, "-m", "trainer.datasets.synthetic",
                "--format", "csv",
                "--out", str(local),
                "--examples", str(self.options.examples // 2 * shards),
                "--features", str(self.options.features),
                "--classes", str(self.options.classes),
                "--shards", str(shards),
            ],
            cwd=ROOT / "training_image",
            check=True,
            capture_output=True,
            text=True,
        )

    def _destroy_serving(self) -> None:
        # Not in the main assembly (synthesized before the promotion), but in the app again: it
        # reads the promotion record, so the CLI synthesizes the stack afresh, as for a user's
        # `cdk destroy <project>-serving`.
        assert self.cdk is not None
        serving = f"{self.config().project_name}-serving"
        if serving not in self.outputs:
            return
        self.cdk.run(["destroy", serving, "--force", "--output", str(self.work_dir / "cdk.out.destroy-serving")], timeout=1200)
        if self.hosting is not None:
            self.hosting.stop()
        self.progress.say("serving stack destroyed; local serving process stopped")

    def audit(self) -> Any:
        """Teardown audit: list everything still tagged with the project and judge it."""
        from scripts.teardown_audit import audit

        with self.progress.phase("teardown audit"):
            endpoint = self.emulator.endpoint_url if self.emulator else None
            self.audit_report = audit(
                project=self.config().project_name,
                data_retained=not self.options.sandbox,
                session=self.session(),
                endpoint_url=endpoint,
            )
            self.progress.out(self.audit_report.render())
            if not self.audit_report.ok:
                raise RuntimeError(f"teardown audit found {len(self.audit_report.errors)} error(s)")
        return self.audit_report

    def close(self) -> None:
        """Stop the local runner and the emulator (its state is lost)."""
        # In this order: what serves and runs jobs first, the Docker clients, then the emulator they call.
        for name, end in (("hosting", "stop"), ("states", "stop"), ("cluster", "stop"), ("runner", "stop"), ("docker", "close"),
                          ("emulator", "stop")):
            service = getattr(self, name)
            if service is not None:
                getattr(service, end)()
                setattr(self, name, None)


@contextmanager
def _quiet_moto() -> Iterator[None]:
    import logging
    import warnings

    logger = logging.getLogger("moto")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _moto_version() -> str:
    import moto

    return str(moto.__version__)
