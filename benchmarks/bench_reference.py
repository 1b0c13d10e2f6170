"""Per-model latency and peak memory: sealtrace reference vs ONNX Runtime vs onnx.reference.

Each (model, engine) pair is measured in its own child process so that peak memory (RSS high-water
mark above the process's baseline after imports) belongs to that engine alone. All engines get the
same thread count. Latency is the median of repeated runs after one warm-up run.

    python benchmarks/bench_reference.py [--repeats 10] [--threads 2] [--models a,b]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENGINES = ("reference:1", "reference:2", "onnxruntime:1", "onnxruntime:2", "onnx.reference")


def measure(key: str, engine: str, repeats: int, threads: int, budget_s: float) -> dict[str, float]:
    """Runs in the child process: time ``repeats`` runs and report the peak RSS growth."""
    import resource

    import numpy as np
    import onnxruntime as ort
    import psutil

    from sealtrace import Session, zoo

    real = zoo.model(key) if key != "acasxu" else None
    path = str(real.path) if real else str(zoo.acasxu_networks()[0])
    feeds = real.inputs() if real else zoo.acasxu_inputs(1, 1)[0]
    baseline = psutil.Process().memory_info().rss
    kind, _, count = engine.partition(":")
    threads = int(count) if count else threads
    if kind == "reference":
        from sealtrace.backends.reference import ReferenceBackend

        session = Session(path, backend=ReferenceBackend(threads=threads))
        run = lambda: session.run(None, feeds)  # noqa: E731
    elif kind == "onnxruntime":
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        ort_session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        run = lambda: ort_session.run(None, feeds)  # noqa: E731
    else:
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(path)
        run = lambda: evaluator.run(None, feeds)  # noqa: E731
    with np.errstate(all="ignore"):
        start = time.perf_counter()
        run()  # warm-up (also builds lazily initialised state)
        first = time.perf_counter() - start
        times = [first]
        count = repeats if first * repeats < budget_s else max(1, int(budget_s / max(first, 1e-9)))
        times = []
        for _ in range(count):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"median_s": statistics.median(times), "runs": len(times), "peak_mb": max(0, peak - baseline) / 2**20}


def child(args: argparse.Namespace) -> None:
    print(json.dumps(measure(args.child_model, args.child_engine, args.repeats, args.threads, args.budget)))


def run_child(key: str, engine: str, args: argparse.Namespace) -> dict[str, float] | None:
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(args.threads)
    cmd = [sys.executable, __file__, "--child-model", key, "--child-engine", engine,
           "--repeats", str(args.repeats), "--threads", str(args.threads), "--budget", str(args.budget)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        sys.stderr.write(f"{key} on {engine} failed: {done.stderr.strip().splitlines()[-1:]}\n")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--budget", type=float, default=20.0, help="seconds of timed runs per pair at most")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--models", default=None)
    parser.add_argument("--child-model")
    parser.add_argument("--child-engine")
    args = parser.parse_args()
    if args.child_model:
        child(args)
        return
    sys.path.insert(0, str(HERE))
    from machine import facts_markdown
    from sealtrace import zoo

    keys = args.models.split(",") if args.models else [m.key for m in zoo.MODELS] + ["acasxu"]
    rows = []
    ratios: dict[str, list[float]] = {"1": [], "2": [], "onnx.reference": [], "memory": []}
    for key in keys:
        r = {engine: run_child(key, engine, args) for engine in ENGINES}
        cells = [key]
        for engine in ENGINES:
            cells.append(f"{r[engine]['median_s'] * 1000:.2f}" if r[engine] else "n/a")
        for n in ("1", "2"):
            ref, ort_ = r[f"reference:{n}"], r[f"onnxruntime:{n}"]
            if ref and ort_:
                ratios[n].append(ref["median_s"] / ort_["median_s"])
                cells.append(f"{ratios[n][-1]:.2f}x")
            else:
                cells.append("n/a")
        best_ref = min((r[e]["median_s"] for e in ("reference:1", "reference:2") if r[e]), default=None)
        oref = r["onnx.reference"]
        if best_ref and oref:
            ratios["onnx.reference"].append(oref["median_s"] / best_ref)
            cells.append(f"{ratios['onnx.reference'][-1]:.1f}x")
        else:
            cells.append("n/a (failed or timed out)")
        ref_mem, ort_mem = r["reference:1"], r["onnxruntime:1"]
        for m in (ref_mem, ort_mem):
            cells.append(f"{m['peak_mb']:.1f}" if m else "n/a")
        if ref_mem and ort_mem and ort_mem["peak_mb"] > 0:
            ratios["memory"].append(ref_mem["peak_mb"] / max(ort_mem["peak_mb"], 1e-3))
            cells.append(f"{ratios['memory'][-1]:.2f}x")
        else:
            cells.append("n/a")
        rows.append(cells)
        print(" | ".join(cells), file=sys.stderr)

    def geomean(values: list[float]) -> str:
        return f"{math.exp(sum(map(math.log, values)) / len(values)):.2f}x" if values else "n/a"

    header = ["model", "reference 1T ms", "reference 2T ms", "ORT 1T ms", "ORT 2T ms", "onnx.reference ms",
              "ref/ORT 1T", "ref/ORT 2T", "onnx.reference/ref", "ref peak MB", "ORT peak MB", "ref/ORT memory"]
    lines = [
        "## Reference interpreter latency and memory",
        "",
        "Command: `python benchmarks/bench_reference.py` (part of `make bench`). Median of up to "
        f"{args.repeats} runs after a warm-up, each engine in its own process. 1T/2T: the reference "
        "backend's BLAS threads (`ReferenceBackend(threads=N)`; the default is 1) and ORT's "
        "intra_op_num_threads. onnx.reference is `onnx.reference.ReferenceEvaluator` (its NumPy BLAS "
        "left at the environment's thread count). Peak memory is the RSS high-water mark above the "
        "process baseline after imports (model load + runs), at 1 thread.",
        "",
        facts_markdown(args.threads),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(c) + " |" for c in rows),
        "",
        f"Geometric means: reference/ORT latency {geomean(ratios['1'])} at 1 thread, {geomean(ratios['2'])} "
        f"at 2 threads (target <= 2x); onnx.reference/reference {geomean(ratios['onnx.reference'])} "
        f"(target >= 10x); reference/ORT peak memory {geomean(ratios['memory'])} (target <= 2x).",
        "",
    ]
    text = "\n".join(lines)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "reference.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
