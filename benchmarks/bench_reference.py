"""Per-model latency and peak memory: sealtrace reference vs ONNX Runtime vs onnx.reference.

Latency: the reference backend and ONNX Runtime alternate in one child process per model and
thread count, so the shared machine's load falls on both alike (median of per-pair ratios). Peak
memory: each engine in its own child process, so the RSS high-water mark above the process's
baseline after imports belongs to that engine alone.

    python benchmarks/bench_reference.py [--repeats 10] [--models a,b]
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The machine's environment may pin OpenBLAS's kernels (OPENBLAS_CORETYPE); the "native" column
# measures with that pin removed, so OpenBLAS picks the kernels for the CPU it runs on.
CORETYPE_VARS = ("OPENBLAS_CORETYPE",)


def load(key: str) -> tuple[str, dict[str, Any]]:
    """The model path and real inputs of one benchmark case (sealtrace.zoo.benchmark_cases)."""
    from sealtrace import zoo

    cases = zoo.benchmark_cases([key])
    if not cases:
        raise SystemExit(f"{key}: no such benchmark case, or its material is not installed")
    _, path, feeds = cases[0]
    return path, feeds


def runner(kind: str, path: str, feeds: dict[str, Any], threads: int) -> Callable[[], Any]:
    """A no-argument callable running the model once on ``kind`` with ``threads`` threads."""
    if kind == "reference":
        from sealtrace import Session
        from sealtrace.backends.reference import ReferenceBackend

        session = Session(path, backend=ReferenceBackend(threads=threads))
        return lambda: session.run(None, feeds)
    if kind == "onnxruntime":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        ort_session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        return lambda: ort_session.run(None, feeds)
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(path)
    return lambda: evaluator.run(None, feeds)


def timed(run: Callable[[], Any]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def side_by_side(key: str, threads: int, repeats: int, budget_s: float) -> dict[str, float]:
    """Reference and ORT runs alternating in one process: medians and the median per-pair ratio
    (load from other jobs hits both sides of a pair alike)."""
    import numpy as np

    path, feeds = load(key)
    ours, theirs = runner("reference", path, feeds, threads), runner("onnxruntime", path, feeds, threads)
    with np.errstate(all="ignore"):
        pair = timed(ours) + timed(theirs)  # warm-up (folds constants, lazy init)
        count = max(repeats, min(20 * repeats, int(budget_s / max(pair, 1e-9))))
        ref_times, ort_times = [], []
        for _ in range(count):
            ref_times.append(timed(ours))
            ort_times.append(timed(theirs))
    return {
        "reference_s": statistics.median(ref_times),
        "onnxruntime_s": statistics.median(ort_times),
        "ratio": statistics.median(r / o for r, o in zip(ref_times, ort_times, strict=True)),
        "pairs": count,
    }


def alone(key: str, kind: str, threads: int, repeats: int, budget_s: float) -> dict[str, float]:
    """One engine in its own process: median latency and the peak RSS growth over the baseline."""
    import numpy as np
    import onnx.reference  # noqa: F401 - every engine's imports come before the baseline
    import onnxruntime  # noqa: F401
    import psutil

    import sealtrace.backends.reference  # noqa: F401

    path, feeds = load(key)
    baseline = psutil.Process().memory_info().rss
    run = runner(kind, path, feeds, threads)
    with np.errstate(all="ignore"):
        first = timed(run)
        count = repeats if first * repeats < budget_s else max(1, int(budget_s / max(first, 1e-9)))
        times = [timed(run) for _ in range(count)]
    return {"median_s": statistics.median(times), "peak_mb": max(0.0, high_water_mib() - baseline / 2**20)}


def cold(key: str, kind: str) -> dict[str, float]:
    """Cold start in this fresh process: the engine's imports first (not timed: both engines'
    import cost is the interpreter's, paid once per process), then the wall and CPU time of making
    the runnable thing (``Session``: model read, Plan build; ORT: ``InferenceSession``) and of its
    first run (the reference backend folds weight-only steps and specializes steps then; ORT did
    its graph optimizations and weight prepacking in the session)."""
    import numpy as np
    import onnx  # noqa: F401
    import onnxruntime as ort

    import sealtrace.backends.reference  # noqa: F401
    from sealtrace import Session

    path, feeds = load(key)
    wall, cpu = time.perf_counter, time.process_time
    with np.errstate(all="ignore"):
        start, start_cpu = wall(), cpu()
        if kind == "reference":
            session = Session(path)
            run: Callable[[], Any] = lambda: session.run(None, feeds)  # noqa: E731
        else:
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            ort_session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
            run = lambda: ort_session.run(None, feeds)  # noqa: E731
        made, made_cpu = wall(), cpu()
        run()
        first, first_cpu = wall(), cpu()
        run()
        second = wall()
    return {
        "create_s": made - start,
        "create_cpu_s": made_cpu - start_cpu,
        "first_s": first - made,
        "first_cpu_s": first_cpu - made_cpu,
        "cold_s": first - start,
        "cold_cpu_s": first_cpu - start_cpu,
        "warm_s": second - first,
    }


def cold_start(key: str, args: argparse.Namespace) -> dict[str, Any] | None:
    """Medians over ``args.cold_repeats`` fresh processes per engine, the engines alternating (the
    ratio is the median of per-pair ratios of cold wall time)."""
    runs: dict[str, list[dict[str, float]]] = {"reference": [], "onnxruntime": []}
    for i in range(args.cold_repeats):
        order = ("reference", "onnxruntime") if i % 2 == 0 else ("onnxruntime", "reference")
        for kind in order:
            result = run_child(["cold", key, kind], args, 1)
            if result is None:
                return None
            runs[kind].append(result)
    med = {
        kind: {field: statistics.median(r[field] for r in results) for field in results[0]}
        for kind, results in runs.items()
    }
    pairs = zip(runs["reference"], runs["onnxruntime"], strict=True)
    return {
        **med,
        "ratio": statistics.median(r["cold_s"] / o["cold_s"] for r, o in pairs),
        "cpu_ratio": med["reference"]["cold_cpu_s"] / med["onnxruntime"]["cold_cpu_s"],
    }


COLD_HEADING = "### Cold start: Plan build and first run"
COLD_NOTES = """Where the reference backend's cold start goes (fresh processes on this machine; `python
benchmarks/profile_steps.py` profiles a warm run, `python -m cProfile` on `Session(path)` and a first run
shows the rest):
- **Fixed costs, once per process.** onnx builds its operator schema registry on the first schema lookup
  or shape inference: about 20 ms (a fresh process's first `onnx.defs.get_schema`: 19.8-21 ms, the next
  0.02 ms). threadpoolctl, which pins NumPy's BLAS to one thread for the run, is imported and scans every
  shared library the process has loaded (a realpath of each of about 60): 5-15 ms, up to 50 ms while the
  file system is busy. ONNX Runtime's whole cold start on ACAS Xu is 4-7 ms and on Silero VAD (sequence)
  16 ms: below these fixed costs alone, so 2x is out of reach on the smallest models while the Plan is
  built with onnx's schemas and shape inference (a floor, not a cost of the model).
- **Plan build.** Shape inference on a copy without the large weights (1-15 ms warm), every weight as an
  array (`to_array`), one schema lookup per op type and build (onnx made a new schema object per lookup
  and parsed every attribute default per access; cached now, with name checks that no longer format a
  message per name: Silero VAD's build went from about 39 to 30 ms of CPU, 689 nodes and 1035 initializers).
- **First run.** Weight-only steps are folded once (MiniLM's int8 dequantization of every weight is most
  of its first run, as ORT's prepacking is part of its session creation) and the run's code is generated
  and compiled (1-10 ms).
"""
COLD_TARGET = 2.0


def cold_section(rows: list[list[str]], ratios: list[float], repeats: int) -> str:
    header = ["model", "reference: Session (read + Plan build) ms", "reference: first run ms", "reference cold ms",
              "ORT: InferenceSession ms", "ORT: first run ms", "ORT cold ms", "cold ref/ORT (wall)",
              "cold ref/ORT (CPU)", f"<= {COLD_TARGET:g}x"]
    return "\n".join(
        [
            COLD_HEADING,
            "",
            "What a user sees first: the wall time from a model path to the first result, in a fresh process "
            "after the imports (both engines imported before the clock starts; their import time is the "
            "interpreter's, once per process). reference: `Session(path)` (read the file, check it, build the "
            "Plan: shape inference, weights as arrays) then the first run (weight-only steps folded, steps "
            "specialized, the run's code generated); ORT: `InferenceSession(path)` at one thread (graph "
            "optimization, weight prepacking) then its first run. Medians of "
            f"{repeats} fresh processes per engine, the engines alternating; the wall ratio is the median of "
            f"per-pair ratios, the CPU ratio compares the medians of process CPU time. Target: <= {COLD_TARGET:g}x.",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
            *("| " + " | ".join(c) + " |" for c in rows),
            "",
            f"Geometric mean cold ref/ORT (wall): {geomean(ratios)}.",
            "",
            COLD_NOTES,
        ]
    )


def cold_rows(keys: list[str], args: argparse.Namespace) -> tuple[list[list[str]], list[float]]:
    rows, ratios = [], []
    for key in keys:
        result = cold_start(key, args)
        if result is None:
            rows.append([key] + ["n/a"] * 9)
            continue
        ref, ort = result["reference"], result["onnxruntime"]
        ratios.append(result["ratio"])
        rows.append(
            [
                key,
                f"{ref['create_s'] * 1e3:.1f}",
                f"{ref['first_s'] * 1e3:.1f}",
                f"{ref['cold_s'] * 1e3:.1f}",
                f"{ort['create_s'] * 1e3:.1f}",
                f"{ort['first_s'] * 1e3:.1f}",
                f"{ort['cold_s'] * 1e3:.1f}",
                f"**{result['ratio']:.2f}x**",
                f"{result['cpu_ratio']:.2f}x",
                "ok" if result["ratio"] <= COLD_TARGET else "over",
            ]
        )
        print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    return rows, ratios


def high_water_mib() -> float:
    """This process image's peak RSS (VmHWM; ru_maxrss would carry the parent's peak over exec)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def run_child(job: list[str], args: argparse.Namespace, threads: int, native: bool = False) -> dict[str, float] | None:
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    if native:
        for var in CORETYPE_VARS:
            env.pop(var, None)
    cmd = [sys.executable, __file__, "--child", *job, "--repeats", str(args.repeats), "--budget", str(args.budget)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        sys.stderr.write(f"{job} failed: {done.stderr.strip().splitlines()[-1:]}\n")
        return None
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


NOTES = """What bounds the latency ratio (mechanisms measured on this machine; the table gives the figures):
- **GEMM kernels.** With the environment's OPENBLAS_CORETYPE=Haswell, NumPy's sgemm does about 105 GFLOPS on
  one core, ONNX Runtime's MLAS about 205 (a 512x1152 by 1152x1600 product: 17.8 ms vs 9.3 ms; 9.1 ms for
  NumPy with the pin removed). Conv-heavy models, whose time is im2col + GEMM, sit near 2-2.8x here and
  1.4-2.2x with native kernels (last latency column).
- **Depthwise convolutions.** NumPy has no fused multiply-accumulate over shifted windows; the fastest
  formulation measured (each channel's taps gathered into a column block, one BLAS gemv per channel) takes
  0.24-0.28 ms for a 5x5 depthwise convolution of 256x14x14 or 512x7x7, where MLAS takes 0.02-0.04 ms.
  Per-tap accumulation, channels-last accumulation and einsum over a window view were all slower.
  MobileNetV3 and PP-OCR cls spend most of their time there.
- **Steps of microseconds.** Each step costs about 0.35 us of the executor's own Python (measured by
  replacing every kernel with one that returns its saved result: 8-16 us of ACAS Xu's ~31 us for 22 steps,
  55 us of Silero VAD's ~240 us for 76 steps and 7 If branches) plus 0.4-1 us for the NumPy calls of even
  the smallest kernel (a [1, 50] Add, Relu or MatMul), against ONNX Runtime's whole run of 7-80 us on these
  models. Weight-only steps (Constant nodes, int8 dequantization) are folded once per Plan, and steps whose
  shapes, axes, bounds or statistics are constants are specialized once (Reshape, Squeeze, Unsqueeze, Slice,
  Pad, Gather, Pow, BatchNormalization), which leaves the NumPy calls that depend on the input.
- **onnx.reference** is itself a per-node Python interpreter: on the models of many small steps it is only a
  few times slower than the reference backend, on conv-heavy models one to two orders of magnitude (table).
  Measured at 1 BLAS thread in its own process; an earlier version of this benchmark left it at 2 BLAS
  threads, whose spinning threads made it look up to 10x slower on the Silero models (11.9x geomean then).
- **2 threads** is slower than 1 for the reference backend on this shared 2-core machine: OpenBLAS's worker
  threads spin and collapse when the cores are shared, which is why `ReferenceBackend` defaults to 1 thread.
"""


def geomean(values: list[float]) -> str:
    return f"{math.exp(sum(map(math.log, values)) / len(values)):.2f}x" if values else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--budget", type=float, default=20.0, help="seconds of timed runs per measurement at most")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--models", default=None)
    parser.add_argument("--cold-repeats", type=int, default=5, help="fresh processes per engine for cold start")
    parser.add_argument(
        "--cold-only",
        action="store_true",
        help="measure only cold start and replace that section of results/reference.md (the rest is kept)",
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        what, key, *rest = args.child
        if what == "cold":
            print(json.dumps(cold(key, rest[0])))
        elif what == "pair":
            print(json.dumps(side_by_side(key, int(rest[0]), args.repeats, args.budget)))
        else:
            print(json.dumps(alone(key, rest[0], int(rest[1]), args.repeats, args.budget)))
        return
    sys.path.insert(0, str(HERE))
    from machine import facts_markdown
    from material import require
    from sealtrace import zoo

    keys = args.models.split(",") if args.models else [m.key for m in zoo.MODELS] + ["acasxu"]
    require("bench_reference", HERE / "results" / "reference.md", keys)
    out = HERE / "results" / "reference.md"
    if args.cold_only:
        kept = out.read_text().split(COLD_HEADING)[0].rstrip("\n") if out.exists() else ""
        section = cold_section(*cold_rows(keys, args), args.cold_repeats)
        out.write_text((kept + "\n\n" if kept else "") + section)
        print(section)
        return
    rows = []
    ratios: dict[str, list[float]] = {"1": [], "2": [], "native": [], "onnx.reference": [], "memory": []}
    for key in keys:
        one = run_child(["pair", key, "1"], args, 1)
        two = run_child(["pair", key, "2"], args, 2)
        native = run_child(["pair", key, "1"], args, 1, native=True)
        oref = run_child(["alone", key, "onnx.reference", "1"], args, 1)
        ref_mem = run_child(["alone", key, "reference", "1"], args, 1)
        ort_mem = run_child(["alone", key, "onnxruntime", "1"], args, 1)
        cells = [key]
        cells += [f"{one['reference_s'] * 1e3:.2f}", f"{one['onnxruntime_s'] * 1e3:.2f}"] if one else ["n/a"] * 2
        for name, result in (("1", one), ("2", two), ("native", native)):
            if result:
                ratios[name].append(result["ratio"])
                cells.append(f"{result['ratio']:.2f}x")
            else:
                cells.append("n/a")
        if oref and ref_mem:
            # Both alone in their own process at 1 thread: like against like.
            ratios["onnx.reference"].append(oref["median_s"] / ref_mem["median_s"])
            cells += [f"{oref['median_s'] * 1e3:.1f}", f"{ratios['onnx.reference'][-1]:.1f}x"]
        else:
            cells += ["n/a", "n/a (failed or timed out)"]
        cells += [f"{m['peak_mb']:.1f}" if m else "n/a" for m in (ref_mem, ort_mem)]
        if ref_mem and ort_mem and ort_mem["peak_mb"] > 0:
            ratios["memory"].append(ref_mem["peak_mb"] / ort_mem["peak_mb"])
            cells.append(f"{ratios['memory'][-1]:.2f}x")
        else:
            cells.append("n/a")
        rows.append(cells)
        print(" | ".join(cells), file=sys.stderr)

    coretype = os.environ.get("OPENBLAS_CORETYPE")
    header = ["model", "reference 1T ms", "ORT 1T ms", "ref/ORT 1T", "ref/ORT 2T", "ref/ORT 1T native BLAS",
              "onnx.reference ms", "onnx.reference/ref", "ref peak MB", "ORT peak MB", "ref/ORT memory"]
    lines = [
        "## Reference interpreter latency and memory",
        "",
        "Command: `python benchmarks/bench_reference.py` (part of `make bench`). Latency: the reference "
        "backend and ONNX Runtime alternate run by run in one process per model and thread count "
        f"(at least {args.repeats} pairs after a warm-up); the milliseconds are medians, the ratio is the "
        "median of per-pair ratios, so load from other jobs falls on both sides alike. 1T/2T: the "
        "reference backend's BLAS threads (`ReferenceBackend(threads=N)`, with its default portable numerics, "
        "docs/numerics.md; the default thread count is the environment's, all cores) and ORT's "
        "intra_op_num_threads. 'native BLAS': the same 1-thread pair with OPENBLAS_CORETYPE removed "
        f"from the environment (here it is {coretype!r}), so OpenBLAS picks the kernels for this CPU. "
        "onnx.reference is `onnx.reference.ReferenceEvaluator` at 1 BLAS thread, in its own process, compared "
        "with the reference backend alone in its own process. Peak memory is "
        "the RSS high-water mark above the process baseline after imports (model load + runs), each "
        "engine in its own process at 1 thread.",
        "",
        facts_markdown(1),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(c) + " |" for c in rows),
        "",
        f"Geometric means: reference/ORT latency {geomean(ratios['1'])} at 1 thread, {geomean(ratios['2'])} "
        f"at 2 threads, {geomean(ratios['native'])} at 1 thread with native BLAS kernels (target <= 2x); "
        f"onnx.reference/reference {geomean(ratios['onnx.reference'])} (target >= 10x); reference/ORT "
        f"peak memory {geomean(ratios['memory'])} (target <= 2x).",
        "",
        NOTES,
        cold_section(*cold_rows(keys, args), args.cold_repeats),
    ]
    text = "\n".join(lines)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "reference.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
