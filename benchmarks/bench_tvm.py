"""TVM engines: compile time and latency next to ONNX Runtime and the reference backend, on the real models.

For each real model (and one ACAS Xu network), in one process:
- compile time: ``sealtrace.engines.compile_tvm`` on the sealed model (container verified, TVM's Relax
  ONNX frontend, ``tvm.compile`` for target llvm, ``export_library``, binding written), every dynamic
  axis fixed to the real input's size; next to it what the other two spend before a first run: ONNX
  Runtime's ``InferenceSession`` with all graph optimizations, and the reference backend's Plan
  build plus its first run (which prepares its Program: folded weights, generated step functions);
- latency: the median of up to ``--repeats`` interleaved rounds (after one warm-up run each) of
  ONNX Runtime (``session.run``), the reference backend and the TVM engine loaded through its
  binding (``TvmBackend.run``: the checks are done once at load), without observers.
Threads: every runtime is held to ``--threads`` (default 1): ORT's ``intra_op_num_threads`` (and one
inter-op thread), the reference backend's BLAS threads, TVM's thread pool (``runtime.config_threadpool``).
Each engine's graph outputs are compared with the reference backend's (``check_parity``, default
tolerance): the script fails if one disagrees. Models TVM cannot take get a line saying why (the
error, as `sealtrace compile` prints it).

    python benchmarks/bench_tvm.py [--threads 1] [--repeats 15] [--budget 15] [--models a,b]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _dims(plan: Any, feeds: dict[str, Any]) -> dict[str, int]:
    """--dim sizes fixing every dynamic input axis to the real input's size."""
    import numpy as np

    return {
        f"{name}:{axis}": int(size)
        for name, value in feeds.items()
        for axis, (size, declared) in enumerate(zip(np.shape(value), plan.inputs_by_name[name].shape or (), strict=False))
        if not (isinstance(declared, int) and declared > 0)
    }


def measure(path: str, feeds: dict[str, Any], threads: int, repeats: int, budget_s: float, folder: Path) -> dict[str, Any]:
    """Compile times (s) and median latencies (s) of the three runtimes, or why TVM could not take the model."""
    import onnxruntime as ort

    from sealtrace import Session
    from sealtrace.backends.reference import ReferenceBackend
    from sealtrace.backends.tvm import TvmBackend
    from sealtrace.container import seal_model
    from sealtrace.engines.tvm import compile_tvm
    from sealtrace.errors import SealtraceError
    from sealtrace.plan import build_plan
    from sealtrace.plan.feeds import check_feeds

    seal = folder / "model.seal"
    seal_model(path, seal)
    found: dict[str, Any] = {}
    plan_only = Session(seal, backend="onnxruntime").plan
    library = folder / "model.so"
    start = time.perf_counter()
    try:
        compile_tvm(seal, library, dims=_dims(plan_only, feeds))
    except SealtraceError as exc:
        found["error"] = f"{type(exc).__name__}: {exc}"
        return found
    found["compile tvm"] = time.perf_counter() - start

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    start = time.perf_counter()
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    found["compile onnxruntime"] = time.perf_counter() - start

    reference = ReferenceBackend(threads=threads)
    start = time.perf_counter()
    plan = build_plan(path)
    checked = check_feeds(plan, feeds)
    reference.run(plan, checked)  # prepares the Program (weights folded, step functions generated)
    found["compile reference"] = time.perf_counter() - start

    tvm_backend = TvmBackend(threads=threads)
    tvm_plan, _engine = tvm_backend.load(library, seal)
    tvm_feeds = check_feeds(tvm_plan, feeds)
    calls: dict[str, Callable[[], Any]] = {
        "onnxruntime": lambda: session.run(None, feeds),
        "reference": lambda: reference.run(plan, checked),
        "tvm": lambda: tvm_backend.run(tvm_plan, tvm_feeds),
    }
    from sealtrace.parity import check_parity

    agreement = check_parity(tvm_plan, feeds, [ReferenceBackend(threads=threads), tvm_backend])
    found["agrees"] = agreement.passed
    found["max abs"] = max((d.max_abs for d in agreement.graph_outputs), default=0.0)
    for call in calls.values():
        call()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in calls}
    start = time.perf_counter()
    for _ in range(repeats):
        for name, call in calls.items():
            t0 = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s and len(times["tvm"]) >= 3:
            break
    found.update({name: statistics.median(values) for name, values in times.items()})
    found["rounds"] = len(times["tvm"])
    return found


def table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    lines = [
        "| model | TVM compile (s) | ORT session (s) | reference Plan + first run (s) | ORT (ms) | reference (ms) "
        "| TVM engine (ms) | TVM / ORT | rounds | TVM vs reference: max abs diff of graph outputs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    failed = []
    for key, m in rows:
        if "error" in m:
            failed.append((key, m["error"]))
            continue
        ort_ms, ref_ms, tvm_ms = (1e3 * m[k] for k in ("onnxruntime", "reference", "tvm"))
        lines.append(
            f"| {key} | {m['compile tvm']:.1f} | {m['compile onnxruntime']:.2f} | {m['compile reference']:.2f} "
            f"| {ort_ms:.2f} | {ref_ms:.2f} | {tvm_ms:.2f} | {tvm_ms / ort_ms:.2f}x | {m['rounds']} "
            f"| {m['max abs']:.2g} ({'within' if m['agrees'] else 'OUTSIDE'} parity tolerance) |"
        )
    if failed:
        lines += ["", "Not compiled (TVM's Relax ONNX frontend cannot take them; docs/tvm.md):", ""]
        lines += [f"- {key}: {error}" for key, error in failed]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="threads for every runtime")
    parser.add_argument("--repeats", type=int, default=15, help="rounds at most")
    parser.add_argument("--budget", type=float, default=15.0, help="seconds of timed rounds per model at most")
    parser.add_argument("--models", default=None, help="comma-separated keys (default: all real models + acasxu)")
    parser.add_argument("--out", default=str(HERE / "results" / "tvm.md"))
    args = parser.parse_args()
    from material import require
    from sealtrace import zoo

    wanted = args.models.split(",") if args.models else None
    require("bench_tvm", Path(args.out), wanted)
    try:
        import tvm
    except ImportError:
        raise SystemExit("bench_tvm: Apache TVM is not installed (pip install 'sealtrace[tvm]')") from None
    rows = []
    for key, path, feeds in zoo.benchmark_cases(wanted):
        with tempfile.TemporaryDirectory(prefix="bench-tvm-") as tmp:
            result = measure(path, feeds, args.threads, args.repeats, args.budget, Path(tmp))
        rows.append((key, result))
        print(f"{key}: {result}", file=sys.stderr, flush=True)
    from machine import machine_facts

    facts = machine_facts()
    text = (
        "## TVM engines: compile time and latency\n\n"
        f"`python benchmarks/bench_tvm.py --threads {args.threads}`: one run; latency is the median of up to "
        f"{args.repeats} interleaved rounds after a warm-up, no observers. Threads: {args.threads} for every runtime "
        "(ORT intra_op_num_threads, one inter-op thread; the reference backend's BLAS threads; TVM's thread pool "
        "via runtime.config_threadpool). TVM: target llvm, every dynamic axis fixed to the real input's size; "
        "its compile time covers container verification, import, `tvm.compile`, `export_library` and the binding. "
        "ORT: all graph optimizations, CPU.\n"
        f"Machine: {facts.get('cpu')} ({facts.get('cores')} cores), onnxruntime {facts.get('onnxruntime')}, "
        f"numpy {facts.get('numpy')}, TVM {tvm.__version__}.\n\n" + table(rows) + "\n"
    )
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    disagree = [key for key, m in rows if "error" not in m and not m["agrees"]]
    if disagree:
        raise SystemExit(f"bench_tvm: TVM engines disagree with the reference on {', '.join(disagree)}")


if __name__ == "__main__":
    main()
