"""The SageMaker Python SDK (v2) tunes a script-mode estimator on the emulator.

What a SageMaker user does: ``HyperparameterTuner(estimator, objective_metric_name, ranges,
metric_definitions, ...).fit(...)``, then ``best_training_job()`` and ``analytics()``. The
emulator's local tuner starts every trial as a platform training job of the user's script
(``sdk_user_code/train.py``, which writes what it was given to ``summary.json`` in its model), reads
the objective from each trial's log with the user's regex, and reports the best. The tests assert
on what each trial's script saw, not on a status alone, and that a failed trial is a failed
trial, not a failed tuner.
"""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from typing import Any, Iterator

import pytest

from scripts.emulator.lifecycle import Lifecycle, Options
from tests.integration.test_sagemaker_sdk_transform import BUCKET, script_mode_estimator, start_for_the_sdk
from tests.offline import loopback_only

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.filterwarnings("ignore:Tried to parse:UserWarning")]

LOSS = [{"Name": "loss", "Regex": r"loss: ([0-9\.]+)"}]


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory, containers: bool) -> Iterator[tuple[Lifecycle, pytest.MonkeyPatch]]:
    work = tmp_path_factory.mktemp("sdk-tuning")
    lifecycle = Lifecycle(Options(work_dir=work / "run", job_timeout_seconds=600, containers=containers))
    patch = pytest.MonkeyPatch()
    try:
        start_for_the_sdk(lifecycle, patch, work)
        yield lifecycle, patch
    finally:
        patch.undo()
        lifecycle.close()


def _tune(emulator: tuple[Lifecycle, pytest.MonkeyPatch], ranges: dict[str, Any], **kwargs: Any) -> tuple[Any, Exception | None]:
    from sagemaker.tuner import HyperparameterTuner

    lifecycle, patch = emulator
    estimator = script_mode_estimator(lifecycle, hyperparameters={"epochs": 1, "batch-size": 32})
    tuner = HyperparameterTuner(estimator, "loss", ranges, metric_definitions=LOSS, objective_type="Minimize", **kwargs)
    error = None
    with loopback_only(patch) as outside:
        try:
            # A name of its own: the SDK's default has minute resolution, and tests start several a minute.
            tuner.fit({"training": f"s3://{BUCKET}/train/"}, include_cls_metadata=False, job_name=f"tune-{uuid.uuid4().hex[:8]}")
        except Exception as err:  # noqa: BLE001 - asserted on by the tests
            error = err
    assert outside == [], f"the SDK left the emulator: {outside}"
    return tuner, error


def _summary(lifecycle: Lifecycle, job: dict[str, Any]) -> dict[str, Any]:
    """The ``summary.json`` the trial's script wrote into its model."""
    bucket, _, key = job["ModelArtifacts"]["S3ModelArtifacts"][len("s3://") :].partition("/")
    archive = lifecycle.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        member = tar.extractfile("summary.json")
        assert member is not None
        return dict(json.load(member))


def test_two_random_trials_each_train_their_own_sample_and_the_lower_loss_is_best(emulator) -> None:
    from sagemaker.tuner import CategoricalParameter, IntegerParameter

    lifecycle, _ = emulator
    tuner, error = _tune(
        emulator, {"epochs": IntegerParameter(1, 4), "batch-size": CategoricalParameter([8, 16, 32])},
        strategy="Random", max_jobs=2, max_parallel_jobs=2,
    )
    assert error is None, error
    sagemaker_client = lifecycle.client("sagemaker")
    name = tuner.latest_tuning_job.name
    described = sagemaker_client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
    assert described["HyperParameterTuningJobStatus"] == "Completed"
    assert described["TrainingJobStatusCounters"]["Completed"] == 2
    assert described["ObjectiveStatusCounters"] == {"Succeeded": 2, "Pending": 0, "Failed": 0}
    trials = sagemaker_client.list_training_jobs_for_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)["TrainingJobSummaries"]
    assert len(trials) == 2
    losses = {}
    for trial in trials:
        job = sagemaker_client.describe_training_job(TrainingJobName=trial["TrainingJobName"])
        seen = _summary(lifecycle, job)
        # The trial's script saw its own sampled values, as a platform training job of the user's script.
        # (The SDK JSON-encodes a framework estimator's categorical values: '"32"'; the container decodes them.)
        tuned = {k: json.loads(v) for k, v in trial["TunedHyperParameters"].items()}
        assert (seen["epochs"], seen["batch_size"]) == (int(tuned["epochs"]), int(tuned["batch-size"]))
        assert trial["TrainingJobName"].startswith(f"{name}-00")
        # The objective is the last loss the script's log printed, which its summary also kept.
        value = trial["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]
        assert value == pytest.approx(seen["loss"], abs=1e-3)
        losses[trial["TrainingJobName"]] = value
    assert tuner.best_training_job() == min(losses, key=losses.get)
    frame = tuner.analytics().dataframe()
    assert sorted(frame["TrainingJobName"]) == sorted(losses)
    assert dict(zip(frame["TrainingJobName"], frame["FinalObjectiveValue"])) == pytest.approx(losses)
    assert (frame["TrainingElapsedTimeSeconds"] >= 0).all()


def test_a_failed_trial_is_a_failed_trial_not_a_failed_tuner(emulator) -> None:
    from sagemaker.tuner import CategoricalParameter

    lifecycle, _ = emulator
    # Grid walks the values in order: epochs=oops makes the script's argparse exit 2.
    tuner, error = _tune(emulator, {"epochs": CategoricalParameter(["oops", "1"])}, strategy="Grid", max_jobs=2, max_parallel_jobs=1)
    assert error is None, error
    name = tuner.latest_tuning_job.name
    sagemaker_client = lifecycle.client("sagemaker")
    described = sagemaker_client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
    assert described["HyperParameterTuningJobStatus"] == "Completed"
    assert described["ObjectiveStatusCounters"] == {"Succeeded": 1, "Pending": 0, "Failed": 1}
    trials = {json.loads(t["TunedHyperParameters"]["epochs"]): t for t in
              sagemaker_client.list_training_jobs_for_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)["TrainingJobSummaries"]}
    assert trials["oops"]["TrainingJobStatus"] == "Failed" and trials["oops"]["FailureReason"]
    assert tuner.best_training_job() == trials["1"]["TrainingJobName"]


def test_a_tuner_whose_trials_all_fail_fails_in_one_line(emulator) -> None:
    from sagemaker.tuner import CategoricalParameter

    lifecycle, _ = emulator
    tuner, error = _tune(emulator, {"epochs": CategoricalParameter(["oops"])}, strategy="Bayesian", max_jobs=1, max_parallel_jobs=1)
    assert error is not None and tuner.latest_tuning_job is not None, error
    described = lifecycle.client("sagemaker").describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=tuner.latest_tuning_job.name)
    assert described["HyperParameterTuningJobStatus"] == "Failed"
    reason = described["FailureReason"]
    assert reason.startswith("No training job succeeded with an objective value (1 trial(s)): ") and "\n" not in reason
    assert "BestTrainingJob" not in described
