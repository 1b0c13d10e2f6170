"""`make portability`: the golden run digests (tests/portability/golden.json) reproduced on arm64, with
Debian's arm64 Python and NumPy under qemu-user emulation.

Portable numerics (docs/numerics.md) define every result as a function of the inputs only, so a run's
digest must not depend on the CPU. golden.json records, for each real model of ``sealtrace.zoo`` on its
real input and for each of the 45 ACAS Xu networks on one point of property 1's box
(``zoo.acasxu_inputs(prop=1, count=1, seed=ACASXU_INPUT_SEED)``), the input digests, the output digests,
the step count and the run digest. This script runs exactly those 55 cases in an arm64 Debian root
filesystem (``benchmarks/portability_arm64_root.sh`` builds it once into .testmodels/arm64-root) with
``chroot ROOT qemu-aarch64-static /usr/bin/python3``, from one snapshot of ``src/`` and of the golden
digests' own code (tests/portability/runs.py: each case's record is its ``golden_record(model, feeds)``),
and compares each record with golden.json. An input whose digest is not golden.json's is reported as
such (the material, not the numerics). For a case whose run differs from golden.json, the same case
also runs natively on this x86-64 machine and the two runs' per-step digests name the first step that
differs on arm64 (op type and step path: the kernel that still depends on the CPU).

    python benchmarks/portability_arm64.py                      # the 55 golden cases
    python benchmarks/portability_arm64.py --models magika,acasxu-5_9 --jobs 1
    python benchmarks/portability_arm64.py --onnx 1.23.2        # PyPI's onnx wheel in the root
    python benchmarks/portability_arm64.py --numerics native    # arm64 against x86-64, no golden digests

--models takes golden case names (a zoo key such as magika, or acasxu/ACASXU_run2a_A_B_batch_2000.onnx),
acasxu-A_B for the latter, or acasxu for all 45 networks. With --numerics native the golden digests do
not apply (they are portable numerics' bits): every case runs on both sides and arm64's run digest is
compared with x86-64's, showing which kernels depend on the CPU when NumPy and the BLAS round as the host
does.

Exit status: 0 every case matches golden.json (native: every arm64 digest equals x86-64's), 1 a case
differs or a run failed, 2 a prerequisite is missing (not Debian, not root, no network to build the root,
real material not installed, unknown case). Results of the full set go to
benchmarks/results/portability_arm64.md (a subset's, native numerics' or --onnx's only with --output).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_ROOT = REPO / ".testmodels" / "arm64-root"
ROOT_SCRIPT = HERE / "portability_arm64_root.sh"
RESULTS = HERE / "results" / "portability_arm64.md"
GOLDEN = REPO / "tests" / "portability" / "golden.json"
# The golden digests' code, copied beside the snapshot of src/ so that both sides digest as golden.json did.
RECIPE_FILES = ("tests/__init__.py", "tests/portability/__init__.py", "tests/portability/runs.py")
# Inside the root: the snapshots of src/ and of RECIPE_FILES, this script, the models and their inputs.
WORK_IN_ROOT = "/tmp/sealtrace-portability"
QEMU_IN_ROOT = "/usr/bin/qemu-aarch64-static"
PREREQUISITE = 2
ACASXU_PREFIX = "acasxu/"
# Rough arm64 seconds of a case under emulation (an earlier run on 2 busy cores): the emulated processes
# take the cases largest first, so that no long case starts last. ACAS Xu networks: about 0.5 s each.
ARM64_SECONDS = {
    "ppocr-det": 80,
    "ppocr-rec": 75,
    "yolov8n": 50,
    "minilm-int8": 40,
    "mobilenetv3-orientation": 25,
    "ppocr-cls": 17,
    "magika": 16,
    "silero-vad": 10,
    "silero-vad-ifless": 7,
    "silero-vad-sequence": 6,
}


class PrerequisiteError(Exception):
    """A prerequisite is missing; the message says which and how to get it (exit 2)."""


# --- the worker: runs in both interpreters (stdlib, NumPy, sealtrace and tests/portability/runs.py) ----


def run_case(model: str, feeds_path: str, numerics: str) -> dict[str, Any]:
    """One case's record (golden.json's fields) and its per-step digests [op_type, path, digests].

    Portable numerics: ``tests.portability.runs.golden_record``, the very code that wrote golden.json;
    its ``run_digest`` result is kept on the way (for the per-step digests) without running twice.
    Native numerics: the same recipe with the reference backend's native numerics."""
    import numpy as np
    from tests.portability import runs

    with np.load(feeds_path) as npz:
        feeds = {name: npz[name] for name in npz.files}
    start = time.perf_counter()
    if numerics == "portable":
        kept: list[dict[str, Any]] = []
        recipe = runs.run_digest

        def keep(model: Any, feeds: Any) -> dict[str, Any]:
            run = recipe(model, feeds)
            kept.append(run)
            return run

        runs.run_digest = keep  # golden_record looks run_digest up in its module when called
        try:
            record = runs.golden_record(model, feeds)
        finally:
            runs.run_digest = recipe
        steps = kept[0]["steps"]
    else:
        record, steps = native_record(model, feeds)
    record["step_digests"] = [list(s) for s in steps]
    record["seconds"] = time.perf_counter() - start
    return record


def native_record(model: str, feeds: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """``golden_record``'s fields with native numerics: run_digest's recipe, another backend."""
    import numpy as np
    from tests.portability.runs import _StepDigests

    from sealtrace import Session
    from sealtrace.audit.records import value_digest
    from sealtrace.backends.reference import ReferenceBackend

    session = Session(model, backend=ReferenceBackend(numerics="native"))
    observer = _StepDigests()
    with np.errstate(all="ignore"):
        outputs = session.backend.run(session.plan, dict(feeds), [observer])
    h = hashlib.sha256()
    for _, _, digests in observer.steps:
        for digest in digests:
            h.update((digest or "-").encode())
    output_digests = {name: value_digest(value) for name, value in outputs.items()}
    for name in sorted(output_digests):
        h.update(f"{name}={output_digests[name]}".encode())
    record = {
        "inputs": {name: value_digest(np.asarray(value)) for name, value in sorted(feeds.items())},
        "outputs": output_digests,
        "steps": len(observer.steps),
        "digest": h.hexdigest(),
    }
    return record, observer.steps


def environment() -> dict[str, Any]:
    """The interpreter's facts for the results: machine, Python, NumPy (and its BLAS), onnx, gmpy2."""
    import numpy as np

    facts: dict[str, Any] = {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    for name in ("onnx", "gmpy2", "ml_dtypes"):
        try:
            module = __import__(name)
            facts[name] = str(module.__version__)
            facts[f"{name}_file"] = str(module.__file__)
        except Exception as exc:
            facts[name] = f"n/a ({type(exc).__name__})"
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        facts["blas"] = f"{blas.get('name')} {blas.get('version')}"
    except Exception:
        facts["blas"] = "unknown"
    try:  # NumPy's SIMD kernels: the baseline it was built for, and the dispatched ones this CPU has
        from numpy._core import _multiarray_umath as umath

        found = [f for f in umath.__cpu_dispatch__ if umath.__cpu_features__.get(f)]
        facts["simd"] = " ".join(umath.__cpu_baseline__) + (f" + {' '.join(found)}" if found else "")
    except Exception:
        facts["simd"] = "unknown"
    os_release = Path("/etc/os-release")
    if os_release.is_file():
        fields = dict(line.split("=", 1) for line in os_release.read_text().splitlines() if "=" in line)
        facts["os"] = fields.get("PRETTY_NAME", "").strip('"')
    debian = Path("/etc/debian_version")
    if debian.is_file():
        facts["debian_version"] = debian.read_text().strip()
    return facts


def worker(manifest_path: str, out_dir: str) -> int:
    """Run the manifest's cases, each by whichever worker claims it first (OUT/<id>.claim), writing
    OUT/<id>.json as each finishes; the manifest lists the longest cases first."""
    start = time.perf_counter()
    # Imported before the cases, so that the import time (long under emulation) is reported apart.
    import tests.portability.runs

    import sealtrace.session
    from sealtrace.ops.numerics import SPEC_VERSION

    out = Path(out_dir)
    base = Path(manifest_path).parent
    facts = environment()
    facts["import_s"] = time.perf_counter() - start
    facts["sealtrace"] = str(Path(sealtrace.session.__file__).parent)
    facts["recipe"] = str(tests.portability.runs.__file__)
    facts["spec"] = SPEC_VERSION
    (out / f"env-{os.getpid()}.json").write_text(json.dumps(facts))
    for case in json.loads(Path(manifest_path).read_text()):
        try:
            os.close(os.open(out / f"{case['id']}.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue  # another worker runs it
        try:
            result = run_case(str(base / case["model"]), str(base / case["feeds"]), case["numerics"])
        except Exception as exc:
            result = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
        result["case"] = case["case"]
        partial = out / f"{case['id']}.json.partial"
        partial.write_text(json.dumps(result))
        partial.replace(out / f"{case['id']}.json")
        took = f"{result['seconds']:.1f} s" if "digest" in result else result["error"]
        print(f"  [{facts['machine']}] {case['case']}: {took}", file=sys.stderr, flush=True)
    return 0


# --- the driver ---------------------------------------------------------------------------------


def check_host() -> None:
    """PrerequisiteError unless this is a Debian-like x86-64 machine and we are root."""
    if not Path("/etc/debian_version").is_file() or shutil.which("apt-get") is None:
        raise PrerequisiteError(
            "not Debian or Ubuntu: the arm64 root is built from Debian's archive with apt and debootstrap"
        )
    if platform.machine() not in ("x86_64", "AMD64"):
        raise PrerequisiteError(
            f"this check compares x86-64 with emulated arm64; this machine is {platform.machine()}"
        )
    if os.geteuid() != 0:
        raise PrerequisiteError(
            "needs root: the arm64 root is built with debootstrap and entered with chroot"
        )


def ensure_root(root: Path, onnx: str) -> None:
    """Build the arm64 root (once; the script returns at once when it is there and current)."""
    env = {**os.environ, "SEALTRACE_ARM64_ONNX": onnx, "PYTHON": sys.executable}
    status = subprocess.run(["sh", str(ROOT_SCRIPT), str(root)], env=env, check=False).returncode
    if status == PREREQUISITE:
        raise PrerequisiteError("the arm64 root cannot be built (see the line above)")
    if status != 0:
        raise SystemExit(f"portability_arm64.py: building the arm64 root failed (exit {status})")


def load_golden() -> dict[str, Any]:
    if not GOLDEN.is_file():
        raise PrerequisiteError(
            f"{GOLDEN.relative_to(REPO)} not found (python -m tests.portability.runs --write-golden)"
        )
    return json.loads(GOLDEN.read_text())


def display_order(names: list[str]) -> list[str]:
    """zoo.MODELS's order, then the ACAS Xu networks sorted, then anything else sorted."""
    from sealtrace import zoo

    rank = {m.key: i for i, m in enumerate(zoo.MODELS)}
    return sorted(names, key=lambda n: (n.startswith(ACASXU_PREFIX), rank.get(n, len(rank)), n))


def select(wanted: str | None, golden: dict[str, Any]) -> list[str]:
    """The golden case names ``--models`` picks (all by default); PrerequisiteError for an unknown one."""
    known = list(golden)
    if not wanted:
        return display_order(known)
    chosen: list[str] = []
    for token in (t.strip() for t in wanted.split(",")):
        if not token:
            continue
        network = re.fullmatch(r"acasxu-(\d)_(\d)", token)
        if token == "acasxu":
            names = [n for n in known if n.startswith(ACASXU_PREFIX)]
        elif network:
            names = [f"{ACASXU_PREFIX}ACASXU_run2a_{network[1]}_{network[2]}_batch_2000.onnx"]
        else:
            names = [token]
        for name in names:
            if name not in golden:
                models = ", ".join(n for n in display_order(known) if not n.startswith(ACASXU_PREFIX))
                raise PrerequisiteError(
                    f"no golden case {token!r}; known: {models}, acasxu (all 45), acasxu-A_B or "
                    f"{ACASXU_PREFIX}ACASXU_run2a_A_B_batch_2000.onnx (A 1-5, B 1-9)"
                )
            if name not in chosen:
                chosen.append(name)
    return display_order(chosen)


def load_cases(names: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
    """(case, model path, feeds) of each golden case, made as tests/portability/test_golden.py makes
    them; PrerequisiteError naming every case whose material is absent."""
    from tests.portability.runs import ACASXU_INPUT_SEED

    from sealtrace import zoo

    cases, missing = [], []
    point: dict[str, Any] | None = None
    for name in names:
        try:
            if name.startswith(ACASXU_PREFIX):
                if point is None:
                    (point,) = zoo.acasxu_inputs(prop=1, count=1, seed=ACASXU_INPUT_SEED)
                cases.append((name, str(zoo.acasxu_file(name.removeprefix(ACASXU_PREFIX))), point))
            else:
                model = zoo.model(name)
                cases.append((name, str(model.path), model.inputs()))
        except (zoo.MaterialMissingError, ImportError) as exc:
            missing.append(f"{name} ({str(exc).splitlines()[0]})")
    if missing:
        shown = "; ".join(missing[:3]) + (f"; and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise PrerequisiteError(f"real material not installed (make material): {shown}")
    return cases


def file_id(name: str) -> str:
    return name.replace("/", "--")


def sync_tree(src: Path, dst: Path, files: list[Path] | None = None) -> str:
    """Make ``dst`` a copy of ``src``'s files (or of ``files``, relative to src; no __pycache__), copying
    only what changed (mtimes kept, so the bytecode compiled under emulation stays valid); the sha256
    over the copied files."""
    digest = hashlib.sha256()
    wanted = set()
    paths = [src / f for f in files] if files is not None else sorted(src.rglob("*"))
    for path in paths:
        if "__pycache__" in path.parts or not path.is_file():
            continue
        rel = path.relative_to(src)
        wanted.add(rel)
        data = path.read_bytes()
        digest.update(str(rel).encode() + b"\0" + hashlib.sha256(data).digest())
        target = dst / rel
        if not target.is_file() or target.read_bytes() != data:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            shutil.copystat(path, target)
    if dst.is_dir():
        for path in sorted(dst.rglob("*"), reverse=True):
            if "__pycache__" not in path.parts and path.is_file() and path.relative_to(dst) not in wanted:
                path.unlink()
    return digest.hexdigest()


def prepare(root: Path, cases: list[tuple[str, str, dict[str, Any]]]) -> tuple[Path, str]:
    """Write the snapshots of src/ and of the golden digests' code, this script, the models and their
    inputs into the root; the sha256 of the snapshot of src/."""
    import numpy as np

    work = root / WORK_IN_ROOT.lstrip("/")
    source_digest = sync_tree(REPO / "src", work / "src")
    sync_tree(REPO / "tests", work / "tests", [Path(f).relative_to("tests") for f in RECIPE_FILES])
    shutil.copyfile(Path(__file__), work / "worker.py")
    for stale in (*work.glob("out-*"), *work.glob("manifest*.json")):  # an earlier run's
        if stale.is_dir():
            shutil.rmtree(stale)
        else:
            stale.unlink()
    shutil.rmtree(work / "cases", ignore_errors=True)
    (work / "cases").mkdir(parents=True)
    for name, model, feeds in cases:
        target = work / "cases" / f"{file_id(name)}.onnx"
        shutil.copyfile(model, target)
        np.savez(work / "cases" / f"{file_id(name)}.npz", **feeds)
    return work, source_digest


def write_manifest(work: Path, side: str, names: list[str], numerics: str) -> Path:
    """The cases one side runs, longest first (ARM64_SECONDS)."""
    ordered = sorted(names, key=lambda n: -ARM64_SECONDS.get(n, 0.5))
    manifest = [
        {
            "case": n,
            "id": file_id(n),
            "model": f"cases/{file_id(n)}.onnx",
            "feeds": f"cases/{file_id(n)}.npz",
            "numerics": numerics,
        }
        for n in ordered
    ]
    path = work / f"manifest-{side}.json"
    path.write_text(json.dumps(manifest, indent=1))
    return path


def run_side(commands: list[list[str]], env: dict[str, str], timeout: float) -> tuple[float, list[str]]:
    """Run the workers in parallel; wall seconds and the failures (exit status or timeout)."""
    start = time.perf_counter()
    procs = [subprocess.Popen(c, env=env, stdin=subprocess.DEVNULL) for c in commands]
    failures = []
    for proc in procs:
        left = max(1.0, timeout - (time.perf_counter() - start))
        try:
            status = proc.wait(timeout=left)
            if status != 0:
                failures.append(f"worker exited {status}")
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            failures.append(f"worker killed after {timeout:.0f} s (--timeout)")
    return time.perf_counter() - start, failures


def read_results(out: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Each case's result (by case name), and the interpreter's facts."""
    results = {}
    for p in out.glob("*.json"):
        if not p.name.startswith("env-"):
            r = json.loads(p.read_text())
            results[r["case"]] = r
    envs = [json.loads(p.read_text()) for p in sorted(out.glob("env-*.json"))]
    env = envs[0] if envs else {}
    if envs:
        env["import_s"] = max(e["import_s"] for e in envs)
    if "onnx_file" in env:
        env["onnx_from"] = "PyPI's aarch64 wheel" if "/usr/local/" in env["onnx_file"] else "Debian"
    return results, env


class Side:
    """One side's runs: the x86-64 interpreter of this script, or Debian's arm64 one in the root."""

    def __init__(self, name: str, work: Path, root: Path, jobs: int, timeout: float) -> None:
        self.name, self.work, self.root, self.jobs, self.timeout = name, work, root, jobs, timeout
        self.results: dict[str, dict[str, Any]] = {}
        self.facts: dict[str, Any] = {}
        self.wall = 0.0
        self.failures: list[str] = []
        self.processes = 0

    def run(self, names: list[str], numerics: str) -> None:
        out = self.work / f"out-{self.name}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        manifest = write_manifest(self.work, self.name, names, numerics)
        self.processes = max(1, min(self.jobs, len(names)))
        if self.name == "arm64":
            inside = f"{WORK_IN_ROOT}/{manifest.name}", f"{WORK_IN_ROOT}/{out.name}"
            command = [
                shutil.which("chroot") or "/usr/sbin/chroot",
                str(self.root),
                QEMU_IN_ROOT,
                "/usr/bin/python3",
            ]
            command += [f"{WORK_IN_ROOT}/worker.py", "--worker", *inside]
            env = {"PATH": "/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
            env["PYTHONPATH"] = f"{WORK_IN_ROOT}/src:{WORK_IN_ROOT}"
            where = self.root.relative_to(REPO) if self.root.is_relative_to(REPO) else self.root
            label = f"arm64 (chroot {where}, qemu-aarch64"
        else:
            command = [sys.executable, str(self.work / "worker.py"), "--worker", str(manifest), str(out)]
            env = {**os.environ, "PYTHONPATH": f"{self.work / 'src'}:{self.work}"}
            label = f"x86-64 (native, {sys.executable}"
        plural = "es" if self.processes > 1 else ""
        print(f"== {label}, {self.processes} process{plural}): {len(names)} case(s)", flush=True)
        wall, failures = run_side([command] * self.processes, env, self.timeout)
        results, facts = read_results(out)
        self.results.update(results)
        self.facts = facts or self.facts
        self.wall += wall
        self.failures += failures


def first_difference(x86: list[Any], arm: list[Any]) -> str:
    """The first step whose outputs differ (or where the two step lists stop matching), for people."""
    for i, ((a_op, a_path, a_dig), (b_op, b_path, b_dig)) in enumerate(zip(x86, arm, strict=False)):
        if (a_op, a_path) != (b_op, b_path):
            return f"step lists diverge at #{i + 1}: x86-64 {a_op} '{a_path}', arm64 {b_op} '{b_path}'"
        if a_dig != b_dig:
            outs = [str(k) for k, (x, y) in enumerate(zip(a_dig, b_dig, strict=False)) if x != y]
            return f"step #{i + 1} {a_op} '{a_path}' (output {', '.join(outs)})"
    if len(x86) != len(arm):
        return f"step counts differ: x86-64 {len(x86)}, arm64 {len(arm)}"
    return "no step differs (the graph outputs' digests differ?)"


def against_golden(record: dict[str, Any], golden: dict[str, Any]) -> str:
    """What of ``record`` differs from golden.json's record ('' when nothing)."""
    what = [f for f in ("steps", "outputs", "digest") if record.get(f) != golden.get(f)]
    if not what:
        return ""
    if "steps" in what:
        return f"{record.get('steps')} steps, golden {golden.get('steps')}"
    outs = sorted(n for n in golden["outputs"] if record["outputs"].get(n) != golden["outputs"][n])
    return (
        f"outputs {', '.join(outs)} differ" if outs else "intermediate steps differ (the outputs are golden)"
    )


def compare_golden(
    names: list[str], golden: dict[str, Any], host_inputs: dict[str, dict[str, Any]], arm: Side
) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        g, r = golden[name], arm.results.get(name, {})
        row = {"case": name, "steps": g["steps"], "golden": g["digest"], "arm64": r.get("digest"), "note": ""}
        row["arm64_s"] = r.get("seconds")
        if "digest" not in r:
            row["verdict"] = "FAILED"
            row["note"] = r.get("error", "no result (worker failed or timed out)")
        elif r["inputs"] != g["inputs"]:
            row["verdict"] = "INPUT DIFFERS"
            if host_inputs[name] != g["inputs"]:
                row["note"] = (
                    "the input made here is not the one golden.json was recorded with (material changed?)"
                )
            else:
                row["note"] = "arm64 digests the golden input differently (value_digest depends on the CPU?)"
        elif against_golden(r, g):
            row["verdict"] = "DIFFERENT"
            row["note"] = against_golden(r, g)
        else:
            row["verdict"] = "same"
        rows.append(row)
    return rows


def diagnose(rows: list[dict[str, Any]], golden: dict[str, Any], arm: Side, x86: Side) -> None:
    """For each DIFFERENT case: x86-64's run of it and the first step where arm64's run departs from it."""
    for row in rows:
        if row["verdict"] != "DIFFERENT":
            continue
        a, b = x86.results.get(row["case"], {}), arm.results[row["case"]]
        if "digest" not in a:
            row["note"] += f"; x86-64 run failed: {a.get('error', 'no result')}"
        elif a["digest"] == b["digest"]:
            row["note"] += (
                "; x86-64 gives arm64's digest too: not arm64's difference (src/ changed since golden.json "
                "was recorded?)"
            )
        else:
            x86_golden = (
                "x86-64 matches golden"
                if not against_golden(a, golden[row["case"]])
                else ("x86-64 differs from golden too")
            )
            row["note"] += f"; {x86_golden}; first differing step against x86-64: "
            row["note"] += first_difference(a["step_digests"], b["step_digests"])


def compare_native(names: list[str], x86: Side, arm: Side) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        a, b = x86.results.get(name, {}), arm.results.get(name, {})
        row = {"case": name, "x86": a.get("digest"), "arm64": b.get("digest"), "note": ""}
        row["steps"] = a.get("steps", b.get("steps", 0))
        row["x86_s"], row["arm64_s"] = a.get("seconds"), b.get("seconds")
        if "digest" not in a or "digest" not in b:
            row["verdict"] = "FAILED"
            row["note"] = "; ".join(
                f"{side}: {r.get('error', 'no result (worker failed or timed out)')}"
                for side, r in (("x86-64", a), ("arm64", b))
                if "digest" not in r
            )
        elif a["inputs"] != b["inputs"]:
            row["verdict"], row["note"] = "INPUT DIFFERS", "the two sides digest the same input differently"
        elif a["digest"] == b["digest"]:
            row["verdict"] = "same"
        else:
            row["verdict"] = "DIFFERENT"
            row["note"] = first_difference(a["step_digests"], b["step_digests"])
        rows.append(row)
    return rows


def short(digest: str | None) -> str:
    return digest[:16] if digest else "-"


def secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def qemu_version(root: Path) -> str:
    try:
        out = subprocess.run(
            [str(root) + QEMU_IN_ROOT, "--version"], capture_output=True, text=True, check=True
        ).stdout
        return out.splitlines()[0].replace("qemu-aarch64 version ", "")
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


def table(rows: list[dict[str, Any]], native: bool, summarize: bool) -> list[list[str]]:
    """Header and rows of the results table; ``summarize``: the ACAS Xu cases that match in one row."""
    if native:
        head = ["case", "steps", "x86-64 digest", "arm64 digest", "same?", "x86-64 s", "arm64 s"]
        cells = [
            [
                r["case"],
                str(r["steps"]),
                short(r["x86"]),
                short(r["arm64"]),
                r["verdict"],
                secs(r["x86_s"]),
                secs(r["arm64_s"]),
            ]
            for r in rows
        ]
        return [head, *cells]
    head = ["case", "steps", "golden digest", "arm64 digest", "same?", "arm64 s"]
    acasxu = [r for r in rows if r["case"].startswith(ACASXU_PREFIX)]
    out = [head]

    def row(r: dict[str, Any]) -> list[str]:
        return [r["case"], str(r["steps"]), short(r["golden"]), short(r["arm64"]), r["verdict"], secs(r["arm64_s"])]

    out.extend(row(r) for r in rows if not (summarize and r in acasxu))
    if summarize and acasxu:
        same = sum(r["verdict"] == "same" for r in acasxu)
        steps = sorted({str(r["steps"]) for r in acasxu})
        took = sum(r["arm64_s"] or 0 for r in acasxu)
        out.append(
            [
                f"acasxu/ (the {len(acasxu)} networks)",
                "/".join(steps) + " each",
                f"({len(acasxu)} digests)",
                "(see below)" if same < len(acasxu) else "(all golden)",
                f"{same} of {len(acasxu)} match",
                f"{took:.2f} in all",
            ]
        )
        out.extend(row(r) for r in acasxu if r["verdict"] != "same")
    return out


def print_table(cells: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models",
        help="comma-separated golden cases (default: all 55): a zoo key, acasxu/<network file>, acasxu-A_B, "
        "or acasxu (the 45 networks)",
    )
    parser.add_argument(
        "--root",
        type=Path,
        help=f"the arm64 root, built there when absent (default {DEFAULT_ROOT.relative_to(REPO)})",
    )
    parser.add_argument(
        "--onnx",
        default="debian",
        metavar="VERSION",
        help="onnx in the arm64 root: Debian's (default), or VERSION's aarch64 wheel and protobuf's from PyPI "
        "(in a root of its own, by default .testmodels/arm64-root-onnx-VERSION)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="emulated processes in parallel (each imports sealtrace again: ~30-50 s)",
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for each side's runs in all")
    parser.add_argument(
        "--output",
        type=Path,
        help=f"Markdown results (default for the full set with Debian's onnx: {RESULTS.relative_to(REPO)})",
    )
    parser.add_argument(
        "--numerics",
        choices=("portable", "native"),
        default="portable",
        help="the reference backend's numerics (native: NumPy and the BLAS as the host runs them; no golden "
        "digests apply, arm64 is compared with x86-64; its results are written only with --output)",
    )
    parser.add_argument("--no-write", action="store_true", help="write no results file")
    parser.add_argument("--worker", nargs=2, metavar=("MANIFEST", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(*args.worker)

    started = time.perf_counter()
    sys.path[:0] = [str(REPO / "src"), str(REPO)]
    from sealtrace.audit.records import value_digest
    from sealtrace.ops.numerics import SPEC_VERSION

    native = args.numerics == "native"
    root = (
        args.root
        or (DEFAULT_ROOT if args.onnx == "debian" else DEFAULT_ROOT.with_name(f"arm64-root-onnx-{args.onnx}"))
    ).resolve()
    try:
        golden_file = load_golden()
        golden = golden_file["cases"]
        names = select(args.models, golden)
        check_host()
        cases = load_cases(names)
        ensure_root(root, args.onnx)
    except PrerequisiteError as exc:
        print(f"portability_arm64.py: {exc}", file=sys.stderr)
        return PREREQUISITE
    if not native and golden_file["spec"] != SPEC_VERSION:
        print(
            f"portability_arm64.py: golden.json holds numerics specification {golden_file['spec']}'s digests, "
            f"src/ implements {SPEC_VERSION} (re-record them: python -m tests.portability.runs --write-golden)",
            file=sys.stderr,
        )
        return 1
    host_inputs = {
        name: {k: value_digest(v) for k, v in sorted(feeds.items())} for name, _model, feeds in cases
    }
    work, source_digest = prepare(root, cases)
    arm = Side("arm64", work, root, args.jobs, args.timeout)
    x86 = Side("x86_64", work, root, args.jobs, args.timeout)

    if native:
        x86.run(names, "native")
        arm.run(names, "native")
        rows = compare_native(names, x86, arm)
    else:
        arm.run(names, "portable")
        rows = compare_golden(names, golden, host_inputs, arm)
        differing = [r["case"] for r in rows if r["verdict"] == "DIFFERENT"]
        if differing:
            print(
                f"== {len(differing)} case(s) differ from golden.json: their x86-64 runs, to find the first "
                "differing step",
                flush=True,
            )
            x86.run(differing, "portable")
            diagnose(rows, golden, arm, x86)
    total = time.perf_counter() - started

    print()
    print_table(table(rows, native, summarize=False))
    for r in rows:
        if r["note"]:
            print(f"{r['case']}: {r['verdict']}: {r['note']}")
    for side in (x86, arm):
        for f in side.failures:
            print(f"failed: {side.name}: {f}")
    same = sum(r["verdict"] == "same" for r in rows)
    against = "x86-64's" if native else "golden.json's"
    x86_part = f", x86-64 side {x86.wall:.0f} s" if x86.processes else ""
    print(
        f"\n{same} of {len(rows)} cases give {against} digest on arm64; arm64 side {arm.wall:.0f} s ({arm.processes} "
        f"process(es), each importing sealtrace in up to {arm.facts.get('import_s', 0):.0f} s){x86_part}, total "
        f"{total:.0f} s"
    )

    output = args.output or (RESULTS if not args.models and not native and args.onnx == "debian" else None)
    if output and not args.no_write:
        write_markdown(output, rows, native, golden_file["spec"], x86, arm, root, source_digest, total)
        print(f"wrote {output}")
    return 0 if same == len(rows) and not arm.failures and not x86.failures else 1


def write_markdown(
    path: Path,
    rows: list[dict[str, Any]],
    native: bool,
    spec: str,
    x86: Side,
    arm: Side,
    root: Path,
    source_digest: str,
    total: float,
) -> None:
    dirty = git("status", "--porcelain", "--", "src", *RECIPE_FILES)
    changed = len(dirty.splitlines()) if dirty and dirty != "unknown" else 0
    commit = git("rev-parse", "--short", "HEAD") + (
        f" with {changed} file(s) of src/ and tests/portability/runs.py modified (uncommitted)"
        if changed
        else ""
    )
    golden_sha = hashlib.sha256(GOLDEN.read_bytes()).hexdigest()[:16]
    same = sum(r["verdict"] == "same" for r in rows)
    a, h = arm.facts, x86.facts
    if native:
        title = "## Portability, native numerics: arm64 (qemu-user) against x86-64"
        what = (
            "Native numerics (NumPy and the BLAS round as each host does) have no golden digests: each golden case "
            "runs on both sides and arm64's run digest is compared with x86-64's; a differing case names its first "
            "differing step (a kernel that depends on the CPU with native numerics)."
        )
    else:
        title = "## Portability: the golden run digests on arm64 (qemu-user)"
        what = (
            "Each case of tests/portability/golden.json (the real models on their real inputs, the 45 ACAS Xu "
            "networks on one point of property 1's box) runs in an arm64 Debian root "
            "(`benchmarks/portability_arm64_root.sh`: debootstrap, Debian's arm64 Python and NumPy) under "
            "qemu-user emulation, from snapshots of `src/` and of tests/portability/runs.py, whose "
            "`golden_record` (the code that wrote golden.json) gives each case's input digests, output digests, "
            "step count and run digest; all four must equal golden.json's. A case that differs would also run "
            "natively on x86-64, and the two runs' per-step digests name its first differing step."
        )
    lines = [
        title,
        "",
        "Command: `make portability` (`python benchmarks/portability_arm64.py"
        + (" --numerics native" if native else "")
        + "`). "
        + what
        + " Digests below are the first 16 hex digits of the run digest (tests/portability/runs.py's "
        "`run_digest`). Seconds: model load and run of one case, without the interpreter's start and imports.",
        "",
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- commit: {commit}; snapshot of src/ sha256 {source_digest[:16]}",
        f"- golden digests: tests/portability/golden.json (sha256 {golden_sha}), numerics specification version "
        f"{spec}; src/ implements version {a.get('spec', '?')} (on arm64)"
        + (" (not compared: native numerics)" if native else ""),
        f"- arm64: {a.get('os', '?')} (debian_version {a.get('debian_version', '?')}) in qemu-aarch64 "
        f"{qemu_version(root)} (Debian's qemu-user-static); Debian's Python {a.get('python', '?')} and NumPy "
        f"{a.get('numpy', '?')} ({a.get('blas', '?')}; SIMD {a.get('simd', '?')}), onnx {a.get('onnx', '?')} "
        f"({a.get('onnx_from', '?')}), gmpy2 {a.get('gmpy2', '?')} (Debian), ml_dtypes {a.get('ml_dtypes', '?')} "
        "(PyPI's aarch64 wheel: not in Debian)",
    ]
    if x86.processes:
        lines.append(
            f"- x86-64 ({'every case' if native else 'the differing cases only'}): {h.get('os', '?')}, the project's "
            f".venv: Python {h.get('python', '?')}, NumPy {h.get('numpy', '?')} ({h.get('blas', '?')}; SIMD "
            f"{h.get('simd', '?')}), onnx {h.get('onnx', '?')}, gmpy2 {h.get('gmpy2', '?')}, ml_dtypes "
            f"{h.get('ml_dtypes', '?')}"
        )
    x86_part = f", x86-64 side {x86.wall:.0f} s" if x86.processes else "; no x86-64 run was needed"
    lines += [
        f"- time: {total:.0f} s in all on {os.cpu_count()} cores: arm64 side {arm.wall:.0f} s ({arm.processes} "
        f"emulated process(es) in parallel, each importing sealtrace in up to {a.get('import_s', 0):.0f} s)"
        f"{x86_part}; building the arm64 root once (not included) takes about 2 minutes",
        "",
    ]
    cells = table(rows, native, summarize=True)
    lines.append("| " + " | ".join(cells[0]) + " |")
    lines.append("|" + "---|" * len(cells[0]))
    for row in cells[1:]:
        lines.append(
            "| " + " | ".join(f"`{c}`" if re.fullmatch(r"[0-9a-f]{16}", c) else c for c in row) + " |"
        )
    against = "as on x86-64" if native else "as golden.json"
    lines += ["", f"{same} of {len(rows)} cases give the same run digest on arm64 {against}."]
    notes = [r for r in rows if r["note"]]
    if notes:
        lines += ["", "Differences and failures:", ""]
        lines += [f"- {r['case']}: {r['verdict']}: {r['note']}" for r in notes]
    for side in (x86, arm):
        lines += [f"- {side.name} worker failed: {f}" for f in side.failures]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
