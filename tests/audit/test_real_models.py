"""Audit on real models: subgraphs (Silero VAD's If), convolutions; determinism and replay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sealtrace import zoo
from sealtrace.audit import audited_run, replay_log, verify_log
from sealtrace.session import Session
from tests.conftest import require_material


def step_digests(log: Path) -> list[Any]:
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return [(r["path"], r["name"], [o["digest"] for o in r["outputs"]]) for r in records if r["type"] == "step"]


@pytest.mark.slow
@pytest.mark.parametrize("key", ["silero-vad", "ppocr-cls"])
def test_real_model_logs_verify_replay_and_repeat(key: str, tmp_path: Path) -> None:
    real = require_material(lambda: zoo.model(key))
    path = require_material(lambda: real.path)
    feeds = real.inputs()
    session = Session(path)
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    audited_run(session, feeds, audit=first)
    audited_run(session, feeds, audit=second)
    assert verify_log(first, model=path, inputs=feeds).ok
    # Two runs of the same model and input on the same machine: identical step digests.
    assert step_digests(first) == step_digests(second)
    report = replay_log(first, path, feeds)
    assert report.identical, report.summary()
    if key == "silero-vad":
        assert any(path for path, _name, _digests in step_digests(first)), "If branch steps are logged"
