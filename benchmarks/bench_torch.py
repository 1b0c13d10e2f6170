"""Torch latency vs ONNX Runtime on the real models: median time per run, same thread count.

Three ways to run each model, interleaved round by round in one process (the machine's noise
hits all alike), after one warm-up run each:
- ``onnxruntime``: an InferenceSession with all graph optimizations (what users deploy);
- ``torch module``: the fx GraphModule of ``sealtrace.torchbridge.to_torch`` under ``torch.no_grad``;
- ``torch backend``: ``sealtrace``'s torch backend, the Plan step by step (no observers).
Every runtime gets the same number of intra-op threads (``--threads``, default 1).

    python benchmarks/bench_torch.py [--threads 1] [--repeats 15] [--budget 20] [--models a,b]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def runners(path: str, feeds: dict[str, Any], threads: int) -> dict[str, Callable[[], Any]]:
    """One zero-argument callable per runtime, each running the model once on ``feeds``."""
    import numpy as np
    import onnxruntime as ort
    import torch

    from sealtrace.backends.torch import TorchBackend
    from sealtrace.plan import build_plan
    from sealtrace.plan.feeds import check_feeds
    from sealtrace.torchbridge import to_torch

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    plan = build_plan(path)
    checked = check_feeds(plan, feeds)
    module = to_torch(plan)
    args = [torch.from_numpy(np.ascontiguousarray(checked[n])) for n in module.input_names]
    backend = TorchBackend(threads=threads)

    def run_module() -> Any:
        with torch.no_grad():
            return module(*args)

    return {
        "onnxruntime": lambda: session.run(None, feeds),
        "torch module": run_module,
        "torch backend": lambda: backend.run(plan, checked),
    }


def measure(path: str, feeds: dict[str, Any], threads: int, repeats: int, budget_s: float) -> dict[str, float]:
    """Median seconds per run of each runtime, interleaved round by round."""
    import torch

    torch.set_num_threads(threads)
    calls = runners(path, feeds, threads)
    for call in calls.values():
        call()  # warm-up: first-run allocations, lazy initialization
    times: dict[str, list[float]] = {name: [] for name in calls}
    start = time.perf_counter()
    for _ in range(repeats):
        for name, call in calls.items():
            t0 = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s and len(times["onnxruntime"]) >= 3:
            break
    return {name: statistics.median(values) for name, values in times.items()}


def table(rows: list[tuple[str, dict[str, float]]]) -> str:
    lines = [
        "| model | onnxruntime (ms) | torch module (ms) | torch backend (ms) | module / ORT | backend / ORT |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, m in rows:
        ort_ms, mod_ms, back_ms = (1e3 * m[k] for k in ("onnxruntime", "torch module", "torch backend"))
        lines.append(
            f"| {key} | {ort_ms:.2f} | {mod_ms:.2f} | {back_ms:.2f} | {mod_ms / ort_ms:.2f}x | {back_ms / ort_ms:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads for every runtime")
    parser.add_argument("--repeats", type=int, default=15, help="rounds at most")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds of timed rounds per model at most")
    parser.add_argument("--models", default=None, help="comma-separated keys (default: all real models + acasxu)")
    parser.add_argument("--out", default=str(HERE / "results" / "torch.md"))
    args = parser.parse_args()
    from material import require
    from sealtrace import zoo

    wanted = args.models.split(",") if args.models else None
    require("bench_torch", Path(args.out), wanted)
    rows = []
    for key, path, feeds in zoo.benchmark_cases(wanted):
        result = measure(path, feeds, args.threads, args.repeats, args.budget)
        rows.append((key, result))
        print(f"{key}: " + ", ".join(f"{k} {1e3 * v:.2f} ms" for k, v in result.items()), file=sys.stderr, flush=True)
    from machine import machine_facts

    facts = machine_facts()
    body = table(rows)
    text = (
        "## Torch bridge: latency vs ONNX Runtime\n\n"
        f"`python benchmarks/bench_torch.py --threads {args.threads}`: median of up to {args.repeats} interleaved "
        f"rounds, {args.threads} intra-op thread(s) for every runtime, CPU.\n"
        f"Machine: {facts.get('cpu')} ({facts.get('cores')} cores), onnxruntime {facts.get('onnxruntime')}, "
        f"torch {facts.get('torch', '?')}.\n\n" + body + "\n"
    )
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
