"""Replay time: `sealverify replay` (Go, issue 30) against sealtrace's replay of the same logs, side by side.

    python benchmarks/bench_replay.py [--repeat 3]

Each log is recorded by sealtrace on a real input (portable numerics), then replayed by both: sealverify
as a process (`sealverify replay LOG --container M --inputs X.npz`), sealtrace both as a process
(`sealtrace replay`, Python's start and imports included) and in a running Python (`replay_log`). The ACAS
Xu family is replayed in bulk, every log through one `sealverify batch` process and one Python loop.
Medians of --repeat interleaved runs; writes results/replay.md. Speed is not the goal of the second
implementation, agreement is; every replay here must be bit-identical or the benchmark fails.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.verifier.replay_corpus import compare, make_cases, real_model_cases, stage_c_cases

from bench_verifier import build_sealverify, go_version, timed  # benchmarks/ is a folder of scripts
from material import require
from sealtrace.audit import replay_log
from sealtrace.zoo import ACASXU_NETWORKS

RESULTS = Path(__file__).resolve().parent / "results" / "replay.md"
# The real models of the replay stages (sealtrace.zoo keys), each on one real image; and MiniLM in float32,
# exported from the int8 model's weights (tests/verifier/minilm_fp32.py).
MODELS = ("mobilenetv3-orientation", "yolov8n", "ppocr-det")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    require("bench_replay.py", RESULTS, [*MODELS, "minilm-int8", "acasxu"])
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        workdir = Path(tmp)
        binary = build_sealverify(workdir)
        cases = {key: real_model_cases(workdir, key, ("astronaut",), 0)[0] for key in MODELS}
        minilm = workdir / "minilm"
        minilm.mkdir()
        cases["minilm-fp32 (all-MiniLM-L6-v2 in float32), two real sentences"] = stage_c_cases(minilm, 2, 0)[0][1]
        for name, case in cases.items():
            steps = len(case.log.read_text().splitlines()) - 2
            go, cli, in_process = [], [], []
            for _ in range(args.repeat):
                go.append(timed([str(binary), *case.args()])["seconds"])
                cli.append(timed([sys.executable, "-m", "sealtrace", "replay", str(case.log), "--container",
                                  str(case.container), "--inputs", str(case.inputs)])["seconds"])  # fmt: skip
                start = time.perf_counter()
                report = replay_log(case.log, case.container, dict(_load(case.inputs)))
                in_process.append(time.perf_counter() - start)
                if not report.identical:
                    raise SystemExit(f"bench_replay.py: {name}: sealtrace's replay is not bit-identical")
            label = f"{name}, one real image" if name in MODELS else name
            rows.append((f"{label} ({steps} steps)", statistics.median(go), statistics.median(cli),
                         statistics.median(in_process)))  # fmt: skip
            print(rows[-1], flush=True)
        acasxu = workdir / "acasxu"
        acasxu.mkdir()
        bulk_cases = make_cases(acasxu, list(ACASXU_NETWORKS), runs=2)
        go_bulk, py_bulk = [], []
        for _ in range(args.repeat):
            problems, seconds_go, seconds_python = compare(binary, bulk_cases, workdir)
            if problems:
                raise SystemExit("bench_replay.py: the implementations disagree:\n" + "\n".join(problems))
            go_bulk.append(seconds_go)
            py_bulk.append(seconds_python)
    bulk = (statistics.median(go_bulk), statistics.median(py_bulk))
    lines = [
        "## `sealverify replay` against sealtrace's replay (issue 30)",
        "",
        f"Command: `python benchmarks/bench_replay.py --repeat {args.repeat}`. {platform.machine()}, "
        f"{os.cpu_count()} CPU(s) (shared: other jobs ran beside it), {go_version()}, Python "
        f"{platform.python_version()}; load average {os.getloadavg()[0]:.1f} at the end. Medians of {args.repeat} "
        "interleaved runs; every replay bit-identical (the benchmark fails otherwise).",
        "",
        "| log | `sealverify replay` (a process) | `sealtrace replay` (a process) | `replay_log` (in Python) | sealverify / replay_log |",
        "|---|---:|---:|---:|---:|",
        *(f"| {name} | {go:.2f} s | {cli:.2f} s | {py:.2f} s | {go / py:.2f} |" for name, go, cli, py in rows),
        f"| ACAS Xu: {len(bulk_cases)} logs of the 45 networks (one edited in each), in bulk: one `sealverify batch`, "
        f"one Python loop | {bulk[0]:.2f} s | - | {bulk[1]:.2f} s | {bulk[0] / bulk[1]:.2f} |",
        "",
        "Speed is not the goal of the second implementation, agreement is. sealverify checks the log and the",
        "container, reads every weight and re-executes every step in Go's scalar code: sums of products by a",
        "float64 error bound with a `math/big` fallback, transcendental functions with a high-precision fallback",
        "of their own, no SIMD. sealtrace's reference runs the same specification vectorised in NumPy.",
        "",
    ]
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("\n".join(lines))
    print("\n".join(lines))


def _load(path: Path | None) -> dict:
    import numpy as np

    return dict(np.load(path)) if path is not None else {}


if __name__ == "__main__":
    main()
