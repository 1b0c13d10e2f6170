"""What portable numerics cost: per real model, the portable reference against the native one and ONNX
Runtime, the share of elements that took an exact path, and the floor.

In one child process per model, three engines alternate run by run (so the machine's load falls on
all alike; medians, and the medians of per-run ratios), each at its default thread count:
- portable: the reference backend as it is now (portable numerics, docs/numerics.md; its BLAS on
  the environment's threads, all cores);
- native: the reference backend as it was before portable numerics (`numerics="native"`, one BLAS
  thread, its default then);
- ONNX Runtime (intra_op_num_threads 0: all cores).
The floor is what portable numerics cannot go below: the float64 GEMMs of the model's MatMul, Gemm
and Conv products (the shapes the run asked for, timed alone at the portable default's threads).

    python benchmarks/bench_numerics.py [--models a,b] [--repeats 15]

Run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (make bench does): they slow current NumPy.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "numerics.md"
sys.path.insert(0, str(HERE))

TARGET_GEOMEAN = 1.5
TARGET_WORST = 2.5


def measure(key: str, repeats: int, budget_s: float) -> dict[str, Any]:
    """The child's work for one model."""
    import numpy as np
    import onnxruntime as ort

    from sealtrace import Session, zoo
    from sealtrace.backends.reference import ReferenceBackend
    from sealtrace.ops import numerics
    from sealtrace.ops.numerics import products
    from sealtrace.ops.numerics.settle import Counts

    (_, path, feeds), = zoo.benchmark_cases([key])
    portable = Session(path, backend=ReferenceBackend())
    native = Session(path, backend=ReferenceBackend(threads=1, numerics="native"))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    # ORT's pool threads spin after a run by default, taking the cores the next engine's BLAS
    # threads need (measured: the portable reference 1.5-2x slower right after an ORT run)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    runtime = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    engines = {
        "portable": lambda: portable.run(None, feeds),
        "native": lambda: native.run(None, feeds),
        "onnxruntime": lambda: runtime.run(None, feeds),
    }
    times: dict[str, list[float]] = {name: [] for name in engines}
    with np.errstate(all="ignore"):
        for run in engines.values():
            run()  # warm-up: folding, code generation, prepared weights
        # the products' shapes, and the share of elements that took an exact path, of one run
        shapes: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        original = products.product

        def recording(a: Any, b: Any, *args: Any, **kwargs: Any) -> Any:
            shapes.append((np.shape(a), np.shape(b)))
            return original(a, b, *args, **kwargs)

        products.product = numerics.product = recording  # type: ignore[assignment]
        Counts.reset()
        engines["portable"]()
        rounded, undecided, mpfr = Counts.rounded, Counts.undecided, Counts.mpfr
        products.product = numerics.product = original  # type: ignore[assignment]
        pair = sum(_timed(run) for run in engines.values())
        count = max(repeats, min(20 * repeats, int(budget_s / max(pair, 1e-9))))
        for _ in range(count):
            for name, run in engines.items():
                times[name].append(_timed(run))
    floor = _gemm_floor(shapes)
    return {
        "runs": count,
        **{f"{name}_ms": statistics.median(t) * 1e3 for name, t in times.items()},
        "portable_over_native": statistics.median(p / n for p, n in zip(times["portable"], times["native"], strict=True)),
        "portable_over_ort": statistics.median(p / o for p, o in zip(times["portable"], times["onnxruntime"], strict=True)),
        "native_over_ort": statistics.median(n / o for n, o in zip(times["native"], times["onnxruntime"], strict=True)),
        "rounded": rounded,
        "undecided": undecided,
        "mpfr": mpfr,
        "products": len(shapes),
        **floor,
    }


def _timed(run: Any) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _gemm_floor(shapes: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> dict[str, float]:
    """The float64 GEMMs of the run's products (at the environment's BLAS threads, as the portable
    reference runs them) and, beside them, the float32 GEMMs of the same shapes at one thread (the
    native reference's): best of 5 of the whole set."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    def best(operands: list[tuple[Any, Any]]) -> float:
        result = math.inf
        for _ in range(5):
            start = time.perf_counter()
            for a, b in operands:
                np.matmul(a, b)
            result = min(result, time.perf_counter() - start)
        return result * 1e3

    wide = [(np.ones(a, np.float64), np.ones(b, np.float64)) for a, b in shapes]
    narrow = [(x.astype(np.float32), y.astype(np.float32)) for x, y in wide]
    float64_ms = best(wide)
    with threadpool_limits(1):
        float32_ms = best(narrow)
    return {"floor_float64_ms": float64_ms, "float32_gemm_1t_ms": float32_ms}


def section(rows: list[tuple[str, dict[str, Any]]], repeats: int) -> str:
    from machine import facts_markdown

    table = [
        "| model | portable ms | native ms | ORT ms | portable/native | portable/ORT | native/ORT | exact path | floor: float64 GEMMs ms | float32 GEMMs (1T) ms | floor/native |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratios, floors = [], []
    for key, r in rows:
        share = r["undecided"] / max(r["rounded"], 1)
        floor_ratio = r["floor_float64_ms"] / r["native_ms"]
        ratios.append(r["portable_over_native"])
        floors.append(floor_ratio)
        table.append(
            f"| {key} | {r['portable_ms']:.2f} | {r['native_ms']:.2f} | {r['onnxruntime_ms']:.2f} | "
            f"{r['portable_over_native']:.2f}x | {r['portable_over_ort']:.2f}x | {r['native_over_ort']:.2f}x | "
            f"{share:.4%} ({r['undecided']} of {r['rounded']}; {r['mpfr']} by MPFR) | {r['floor_float64_ms']:.2f} | "
            f"{r['float32_gemm_1t_ms']:.2f} | {floor_ratio:.2f}x |"
        )
    geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else float("nan")
    worst_key, worst = max(((k, r["portable_over_native"]) for k, r in rows), key=lambda kv: kv[1], default=("-", 0.0))
    over = [k for k, r in rows if r["portable_over_native"] > TARGET_WORST]
    floor_geomean = math.exp(sum(math.log(x) for x in floors) / len(floors)) if floors else float("nan")
    verdict = (
        f"Geometric mean portable/native: **{geomean:.2f}x** (target <= {TARGET_GEOMEAN}x: "
        f"{'met' if geomean <= TARGET_GEOMEAN else 'not met'}); worst {worst_key} {worst:.2f}x (target: no model over "
        f"{TARGET_WORST}x: {'met' if not over else 'not met, ' + ', '.join(over)}). The float64 GEMMs alone (the floor) "
        f"are {floor_geomean:.2f}x the whole native run (geometric mean)."
    )
    return "\n".join([
        "## Portable numerics",
        "",
        "Command: `python benchmarks/bench_numerics.py` (part of `make bench`; OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE "
        f"unset). Per model, one child process; portable, native and ORT alternate run by run (at least {repeats} "
        "rounds after a warm-up); milliseconds are medians, ratios medians of per-round ratios. Each engine at its "
        "default thread count: portable numerics with the BLAS on the environment's threads (all cores), native "
        "numerics at one BLAS thread (the reference's default before portable numerics: 'today's native reference'), "
        "ONNX Runtime on all cores (its pool's spinning off, which otherwise takes the cores from the engine that runs "
        "next). 'exact path': the share of elements whose rounding the float64 bound did not "
        "decide (docs/numerics.md, section 7), and how many of them MPFR computed. Floor: the float64 GEMMs of the "
        "run's MatMul, Gemm and Conv products timed alone (best of 5) at the portable default's threads; beside it the "
        "float32 GEMMs of the same shapes on one thread, what the native reference spends there.",
        "",
        facts_markdown(0),
        "",
        *table,
        "",
        verdict,
        "",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=None, help="comma-separated model keys (default: every real model)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--budget", type=float, default=20.0, help="seconds of timed rounds per model at most")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.repeats, args.budget)))
        return 0
    from material import require
    from sealtrace import zoo

    keys = args.models.split(",") if args.models else list(zoo.BENCHMARK_KEYS)
    require("bench_numerics.py", RESULTS, keys)
    rows = []
    for key in keys:
        done = subprocess.run(
            [sys.executable, __file__, "--child", key, "--repeats", str(args.repeats), "--budget", str(args.budget)],
            capture_output=True, text=True, check=False,
        )
        if done.returncode != 0:
            print(f"{key}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
            return 1
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{key}: portable {result['portable_ms']:.2f} ms, native {result['native_ms']:.2f} ms, "
              f"ORT {result['onnxruntime_ms']:.2f} ms, portable/native {result['portable_over_native']:.2f}x", flush=True)
        rows.append((key, result))
    RESULTS.write_text(section(rows, args.repeats))
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
