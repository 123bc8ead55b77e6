"""Command line of the main job: parse options, run the phases, print the summary and audit.

    scripts/run-local.sh                 # emulator: deploy -> train -> destroy -> audit
    scripts/run-local.sh --keep          # stop after the summary; explore until Ctrl-C
    scripts/run-local.sh --sandbox       # delete_data_on_destroy=true: data goes too
    scripts/run-local.sh --real-account  # the same flow on your AWS credentials' account
    scripts/run-local.sh --pipeline      # raw data -> pipeline (process -> train) -> serve -> pipeline with promote
    scripts/run-local.sh --containers    # every job and endpoint in Docker, in the built training image
    scripts/run-local.sh --cluster       # jobs on a two-node GPU cluster: run, refused, stop, resumed
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Sequence

from scripts.common import EXIT_FAILED, EXIT_INTERRUPTED, count_argument, help_epilog
from scripts.emulator.lifecycle import DEFAULT_WORK_DIR, Lifecycle, Options


def parse_args(argv: Sequence[str] | None) -> Options:
    """Options from the command line."""
    parser = argparse.ArgumentParser(
        prog="scripts/run-local.sh",
        description="Deploy the platform, train a job on it, destroy it and audit what is left: "
        "on a local AWS emulator (default) or on a real account.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            "scripts/run-local.sh",
            [
                ("", "deploy -> train -> serve -> destroy -> audit on the emulator, under a minute on 2 cores"),
                ("--keep", "stop after the summary and keep the emulator up until Ctrl-C"),
                ("--pipeline", "raw CSV -> the pipeline -> served; a second execution promotes onto the endpoint"),
            ],
            credentials="none: it starts moto on loopback and gives every command it runs that emulator's "
            "AWS_ENDPOINT_URL and keys (--keep prints them for your shell). --real-account uses your AWS "
            "credentials and region instead (AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; "
            "AWS_REGION) and costs money.",
            done="trained (and served), destroyed, and the audit found nothing left behind",
            failed="a phase failed, a refused configuration or launch included: the error line names it, "
            "the logs are in --work-dir",
            cannot_proceed=None,
            more={EXIT_INTERRUPTED: "interrupted (Ctrl-C)"},
        ),
    )
    parser.add_argument("--keep", action="store_true", help="leave everything up after the summary (Ctrl-C ends it)")
    parser.add_argument(
        "--sandbox", action="store_true", help="deploy with delete_data_on_destroy=true: destroy deletes the data too"
    )
    parser.add_argument(
        "--real-account",
        action="store_true",
        help="use the account and region of your AWS credentials: no emulator, SageMaker trains (costs money)",
    )
    parser.add_argument("--epochs", type=count_argument, default=2, help="epochs of the launched job (default: 2)")
    parser.add_argument("--examples", type=count_argument, default=2000, help="rows of the synthetic dataset (default: 2000)")
    parser.add_argument("--no-train", action="store_true", help="deploy, then destroy: no dataset, no job")
    parser.add_argument("--no-serve", action="store_true", help="train, but do not deploy and invoke the endpoint")
    parser.add_argument(
        "--user-script",
        action="store_true",
        help="train the example Keras script (training_image/examples/keras_image_classifier) in SageMaker script "
        "mode on synthetic images, instead of the built-in MLP (no serving phase)",
    )
    parser.add_argument(
        "--pipeline",
        action="store_true",
        help="run the pipeline from raw CSV rows instead of one job: process -> train, serve that model, then "
        "process -> train -> promote on fresh raw data and invoke the promoted model",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="instead of one SageMaker job, jobs on a two-node GPU cluster with python -m scripts.cluster_job: run, "
        "status and logs, a second job refused while it runs, stop, the job resumed to its end (no serving phase)",
    )
    parser.add_argument(
        "--containers",
        action="store_true",
        help="run every job and endpoint in Docker, in containers of the training image built by scripts/build-image.sh "
        "(as SageMaker runs it: the job's entrypoint, /opt/ml mounted, algo-1..N on a Docker network; with --cluster, "
        "each node a container named as the node, node-0..N); default: this "
        "machine's processes play the image",
    )
    parser.add_argument(
        "--job-timeout", type=float, default=900, metavar="SECONDS", help="longest wait for the training job (default: 900)"
    )
    parser.add_argument("--port", type=int, help="emulator port (default: a free one)")
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR, help="run files (default: .work/emulator)")
    parser.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE", help="extra CDK context")
    parser.add_argument("-v", "--verbose", action="store_true", help="stream the CDK CLI's output")
    args = parser.parse_args(argv)
    if args.pipeline and (args.no_train or args.no_serve or args.user_script):
        parser.error("--pipeline trains, serves and promotes: it does not combine with --no-train, --no-serve or --user-script")
    if args.cluster and (args.pipeline or args.no_train or args.user_script or args.real_account):
        parser.error(
            "--cluster runs jobs on the emulated cluster's nodes: it does not combine with --pipeline, "
            "--no-train, --user-script or --real-account"
        )
    if args.containers and (args.real_account or args.no_train):
        parser.error("--containers runs the emulator's jobs in Docker: it does not combine with --real-account or --no-train")
    context = {}
    for item in args.context:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"-c expects KEY=VALUE, got {item!r}")
        context[key] = value
    if args.cluster and not any(k.removeprefix("gpu_training.") == "cluster.node_count" for k in context):
        context["gpu_training.cluster.node_count"] = "2"  # a multi-node job: both nodes train one model
    return Options(
        real_account=args.real_account,
        sandbox=args.sandbox,
        keep=args.keep,
        context=context,
        epochs=args.epochs,
        examples=args.examples,
        train=not args.no_train,
        job_timeout_seconds=args.job_timeout,
        work_dir=args.work_dir,
        port=args.port,
        echo_cdk=args.verbose,
        user_script=args.user_script,
        # The serving phase checks held-out feature rows against the built-in model; the example
        # user script is an image classifier, so --user-script stops after training.
        serve=not args.no_serve and not args.user_script and not args.cluster,
        pipeline=args.pipeline,
        cluster=args.cluster,
        containers=args.containers,
    )


def failure_note(run: Lifecycle) -> str | None:
    """What is left after a failed run, and how to clean it up; ``None`` when nothing is."""
    logs = f"logs: {run.options.work_dir}"
    if run.emulator is not None:
        # The emulator stops with this process and keeps no state: whatever was deployed on it is gone.
        return f"note: the emulator stops now and everything deployed on it goes with it; nothing to clean up ({logs})"
    if run.options.real_account and run.cdk is not None and not run.destroyed:
        return (
            f"note: stacks may still be deployed in {run.account}/{run.region}: re-run, or "
            f"`python -m scripts.teardown --stop-running --destroy` then `python -m scripts.teardown_audit` ({logs})"
        )
    return None


def run_phases(run: Lifecycle) -> None:
    """Every phase up to the summary: what ``scripts/run-local.sh --keep`` leaves deployed (the
    integration tests run this, then a user's teardown)."""
    options = run.options
    if options.train:
        run.check_launch()
    run.start()
    run.bootstrap_and_synth()
    if options.real_account:
        run.preflight()
    run.deploy()
    if options.pipeline:
        first, second = run.upload_raw_data()
        run.run_pipeline(first, promote=False)  # the endpoint does not exist yet: no promote
        run.deploy_endpoint()  # python -m scripts.promote JOB, with the pipeline's training job
        run.invoke_endpoint()
        run.run_pipeline(second, promote=True)
        run.check_promoted()
        run.invoke_endpoint()
    elif options.cluster:
        run.upload_dataset()
        run.run_cluster_jobs()
    elif options.train:
        run.upload_dataset()
        run.launch()
        run.train()
        if options.serve:
            run.deploy_endpoint()  # python -m scripts.promote JOB: deploys and records
            run.invoke_endpoint()
    run.summary()


def main(argv: Sequence[str] | None = None) -> int:
    """Run every phase; 0 when the job trained and the audit found nothing left behind."""
    options = parse_args(argv)
    run = Lifecycle(options)
    target = "your AWS account (real resources, real cost)" if options.real_account else "a local AWS emulator (moto)"
    print(f"main job: deploy -> train -> destroy -> audit on {target}")
    try:
        run_phases(run)
        if options.keep:
            _explore(run)
            return 0
        run.destroy()
        run.audit()
        print("\nphase times\n" + run.progress.table())
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:  # noqa: BLE001 - one line for the user, details are in the logs
        print(f"\nerror: {err}", file=sys.stderr)
        note = failure_note(run)
        if note:
            print(note, file=sys.stderr)
        return EXIT_FAILED
    finally:
        run.close()


def _explore(run: Lifecycle) -> None:
    if run.emulator is None:
        print("\n--keep: everything stays deployed. Tear down later with: python -m scripts.teardown --stop-running --destroy")
        return
    env = run.emulator.client_env()
    print("\n--keep: the emulator stays up until Ctrl-C. In another shell:")
    # AWS_DEFAULT_REGION too: boto3 reads no AWS_REGION (the CDK CLI and the other SDKs do).
    for key in ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                "AWS_SESSION_TOKEN"):
        print(f"  export {key}={env[key]}")
    sandbox = " --sandbox" if run.options.sandbox else ""
    print(f"  .venv/bin/python -m scripts.teardown_audit{sandbox}   # what carries the project's tags")
    print("  .venv/bin/python -m scripts.teardown --stop-running --destroy   # docs/teardown-and-cost.md; then audit again")
    if run.endpoint_name is not None:
        print("  npx cdk destroy --all   # or plain CDK: the app reads the promotion record, so the endpoint goes too")
    if run.runner is not None:
        print("Training jobs created there (python -m scripts.launch ...) are run by the local runner.")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
