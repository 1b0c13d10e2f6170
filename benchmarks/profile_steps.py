"""Where does the reference backend spend its time? Per-op-type totals for one real model.

    python benchmarks/profile_steps.py MODEL_KEY [--runs 5] [--ort]

``--ort`` adds ONNX Runtime's own per-op profile of its optimized run at one thread. Its op types
are those of its optimized graph: fused convolutions (Conv with BatchNormalization and activation
folded in), NCHWc reorders. Compare totals by family rather than line by line.
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
from sealtrace.backends.base import Backend, StepEvent
from sealtrace.plan.model import Plan


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--ort", action="store_true", help="also print ONNX Runtime's per-op profile")
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
        session.run(None, feeds, observers=[timer])
    total = (time.perf_counter() - start) / args.runs
    print(f"{args.model}: {total * 1000:.2f} ms per run, {len(session.plan.steps)} steps")
    for op, seconds in sorted(timer.totals.items(), key=lambda kv: -kv[1]):
        per_run = seconds / args.runs
        print(f"  {op:28s} {per_run * 1000:9.3f} ms  {100 * per_run / total:5.1f}%  x{timer.counts[op] // args.runs}")
    if args.ort:
        ort_total, ort_totals, ort_counts = ort_profile(str(real.path), feeds, args.runs)
        print(f"onnxruntime (optimized, 1 thread): {ort_total * 1000:.2f} ms per run")
        for op, seconds in sorted(ort_totals.items(), key=lambda kv: -kv[1]):
            print(f"  {op:28s} {seconds * 1000:9.3f} ms  {100 * seconds / ort_total:5.1f}%  x{ort_counts[op]}")


if __name__ == "__main__":
    main()
