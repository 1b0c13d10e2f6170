"""`sealtrace batch` in this process: records in position order, named by job and position, resumable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sealtrace.container import IntegrityError
from sealtrace.errors import InputError
from sealtrace.ledger import Ledger
from sealtrace.scale import BatchJob, InProcess, JobError, run_batch
from sealtrace.scale.batch import batch_record_id
from sealtrace.scale.errors import JobInterrupted
from tests.scale.conftest import copy_dataset, records_of, verify_ok


def _job(material: dict[str, Path], ledger: Path, model: str = "tiny", **options: Any) -> BatchJob:
    return BatchJob(str(material[model]), str(material[f"{model}_data"]), str(ledger),
                    sign_key=str(material["key"]), **options)


@pytest.mark.parametrize("audit", ["io", "full"])
def test_records_in_position_order_named_by_job_and_position(material: dict[str, Path], tmp_path: Path,
                                                             audit: str) -> None:
    summary = run_batch(_job(material, tmp_path / "l.db", audit=audit, task_size=5), InProcess())
    assert (summary.recorded, summary.skipped, summary.failures) == (12, 0, [])
    records = records_of(tmp_path / "l.db")
    assert [r["id"] for r in records] == [batch_record_id(summary.job_id, p) for p in range(12)]
    from sealtrace.arrayfiles import load_npz
    from sealtrace.audit.records import value_identity

    files = sorted((material["tiny_data"]).iterdir())
    with Ledger.open(str(tmp_path / "l.db"), readonly=True) as ledger:
        for record, path in zip(records, files, strict=True):
            assert record["inputs"]["x"] == value_identity(load_npz(path)["x"])  # the file at its position
            assert record["audit"] == audit and record["backend"]["name"] == ("reference" if audit == "full" else "onnxruntime")
            np.testing.assert_array_equal(ledger.inputs_of(record)["x"], load_npz(path)["x"])
            if audit == "full":
                from sealtrace.audit.log import parse_lines
                from sealtrace.audit.verify import verify_lines

                log = ledger.trail(record["trail"])
                assert verify_lines(parse_lines(log), "trail").ok  # the worker's trail, stored whole
            else:
                assert record["trail"] is None
    verify_ok(tmp_path / "l.db", material["pub"])


def test_a_failed_request_is_reported_and_the_others_recorded(material: dict[str, Path], tmp_path: Path) -> None:
    data = copy_dataset(material["tiny_data"], tmp_path / "data")
    np.savez(data / "req00003.npz", x=np.zeros((1, 2), np.float64))  # the model takes float32
    (data / "req00005.npz").write_bytes(b"not a zip")
    job = BatchJob(str(material["tiny"]), str(data), str(tmp_path / "l.db"), sign_key=str(material["key"]))
    summary = run_batch(job, InProcess())
    assert [(f.position, f.name) for f in summary.failures] == [(3, "req00003.npz"), (5, "req00005.npz")]
    assert "float64" in summary.failures[0].error
    assert summary.recorded == 10
    ids = [r["id"] for r in records_of(tmp_path / "l.db")]
    assert ids == [batch_record_id(summary.job_id, p) for p in range(12) if p not in (3, 5)]


def test_the_same_job_again_is_refused_and_resume_skips_what_is_recorded(material: dict[str, Path], tmp_path: Path) -> None:
    first = run_batch(_job(material, tmp_path / "l.db"), InProcess())
    with pytest.raises(JobError, match="--resume"):
        run_batch(_job(material, tmp_path / "l.db"), InProcess())
    again = run_batch(_job(material, tmp_path / "l.db", resume=True), InProcess())
    assert (again.job_id, again.recorded, again.skipped) == (first.job_id, 0, 12)
    assert len(records_of(tmp_path / "l.db")) == 12
    # Another audit mode is another job: recorded beside it.
    other = run_batch(_job(material, tmp_path / "l.db", audit="full"), InProcess())
    assert other.job_id != first.job_id and other.recorded == 12


def test_interrupted_job_leaves_a_prefix_and_resume_completes_it(material: dict[str, Path], tmp_path: Path) -> None:
    whole = run_batch(_job(material, tmp_path / "whole.db", task_size=3), InProcess())

    def interrupt(done: int, total: int, failed: int) -> None:
        if done >= 6:
            raise KeyboardInterrupt

    with pytest.raises(JobInterrupted) as stopped:
        run_batch(_job(material, tmp_path / "l.db", task_size=3), InProcess(), interrupt)
    assert stopped.value.summary.recorded == 6
    prefix = [r["id"] for r in records_of(tmp_path / "l.db")]
    assert prefix == [batch_record_id(whole.job_id, p) for p in range(6)]
    verify_ok(tmp_path / "l.db", material["pub"])  # what was appended is signed and whole
    resumed = run_batch(_job(material, tmp_path / "l.db", task_size=3, resume=True), InProcess())
    assert (resumed.recorded, resumed.skipped) == (6, 6)
    assert [r["id"] for r in records_of(tmp_path / "l.db")] == [r["id"] for r in records_of(tmp_path / "whole.db")]
    verify_ok(tmp_path / "l.db", material["pub"])


def test_a_record_id_the_ledger_holds_is_never_appended_twice(material: dict[str, Path], tmp_path: Path) -> None:
    # Two drivers of one job (a resume racing the first run): the ledger refuses the second copy.
    from sealtrace.scale.batch import RunOutcome
    from sealtrace.scale.ordered import append_in_order

    run_batch(_job(material, tmp_path / "l.db"), InProcess())
    record = records_of(tmp_path / "l.db")[0]
    outcome = RunOutcome(0, "again", record, None, None, "test")
    with Ledger.open(str(tmp_path / "l.db"), signer=str(material["key"])) as ledger:
        appended = append_in_order(ledger, InProcess(), lambda shared, task: [outcome], None, [0])
    assert (appended.recorded, appended.already) == (0, 1)
    assert len(records_of(tmp_path / "l.db")) == 12


def test_parquet_dataset_records_the_same_inputs(material: dict[str, Path], tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from sealtrace.arrayfiles import load_npz

    values = [load_npz(path)["x"] for path in sorted(material["tiny_data"].iterdir())]
    pq.write_table(pa.table({"x": pa.array([v.ravel().tolist() for v in values], pa.list_(pa.float32()))}),
                   tmp_path / "d.parquet", row_group_size=5)
    run_batch(BatchJob(str(material["tiny"]), str(tmp_path / "d.parquet"), str(tmp_path / "p.db"),
                       sign_key=str(material["key"])), InProcess())
    run_batch(_job(material, tmp_path / "n.db"), InProcess())
    assert [r["inputs"] for r in records_of(tmp_path / "p.db")] == [r["inputs"] for r in records_of(tmp_path / "n.db")]
    assert [r["outputs"] for r in records_of(tmp_path / "p.db")] == [r["outputs"] for r in records_of(tmp_path / "n.db")]


def test_refusals_before_anything_runs(material: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(InputError, match="reference backend"):
        run_batch(_job(material, tmp_path / "l.db", audit="full", backend="onnxruntime"), InProcess())
    with pytest.raises(InputError, match="not a sealed container"):
        run_batch(BatchJob(str(material["dir"] / "tiny.onnx"), str(material["tiny_data"]), str(tmp_path / "l.db")),
                  InProcess())
    from sealtrace.signing import generate_keypair

    generate_keypair(tmp_path / "other.pem")
    with pytest.raises(IntegrityError):
        run_batch(_job(material, tmp_path / "l.db", trust=(str(tmp_path / "other.pub"),)), InProcess())
    assert not (tmp_path / "l.db").exists()  # refused before the ledger was opened


def test_the_gpu_and_its_precision_are_part_of_a_jobs_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job resumed on another GPU or precision is another job (its records' bits differ), while the
    CPU adds nothing (a CPU job's id is what it was). No GPU is needed: torch.cuda's facts are faked."""
    torch = pytest.importorskip("torch")
    from tests.audit.test_device import _fake_gpu

    _fake_gpu(monkeypatch)
    job = BatchJob("m.seal", "data", "l.db", backend="torch", device="cuda")
    assert BatchJob("m.seal", "data", "l.db").device_identity() == {}
    assert BatchJob("m.seal", "data", "l.db", backend="torch", device="cpu").device_identity() == {}
    h200 = job.device_identity()
    assert h200["device"]["gpu"]["name"] == "NVIDIA H200" and h200["device"]["precision"] == "faithful"
    tf32 = BatchJob("m.seal", "data", "l.db", backend="torch", device="cuda", gpu_precision="tf32").device_identity()
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA A100")
    a100 = job.device_identity()
    assert len({str(h200), str(tf32), str(a100)}) == 3
