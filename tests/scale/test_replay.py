"""`sealtrace ledger replay`: verdicts against the records, and where full-audit runs part."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sealtrace.cli import main
from sealtrace.errors import InputError
from sealtrace.ops import registry
from sealtrace.scale import BatchJob, InProcess, JobError, run_batch
from sealtrace.scale import shipped as shipped_models
from sealtrace.scale.replay import NO_TRAIL, LedgerReplay, replay_ledger, replay_record_id
from tests.scale.conftest import records_of, verify_ok


def _batch(material: dict[str, Path], ledger: Path, **options: Any) -> None:
    run_batch(BatchJob(str(material["chain"]), str(material["chain_data"]), str(ledger),
                       sign_key=str(material["key"]), task_size=8, **options), InProcess())


def _replay(material: dict[str, Path], ledger: Path, **options: Any) -> Any:
    return replay_ledger(LedgerReplay(str(ledger), (str(material["chain"]),), sign_key=str(material["key"]),
                                      **options), InProcess())


@pytest.fixture
def changed_tanh(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """Make the reference backend's Tanh differ by ``offset`` from now on (a regression to catch)."""

    def change(offset: float) -> None:
        key = ("", "Tanh", 13)
        original = registry._KERNELS[key]
        changed = type(original)(original.domain, original.op_type, original.since_version,
                                 lambda x: (np.tanh(x) + np.float32(offset)).astype(x.dtype), original.context)
        monkeypatch.setitem(registry._KERNELS, key, changed)
        monkeypatch.setattr(shipped_models, "_SESSIONS", {})  # sessions opened after this use it

    return change


def test_unchanged_replays_are_identical_and_linked(material: dict[str, Path], tmp_path: Path) -> None:
    _batch(material, tmp_path / "l.db", audit="full")
    summary = _replay(material, tmp_path / "l.db")
    assert (summary.replayed, dict(summary.verdicts), dict(summary.divergences)) == (24, {"identical": 24}, {})
    records = records_of(tmp_path / "l.db")
    originals, replays = records[:24], records[24:]
    for original, replay in zip(originals, replays, strict=True):
        assert replay["kind"] == "replay" and replay["id"] == replay_record_id(summary.job_id, original["id"])
        assert replay["links"] == [{"relation": "replays", "record": original["id"], "verdict": "identical"}]
        assert replay["outputs"] == original["outputs"] and replay["trail"] is not None
    verify_ok(tmp_path / "l.db", material["pub"])
    with pytest.raises(JobError, match="--resume"):
        _replay(material, tmp_path / "l.db")
    again = _replay(material, tmp_path / "l.db", resume=True)
    assert (again.replayed, again.skipped) == (0, 24)


def test_a_changed_kernel_is_located_at_its_step(material: dict[str, Path], tmp_path: Path,
                                                 changed_tanh: Callable[[float], None]) -> None:
    _batch(material, tmp_path / "l.db", audit="full")
    changed_tanh(1e-3)
    summary = _replay(material, tmp_path / "l.db")
    # The reference recorded these: its own earlier values cannot be re-computed, so nothing says by
    # how much they differ (failed), but the trails say where: the first Tanh.
    assert dict(summary.verdicts) == {"failed": 24}
    assert dict(summary.divergences) == {("chain", "tanh0 (Tanh)"): 24}
    link = records_of(tmp_path / "l.db")[24]["links"][0]
    assert link["verdict"] == "failed" and "runs part at step tanh0 (Tanh)" in link["detail"]


@pytest.mark.parametrize(("offset", "verdict"), [(0.1, "diverged"), (1e-7, "within-tolerance")])
def test_io_records_are_judged_against_re_computed_served_values(
    material: dict[str, Path], tmp_path: Path, changed_tanh: Callable[[float], None], offset: float, verdict: str,
) -> None:
    _batch(material, tmp_path / "l.db", audit="io")  # served by onnxruntime
    changed_tanh(offset)
    summary = _replay(material, tmp_path / "l.db")
    assert dict(summary.verdicts) == {verdict: 24}
    if verdict == "diverged":
        assert dict(summary.divergences) == {("chain", NO_TRAIL): 24}  # io-only: no trail to say where
        assert "max |diff|" in records_of(tmp_path / "l.db")[24]["links"][0]["detail"]


def test_inputs_not_stored_fail_their_replays(material: dict[str, Path], tmp_path: Path) -> None:
    _batch(material, tmp_path / "l.db", store_inputs=False)
    summary = _replay(material, tmp_path / "l.db")
    assert dict(summary.verdicts) == {"failed": 24} and "not stored" in summary.failures[0][1]
    assert records_of(tmp_path / "l.db")[24]["inputs"] == records_of(tmp_path / "l.db")[0]["inputs"]


def test_since_and_records_of_models_not_given(material: dict[str, Path], tmp_path: Path) -> None:
    _batch(material, tmp_path / "l.db")
    run_batch(BatchJob(str(material["tiny"]), str(material["tiny_data"]), str(tmp_path / "l.db"),
                       sign_key=str(material["key"])), InProcess())
    summary = _replay(material, tmp_path / "l.db", since="20")
    assert (summary.selected, summary.replayed, dict(summary.unmatched)) == (16, 4, {"tiny": 12})
    future = _replay(material, tmp_path / "l.db", since="2999-01-01")
    assert (future.selected, future.replayed) == (0, 0)
    second = records_of(tmp_path / "l.db")[20]["time"][:19] + "Z"  # 2025-01-31T12:00:00Z: that whole second on
    assert _replay(material, tmp_path / "l.db", since=second, resume=True).selected >= 16
    with pytest.raises(InputError, match="leaf index"):
        _replay(material, tmp_path / "l.db", since="yesterday")


def test_replay_command(material: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                        changed_tanh: Callable[[float], None]) -> None:
    _batch(material, tmp_path / "l.db", audit="io")
    argv = ["ledger", "replay", str(tmp_path / "l.db"), "--container", str(material["chain"]),
            "--sign", str(material["key"])]
    assert main([*argv, "--since", "20"]) == 0
    assert "within-tolerance 4" in capsys.readouterr().out  # onnxruntime and the reference differ in the last bits
    changed_tanh(0.1)
    assert main([*argv, "--resume"]) == 1
    captured = capsys.readouterr()
    assert "diverged 20" in captured.out and NO_TRAIL in captured.out
    errors = [line for line in captured.err.splitlines() if line.startswith("sealtrace:")]  # beside progress lines
    assert len(errors) == 1 and errors[0].startswith("sealtrace: error: 20 of 20 replay(s) diverged")
    assert main(["ledger", "replay", str(tmp_path / "missing.db"), "--container", str(material["chain"])]) == 2
    assert "no such ledger" in capsys.readouterr().err
