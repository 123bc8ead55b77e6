"""Which files a processing script wrote where SageMaker uploads nothing (trainer.user_code.outputs)."""

from __future__ import annotations

import os
import time

import pytest

from trainer.contract.errors import UserScriptError
from trainer.user_code import outputs


def _touch(path, text="x"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_only_new_files_outside_declared_outputs_and_inputs_are_strays(tmp_path):
    config = {
        "ProcessingInputs": [{"InputName": "code", "S3Input": {"LocalPath": "/opt/ml/processing/input/code"}}],
        "ProcessingOutputConfig": {"Outputs": [{"OutputName": "train", "S3Output": {"LocalPath": "/opt/ml/processing/train"}}]},
    }
    declared = outputs.declared_paths(tmp_path, config)
    assert declared.outputs == {"train": tmp_path / "processing" / "train"}
    assert declared.inputs == (tmp_path / "processing" / "input" / "code",)
    started = time.time()
    _touch(tmp_path / "processing" / "train" / "part-0.csv")
    _touch(tmp_path / "processing" / "input" / "code" / "scratch.txt")
    _touch(tmp_path / "processing" / "input" / "code" / "__pycache__" / "x.pyc")
    _touch(tmp_path / "output" / "message")
    old = _touch(tmp_path / "processing" / "output" / "old.csv")
    os.utime(old, (started - 60, started - 60))
    assert outputs.stray_files(tmp_path, declared, started) == []

    lost = [_touch(tmp_path / "processing" / "output" / "a.csv"), _touch(tmp_path / "model" / "m.bin"), _touch(tmp_path / "output" / "data" / "d.txt")]
    assert outputs.stray_files(tmp_path, declared, started) == sorted(lost)
    with pytest.raises(UserScriptError, match=r"wrote 3 file\(s\) outside the job's declared outputs") as raised:
        outputs.check(tmp_path, declared, started, "prep.py")
    assert f"Declared outputs: train -> {tmp_path / 'processing' / 'train'}." in str(raised.value)
    assert all(path.is_file() for path in lost), "the check never deletes anything"


def test_a_job_without_a_readable_config_declares_nothing(tmp_path):
    assert outputs.read_declared_paths(tmp_path) == outputs.DeclaredPaths(outputs={}, inputs=())
