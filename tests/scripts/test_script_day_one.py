"""Day one (issue #41): a job checked and priced before it costs anything, offline dry runs in every mode,
and one way to give the configuration, whether the CDK CLI or an operator script reads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import boto3
import pytest

from scripts.common import run
from scripts.launch import main
from tests.scripts.conftest import PROJECT, REGION
from tests.synth import ROOT, project_context


def _executions(aws) -> list[dict]:
    sfn = boto3.client("stepfunctions", region_name=REGION)
    return sfn.list_executions(stateMachineArn=aws.training["StateMachineArn"])["executions"]


def _started(aws) -> tuple[int, int]:
    """Workflow executions and training jobs so far (the emulator is shared by the module's tests)."""
    jobs = boto3.client("sagemaker", region_name=REGION).list_training_jobs()["TrainingJobSummaries"]
    return len(_executions(aws)), len(jobs)


def _offline(tmp_path, *argv: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """``python -m scripts.launch ARGV`` with no credentials, no region (unless given) and no emulator."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_CONFIG_FILE=str(tmp_path / "config"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "credentials"),
               AWS_EC2_METADATA_DISABLED="true", **extra_env)
    return subprocess.run([sys.executable, "-m", "scripts.launch", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


# --- the image's hyperparameter rules, before anything is started ------------------------------------------


@pytest.mark.parametrize("mode", [["--dry-run"], [], ["--direct"], ["--pipeline", "--skip-process"], ["--pipeline", "--dry-run"]],
                         ids=["dry-run", "workflow", "direct", "pipeline", "pipeline-dry-run"])
def test_a_misspelled_hyperparameter_is_refused_in_every_mode_before_anything_starts(aws, capsys, mode):
    before = _started(aws)
    assert run(main, [*mode, "--hp", "epocs=3", "--hp", "batch_size=abc"]) == 3
    err = capsys.readouterr().err
    assert "unknown hyperparameter 'epocs' (did you mean 'epochs'?" in err
    assert "hyperparameter 'batch_size' must be an integer, got 'abc'" in err and err.count("\n") == 1
    assert _started(aws) == before


def test_a_batch_the_jobs_gpus_cannot_share_is_refused_before_the_instances_start(aws, capsys):
    before = _started(aws)
    # 3 x ml.g5.12xlarge = 12 GPUs; the configured global batch of 256 does not split over 12 replicas.
    assert run(main, ["--instance-type", "ml.g5.12xlarge", "--instance-count", "3", "--yes"]) == 3
    assert "must be divisible by the 12 replicas of this job (3 worker(s)); use a multiple of 12" in capsys.readouterr().err
    assert _started(aws) == before


def test_a_sagemaker_key_is_refused_as_the_platforms(aws, capsys):
    before = _started(aws)
    assert run(main, ["--hp", "sagemaker_program=evil.py"]) == 3
    assert "hyperparameters sagemaker_program are the platform's (sagemaker_*" in capsys.readouterr().err
    assert _started(aws) == before


def test_a_scripts_own_hyperparameters_pass_through(aws, capsys, tmp_path):
    source = tmp_path / "code"
    source.mkdir()
    (source / "train.py").write_text("print('hi')\n")
    argv = ["--source-dir", str(source), "--entry-point", "train.py", "--hp", "batch-size=32", "--hp", "my_flag=x"]
    assert run(main, [*argv, "--name", f"{PROJECT}-script-hps"]) == 0, capsys.readouterr().err
    arn = aws.training["StateMachineArn"].replace(":stateMachine:", ":execution:") + f":{PROJECT}-script-hps"
    described = boto3.client("stepfunctions", region_name=REGION).describe_execution(executionArn=arn)
    assert json.loads(described["input"])["hyperparameters"] == {"batch-size": "32", "my_flag": "x"}


# --- the price before the spend ----------------------------------------------------------------------------


def test_every_launch_prints_its_price_line(aws, capsys):
    assert run(main, ["--on-demand", "--instance-count", "2"]) == 0
    out = capsys.readouterr().out
    [line] = [line for line in out.splitlines() if line.startswith("price: ")]
    # 2 x ml.g5.xlarge at SageMaker's list price ($1.006 EC2 + 40%) and 100 GB of ML storage each, for 24 h.
    assert line.startswith(f"price: training job {PROJECT}-") and ": 2 x ml.g5.xlarge, on-demand $2.86/h; at most $68.52 over its 24 h" in line


def test_a_launch_over_the_confirmation_threshold_needs_yes_and_starts_nothing_without(aws, capsys):
    argv = ["--instance-type", "ml.g5.12xlarge", "--instance-count", "2", "--on-demand"]
    before = _started(aws)
    assert run(main, argv) == 2
    captured = capsys.readouterr()
    assert "error: this launch can cost up to $382.08 at its maximum runtime, over cost.confirm_above_usd = $100: add --yes" in captured.err
    assert _started(aws) == before
    assert run(main, [*argv, "--dry-run"]) == 0  # a dry run spends nothing and never asks
    assert "at most $382.08" in capsys.readouterr().err
    assert run(main, [*argv, "--yes"]) == 0
    assert _started(aws)[0] == before[0] + 1
    # The threshold is a setting: 0 asks for every launch.
    assert run(main, ["-c", "cost.confirm_above_usd=0"]) == 2 and _started(aws)[0] == before[0] + 1


def test_a_pipeline_run_is_priced_and_confirmed_as_a_whole(aws, capsys):
    argv = ["--pipeline", "--process-instance-type", "ml.g5.12xlarge",
            "-c", 'processing.allowed_instance_types=["ml.g5.12xlarge"]', "--dry-run"]
    assert run(main, argv) == 0
    prices = [line for line in capsys.readouterr().err.splitlines() if line.startswith("price: ")]
    assert [p.split(":")[1].strip().split()[0:2] for p in prices] == [["processing", "job"], ["training", "job"]]
    assert "1 x ml.g5.12xlarge, on-demand $7.96/h; at most $191.04" in prices[0]
    assert run(main, argv[:-1]) == 2  # for real: $191.04 + $34.26 is over $100
    assert "can cost up to $225.30" in capsys.readouterr().err


# --- offline dry runs, in every mode ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "env", "printed"),
    [
        (["--pipeline", "--dry-run", "--region", "us-east-1"], {}, "process"),
        (["--process", "--direct", "--dry-run"], {}, "AppSpecification"),
        (["--process", "--direct", "--dry-run"], {"AWS_REGION": "eu-west-1"}, "AppSpecification"),
        (["--dry-run", "--direct"], {}, "AlgorithmSpecification"),
    ],
    ids=["pipeline-no-credentials", "process-no-region", "process-no-credentials", "training-direct"],
)
def test_an_offline_dry_run_works_in_every_mode(tmp_path, argv, env, printed):
    result = _offline(tmp_path, *argv, **env)
    assert result.returncode == 0, result.stderr
    note, *prices = result.stderr.splitlines()[:3]
    assert note.startswith("note: no deployed stack could be read (") and "Error:" not in note
    assert printed in json.loads(result.stdout) or printed in result.stdout
    assert any(p.startswith("price: ") for p in prices)


# --- scripts.cost covers processing ----------------------------------------------------------------------


def test_cost_covers_processing(capsys):
    from scripts.cost import main as cost

    assert cost([]) == 0
    default = capsys.readouterr().out
    assert "SageMaker processing, on-demand: 1 x ml.g5.xlarge" in default
    assert cost(["-c", "processing.instance_type=ml.g5.12xlarge", "-c", 'processing.allowed_instance_types=["ml.g5.12xlarge"]']) == 0
    assert "SageMaker processing, on-demand: 1 x ml.g5.12xlarge" in capsys.readouterr().out
    assert cost(["-c", "processing.enabled=false"]) == 0
    assert "processing" not in capsys.readouterr().out.lower().replace("no compute", "")


# --- one way in: the same -c keys for cdk synth and the scripts --------------------------------------------


def _synth(extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """What ``cdk synth -c KEY=VALUE`` runs: the app with the CLI's context."""
    return subprocess.run(
        [sys.executable, "app.py"], cwd=ROOT, capture_output=True, text=True, timeout=180,
        env={"PATH": str(ROOT / ".venv" / "bin") + ":/usr/bin:/bin", "CDK_CONTEXT_JSON": json.dumps({**project_context(), **extra}),
             "CDK_OUTDIR": "/nonexistent-never-written"},
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("key", "error"),
    [
        ("gpu_trainng.cluster.node_count", "error: invalid configuration: gpu_trainng.cluster.node_count = \"2\": not a setting"),
        ("training_job.hyperparameters.epocs", "unknown hyperparameter 'epocs' (did you mean 'epochs'?"),
    ],
)
def test_cdk_synth_refuses_a_misspelled_key_or_hyperparameter_in_one_line(key, error):
    result = _synth({key: "2"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith(error) or error in line


def test_the_scripts_and_cdk_take_a_short_key_the_same_way(aws, capsys):
    from scripts.common import cdk_command, load_platform_config

    assert load_platform_config(["training_job.instance_count=2"]).training_job.instance_count == 2
    assert cdk_command("synth", overrides=["training_job.instance_count=2"])[-2:] == ["-c", "gpu_training.training_job.instance_count=2"]
    assert run(main, ["--dry-run", "-c", "gpu_trainng.training_job.use_spot=false"]) == 3
    assert "did you mean gpu_training.training_job.use_spot?" in capsys.readouterr().err


# --- warm pools bill: priced, counted, refused with spot (issue #39) ----------------------------------------


def test_a_warm_pool_is_priced_and_sent_and_refused_with_spot(aws, capsys):
    assert run(main, ["--direct", "--on-demand", "--keep-alive", "900", "--name", f"{PROJECT}-warm-2"]) == 0
    out = capsys.readouterr().out
    assert "at most $34.62 over its 24 h maximum runtime and 15 min of warm pool after it" in out
    job = boto3.client("sagemaker", region_name=REGION).describe_training_job(TrainingJobName=f"{PROJECT}-warm-2")
    assert job["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 900
    assert run(main, ["--keep-alive", "900"]) == 3  # managed spot by default
    assert "keep_alive_seconds 900 needs an on-demand job: SageMaker keeps no warm pool for managed spot" in capsys.readouterr().err


def test_cost_counts_the_warm_pool(capsys):
    from scripts.cost import main as cost

    assert cost(["-c", "training_job.use_spot=false", "-c", "training_job.keep_alive_seconds=1800"]) == 0
    assert "SageMaker warm pool after each job: 1 x ml.g5.xlarge, 30 min" in capsys.readouterr().out
