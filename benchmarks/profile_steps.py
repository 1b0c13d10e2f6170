"""Where does the reference backend spend its time? Per-op-type totals for one real model.

    python benchmarks/profile_steps.py MODEL_KEY [--runs 5]
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    real = zoo.model(args.model)
    session = Session(real.path)
    feeds = real.inputs()
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


if __name__ == "__main__":
    main()
