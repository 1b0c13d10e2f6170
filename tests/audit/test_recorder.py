"""The recorder: what a log holds, subgraph paths, determinism, crashes, bounded memory."""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace.audit import AuditLogExistsError, AuditRecorder, audited_run, verify_log
from sealtrace.audit.records import sample_of, stats_of, value_summary
from sealtrace.backends.base import Backend
from sealtrace.digest import tensor_digest
from sealtrace.errors import KernelError
from sealtrace.plan.events import StepEvent
from sealtrace.plan.model import Plan
from sealtrace.session import RunOptions, Session
from tests.audit.conftest import MLP_INPUT, loop_model
from tests.conftest import make_model


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_log_holds_every_step_with_full_digests(mlp_path: Path, record_log: Callable[..., Path]) -> None:
    log = record_log(mlp_path)
    header, *steps, footer = records(log)
    assert header["model"]["kind"] == "onnx"
    assert header["model"]["sha256"] == Session(mlp_path).origin.sha256
    assert header["plan_digest"] == Session(mlp_path).plan.digest
    assert header["inputs"][0]["digest"] == tensor_digest(MLP_INPUT["x"])
    assert header["inputs"][0]["sample"] == MLP_INPUT["x"].ravel().tolist()
    assert header["backend"]["name"] == "reference"
    assert {"cpu", "blas", "threads"} <= set(header["host"])
    assert [s["op_type"] for s in steps] == ["MatMul", "Add", "Relu"]
    # Every output's digest is the full tensor digest; step inputs name the digests they read.
    values: dict[str, np.ndarray] = {}

    class Keep:
        def on_run_start(self, plan: Plan, feeds: Mapping[str, Any], backend: Backend) -> None: ...
        def on_step(self, event: StepEvent) -> None:
            values.update(zip(event.step.outputs, event.outputs, strict=True))
        def on_run_end(self, outputs: Mapping[str, Any]) -> None: ...

    Session(mlp_path).run(None, MLP_INPUT, RunOptions(observers=[Keep()]))
    for step in steps:
        out = step["outputs"][0]
        assert out["digest"] == tensor_digest(values[out["name"]])
        assert out["stats"]["min"] == float(values[out["name"]].min())
    assert steps[1]["inputs"][0] == {"name": "h", "digest": steps[0]["outputs"][0]["digest"]}
    assert footer["steps"] == 3
    assert footer["outputs"][0]["digest"] == steps[-1]["outputs"][0]["digest"]


def test_two_runs_give_identical_step_digests(mlp_path: Path, record_log: Callable[..., Path]) -> None:
    def steps(log: Path) -> list[Any]:
        return [(r["name"], r["inputs"], r["outputs"]) for r in records(log) if r["type"] == "step"]

    first, second = record_log(mlp_path), record_log(mlp_path)
    assert steps(first) == steps(second)
    assert records(first)[0]["run_id"] != records(second)[0]["run_id"]


def test_subgraph_steps_are_logged_with_their_path(record_log: Callable[..., Path]) -> None:
    x = np.array([1.0, -2.0], np.float32)
    log = record_log(loop_model(), {"x": x})
    assert verify_log(log).ok
    steps = [r for r in records(log) if r["type"] == "step"]
    paths = [(tuple(s["path"]), s["name"]) for s in steps]
    assert paths[:2] == [(("loop", "body", "0"), "keep_going"), (("loop", "body", "0"), "accumulate")]
    assert (("loop", "body", "2"), "accumulate") in paths
    assert (("branch", "else_branch", "0"), "absolute") in paths
    # A body input fed by the Loop kernel is hashed from its value, iteration by iteration.
    accumulate = [s for s in steps if s["name"] == "accumulate"]
    assert accumulate[1]["inputs"][0]["digest"] == accumulate[0]["outputs"][0]["digest"]
    assert accumulate[0]["inputs"][1]["digest"] == tensor_digest(x)


def test_sample_size_is_configurable(mlp_path: Path, record_log: Callable[..., Path]) -> None:
    for n in (0, 2):
        log = record_log(mlp_path, sample=n)
        header, *steps, _ = records(log)
        assert header["sample_size"] == n
        assert all(len(s["outputs"][0]["sample"]) == n for s in steps)


def test_existing_log_is_refused_unless_overwrite(mlp_path: Path, tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("keep me")
    with pytest.raises(AuditLogExistsError):
        audited_run(Session(mlp_path), MLP_INPUT, audit=log)
    assert log.read_text() == "keep me"
    audited_run(Session(mlp_path), MLP_INPUT, audit=AuditRecorder(log, overwrite=True))
    assert verify_log(log).ok


def test_recorder_writes_to_a_file_object_and_memory(mlp_path: Path) -> None:
    buffer = io.BytesIO()
    recorder = AuditRecorder(buffer)
    audited_run(Session(mlp_path), MLP_INPUT, audit=recorder)
    assert buffer.getvalue().count(b"\n") == 5
    assert recorder.run_digest == json.loads(buffer.getvalue().splitlines()[-1])["chain_head"]
    in_memory = AuditRecorder(None)
    audited_run(Session(mlp_path), MLP_INPUT, audit=in_memory)
    assert [r["type"] for r in in_memory.records] == ["header", "step", "step", "step", "footer"]
    with pytest.raises(Exception, match="one run"):
        audited_run(Session(mlp_path), MLP_INPUT, audit=in_memory)


def _failing_model() -> Any:
    """Relu then a Reshape to a shape fed at run time: a bad shape fails the second step."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["y"], name="reshape"),
    ]
    return make_model(
        nodes,
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )


def test_a_failed_run_leaves_a_valid_prefix_reported_as_truncated(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    feeds = {"x": np.ones((2, 3), np.float32), "shape": np.array([4, 4], np.int64)}
    with pytest.raises(KernelError):
        audited_run(Session(_failing_model()), feeds, audit=log)
    assert [r["type"] for r in records(log)] == ["header", "step"]
    result = verify_log(log)
    assert not result.ok
    assert result.problems[0].line == 3 and "truncated" in result.problems[0].message


def test_lines_are_written_while_the_run_goes(mlp_path: Path, tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    seen: list[int] = []

    def lines() -> int:  # the worker creates the file: it may not be there yet
        return log.read_bytes().count(b"\n") if log.exists() else 0

    class WatchLog:
        def on_run_start(self, plan: Plan, feeds: Mapping[str, Any], backend: Backend) -> None: ...
        def on_step(self, event: StepEvent) -> None:
            if event.step.name == "relu":  # the last step: header and earlier steps are on disk
                deadline = time.monotonic() + 10
                while lines() < 3 and time.monotonic() < deadline:
                    time.sleep(0.001)
                seen.append(lines())
        def on_run_end(self, outputs: Mapping[str, Any]) -> None: ...

    audited_run(Session(mlp_path), MLP_INPUT, audit=log, observers=[WatchLog()])
    assert seen and seen[0] >= 3


def test_a_short_run_wakes_no_worker_thread(mlp_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Waking a thread and taking turns with it for the GIL cost more than a run of small steps:
    # a run that ends before the latency bound, with a pipe that never filled, is recorded on the
    # run's own thread. A run whose pipe fills starts the worker, and its log is the same.
    from sealtrace.audit import pipeline

    started: list[str] = []
    start_worker = pipeline.start_worker

    def counted(task: Callable[[], None], name: str) -> Any:
        started.append(name)
        return start_worker(task, name)

    monkeypatch.setattr(pipeline, "start_worker", counted)
    session = Session(_big_chain(8, 1 << 16))
    feeds = {"v0": np.zeros(1 << 16, np.float32)}
    audited_run(session, feeds, audit=tmp_path / "short.jsonl")
    assert started == []
    assert verify_log(tmp_path / "short.jsonl").ok
    filled = AuditRecorder(tmp_path / "filled.jsonl", max_pending_bytes=1 << 18, hash_threads=0)
    audited_run(session, feeds, audit=filled)
    assert started == ["sealtrace-audit"]
    assert verify_log(tmp_path / "filled.jsonl").ok
    short, full = (records(tmp_path / name) for name in ("short.jsonl", "filled.jsonl"))
    assert [r["outputs"] for r in short[1:]] == [r["outputs"] for r in full[1:]]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_lines_are_written_while_the_run_goes_in_a_forked_child(mlp_path: Path, tmp_path: Path) -> None:
    # Threads do not survive fork: the child starts its own latency watch and worker threads rather
    # than hand its run to the parent's parked worker, which does not exist in the child.
    started = AuditRecorder(tmp_path / "parent.jsonl", max_pending_bytes=1 << 18, hash_threads=0)
    audited_run(Session(_big_chain(8, 1 << 16)), {"v0": np.zeros(1 << 16, np.float32)}, audit=started)
    log = tmp_path / "child.jsonl"

    class WatchLog:
        seen = 0

        def on_run_start(self, plan: Plan, feeds: Mapping[str, Any], backend: Backend) -> None: ...
        def on_step(self, event: StepEvent) -> None:
            if event.step.name == "relu":
                deadline = time.monotonic() + 10
                while (log.read_bytes().count(b"\n") if log.exists() else 0) < 3 and time.monotonic() < deadline:
                    time.sleep(0.001)
                WatchLog.seen = log.read_bytes().count(b"\n") if log.exists() else 0
        def on_run_end(self, outputs: Mapping[str, Any]) -> None: ...

    pid = os.fork()
    if pid == 0:  # the child: exit status 0 when the lines were there before the run ended
        try:
            audited_run(Session(mlp_path), MLP_INPUT, audit=log, observers=[WatchLog()])
            os._exit(0 if WatchLog.seen >= 3 else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert verify_log(log).ok


def _big_chain(n_steps: int, size: int) -> Any:
    nodes = [helper.make_node("Add", [f"v{i}", "one"], [f"v{i + 1}"], name=f"add{i}") for i in range(n_steps)]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [size])],
        [helper.make_tensor_value_info(f"v{n_steps}", TensorProto.FLOAT, [size])],
        [numpy_helper.from_array(np.ones(1, np.float32), "one")],
    )


def test_memory_held_by_the_recorder_is_bounded() -> None:
    size = 1 << 18  # 1 MiB per tensor
    bound = 3 << 20
    recorder = AuditRecorder(None, max_pending_bytes=bound)
    audited_run(Session(_big_chain(24, size)), {"v0": np.zeros(size, np.float32)}, audit=recorder)
    assert 0 < recorder.peak_pending_bytes <= bound
    assert recorder.steps == 24
    assert recorder.records[-1]["outputs"][0]["digest"] == tensor_digest(np.full(size, 24, np.float32))


def test_other_backends_are_logged_too(mlp_path: Path, tmp_path: Path) -> None:
    # The recorder does not know which backend ran: whatever steps it reports are chained.
    log = tmp_path / "ort.jsonl"
    audited_run(Session(mlp_path, backend="onnxruntime"), MLP_INPUT, audit=log)
    result = verify_log(log)
    assert result.ok, result.problems
    assert result.header is not None and result.header["backend"]["name"] == "onnxruntime"


def test_samples_and_stats() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4).T  # a non-contiguous view
    assert sample_of(a, 5) == [0.0, 4.0, 8.0, 1.0, 5.0]
    assert sample_of(a, 0) == []
    assert stats_of(a) == {"min": 0.0, "max": 11.0, "mean": 5.5, "nan": 0, "inf": 0}
    odd = np.array([1.0, np.nan, np.inf, -np.inf, 3.0], np.float32)
    assert stats_of(odd) == {"min": 1.0, "max": 3.0, "mean": 2.0, "nan": 1, "inf": 2}
    assert sample_of(odd, 5) == [1.0, "nan", "inf", "-inf", 3.0]
    assert stats_of(np.array([np.nan], np.float32)) == {"min": None, "max": None, "mean": None, "nan": 1, "inf": 0}
    assert stats_of(np.array([True, False, True])) == {"min": 0, "max": 1, "mean": 2 / 3, "nan": 0, "inf": 0}
    assert stats_of(np.zeros(0, np.float32)) is None
    mask = np.full(4, np.finfo(np.float32).min, np.float32)  # a float32 sum would overflow
    assert stats_of(mask)["mean"] == float(np.finfo(np.float32).min)  # type: ignore[index]
    assert stats_of(np.array(["a"], dtype=object)) is None
    strings = value_summary(np.array(["ab", "c"], dtype=object), 4)
    assert strings["dtype"] == "str" and strings["sample"] == ["ab", "c"]
    sequence = value_summary([np.zeros(2, np.float32), np.ones(1, np.int64)], 4)
    assert sequence["kind"] == "sequence" and sequence["length"] == 2
    assert value_summary(None, 4) == {"kind": "none", "digest": None}


def test_plan_constants_are_summarized_once_per_plan() -> None:
    from sealtrace.audit.recorder import plan_facts

    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [
        helper.make_node("Constant", [], ["c"], name="const", value=numpy_helper.from_array(value)),
        helper.make_node("Add", ["x", "c"], ["y"], name="add"),
    ]
    model = make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    session = Session(model)
    logs = []
    for _ in range(2):
        recorder = AuditRecorder(None)
        audited_run(session, {"x": np.ones((2, 3), np.float32)}, audit=recorder)
        logs.append(recorder.records)
    constant = [r["outputs"][0] for log in logs for r in log if r["type"] == "step" and r["name"] == "const"]
    assert [c["digest"] for c in constant] == [tensor_digest(value)] * 2
    assert constant[0]["sample"] == value.ravel().tolist()
    facts = plan_facts(session.plan)
    # Made once: by identity when the backend folded the Constant step, else as the Plan's view.
    assert len(facts._constant_entries) + len(facts._owned_entries) == 1


def test_a_log_created_between_recorder_and_run_is_not_overwritten(mlp_path: Path, tmp_path: Path) -> None:
    # The file is created on the worker when the run starts: one that appeared since the
    # recorder was made is still refused, with the same error, and left as it was.
    log = tmp_path / "log.jsonl"
    recorder = AuditRecorder(log)
    log.write_text("someone else's")
    with pytest.raises(AuditLogExistsError):
        audited_run(Session(mlp_path), MLP_INPUT, audit=recorder)
    assert log.read_text() == "someone else's"


def test_an_unwritable_log_fails_the_run_with_a_write_error(mlp_path: Path, tmp_path: Path) -> None:
    from sealtrace.audit import AuditWriteError

    with pytest.raises(AuditWriteError, match="cannot create audit log"):
        audited_run(Session(mlp_path), MLP_INPUT, audit=tmp_path / "missing-dir" / "log.jsonl")
