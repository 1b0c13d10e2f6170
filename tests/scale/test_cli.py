"""The batch verb's command line: exit codes, one error line, Ctrl-C and --resume, Ray missing."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sealtrace.cli import main
from tests.scale.conftest import copy_dataset, npz_dataset, records_of, verify_ok

ROOT = Path(__file__).resolve().parents[2]


def _argv(material: dict[str, Path], data: Path, ledger: Path, *more: str) -> list[str]:
    return ["batch", str(material["tiny"]), str(data), "--ledger", str(ledger), "--sign", str(material["key"]), *more]


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("sealtrace:")]


def test_json_summary_and_exit_codes_for_failed_requests(material: dict[str, Path], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    data = copy_dataset(material["tiny_data"], tmp_path / "data")
    np.savez(data / "req00004.npz", y=np.zeros((1, 2), np.float32))  # no input x
    assert main([*_argv(material, data, tmp_path / "l.db"), "--json"]) == 1
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert (summary["recorded"], summary["failed"]) == (11, 1)
    assert summary["failures"][0]["position"] == 4 and "missing input 'x'" in summary["failures"][0]["error"]
    assert _error_lines(captured.err) == [captured.err.strip()]  # --json: no progress, one error line
    assert "1 of 12 request(s) failed" in captured.err

    bad = tmp_path / "bad"
    bad.mkdir()
    np.savez(bad / "a.npz", y=np.zeros((1, 2), np.float32))
    assert main(_argv(material, bad, tmp_path / "l2.db")) == 2  # nothing ran: bad input
    assert "no request ran" in _error_lines(capsys.readouterr().err)[0]


def test_usage_errors_are_one_line(material: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = material["tiny_data"]
    for extra, message in ((["--workers", "2"], "--workers is for --ray"),
                           (["--audit", "full", "--backend", "onnxruntime"], "reference backend")):
        assert main(_argv(material, data, tmp_path / "l.db", *extra)) == 2
        lines = _error_lines(capsys.readouterr().err)
        assert len(lines) == 1 and message in lines[0]
    assert not (tmp_path / "l.db").exists()


def test_ray_missing_is_one_line(material: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError, as when not installed
    assert main([*_argv(material, material["tiny_data"], tmp_path / "l.db"), "--ray"]) == 2
    assert capsys.readouterr().err == "sealtrace: error: --ray needs Ray, which is not installed: pip install 'sealtrace[ray]'\n"
    (tmp_path / "i.csv").write_text("n.onnx,p.vnnlib,1\n")
    assert main(["falsify-bench", str(tmp_path / "i.csv"), "--ray"]) == 2
    assert "pip install 'sealtrace[ray]'" in capsys.readouterr().err


def _records(ledger: Path) -> int:
    try:
        with sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=1) as connection:
            return int(connection.execute("SELECT count(*) FROM records").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_ctrl_c_then_resume(material: dict[str, Path], tmp_path: Path) -> None:
    data = npz_dataset(tmp_path / "data", 300, 32, seed=5)
    ledger = tmp_path / "l.db"
    argv = [sys.executable, "-m", "sealtrace", "batch", str(material["chain"]), str(data), "--ledger", str(ledger),
            "--sign", str(material["key"]), "--audit", "full", "--task-size", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OPENBLAS_NUM_THREADS": "1"}
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while _records(ledger) < 5 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    if process.returncode == 0:
        pytest.skip("the job finished before Ctrl-C reached it")  # a very fast machine: nothing to resume
    assert process.returncode == 130, err
    assert _error_lines(err)[-1].startswith("sealtrace: interrupted: job ") and "--resume" in err
    held = records_of(ledger)
    assert 5 <= len(held) < 300
    verify_ok(ledger, material["pub"])  # what is there is whole and signed
    again = subprocess.run([*argv, "--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"{300 - len(held)} recorded, {len(held)} already in the ledger" in again.stdout
    from sealtrace.scale.batch import batch_record_id

    job = again.stdout.split()[1].rstrip(":")
    assert [r["id"] for r in records_of(ledger)] == [batch_record_id(job, p) for p in range(300)]
    verify_ok(ledger, material["pub"])


def test_without_ray_nothing_of_ray_is_imported(material: dict[str, Path], tmp_path: Path) -> None:
    script = (
        "import sys\nfrom sealtrace.cli import main\n"
        f"assert main({_argv(material, material['tiny_data'], tmp_path / 'l.db')!r}) == 0\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(records_of(tmp_path / "l.db")) == 12
