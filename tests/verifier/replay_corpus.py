"""The replay family of the agreement corpus (issue 30): sealtrace records audit logs of the ACAS Xu
networks on random inputs (and, in the whole corpus, the falsifier's certifying runs of its counterexamples to
the benchmark's sat instances), and ``sealverify replay`` re-executes them with its own kernels (Go, from
docs/numerics.md): every log must replay bit-identical (exit 0), and a log with one step's output digest
edited (and the chain re-digested, so that the log verifies) must be caught at that step (exit 1). The same
logs go through sealtrace's own replay, whose verdict must be the same; both are timed.

``python -m tests.verifier.replay_corpus [--networks N] [--runs R] [--counterexamples S] [--binary B]`` runs
it; ``make verifier-corpus`` runs every network and every sat instance.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sealtrace import Session
from sealtrace.audit import audited_run, replay_log
from sealtrace.container import seal_model
from sealtrace.digest import canonical_json
from sealtrace.falsify import SearchSettings, falsify, load_vnnlib
from sealtrace.zoo import ACASXU_NETWORKS, acasxu_file

# Standard deviations of the random inputs, run after run: the properties' box ([-0.33, 0.68] at most per
# normalized input) and far beyond it both ways, where sums cancel or grow large.
INPUT_SCALES = (2.0, 1e-4, 0.5, 1e4, 2.0, 1e-30)


@dataclass
class ReplayCase:
    """One log to replay: the model, the inputs file (or None: the log's samples hold them), and the
    line of the step that must be named (None: bit-identical)."""

    name: str
    log: Path
    container: Path
    inputs: Path | None
    differing_line: int | None

    def args(self) -> list[str]:
        args = ["replay", str(self.log), "--container", str(self.container), "--json"]
        return args + (["--inputs", str(self.inputs)] if self.inputs else [])


def _rechain(records: list[dict]) -> list[dict]:
    """Re-digest a log's chain (sha256, v1) after an edit, so that it verifies and only replay can tell."""
    prev = "0" * 64
    for record in records:
        field = "chain_head" if record["type"] == "footer" else "digest"
        record["prev"] = prev
        record.pop(field, None)
        record[field] = prev = hashlib.sha256(canonical_json(record)).hexdigest()
    return records


def edit_step_digest(log: Path, out: Path, step_line: int) -> None:
    """Write ``log`` with the first output digest of the step on ``step_line`` replaced, everywhere the
    log names that value (later steps' inputs, the footer), and the chain re-digested."""
    records = [json.loads(line) for line in log.read_text().splitlines()]
    step = records[step_line - 1]
    old = step["outputs"][0]["digest"]
    new = hashlib.sha256(b"not the computed value" + old.encode()).hexdigest()
    name = step["outputs"][0]["name"]
    step["outputs"][0]["digest"] = new
    for record in records[step_line:]:
        for value in record.get("inputs", []) + record.get("outputs", []):
            if value.get("name") == name and value.get("digest") == old:
                value["digest"] = new
    out.write_text("".join(canonical_json(r).decode() + "\n" for r in _rechain(records)))


def _sealed(workdir: Path, network: str) -> Path:
    """The network's container (sealing is deterministic: the container a falsifier's log names)."""
    container = workdir / f"{Path(network).stem}.seal"
    if not container.exists():
        seal_model(acasxu_file(network), container)
    return container


def counterexample_cases(workdir: Path, timeout_s: float) -> list[ReplayCase]:
    """The certifying run of each counterexample the falsifier finds to a sat instance of the benchmark
    (ground_truth.csv) within ``timeout_s``; instances it does not falsify in time are left out."""
    cases = []
    with acasxu_file("ground_truth.csv").open() as rows:
        instances = [(row["onnx"], row["vnnlib"]) for row in csv.DictReader(rows) if row["expected"] == "sat"]
    for network, vnnlib in instances:
        log = workdir / f"{Path(network).stem}-{Path(vnnlib).stem}-cex.jsonl"
        log.unlink(missing_ok=True)
        result = falsify(acasxu_file(network), load_vnnlib(acasxu_file(vnnlib)),
                         SearchSettings(timeout_s=timeout_s, seed=0), audit=log)
        if result.status == "sat":
            cases.append(ReplayCase(log.stem, log, _sealed(workdir, network), None, None))
    return cases


def make_cases(workdir: Path, networks: list[str], runs: int, seed: int = 30) -> list[ReplayCase]:
    """For each network: ``runs`` logs on random inputs (every third with its input in an .npz, recorded
    with a sample too short to hold it; every sixth a BLAKE3 log), and one log with a step's digest edited
    (of the first run, a SHA-256 log)."""
    rng = np.random.default_rng(seed)
    pick = random.Random(seed)
    cases: list[ReplayCase] = []
    workdir.mkdir(parents=True, exist_ok=True)
    for network in networks:
        stem = Path(network).stem
        container = _sealed(workdir, network)
        session = Session(str(container))
        first = len(cases)
        for run in range(runs):
            x = (rng.standard_normal((1, 1, 1, 5)) * INPUT_SCALES[run % len(INPUT_SCALES)]).astype(np.float32)
            log = workdir / f"{stem}-{run}.jsonl"
            log.unlink(missing_ok=True)
            inputs = None
            if run % 3 == 2:
                inputs = workdir / f"{stem}-{run}.npz"
                np.savez(inputs, input=x)
            # Every sixth log hashes with BLAKE3 (a v2 log), the rest with SHA-256.
            audited_run(session, {"input": x}, audit=log, sample=2 if inputs else 8,
                        digest="blake3" if run % 6 == 1 else "sha256")
            cases.append(ReplayCase(f"{stem}-{run}", log, container, inputs, None))
        edited = workdir / f"{stem}-edited.jsonl"
        source = cases[first]
        step_line = pick.randrange(2, len(source.log.read_text().splitlines()))  # a step, not header/footer
        edit_step_digest(source.log, edited, step_line)
        cases.append(ReplayCase(f"{stem}-edited-line-{step_line}", edited, container, source.inputs, step_line))
    return cases


@dataclass
class Outcome:
    case: ReplayCase
    exit_code: int
    where: int | None
    sealtrace_identical: bool
    sealtrace_line: int | None  # the line of the first step sealtrace's replay finds different

    def problem(self) -> str | None:
        want_exit = 0 if self.case.differing_line is None else 1
        if self.exit_code != want_exit or self.where != self.case.differing_line:
            return f"{self.case.name}: sealverify exit {self.exit_code} at {self.where}, expected {want_exit} at {self.case.differing_line}"
        if self.sealtrace_identical != (want_exit == 0) or self.sealtrace_line != self.case.differing_line:
            return (f"{self.case.name}: sealtrace's replay says identical={self.sealtrace_identical} at line "
                    f"{self.sealtrace_line}, expected line {self.case.differing_line}")
        return None


def run_sealverify(binary: Path, cases: list[ReplayCase], workdir: Path) -> list[tuple[int, int | None]]:
    """Every case in one ``sealverify batch`` process: (exit code, the line its first failure names)."""
    batch = workdir / "replay-cases.jsonl"
    batch.write_text("".join(json.dumps({"id": i, "args": c.args()}) + "\n" for i, c in enumerate(cases)))
    done = subprocess.run([str(binary), "batch", str(batch)], capture_output=True, text=True, check=False)
    verdicts = {}
    for line in done.stdout.splitlines():
        entry = json.loads(line)
        verdicts[entry["id"]] = entry["verdict"]
    results = []
    for i in range(len(cases)):
        verdict = verdicts[i]
        failures = verdict["failures"]
        results.append((verdict["exit_code"], failures[0]["where"] if failures else None))
    return results


def compare(binary: Path, cases: list[ReplayCase], workdir: Path) -> tuple[list[str], float, float]:
    """Replay every case with both implementations: the problems, and each one's seconds in all."""
    start = time.perf_counter()
    theirs = run_sealverify(binary, cases, workdir)
    seconds_go = time.perf_counter() - start
    start = time.perf_counter()
    ours = []
    for case in cases:
        inputs = dict(np.load(case.inputs)) if case.inputs else None
        report = replay_log(case.log, case.container, inputs)
        ours.append((report.identical, report.first_difference.line if report.first_difference else None))
    seconds_python = time.perf_counter() - start
    problems = []
    for case, (exit_code, where), (identical, line) in zip(cases, theirs, ours, strict=True):
        problem = Outcome(case, exit_code, where, identical, line).problem()
        if problem:
            problems.append(problem)
    return problems, seconds_go, seconds_python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--networks", type=int, default=len(ACASXU_NETWORKS), help="The first N networks.")
    parser.add_argument("--runs", type=int, default=6, help="Logs on random inputs per network.")
    parser.add_argument("--counterexamples", type=float, default=10.0, metavar="S",
                        help="Falsify every sat instance for up to S seconds and replay the certifying runs (0: none).")
    parser.add_argument("--binary", type=Path, required=True, help="A built sealverify.")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="replay-corpus-") as tmp:
        cases = make_cases(Path(tmp), list(ACASXU_NETWORKS[: args.networks]), args.runs)
        found = counterexample_cases(Path(tmp), args.counterexamples) if args.counterexamples > 0 else []
        problems, seconds_go, seconds_python = compare(args.binary, cases + found, Path(tmp))
    for problem in problems:
        print(problem)
    print(f"replay family: {len(cases)} log(s) of {args.networks} ACAS Xu network(s) on random inputs and "
          f"{len(found)} certified counterexample(s), {len(problems)} disagreement(s); "
          f"sealverify replay {seconds_go:.2f} s in all, sealtrace replay {seconds_python:.2f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
