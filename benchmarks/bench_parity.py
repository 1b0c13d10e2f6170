"""Per-op parity, reference vs ONNX Runtime, on every real model: what it finds and what it costs.

For each model: steps compared, steps over tolerance, the worst step and its error; the parity run's
wall time against the sum of the two backends' plain run times (ORT optimized, as deployed), and its
peak memory against the larger backend's plain peak (each measured in its own process).

    python benchmarks/bench_parity.py [--models a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def measure(key: str, mode: str) -> dict[str, object]:
    import resource
    import statistics

    import onnxruntime as ort
    import psutil

    from sealtrace import Session, zoo
    from sealtrace.parity import check_parity

    real = zoo.model(key)
    feeds = real.inputs()
    baseline = psutil.Process().memory_info().rss
    result: dict[str, object] = {}
    if mode == "reference":
        session = Session(real.path)
        run = lambda: session.run(None, feeds)  # noqa: E731
    elif mode == "onnxruntime":
        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        options.log_severity_level = 3
        ort_session = ort.InferenceSession(str(real.path), options, providers=["CPUExecutionProvider"])
        run = lambda: ort_session.run(None, feeds)  # noqa: E731
    else:
        def run() -> None:
            report = check_parity(real.path, feeds)
            worst = max((s for s in report.steps if s.worst is not None), key=lambda s: s.worst.max_abs)  # type: ignore[union-attr]
            result.update(
                steps=len(report.steps),
                compared=sum(1 for s in report.steps if s.status != "not-compared"),
                exceeding=len(report.exceeding),
                worst_step=f"{worst.name} ({worst.op_type})",
                worst_abs=worst.worst.max_abs if worst.worst else 0.0,
                worst_rel=worst.worst.max_rel if worst.worst else 0.0,
                origin=None if report.drift_origin is None else report.drift_origin.name,
            )
    run()
    times = []
    for _ in range(3 if mode == "parity" else 7):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    result["median_s"] = statistics.median(times)
    result["peak_mb"] = max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - baseline) / 2**20
    return result


def run_child(key: str, mode: str) -> dict[str, object] | None:
    env = dict(os.environ, OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2")
    done = subprocess.run([sys.executable, __file__, "--child", key, mode], capture_output=True, text=True,
                          env=env, timeout=900, check=False)
    if done.returncode != 0:
        sys.stderr.write(f"{key} {mode} failed: {done.stderr.strip()[-500:]}\n")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default=None)
    parser.add_argument("--child", nargs=2)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(*args.child)))
        return
    sys.path.insert(0, str(HERE))
    from machine import facts_markdown
    from sealtrace import zoo

    keys = args.models.split(",") if args.models else [m.key for m in zoo.MODELS]
    rows = []
    for key in keys:
        ref, ort_, par = (run_child(key, mode) for mode in ("reference", "onnxruntime", "parity"))
        if not (ref and ort_ and par):
            rows.append(f"| {key} | failed | | | | | | |")
            continue
        cost = float(par["median_s"]) / (float(ref["median_s"]) + float(ort_["median_s"]))  # type: ignore[arg-type]
        memory = float(par["peak_mb"]) / max(float(ref["peak_mb"]), float(ort_["peak_mb"]), 1e-3)  # type: ignore[arg-type]
        rows.append(
            f"| {key} | {par['steps']} ({par['compared']} compared) | {par['exceeding']} | {par['worst_step']} | "
            f"{float(par['worst_abs']):.3g} / {float(par['worst_rel']):.3g} | "  # type: ignore[arg-type]
            f"{float(par['median_s']) * 1000:.0f} ms = {cost:.2f}x | {float(par['peak_mb']):.0f} MB = {memory:.2f}x |"  # type: ignore[arg-type]
        )
        print(rows[-1], file=sys.stderr)
    text = "\n".join([
        "## Per-op parity: reference vs ONNX Runtime on the real models",
        "",
        "Command: `python benchmarks/bench_parity.py`. Default tolerance atol 1e-4, rtol 1e-3; real inputs from "
        "`sealtrace.zoo`. Cost = parity wall time (median of 3, incl. ORT per-op session reuse, local re-runs of "
        "every step and all metrics) / (reference plain median + ORT optimized plain median). Memory = parity peak "
        "RSS growth / the larger of the two plain peaks (each in its own process).",
        "",
        facts_markdown(2),
        "",
        "| model | steps | over tolerance | worst step | worst max abs / max rel | parity time (vs sum of plain runs) | parity peak memory (vs larger plain peak) |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ])
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "parity.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
