"""Per-op parity, reference vs ONNX Runtime, on every real model: what it finds and what it costs.

For each model: steps compared, steps over tolerance, the worst step and its error; the parity run's
wall time and peak memory against their floors, measured in the same run (see FLOORS): time against
two reference runs plus ORT's per-op run, memory against the two backends' plain peaks added.

Time: one process per model runs the plain reference Session, the plain ORT InferenceSession and
parity round-robin (ROUNDS rounds, medians), so the ratio is measured side by side under the same
load. Like the plain runs, parity reuses what is prepared once: the Plan and the two backends (the
reference's folded weight-only steps, ORT's per-op segment sessions). That setup (the first parity
call after building the Plan) is reported in its own column.
Memory: peak RSS growth over the process's size before loading the model, one fresh process per
mode (peak RSS is per process); the parity process's peak includes building the Plan and the
sessions and three parity runs.

    python benchmarks/bench_parity.py [--models a,b] [--baseline OLD_SRC]

``--baseline OLD_SRC``: also measure parity with the sealtrace package under OLD_SRC (e.g. an earlier
commit's ``src`` from ``git archive``), in the same run and alternating with the current code, for a
before/after table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROUNDS = 15
FLOORS = """What the floors are and what is above them:
- **Time.** Parity does, besides comparing: the reference run; ORT in per-op mode (graph optimizations off, so
  no Conv+BatchNorm fusion and no NCHWc layouts, and every value copied out: several times ORT's optimized run,
  column "ORT per-op alone"); and a local re-run of every step on the reference kernel with ORT's inputs (about
  one more reference run; skipped only where the inputs are bit-identical). Time floor = 2 x reference + ORT
  per-op, before any metric. On top come two comparisons per step (output, local), each over every element:
  max/mean abs, max rel, exact max ULP, cosine and the tolerance test take, for values that differ, three dot
  products, a-b and its absolute value, the quotient by b, two or three max/min reductions, the float64 sum
  for the mean and the raw integer difference with two reductions for the ULP (the tolerance test only where
  |a-b| > atol); one pass for values that are bit-identical (found once: a
  later step reading them does not compare them again to skip its re-run), plus about ten microseconds of
  Python per compared value, which dominates models of many small steps (ppocr-cls, silero).
- **Memory.** Parity holds both backends at once: the reference's Plan, folded weights and live set, and ORT's
  sessions (per-op: one per segment of 16 steps not counting Constants, one shared arena, the Plan's weight
  arrays read in place rather than copied) and live set. Memory floor = reference plain peak + ORT plain peak.
  It is met where parity pays a start-up cost once that both plain peaks count (silero-vad), or where ORT
  per-op needs much less than ORT optimized (minilm-int8: ORT's optimizer folds the int8 weights to float32 and
  prepacks them, per-op mode does not). Above the floor: ORT per-op mode itself (measured alone: ppocr-det
  85 MB against ORT optimized's 52 MB (99 MB before the changes below), of which about 20 MB are its 21
  segment sessions, about 1 MB each of ORT's own state per session, and the rest its values: no memory
  planning across the exposed values, each its own buffer, a segment's worth at a time); the Plan, which
  both plain peaks count (each builds its own) and parity builds once, is what keeps most models under
  their floor; and the comparison's temporaries (|a-b| and |a-b|/b in one buffer, reused for the ULP
  difference: twice the value compared up to 262,144 elements, one chunk of 2 MiB above).
"""
CHANGES = """What changed for issue 16 (memory; the time levers are unchanged, see below):
- ORT per-op sessions let go of the serialized model that onnxruntime's Python wrapper keeps for the life of a
  session (a second copy of every embedded weight and repeated Constant, per segment).
- A segment reads the earlier Constants it needs as initializers over the Plan's arrays of their values, instead
  of a repeated Constant node (a copy per segment session); ORT turns Constant nodes into initializers itself, so
  the values are bit-identical to the one-piece per-op session (tested).
- Values of more than 262,144 elements are compared a chunk at a time: a comparison's temporaries are one chunk's
  (2 MiB of float32) instead of twice the value.
- On models of large weights (256 MB and more; none of these ten) segment sessions are built per run and dropped
  after their segment: see the next section.
The JSON reports of the ten models are byte-identical to the previous code's on seven; on mobilenetv3-orientation,
ppocr-det and ppocr-rec, 34 cosines of values compared in chunks differ in their last bits (the chunked cosine is
taken in float64: 0.99999998 where the float32 one rounded to 1.0); summaries, statuses, verdicts, worst steps and
every other figure are identical.

Why the memory target is not met on three models (silero-vad-ifless, magika, ppocr-cls, 1.2-1.4x): their
plain peaks are small (13-23 MB), and ORT per-op mode's own state is not: about 0.7-1 MB per segment session
(ppocr-cls: 17 sessions, 13 MB, as much as ORT's whole optimized peak) and its values without memory planning
(magika: ORT per-op alone 47 MB against ORT optimized's 23 MB). Larger segments (fewer sessions) were tried and
are worse (ppocr-cls 43 MB, magika 66 MB with 64 steps per segment: more values alive at once); no arena and
plain malloc is worse too.

Why the time target is not met: above the floor is the comparison itself, not ORT or the reference run. Each
compared value costs about 10-15 us of NumPy calls and Python (two comparisons per step: output and local),
which dominates models of many small values (ppocr-cls: 374 of its 566 values have 1,000 elements or fewer), and
about twelve passes over memory for the large ones. Levers left: comparing the small values of a segment in one
batch (one set of NumPy calls for many values, segment reductions per value), and a compiled one-pass metric
kernel (tried in session 4 with numba: faster, but 146 MB of resident memory for the compiler and runtime).
"""
THREADS = 2  # ORT intra-op threads (plain and per-op); the reference backend keeps its default (1 BLAS thread)


def _prepare(key: str, mode: str) -> tuple[Any, dict[str, Any]]:
    """The run function for one mode, with everything it reuses built."""
    import onnxruntime as ort

    from sealtrace import Session, build_plan, zoo
    from sealtrace.backends.onnxruntime import OnnxRuntimeBackend
    from sealtrace.backends.reference import ReferenceBackend
    from sealtrace.parity import check_parity

    real = zoo.model(key)
    feeds = real.inputs()
    info: dict[str, Any] = {}
    if mode == "reference":
        session = Session(real.path)
        return (lambda: session.run(None, feeds)), info
    if mode == "per-op":  # ORT per-op alone (segments, every value an output): part of parity's floor
        per_op_plan = build_plan(real.path)
        per_op = OnnxRuntimeBackend(threads=THREADS, per_op=True)
        return (lambda: sum(1 for _ in per_op.stream(per_op_plan, feeds))), info
    if mode == "onnxruntime":
        options = ort.SessionOptions()
        options.intra_op_num_threads = THREADS
        options.log_severity_level = 3
        ort_session = ort.InferenceSession(str(real.path), options, providers=["CPUExecutionProvider"])
        return (lambda: ort_session.run(None, feeds)), info
    start = time.perf_counter()
    plan = build_plan(real.path)
    backends = [ReferenceBackend(), OnnxRuntimeBackend(threads=THREADS, per_op=True)]

    def run() -> None:
        report = check_parity(plan, feeds, backends)
        worst = max((s for s in report.steps if s.worst is not None), key=lambda s: s.worst.max_abs)  # type: ignore[union-attr]
        info.update(
            steps=len(report.steps),
            compared=sum(1 for s in report.steps if s.status != "not-compared"),
            exceeding=len(report.exceeding),
            worst_step=f"{worst.name} ({worst.op_type})",
            worst_abs=worst.worst.max_abs if worst.worst else 0.0,
            worst_rel=worst.worst.max_rel if worst.worst else 0.0,
        )

    run()
    info["setup_s"] = time.perf_counter() - start
    return run, info


def measure_time(key: str) -> dict[str, Any]:
    import statistics

    runs = {mode: _prepare(key, mode) for mode in ("reference", "onnxruntime", "per-op", "parity")}
    times: dict[str, list[float]] = {mode: [] for mode in runs}
    for run, _ in runs.values():
        run()  # warm
    for _ in range(ROUNDS):
        for mode, (run, _) in runs.items():
            start = time.perf_counter()
            run()
            times[mode].append(time.perf_counter() - start)
    result = {f"{mode.replace('-', '_')}_s": statistics.median(t) for mode, t in times.items()}
    result.update(runs["parity"][1])
    return result


def peak_rss() -> int:
    """This process's peak RSS in bytes: VmHWM, as ru_maxrss starts at the spawning process's size."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


def measure_memory(key: str, mode: str) -> dict[str, Any]:
    import onnxruntime  # noqa: F401  (libraries loaded before the baseline: they are no backend's memory)
    import psutil

    import sealtrace.backends.onnxruntime
    import sealtrace.parity  # noqa: F401
    from sealtrace import zoo

    zoo.model(key).inputs()  # nor are the inputs
    baseline = psutil.Process().memory_info().rss
    run, _ = _prepare(key, mode)
    for _ in range(3):
        run()
    return {"peak_mb": max(0, peak_rss() - baseline) / 2**20}


def run_child(*args: str, source: str | None = None) -> dict[str, Any] | None:
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), OPENBLAS_NUM_THREADS=str(THREADS))
    if source is not None:
        env["PYTHONPATH"] = source
    done = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True,
                          env=env, timeout=1800, check=False)
    if done.returncode != 0:
        sys.stderr.write(f"{' '.join(args)} failed: {done.stderr.strip()[-800:]}\n")
        return None
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default=None)
    parser.add_argument("--child", nargs="+")
    parser.add_argument("--baseline", default=None, help="an earlier sealtrace source tree to compare with")
    args = parser.parse_args()
    if args.child:
        key, what = args.child[0], args.child[1]
        print(json.dumps(measure_time(key) if what == "time" else measure_memory(key, what)))
        return
    sys.path.insert(0, str(HERE))
    from machine import facts_markdown
    from material import require
    from sealtrace import zoo

    keys = args.models.split(",") if args.models else [m.key for m in zoo.MODELS]
    require("bench_parity", HERE / "results" / "parity.md", keys)
    load_before = os.getloadavg()
    rows = []
    before_rows = []
    met = {"time": [], "memory": []}
    for key in keys:
        old: dict[str, Any] = {}
        if args.baseline:  # the earlier code first, then the current: alternating per model
            old = {"time": run_child(key, "time", source=args.baseline),
                   "parity": run_child(key, "parity", source=args.baseline)}
        t = run_child(key, "time")
        mem = {mode: run_child(key, mode) for mode in ("reference", "onnxruntime", "parity")}
        if t is None or any(m is None for m in mem.values()):
            rows.append(f"| {key} | failed | | | | | | | |")
            continue
        ref, ort_, par = t["reference_s"], t["onnxruntime_s"], t["parity_s"]
        peaks = {mode: float(m["peak_mb"]) for mode, m in mem.items() if m is not None}
        # Floors, measured: the reference run twice (its own run and the local re-runs) plus ORT per-op;
        # and holding both backends at once (the two plain peaks added).
        time_floor = 2 * ref + t["per_op_s"]
        memory_floor = peaks["reference"] + peaks["onnxruntime"]
        cost = par / time_floor
        memory = peaks["parity"] / max(memory_floor, 1e-3)
        met["time"].append(f"{key} {'yes' if cost <= 1.3 else 'no'} ({cost:.2f}x)")
        met["memory"].append(f"{key} {'yes' if memory <= 1.2 else 'no'} ({memory:.2f}x)")
        rows.append(
            f"| {key} | {t['steps']} ({t['compared']} compared) | {t['exceeding']} | {t['worst_step']} | "
            f"{t['worst_abs']:.3g} / {t['worst_rel']:.3g} | {ref * 1000:.1f} + {ort_ * 1000:.1f} ms | "
            f"{t['per_op_s'] * 1000:.1f} ms | {par * 1000:.1f} ms / {time_floor * 1000:.1f} ms = **{cost:.2f}x** | "
            f"{t['setup_s']:.2f} s | {peaks['reference']:.0f} / {peaks['onnxruntime']:.0f} MB | "
            f"{peaks['parity']:.0f} MB / {memory_floor:.0f} MB = **{memory:.2f}x** |"
        )
        print(rows[-1], file=sys.stderr)
        if old.get("time") and old.get("parity"):
            old_t, old_peak = old["time"], float(old["parity"]["peak_mb"])
            old_floor = 2 * old_t["reference_s"] + old_t["per_op_s"]
            before_rows.append(
                f"| {key} | {old_t['parity_s'] * 1000:.1f} ms = {old_t['parity_s'] / old_floor:.2f}x -> "
                f"{par * 1000:.1f} ms = {cost:.2f}x | {old_peak:.0f} MB = {old_peak / max(memory_floor, 1e-3):.2f}x -> "
                f"{peaks['parity']:.0f} MB = {memory:.2f}x | {old_t['worst_step']} -> {t['worst_step']} |"
            )
    text = "\n".join([
        "## Per-op parity: reference vs ONNX Runtime on the real models",
        "",
        "Command: `python benchmarks/bench_parity.py`. Default tolerance atol 1e-4, rtol 1e-3; real inputs from "
        f"`sealtrace.zoo`. Time: plain reference Session, plain ORT session (optimized, {THREADS} threads) and "
        f"parity run round-robin in one process per model, medians of {ROUNDS}; parity reuses its Plan and "
        "backends as the plain runs reuse their sessions (first call, incl. building the Plan and ORT's segment "
        "sessions: the setup column); it includes ORT per-op, the reference run, local re-runs and all metrics. "
        "Memory: peak RSS growth in a fresh process per mode (parity's includes its setup and three runs), "
        "over the larger plain peak.",
        "",
        facts_markdown(THREADS),
        f"- load average: {load_before[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (the machine is "
        "shared: time figures are only as steady as the load; memory figures do not depend on it)",
        "",
        "| model | steps | over tolerance | worst step | worst max abs / max rel | plain ref + ORT | ORT per-op "
        "alone | parity time / time floor | parity setup | plain peak ref / ORT | parity peak / memory floor |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Targets (issue 16), against the floors measured in the same run: parity time <= 1.3x its floor: "
        + ", ".join(met["time"]) + ". Parity peak memory <= 1.2x its floor: " + ", ".join(met["memory"]) + ".",
        "",
        *([
            f"Before/after (`--baseline`: the code before this change, {args.baseline}; its figures measured in the "
            "same run, alternating with the current code model by model, over the current run's memory floor and "
            "its own run's time floor):",
            "",
            "| model | parity time, before -> after (x of floor) | parity peak, before -> after (x of memory floor) "
            "| worst step, before -> after |",
            "|---|---|---|---|",
            *before_rows,
            "",
        ] if before_rows else []),
        CHANGES,
        FLOORS,
    ])
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "parity.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
