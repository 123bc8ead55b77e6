"""The main job's command line: what it refuses before deploying, and what it says after a failure.

The phases themselves run in tests/integration; here they are replaced, so nothing starts.
"""

from __future__ import annotations

import pytest

from scripts.emulator import cli
from scripts.emulator.lifecycle import Lifecycle


class _Emulator:
    endpoint_url = "http://127.0.0.1:1"
    stopped = False

    def stop(self) -> None:
        _Emulator.stopped = True


def _never(*_args, **_kwargs):
    raise AssertionError("must not run")


def test_bad_hyperparameters_are_refused_before_anything_starts(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(Lifecycle, "start", _never)
    argv = ["--work-dir", str(tmp_path), "-c", 'gpu_training.training_job.hyperparameters={"learning_rat": "0.1"}']
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    # cdk synth would refuse the same config: the image's own rules, in the config's one line.
    assert "error: launch refused before deploy: invalid configuration: gpu_training.training_job.hyperparameters = " in err
    assert "Invalid hyperparameters: unknown hyperparameter 'learning_rat'" in err
    assert "did you mean 'learning_rate'" in err and "note:" not in err


def test_launch_over_sagemakers_limits_is_refused_before_anything_starts(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(Lifecycle, "start", _never)
    argv = ["--work-dir", str(tmp_path), "-c", "gpu_training.training_job.instance_type=ml.g4dn.metal"]
    assert cli.main(argv) == 1
    assert "SageMaker training does not offer this type" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--epochs", "0"], ["--examples", "-5"]])
def test_non_positive_sizes_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(argv)
    assert exc.value.code == 2


def test_after_a_failed_emulator_run_the_note_says_the_emulator_took_the_stacks_with_it(monkeypatch, tmp_path, capsys):
    def start(self: Lifecycle) -> None:
        self.emulator = _Emulator()
        self.cdk = object()  # type: ignore[assignment]

    def deploy(self: Lifecycle) -> None:
        self.outputs = {"gputrain-data": {"VpcId": "vpc-1"}}  # half-way through
        raise RuntimeError("the emulator reported success but did not create: x")

    monkeypatch.setattr(Lifecycle, "start", start)
    monkeypatch.setattr(Lifecycle, "bootstrap_and_synth", lambda self: None)
    monkeypatch.setattr(Lifecycle, "deploy", deploy)
    _Emulator.stopped = False
    assert cli.main(["--work-dir", str(tmp_path), "--no-train"]) == 1
    err = capsys.readouterr().err
    assert "stacks may still be deployed" not in err and "cdk destroy" not in err
    assert "note: the emulator stops now and everything deployed on it goes with it; nothing to clean up" in err
    assert _Emulator.stopped


def test_after_a_failed_real_account_run_the_note_names_the_cleanup(tmp_path):
    run = Lifecycle(cli.parse_args(["--real-account", "--work-dir", str(tmp_path)]))
    run.cdk, run.account, run.region = object(), "111122223333", "eu-west-1"  # type: ignore[assignment]
    note = cli.failure_note(run)
    assert note is not None and note.startswith("note: stacks may still be deployed in 111122223333/eu-west-1")
    assert "python -m scripts.teardown --stop-running --destroy" in note
    run.destroyed = True
    assert cli.failure_note(run) is None


def test_keep_prints_the_region_for_boto3_too(monkeypatch, capsys):
    """boto3 reads AWS_DEFAULT_REGION, not AWS_REGION: without it a user's own boto3 script
    against the kept emulator fails with NoRegionError."""
    from types import SimpleNamespace

    from scripts.emulator.server import Emulator

    class _Done:
        def wait(self) -> None:
            return None

    emulator = SimpleNamespace(client_env=lambda: Emulator.client_env(SimpleNamespace(endpoint_url="http://localhost:1")))
    run = SimpleNamespace(emulator=emulator, options=SimpleNamespace(sandbox=False), runner=None, endpoint_name="gputrain-endpoint")
    monkeypatch.setattr(cli.threading, "Event", _Done)
    monkeypatch.setattr(cli.signal, "signal", lambda *_: None)
    cli._explore(run)  # type: ignore[arg-type]
    out = capsys.readouterr().out
    exports = dict(line.strip().removeprefix("export ").split("=", 1) for line in out.splitlines()
                   if line.strip().startswith("export "))
    # The README's plain teardown too: the main job served through scripts.promote, which recorded it (#39).
    assert "npx cdk destroy --all" in out
    assert exports["AWS_DEFAULT_REGION"] == exports["AWS_REGION"] == "us-east-1"
    assert exports["AWS_ENDPOINT_URL"] == "http://localhost:1"


def test_the_emulator_consents_to_spend_and_a_real_account_run_is_priced_before_deploy() -> None:
    from types import SimpleNamespace

    from scripts.emulator import launching

    def run(real_account: bool, **context: str) -> SimpleNamespace:
        return SimpleNamespace(options=SimpleNamespace(real_account=real_account, epochs=2), context=context)

    assert launching.launch_arguments(run(False))[-1] == "--yes"  # nothing bills on the emulator
    assert "--yes" not in launching.launch_arguments(run(True))
    big = {"gpu_training.training_job.instance_type": "ml.g5.12xlarge", "gpu_training.training_job.use_spot": "false",
           "gpu_training.training_job.allowed_instance_types": '["ml.g5.12xlarge"]'}
    with pytest.raises(RuntimeError, match=r"launch refused before deploy: price: training job .*at most \$191.04.*over cost.confirm_above_usd = \$100"):
        launching.check(run(True, **big))
    assert launching.check(run(True, **big, **{"gpu_training.cost.confirm_above_usd": "500"}))["epochs"] == "2"
    assert launching.check(run(False, **big))["epochs"] == "2"


def test_cluster_runs_two_nodes_without_serving_and_refuses_what_it_cannot_combine(capsys):
    options = cli.parse_args(["--cluster"])
    assert options.cluster and not options.serve and options.train
    assert options.context == {"gpu_training.cluster.node_count": "2"}
    assert cli.parse_args(["--cluster", "-c", "cluster.node_count=3"]).context == {"cluster.node_count": "3"}
    assert cli.parse_args(["--cluster", "--containers"]).containers  # each node a container of the built image
    for other in ("--pipeline", "--no-train", "--user-script", "--real-account"):
        with pytest.raises(SystemExit):
            cli.parse_args(["--cluster", other])
        assert "--cluster runs jobs on the emulated cluster's nodes" in capsys.readouterr().err


def test_an_operator_script_that_hangs_fails_the_run_in_bounded_time(monkeypatch, tmp_path):
    """run_script kills a script past its limit and says which one, with what it had printed in its log."""
    import sys

    from scripts.emulator.lifecycle import Options

    hanging = tmp_path / "python"
    hanging.write_text("#!/bin/sh\necho \"started $*\"\nexec sleep 60\n")
    hanging.chmod(0o755)
    run = Lifecycle(Options(work_dir=tmp_path / "run"))
    run.work_dir.mkdir()
    monkeypatch.setattr(sys, "executable", str(hanging))
    with pytest.raises(RuntimeError, match=r"python -m scripts.watch --pipeline did not end in 1 s and was killed \(its output: .*watch.log\)"):
        run.run_script("watch", "--pipeline", timeout=1)
    log = (run.work_dir / "watch.log").read_text()
    assert "started -m scripts.watch --pipeline" in log and "[killed after 1 s]" in log
