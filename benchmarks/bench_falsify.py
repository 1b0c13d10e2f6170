"""Falsification on the ACAS Xu benchmark of VNN-COMP 2021 (186 instances, 47 of them sat).

Runs every instance of ``acasxu_instances.csv`` with a per-instance budget (default 10 s instead of
VNN-COMP's 116 s: sat instances are found in about a second, and for the unsat ones a falsifier can
only run out of time, so a longer budget only costs time), checks each answer against
VNN-COMP 2021's answers (``SAT_INSTANCES`` below), and writes a Markdown report: sat found (of 47), certified, wrong (sat where the
truth is unsat; must be 0), median and max time to a certified counterexample, the machine, and the
comparison with DNNF's published VNN-COMP 2021 figures (41 of 47, median 2.19 s wall).

Times are in-process wall seconds per instance, from reading the files to the certified answer:
parsing the property, sealing the network (cached by content; the first instance of each network
pays ~0.05 s), verifying the container, converting it to torch, searching and the audited reference
run. The interpreter start-up and imports (once per benchmark, several seconds) are not included;
DNNF's 2.19 s includes its start-up.

    python benchmarks/bench_falsify.py [--timeout 10] [--seed 0] [--limit N] [--only-sat]
        [--out benchmarks/results/falsify.md]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# VNN-COMP 2021's results for ACAS Xu: the 47 instances its tools found violated (sat), as
# (network "I_J", property); the other 139 of acasxu_instances.csv are unsat (six on which one tool
# disagreed with the majority are taken by the majority).
_PROP2_SAFE = {"1_1", "1_7", "1_8", "1_9", "3_3", "4_2"}
SAT_INSTANCES = frozenset(
    {(f"{i}_{j}", "prop_2") for i in range(1, 6) for j in range(1, 10) if f"{i}_{j}" not in _PROP2_SAFE}
    | {(net, prop) for net in ("1_7", "1_8", "1_9") for prop in ("prop_3", "prop_4")}
    | {("1_9", "prop_7"), ("2_9", "prop_8")}
)


def expected_answer(network: str, vnnlib: str) -> str:
    """'sat' or 'unsat' for an instance named by its files (ACASXU_run2a_I_J_batch_2000.onnx, prop_K.vnnlib)."""
    net = network.removeprefix("ACASXU_run2a_").removesuffix("_batch_2000.onnx")
    return "sat" if (net, vnnlib.removesuffix(".vnnlib")) in SAT_INSTANCES else "unsat"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=10.0, help="per-instance budget in seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=None, help="only the first N instances")
    parser.add_argument("--only-sat", action="store_true", help="only the 47 instances whose truth is sat")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "falsify.md")
    args = parser.parse_args(argv)

    from material import skip
    from sealtrace import zoo

    try:
        instances_csv = zoo.acasxu_instances()  # every network and property, or MaterialMissingError
    except zoo.MaterialMissingError as exc:
        skip("bench_falsify", args.out, {"acasxu": str(exc)})
    from sealtrace.falsify import SearchSettings
    from sealtrace.falsify.instances import (
        Instance,
        machine_line,
        markdown_table,
        read_instances,
        run_instances,
        summarize,
        write_csv,
    )

    instances = [
        Instance(i.network, i.vnnlib, i.timeout_s, expected_answer(i.network.name, i.vnnlib.name))
        for i in read_instances(instances_csv)
    ]
    if args.only_sat:
        instances = [i for i in instances if i.expected == "sat"]
    instances = instances[: args.limit]

    def progress(result: object) -> None:
        r = result  # an InstanceResult
        print(f"{r.instance.name:45s} {r.result:8s} {r.time_s:7.2f} s certified={r.certified}"  # type: ignore[attr-defined]
              f" expected={r.instance.expected}", flush=True)  # type: ignore[attr-defined]

    load_before = os.getloadavg()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as cache:
        results = run_instances(instances, timeout_s=args.timeout, settings=SearchSettings(seed=args.seed),
                                cache_dir=cache, on_result=progress)
    wall = time.perf_counter() - started
    load_after = os.getloadavg()
    summary = summarize(results)
    missed = [r.instance.name for r in results if r.instance.expected == "sat" and r.result != "sat"]
    machine = machine_line()

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f} s"

    report = [
        "## Falsification: ACAS Xu (VNN-COMP 2021)",
        "",
        f"`python benchmarks/bench_falsify.py --timeout {args.timeout:g} --seed {args.seed}"
        + (" --only-sat" if args.only_sat else "") + (f" --limit {args.limit}" if args.limit else "") + "`",
        "",
        f"- machine: {machine}; torch search on 1 thread; load average (1 min) {load_before[0]:.1f} at the "
        f"start, {load_after[0]:.1f} at the end (a shared machine)",
        f"- budget: {args.timeout:g} s per instance (VNN-COMP allows 116 s); total wall {wall:.0f} s",
        "- time: in-process wall seconds per instance, from reading the files to the certified answer "
        "(parse, seal (cached), verify, convert, search, audited reference run); interpreter start-up excluded",
        "",
        "| | sealtrace falsify | DNNF (VNN-COMP 2021) |",
        "|---|---|---|",
        f"| sat found | {summary.sat} of {summary.expected_sat} | 41 of 47 |",
        f"| certified by an audited reference run | {summary.certified} | - |",
        f"| wrong (sat on unsat ground truth) | {summary.wrong} | 0 |",
        f"| median time to a certified counterexample | {fmt(summary.median_sat_s)} | 2.19 s (with start-up) |",
        f"| max time to a certified counterexample | {fmt(summary.max_sat_s)} | - |",
        f"| errors | {summary.errors} | - |",
        "",
        f"Missed sat instances: {', '.join(missed) if missed else 'none'}.",
        "",
        markdown_table(results),
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(report), encoding="utf-8")
    write_csv(results, args.out.with_suffix(".csv"))
    print(json.dumps({**summary.to_json(), "wall_s": round(wall, 1), "missed": missed, "machine": machine}, indent=2))
    print(f"wrote {args.out} and {args.out.with_suffix('.csv')}")
    return 0 if summary.wrong == 0 and summary.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
