"""Cost of a full audit: median run time with and without ``audit=`` on each real model.

Full audit means every output of every step hashed in full (no elision), sampled, summarized,
chained and written to a log file on disk. Runs with and without audit alternate in one process
(side by side: the machine's noise hits both alike); each model gets a warm-up of each first.
The ratio is the median of the per-pair ratios (audit run / the plain run beside it).

The floor: what no recorder can avoid is hashing every byte a step produces anew in a run (the
outputs of steps a backend folded into constants are the same objects every run and are hashed
once) and reducing them for the statistics. Both are measured here on one core, on the outputs of
a real run; with C cores and the plain run's own CPU time P, an audited run cannot take less than
max(P, (P + hash + stats) / C), whatever the threads do (hash: the log's digest algorithm). Per-step Python (templates, samples,
the chain) comes on top, and shares the GIL with the executor.

    python benchmarks/bench_audit.py [--repeats 11] [--models a,b] [--budget 30] [--digests sha256,blake3]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from sealtrace.audit import audited_run
from sealtrace.session import RunOptions

HERE = Path(__file__).resolve().parent
FLOOR_TARGET = 1.15  # issue 16: audited wall <= 1.15x the floor measured in the same run, either digest
PLAIN_TARGET = 1.5  # issue 16: audited/plain on the models whose floor is 1.0
EXECUTOR_TARGET_US = 2.0  # issue 16: the recorder's median time per step on the executor thread
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def wait_for_idle(limit_s: float, busy_below: float = 0.15) -> float:
    """Wait (at most ``limit_s``) until the machine's CPUs were less than ``busy_below`` busy over
    a second: the ratio needs the core the run leaves free, which other jobs on a shared machine
    may be using. Returns the busy fraction last seen (Linux /proc/stat; 0.0 elsewhere)."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:8]]
        return sum(ticks), ticks[3]

    deadline = time.monotonic() + limit_s
    busy = 0.0
    try:
        while True:
            total, idle = sample()
            time.sleep(1.0)
            total2, idle2 = sample()
            busy = 1.0 - (idle2 - idle) / max(total2 - total, 1)
            if busy < busy_below or time.monotonic() > deadline:
                return busy
    except OSError:
        return 0.0


def best_of(fn: Any, times: int = 3) -> float:
    """The least CPU time of this thread that ``fn`` took in ``times`` calls (seconds)."""
    best = float("inf")
    for _ in range(times):
        start = time.thread_time()
        fn()
        best = min(best, time.thread_time() - start)
    return best


def intrinsic(session: Any, feeds: dict[str, Any], sample: int, digests: list[str]) -> dict[str, Any]:
    """The audit work of one run, on one core: each digest over every output a run makes afresh,
    the statistics' reductions over them, and the worker's whole job (entries and records) per digest."""
    from sealtrace.audit import AuditRecorder
    from sealtrace.audit.recorder import plan_facts
    from sealtrace.audit.records import stats_of
    from sealtrace.digest import hasher

    items: list[tuple[Any, ...]] = []
    facts = plan_facts(session.plan)

    class Keep:
        def on_run_start(self, *args: Any) -> None: ...
        def on_run_end(self, *args: Any) -> None: ...
        def on_step(self, event: Any) -> None:
            positions = facts.direct_inputs.get(id(event.step))
            direct = {i: event.inputs[i] for i in positions} if positions else None
            items.append((event.path, event.step, event.outputs, direct, getattr(event, "constant", False)))

    session.run(None, feeds, RunOptions(observers=[Keep()]))
    fresh = [v for item in items if not item[4] for v in item[2] if isinstance(v, np.ndarray)]
    contiguous = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in fresh if a.dtype.kind != "O"]
    numeric = [a for a in fresh if a.dtype.kind in "biuf" and a.size]

    def hash_all(algorithm: str) -> Any:
        new = hasher(algorithm)

        def run() -> None:
            for a in contiguous:
                new(a).digest()

        return run

    def stats_all() -> None:
        for a in numeric:
            stats_of(a)

    def worker_all(algorithm: str) -> Any:
        def run() -> None:
            # What the worker thread does for the steps (the recorder's own code, on this thread).
            recorder = AuditRecorder(io.BytesIO(), sample=sample, hash_threads=0, digest=algorithm)
            recorder._facts = facts
            for item in items:
                recorder._step_line(*item)

        return run

    return {
        "fresh_mb": sum(a.nbytes for a in fresh) / 2**20,
        "constant_steps": sum(1 for item in items if item[4]),
        "stats_s": best_of(stats_all),
        "hash_s": {d: best_of(hash_all(d)) for d in digests},
        "worker_s": {d: best_of(worker_all(d)) for d in digests},
    }


def executor_cost_us(session: Any, feeds: dict[str, Any], digest: str, runs: int = 5) -> tuple[float, float]:
    """The recorder's own time per step on the executor thread: its ``on_step`` (the hand-off to the
    worker) timed call by call in audited runs, less the timer's own cost; (median, 90th percentile) in us."""
    from sealtrace.audit import AuditRecorder

    clock = time.perf_counter_ns
    samples: list[int] = []
    for _ in range(runs):
        recorder = AuditRecorder(io.BytesIO(), digest=digest)
        hand_off = recorder.on_step

        def on_step(event: Any, hand_off: Any = hand_off) -> None:
            start = clock()
            hand_off(event)
            samples.append(clock() - start)

        recorder.on_step = on_step  # type: ignore[method-assign]
        audited_run(session, feeds, audit=recorder)

    def nothing(event: Any) -> None:
        pass

    empty = []
    for _ in range(2000):
        start = clock()
        nothing(None)
        empty.append(clock() - start)
    overhead = statistics.median(empty)
    samples.sort()
    return (
        max(0.0, statistics.median(samples) - overhead) / 1e3,
        max(0.0, samples[int(len(samples) * 0.9)] - overhead) / 1e3,
    )


def measure(
    path: str, feeds: dict[str, Any], digests: list[str], repeats: int, budget_s: float, logs: Path
) -> dict[str, Any]:
    """Plain runs and audited runs of each digest in rotating order; medians, ratios and what a log holds."""
    from sealtrace import Session
    from sealtrace.audit import AuditRecorder, verify_log

    session = Session(path)
    counter = iter(range(10**6))
    last: dict[str, AuditRecorder] = {}

    def plain() -> None:
        session.run(None, feeds)

    def audited(digest: str) -> Any:
        def run() -> None:
            recorder = AuditRecorder(logs / f"run{next(counter)}-{digest}.jsonl", digest=digest)
            audited_run(session, feeds, audit=recorder)
            last[digest] = recorder

        return run

    kinds: dict[str, Any] = {"plain": plain, **{d: audited(d) for d in digests}}
    wall: dict[str, list[float]] = {k: [] for k in kinds}
    cpu: dict[str, list[float]] = {k: [] for k in kinds}

    def timed(kind: str) -> float:
        # Wall time is what the issue limits; process CPU time (all threads) shows what the audit
        # costs in total, which is what wall time approaches when no core is idle.
        start, start_cpu = time.perf_counter(), time.process_time()
        kinds[kind]()
        took = time.perf_counter() - start
        cpu[kind].append(time.process_time() - start_cpu)
        return took

    order = list(kinds)
    with np.errstate(all="ignore"):
        first = timed("plain")
        for kind in digests:
            timed(kind)  # warm-up: per-Plan facts and weight digests are made once per digest
        for kind in kinds:
            cpu[kind].clear()
        count = max(3, min(repeats, int(budget_s / max((1 + 2 * len(digests)) * first, 1e-9))))
        ratios: dict[str, list[float]] = {d: [] for d in digests}
        for i in range(count):
            # Rotate the order, so no kind always runs on caches another warmed.
            turn = order[i % len(order) :] + order[: i % len(order)]
            took = {kind: timed(kind) for kind in turn}
            for kind in turn:
                wall[kind].append(took[kind])
            for d in digests:
                ratios[d].append(took[d] / took["plain"])
        work = intrinsic(session, feeds, last[digests[0]].sample, digests)
        executor = {d: executor_cost_us(session, feeds, d) for d in digests}
    plain_cpu = statistics.median(cpu["plain"])
    plain_wall = statistics.median(wall["plain"])
    result: dict[str, Any] = {
        "fresh_mb": work["fresh_mb"],
        "constant_steps": work["constant_steps"],
        "stats_s": work["stats_s"],
        "plain_s": plain_wall,
        "runs": count,
        "digests": {},
    }
    for d in digests:
        recorder = last[d]
        assert recorder.path is not None
        verified = verify_log(recorder.path)
        # In CPU time, which other jobs on the machine do not inflate as they inflate wall time.
        floor = max(plain_cpu, (plain_cpu + work["hash_s"][d] + work["stats_s"]) / CORES)
        # Where the executor holds the GIL all along (steps of microseconds), the worker's Python
        # (all it does but hashing, which releases the GIL) cannot overlap it.
        serial = plain_cpu + max(work["worker_s"][d] - work["hash_s"][d], 0.0)
        ratio = statistics.median(ratios[d])
        result["digests"][d] = {
            "hash_s": work["hash_s"][d],
            "worker_s": work["worker_s"][d],
            "floor_ratio": floor / plain_cpu,
            "serial_ratio": serial / plain_cpu,
            "audit_s": statistics.median(wall[d]),
            "ratio": ratio,
            "to_floor": ratio / (floor / plain_cpu),
            # The fastest run of each kind: what a run costs when nothing else on the machine interferes.
            "best_ratio": min(wall[d]) / min(wall["plain"]),
            "cpu_ratio": statistics.median(cpu[d]) / max(plain_cpu, 1e-9),
            "executor_us": executor[d][0],
            "executor_p90_us": executor[d][1],
            "steps": len(verified.steps),
            "log_kb": recorder.path.stat().st_size / 1024,
            "verified": verified.ok,
        }
    return result


def verdict(floor_ratio: float, ratio: float, executor_us: float) -> str:
    """Which of the issue's targets a row meets: audited <= 1.15x the floor; audited/plain <= 1.5
    where the floor is 1.0; the executor's share <= 2 us per step."""
    missed = []
    if ratio > FLOOR_TARGET * floor_ratio:
        missed.append(f"> {FLOOR_TARGET:g}x floor")
    if floor_ratio <= 1.0 + 1e-9 and ratio > PLAIN_TARGET:
        missed.append(f"> {PLAIN_TARGET:g}x plain")
    if executor_us > EXECUTOR_TARGET_US:
        missed.append(f"executor > {EXECUTOR_TARGET_US:g} us")
    return "ok" if not missed else "over: " + ", ".join(missed)


def summary(bounds: dict[str, tuple[float, float, float]]) -> str:
    """What the floors and the GIL-serial bound say, model by model, in words (one digest)."""
    met = [k for k, (floor, _, ratio) in bounds.items() if ratio <= FLOOR_TARGET * floor]
    missed = [k for k in bounds if k not in met]
    parts = []
    if met:
        parts.append("Within 1.15x of the floor: " + ", ".join(met) + ".")
    if missed:
        parts.append(
            "Over: "
            + ", ".join(
                f"{k} ({bounds[k][2]:.2f} against a floor of {bounds[k][0]:.2f} and a GIL-serial bound of "
                f"{bounds[k][1]:.2f})"
                for k in missed
            )
            + "."
        )
    return " ".join(parts)


def file_creation_us(directory: Path, count: int = 50) -> float:
    """Median microseconds to create, write a line to and close a new file in ``directory``."""
    times = []
    for i in range(count):
        path = directory / f"probe-{i}.jsonl"
        start = time.perf_counter()
        with path.open("xb") as f:
            f.write(b"{}\n")
        times.append(time.perf_counter() - start)
        path.unlink()
    return statistics.median(times) * 1e6


NOTES = """Where the recorder's time goes (`python benchmarks/profile_steps.py MODEL --audit sha256|blake3`,
least CPU time of 30 passes over one run's outputs, this machine):
- **silero-vad** (210 steps, 134 of them folded constants; 82 fresh outputs of 0.06 MB): the executor's
  hand-off 0.8 us per step; the worker 7.2 us per step (sha256), of which digests 0.6, statistics 1.4
  (three NumPy reductions at about 1 us each, whatever the size), samples 0.45 and records, chain and
  the rest 4.7. The plain run is about 0.3 ms: the worker's 1.5 ms of Python cannot overlap a run that
  holds the GIL, so the GIL-serial ratio (4-5) is the bound here, not the hashing floor (1.00), and 1.5x
  plain would need about 0.6 us of Python per step in all.
- **minilm-int8** (385 steps, 15.5 MB made afresh): the worker 16 ms per run with sha256, of which
  digests 8.2, statistics 2.1, samples 0.4 and 5.4 the rest (records, and the 52 views a run makes,
  copied to C order to be hashed); with blake3 the digests take 4.8 ms. Executor hand-off 1.1 us per step.
- What changed in this round: samples written by orjson (byte for byte repr's text), views on the fast
  path, constant steps' records matched on their inputs' digests, no worker thread woken for a run that
  ends before the pipe is half full or 50 ms have passed (its two thread hand-offs per run took 0.1-1 ms
  of an audited ACAS Xu run of 0.8-2 ms on this busy machine), Plan-wide caches of subgraph paths.
- The machine is shared: the plain runs here are up to twice their times on an idle machine (compare the
  reference section), and a worker thread that must wait for a core makes the wall ratio exceed the CPU
  ratio. The floor and GIL-serial columns are CPU-time bounds measured in the same run.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=11, help="rounds of runs per model at most")
    parser.add_argument("--budget", type=float, default=30.0, help="seconds of timed runs per model at most")
    parser.add_argument("--models", default=None, help="comma-separated keys (default: all real models)")
    parser.add_argument("--digests", default="sha256,blake3", help="the log digest algorithms to measure, side by side")
    parser.add_argument("--out", default=str(HERE / "results" / "audit.md"))
    parser.add_argument(
        "--log-dir",
        default=str(HERE.parent / "out"),
        help="where the audit logs are written, in a temporary subdirectory (default: the project's out/)",
    )
    parser.add_argument(
        "--wait-idle", type=float, default=0.0, help="before each model, wait up to this many seconds for idle CPUs"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from machine import facts_markdown
    from material import require
    from sealtrace import zoo
    from sealtrace.hashpool import default_helpers

    wanted = args.models.split(",") if args.models else None
    digests = args.digests.split(",")
    require("bench_audit", Path(args.out), wanted)
    rows = []
    ratios: dict[str, list[float]] = {d: [] for d in digests}
    busy: dict[str, float] = {}
    bounds: dict[str, dict[str, tuple[float, float, float]]] = {d: {} for d in digests}
    executor: list[float] = []
    load_before = os.getloadavg()
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-audit-", dir=args.log_dir) as tmp:
        create_us = file_creation_us(Path(tmp))
        for key, path, feeds in zoo.benchmark_cases(wanted):
            logs = Path(tmp) / key
            logs.mkdir()
            if args.wait_idle > 0:
                busy[key] = wait_for_idle(args.wait_idle)
            try:
                r = measure(path, feeds, digests, args.repeats, args.budget, logs)
            except Exception as exc:  # a model whose kernels are missing is reported, not fatal
                print(f"{key}: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                rows.append(f"| {key} | | n/a |" + " |" * 14 + f" failed: {type(exc).__name__} |")
                continue
            for d in digests:
                m = r["digests"][d]
                ratios[d].append(m["ratio"])
                executor.append(m["executor_us"])
                bounds[d][key] = (m["floor_ratio"], m["serial_ratio"], m["ratio"])
                rows.append(
                    f"| {key} | {d} | {r['plain_s'] * 1e3:.2f} | {m['audit_s'] * 1e3:.2f} | **{m['ratio']:.2f}** | "
                    f"{m['floor_ratio']:.2f} | **{m['to_floor']:.2f}** | {m['best_ratio']:.2f} | {m['cpu_ratio']:.2f} | "
                    f"**{m['executor_us']:.2f}** ({m['executor_p90_us']:.2f}) | {m['steps']} ({r['constant_steps']}) | "
                    f"{r['fresh_mb']:.1f} | {m['hash_s'] * 1e3:.2f} | {r['stats_s'] * 1e3:.2f} | "
                    f"{m['worker_s'] * 1e3:.2f} | {m['serial_ratio']:.2f} | {m['log_kb']:.0f} | "
                    f"{verdict(m['floor_ratio'], m['ratio'], m['executor_us'])}"
                    f"{'' if m['verified'] else ' (log failed verify)'} |"
                )
                print(rows[-1], file=sys.stderr, flush=True)
    geomeans = ", ".join(
        f"{d} {float(np.exp(np.mean(np.log(v)))):.2f}" for d, v in ratios.items() if v
    )
    text = "\n".join(
        [
            "## Audit overhead",
            "",
            "Command: `python benchmarks/bench_audit.py` (part of `make bench`). Full audit: every output "
            "of every step hashed in full (no elision), sampled, summarized, chained and written to a log on "
            f"disk, with each log digest ({', '.join(digests)}) side by side: plain runs and audited runs of "
            "each digest take turns in one process, in rotating order; times are medians, the wall ratio "
            "is the median of per-round ratios (audited / the plain run of the same round), the best-run "
            "ratio compares the fastest run of each kind, the CPU ratio compares process CPU time (all "
            "threads). Targets (issue 16): audited wall <= 1.15x the floor measured in the same run, with "
            "either digest; audited/plain <= 1.5 where the floor is 1.0; the recorder's time per step on the "
            "executor thread <= 2 us (median).",
            "",
            facts_markdown(int(os.environ.get("OPENBLAS_NUM_THREADS", os.cpu_count() or 1))),
            "",
            f"Hash threads: {default_helpers()} helper(s) plus the log writer thread; {CORES} usable cores. "
            f"Logs are written under `{args.log_dir}`, where creating, writing and closing a small file took "
            f"{create_us:.0f} us (median of 50); every audited run creates one log file, which is part of its "
            "cost.",
            "",
            "| model | digest | plain ms | audited ms | wall ratio | floor ratio | audited / floor "
            "| best-run ratio | CPU ratio | executor us/step, median (p90) | steps (constant) "
            "| MB made afresh/run | digest ms, 1 core | stats ms, 1 core | worker ms, 1 core "
            "| GIL-serial ratio | log KB | targets |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Geometric mean wall ratio: {geomeans}. Median executor time per step over all rows: "
            f"{statistics.median(executor) if executor else float('nan'):.2f} us. Load average before: "
            f"{', '.join(f'{x:.1f}' for x in load_before)}; after: "
            f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs"
            + (
                f"; each model waited up to {args.wait_idle:.0f} s for idle CPUs (busy in the second "
                f"before it started: {', '.join(f'{k} {v:.0%}' for k, v in busy.items())})."
                if busy
                else "."
            ),
            "",
            "Columns: 'MB made afresh' is what the steps of one run produce anew (outputs of constant "
            "steps, which the backend folded and reports as the same arrays every run, are hashed once "
            "per backend and not counted); 'digest ms' and 'stats ms' are the time one core takes to hash "
            "them with the row's digest and to take their min/max/mean/NaN/Inf (stats_of), 'worker ms' the "
            "recorder's whole per-step work on one core (digests, stats, samples, records, chain), all "
            "measured on that run's outputs. 'floor ratio' is max(P, (P + digest + stats) / cores) / P, P "
            "the plain run's CPU time: no recorder that hashes every output can do better on this many "
            "cores; 'audited / floor' is the wall ratio over it (target <= 1.15). 'executor us/step' is "
            "the recorder's `on_step` (the hand-off to its worker) timed call by call on the executor "
            "thread in audited runs, less the timer's cost. 'GIL-serial ratio' is (P + worker - digest) / "
            "P: what the run costs when the executor holds the GIL all along (models whose steps take "
            "microseconds), so that none of the worker's Python overlaps it.",
            "",
            *(f"{d}: {summary(b)}" for d, b in bounds.items() if b),
            "",
            NOTES,
        ]
    )
    Path(args.out).parent.mkdir(exist_ok=True)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
