"""The replay family of the agreement corpus (issue 30): sealtrace records audit logs of the ACAS Xu
networks on random inputs (and, in the whole corpus, the falsifier's certifying runs of its counterexamples to
the benchmark's sat instances) and of stage (b)'s models (the demo classifier and YOLOv8n on real images and
random inputs, the PP-OCRv4 text detector too, small models of single operators at their edges over several
seeds) and of stage (c)'s (all-MiniLM-L6-v2 in float32 on batches of real sentences, small models of the
transformer operators) and of the recurrent family (the Silero VAD sequence model on real speech and random
input, small Pad and LSTM models), and ``sealverify replay`` re-executes them with its own kernels (Go, from
docs/numerics.md): every log must replay bit-identical (exit 0), and a log with one step's output digest
edited (and the chain re-digested, so that the log verifies) must be caught at that step (exit 1). The same
logs go through sealtrace's own replay, whose verdict must be the same; both are timed.

``python -m tests.verifier.replay_corpus [--family all|acasxu|stage-b|stage-c|recurrent] [--networks N] [--runs R]
[--counterexamples S] [--seeds K] [--images I] [--random-images J] [--sentence-batches B] [--random-speech R]
--binary B`` runs it;
``make verifier-corpus`` runs every network, every sat instance and the stage (b), (c) and recurrent families.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from sealtrace import Session, zoo
from sealtrace.audit import audited_run, replay_log
from sealtrace.container import seal_model
from sealtrace.digest import canonical_json
from sealtrace.falsify import SearchSettings, falsify, load_vnnlib
from sealtrace.zoo import ACASXU_NETWORKS, acasxu_file
from tests.verifier.minilm_fp32 import minilm_fp32_path
from tests.verifier.recurrent_models import recurrent_op_cases
from tests.verifier.stage_b_models import ModelCase, cnn_op_cases, shape_op_cases
from tests.verifier.stage_c_models import transformer_op_cases

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


def replay_and_catch_an_edit(sealverify: Path, workdir: Path, model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                             op_type: str) -> str:
    """Seals model, records a run on feeds and replays it with sealverify, which must find it bit-identical;
    then a copy of the log with the first ``op_type`` step's digest edited, which it must name at that step.
    Returns the first replay's report."""
    container, log, npz = workdir / "model.seal", workdir / "model.jsonl", workdir / "model.npz"
    seal_model(model, container)
    audited_run(Session(str(container)), feeds, audit=log)
    np.savez(npz, **feeds)
    command = [str(sealverify), "replay", str(log), "--container", str(container), "--inputs", str(npz)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    step_line = next(i for i, r in enumerate(lines, 1) if r.get("op_type") == op_type)
    edited = workdir / "edited.jsonl"
    edit_step_digest(log, edited, step_line)
    command[2] = str(edited)
    caught = subprocess.run([*command, "--json"], capture_output=True, text=True, check=False)
    assert caught.returncode == 1, caught.stderr
    assert json.loads(caught.stdout)["failures"][0]["where"] == step_line
    return done.stdout


def _recorded(workdir: Path, name: str, container: Path, feeds: dict[str, np.ndarray]) -> ReplayCase:
    """A log of one run of the container on feeds, its inputs in an .npz (a sample does not hold them)."""
    log, inputs = workdir / f"{name}.jsonl", workdir / f"{name}.npz"
    log.unlink(missing_ok=True)
    audited_run(Session(str(container)), feeds, audit=log)
    np.savez(inputs, **feeds)
    return ReplayCase(name, log, container, inputs, None)


def _edited(workdir: Path, source: ReplayCase, pick: random.Random) -> ReplayCase:
    """A copy of source's log with a step's output digest edited, which both replays must name."""
    step_line = pick.randrange(2, len(source.log.read_text().splitlines()))  # a step, not header/footer
    edited = workdir / f"{source.name}-edited.jsonl"
    edit_step_digest(source.log, edited, step_line)
    return ReplayCase(f"{source.name}-edited-line-{step_line}", edited, source.container, source.inputs, step_line)


# Stage (b)'s real models (sealtrace.zoo keys) and the real images they run on.
STAGE_B_MODELS = ("mobilenetv3-orientation", "yolov8n", "ppocr-det", "ppocr-cls", "ppocr-rec")
STAGE_B_IMAGES = ("astronaut", "chelsea", "coffee")


def real_model_cases(workdir: Path, key: str, images: tuple[str, ...], random_runs: int, side: int | None = None,
                     seed: int = 30) -> list[ReplayCase]:
    """Logs of a real model on images (resized to its input, or to side x side, scaled to [0, 1]) and on
    random inputs of several scales, and one of them with a step's digest edited."""
    material = zoo.model(key)
    container = workdir / f"{key}.seal"
    if not container.exists():
        seal_model(onnx.load(str(zoo.locate(material.package, material.path_in_package))), container)
    ((name, example),) = material.make_inputs().items()
    shape = example.shape if side is None else (*example.shape[:2], side, side)
    rng = np.random.default_rng(seed)
    feeds = [{name: zoo.image_tensor(image, shape[2], shape[3])} for image in images]
    feeds += [{name: (rng.standard_normal(shape) * scale).astype(np.float32)}
              for scale in RANDOM_IMAGE_SCALES[:random_runs]]
    cases = [_recorded(workdir, f"{key}-{i}", container, f) for i, f in enumerate(feeds)]
    return [*cases, _edited(workdir, cases[0], random.Random(seed))]


# A function giving small models to record, on inputs drawn from a generator.
ModelFamily = Callable[[np.random.Generator], list[ModelCase]]

# Standard deviations of a real model's random inputs.
RANDOM_IMAGE_SCALES = (1.0, 30.0, 1e-3)


def operator_model_cases(workdir: Path, seeds: int, families: tuple[ModelFamily, ...] = (cnn_op_cases, shape_op_cases),
                         seed: int = 30) -> list[ReplayCase]:
    """Logs of stage (b)'s small models of single operators (by default test_replay_cnn.py's and
    stage_b_models.py's) on the inputs of each seed, and for each model one log with a step's digest edited."""
    pick = random.Random(seed)
    cases: list[ReplayCase] = []
    for s in range(seeds):
        rng = np.random.default_rng(s)
        for name, model, feeds in (case for family in families for case in family(rng)):
            container = workdir / f"{name}-{s}.seal"
            container.unlink(missing_ok=True)
            seal_model(model, container)
            cases.append(_recorded(workdir, f"{name}-{s}", container, feeds))
            if s == 0:
                cases.append(_edited(workdir, cases[-1], pick))
    return cases


# Stage (c): all-MiniLM-L6-v2 in float32 on real sentences, in batches of several sizes (each padded to its
# longest sentence, so the attention mask masks), and stage (c)'s small models of single operators.
MINILM_SENTENCES = (
    *zoo.SENTENCES,
    "A second implementation walks the trail and re-executes audit logs bit for bit.",
    "Two implementations that follow this page produce the same bits.",
    "Speed is not the goal here: agreement is.",
    "Every NaN in a float output of a step is the canonical quiet NaN.",
)
MINILM_BATCHES = ((0,), (0, 1), (2, 3, 4), (5,), (0, 1, 2, 3, 4, 5))


def stage_c_cases(workdir: Path, batches: int, seeds: int, seed: int = 30) -> tuple[list[ReplayCase], list[ReplayCase]]:
    """Logs of MiniLM in float32 on the first ``batches`` batches of real sentences (one of them with a step's
    digest edited), and of stage (c)'s small operator models over ``seeds`` seeds."""
    container = workdir / "minilm-fp32.seal"
    seal_model(onnx.load(str(minilm_fp32_path())), container)
    real = [_recorded(workdir, f"minilm-fp32-batch-{i}", container,
                      zoo.minilm_inputs(tuple(MINILM_SENTENCES[k] for k in batch)))
            for i, batch in enumerate(MINILM_BATCHES[:batches])]
    real.append(_edited(workdir, real[0], random.Random(seed)))
    return real, operator_model_cases(workdir, seeds, (transformer_op_cases,), seed)


# The recurrent family: the Silero VAD sequence model (reflect Pad, LSTM) on its real input (speech) and on
# random speech-like inputs of several scales, and the small Pad and LSTM models.
SILERO_SCALES = (0.1, 1.0, 1e-4)


def recurrent_cases(workdir: Path, random_runs: int, seeds: int, seed: int = 30) -> tuple[list[ReplayCase], list[ReplayCase]]:
    """Logs of the Silero VAD sequence model on its real input and ``random_runs`` random ones (one log with a
    step's digest edited), and of the small Pad and LSTM models over ``seeds`` seeds, all in workdir (made here)."""
    workdir.mkdir()
    material = zoo.model("silero-vad-sequence")
    container = workdir / "silero-vad-sequence.seal"
    seal_model(onnx.load(str(material.path)), container)
    real_input = material.inputs()
    rng = np.random.default_rng(seed)
    feeds = [real_input] + [{**real_input, "input": (rng.standard_normal(real_input["input"].shape) * scale)
                             .astype(np.float32)} for scale in SILERO_SCALES[:random_runs]]
    real = [_recorded(workdir, f"silero-vad-sequence-{i}", container, f) for i, f in enumerate(feeds)]
    real.append(_edited(workdir, real[0], random.Random(seed)))
    return real, operator_model_cases(workdir, seeds, (recurrent_op_cases,), seed)


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
        cases.append(_edited(workdir, cases[first], pick))
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
    parser.add_argument("--family", choices=("all", "acasxu", "stage-b", "stage-c", "recurrent"), default="all",
                        help="The ACAS Xu logs, stage (b)'s (the CNN operators, YOLOv8n and the demo classifier), stage (c)'s "
                             "(the transformer operators and MiniLM in float32), the recurrent ones (Pad, LSTM and the "
                             "Silero VAD sequence model), or all.")
    parser.add_argument("--networks", type=int, default=len(ACASXU_NETWORKS), help="The first N networks.")
    parser.add_argument("--runs", type=int, default=6, help="Logs on random inputs per network.")
    parser.add_argument("--counterexamples", type=float, default=10.0, metavar="S",
                        help="Falsify every sat instance for up to S seconds and replay the certifying runs (0: none).")
    parser.add_argument("--seeds", type=int, default=4, help="Stage (b): seeds of the small operator models.")
    parser.add_argument("--images", type=int, default=len(STAGE_B_IMAGES), help="Stage (b): real images per real model.")
    parser.add_argument("--random-images", type=int, default=len(RANDOM_IMAGE_SCALES),
                        help="Stage (b): random inputs per real model.")
    parser.add_argument("--sentence-batches", type=int, default=len(MINILM_BATCHES),
                        help="Stage (c): batches of real sentences MiniLM runs on.")
    parser.add_argument("--random-speech", type=int, default=len(SILERO_SCALES),
                        help="Recurrent: random inputs the Silero VAD sequence model runs on besides its real one.")
    parser.add_argument("--binary", type=Path, required=True, help="A built sealverify.")
    args = parser.parse_args(argv)
    failed = False
    with tempfile.TemporaryDirectory(prefix="replay-corpus-") as tmp:
        workdir = Path(tmp)
        if args.family in ("all", "acasxu"):
            cases = make_cases(workdir, list(ACASXU_NETWORKS[: args.networks]), args.runs)
            found = counterexample_cases(workdir, args.counterexamples) if args.counterexamples > 0 else []
            failed = _report(args.binary, cases + found, workdir,
                             f"replay family: {len(cases)} log(s) of {args.networks} ACAS Xu network(s) on random "
                             f"inputs and {len(found)} certified counterexample(s)") or failed
        if args.family in ("all", "stage-b"):
            stage_b = workdir / "stage-b"
            stage_b.mkdir()
            real = [case for key in STAGE_B_MODELS
                    for case in real_model_cases(stage_b, key, STAGE_B_IMAGES[: args.images], args.random_images)]
            small = operator_model_cases(stage_b, args.seeds)
            failed = _report(args.binary, real + small, stage_b,
                             f"stage (b) replay family: {len(real)} log(s) of {', '.join(STAGE_B_MODELS)} on real "
                             f"images and random inputs and {len(small)} of small operator models over {args.seeds} "
                             "seed(s)") or failed
        if args.family in ("all", "stage-c"):
            stage_c = workdir / "stage-c"
            stage_c.mkdir()
            real, small = stage_c_cases(stage_c, args.sentence_batches, args.seeds)
            failed = _report(args.binary, real + small, stage_c,
                             f"stage (c) replay family: {len(real)} log(s) of MiniLM in float32 on batches of real "
                             f"sentences and {len(small)} of small operator models over {args.seeds} seed(s)") or failed
        if args.family in ("all", "recurrent"):
            real, small = recurrent_cases(workdir / "recurrent", args.random_speech, args.seeds)
            failed = _report(args.binary, real + small, workdir / "recurrent",
                             f"recurrent replay family: {len(real)} log(s) of the Silero VAD sequence model on real "
                             f"and random input and {len(small)} of small Pad and LSTM models over {args.seeds} "
                             "seed(s)") or failed
    return 1 if failed else 0


def _report(binary: Path, cases: list[ReplayCase], workdir: Path, what: str) -> bool:
    """Replays a family's cases with both implementations and prints its problems and summary; whether any
    case disagreed."""
    problems, seconds_go, seconds_python = compare(binary, cases, workdir)
    for problem in problems:
        print(problem)
    edited = sum(case.differing_line is not None for case in cases)
    print(f"{what}, {edited} of them with an edited step; {len(problems)} disagreement(s); sealverify replay "
          f"{seconds_go:.2f} s in all, sealtrace replay {seconds_python:.2f} s")
    return bool(problems)


if __name__ == "__main__":
    sys.exit(main())
