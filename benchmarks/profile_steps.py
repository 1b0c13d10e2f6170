"""Where does the reference backend spend its time? Per-op-type totals for one real model.

    python benchmarks/profile_steps.py MODEL_KEY [--runs 5] [--ort] [--audit sha256|blake3]

``--ort`` adds ONNX Runtime's own per-op profile of its optimized run at one thread. Its op types
are those of its optimized graph: fused convolutions (Conv with BatchNormalization and activation
folded in), NCHWc reorders. Compare totals by family rather than line by line.

``--audit`` adds where the audit recorder's microseconds go on this model, per step: its hand-off
on the executor thread, and on its worker the digests, the statistics, the samples and the rest
(records, chain, dispatch), each the least CPU time of several passes over one run's outputs.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from sealtrace import Session, zoo
from sealtrace.audit import audited_run
from sealtrace.backends.base import Backend
from sealtrace.plan.events import StepEvent
from sealtrace.plan.model import Plan
from sealtrace.session import RunOptions


class StepTimer:
    """An observer that charges the time since the previous event to the step just reported."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self._last = 0.0

    def on_run_start(self, plan: Plan, feeds: Mapping[str, Any], backend: Backend) -> None:
        self._last = time.perf_counter()

    def on_step(self, event: StepEvent) -> None:
        now = time.perf_counter()
        if not event.path:  # subgraph steps are charged to their enclosing step
            self.totals[event.step.op_type] += now - self._last
            self.counts[event.step.op_type] += 1
            self._last = now

    def on_run_end(self, outputs: Mapping[str, Any]) -> None:
        pass


def ort_profile(path: str, feeds: Mapping[str, Any], runs: int) -> tuple[float, dict[str, float], dict[str, int]]:
    """ONNX Runtime's kernel time per op type (seconds per run), from its profiler, at one thread."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.enable_profiling = True
    with tempfile.TemporaryDirectory() as folder:
        options.profile_file_prefix = os.path.join(folder, "ort")
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        session.run(None, dict(feeds))
        start = time.perf_counter()
        for _ in range(runs):
            session.run(None, dict(feeds))
        total = (time.perf_counter() - start) / runs
        with open(session.end_profiling()) as file:
            events = json.load(file)
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            op = event["args"].get("op_name", "?")
            totals[op] += event["dur"] * 1e-6 / (runs + 1)  # microseconds, over every profiled run
            counts[op] += 1
    return total, totals, {op: n // (runs + 1) for op, n in counts.items()}


def audit_profile(session: Session, feeds: Mapping[str, Any], digest: str, passes: int = 30) -> None:
    """Print the recorder's cost per step on this model, part by part (see the module docstring)."""
    import io
    import statistics

    import numpy as np

    from sealtrace.audit import AuditRecorder
    from sealtrace.audit.entries import _prefix, list_json
    from sealtrace.audit.recorder import plan_facts
    from sealtrace.audit.records import float_stats

    facts = plan_facts(session.plan)
    items: list[tuple[Any, ...]] = []

    class Keep:
        def on_run_start(self, *args: Any) -> None: ...
        def on_run_end(self, *args: Any) -> None: ...
        def on_step(self, event: StepEvent) -> None:
            positions = facts.direct_inputs.get(id(event.step))
            direct = {i: event.inputs[i] for i in positions} if positions else None
            items.append((event.path, event.step, event.outputs, direct, event.constant))

    audited_run(session, feeds, audit=AuditRecorder(io.BytesIO(), digest=digest))  # per-Plan facts made
    session.run(None, feeds, RunOptions(observers=[Keep()]))
    fresh = [
        v for item in items if not item[4] for v in item[2]
        if type(v) is np.ndarray and v.size and v.flags.c_contiguous and v.dtype.kind in "fiub"
    ]  # fmt: skip

    def least(fn: Any) -> float:
        best = float("inf")
        for _ in range(passes):
            start = time.thread_time()
            fn()
            best = min(best, time.thread_time() - start)
        return best

    def worker() -> None:
        recorder = AuditRecorder(io.BytesIO(), hash_threads=0, digest=digest)
        recorder._facts = facts
        recorder._digests.update(facts.weight_digests(digest))
        for item in items:
            recorder._step_line(*item)

    def digests() -> None:
        for v in fresh:
            h = _prefix(v.dtype, v.shape, digest)[1].copy()
            h.update(v.reshape(-1).view(np.uint8))
            h.hexdigest()

    def stats() -> None:
        for v in fresh:
            flat = v.reshape(-1)
            if v.dtype.kind == "f":
                float_stats(flat)
            else:
                np.minimum.reduce(flat, axis=None)
                np.maximum.reduce(flat, axis=None)
                np.add.reduce(flat, axis=None, dtype=np.float64)

    def samples() -> None:
        for v in fresh:
            list_json(v.reshape(-1)[:8].tolist())

    clock = time.perf_counter_ns
    hand_offs: list[int] = []
    for _ in range(5):
        recorder = AuditRecorder(io.BytesIO(), digest=digest)
        hand_off = recorder.on_step

        def timed(event: StepEvent, hand_off: Any = hand_off) -> None:
            start = clock()
            hand_off(event)
            hand_offs.append(clock() - start)

        recorder.on_step = timed  # type: ignore[method-assign]
        audited_run(session, feeds, audit=recorder)
    parts = {"worker, all": least(worker), "digests": least(digests), "statistics": least(stats)}
    parts["samples"] = least(samples)
    parts["records, chain, rest"] = parts["worker, all"] - parts["digests"] - parts["statistics"] - parts["samples"]
    steps = len(items)
    print(
        f"audit ({digest}): {steps} steps ({sum(1 for i in items if i[4])} constant), "
        f"{len(fresh)} fresh outputs of {sum(v.nbytes for v in fresh) / 2**20:.2f} MB"
    )
    print(f"  executor thread: on_step median {statistics.median(hand_offs) / 1e3:.2f} us per step (timer included)")
    for name, seconds in parts.items():
        print(f"  worker: {name:22s} {seconds * 1e3:8.3f} ms per run  {seconds * 1e6 / steps:6.2f} us per step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ort", action="store_true", help="also print ONNX Runtime's per-op profile")
    parser.add_argument("--audit", choices=["sha256", "blake3"], help="also profile the audit recorder with this digest")
    args = parser.parse_args()
    real = zoo.model(args.model)
    try:
        session = Session(real.path)
        feeds = real.inputs()
    except zoo.MaterialMissingError as exc:
        raise SystemExit(f"profile_steps: {args.model}: {exc}") from None
    session.run(None, feeds)
    timer = StepTimer()
    start = time.perf_counter()
    for _ in range(args.runs):
        session.run(None, feeds, RunOptions(observers=[timer]))
    total = (time.perf_counter() - start) / args.runs
    print(f"{args.model}: {total * 1000:.2f} ms per run, {len(session.plan.steps)} steps")
    for op, seconds in sorted(timer.totals.items(), key=lambda kv: -kv[1]):
        per_run = seconds / args.runs
        print(f"  {op:28s} {per_run * 1000:9.3f} ms  {100 * per_run / total:5.1f}%  x{timer.counts[op] // args.runs}")
    if args.audit:
        audit_profile(session, feeds, args.audit)
    if args.ort:
        ort_total, ort_totals, ort_counts = ort_profile(str(real.path), feeds, args.runs)
        print(f"onnxruntime (optimized, 1 thread): {ort_total * 1000:.2f} ms per run")
        for op, seconds in sorted(ort_totals.items(), key=lambda kv: -kv[1]):
            print(f"  {op:28s} {seconds * 1000:9.3f} ms  {100 * seconds / ort_total:5.1f}%  x{ort_counts[op]}")


if __name__ == "__main__":
    main()
