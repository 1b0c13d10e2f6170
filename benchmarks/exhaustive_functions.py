"""`make exhaustive`: every float32 input of every float32 elementwise function, checked bit for bit
against an independent oracle (a long run, hours per function on two cores; not part of `make test`).

    python benchmarks/exhaustive_functions.py                                  # all functions, all 2**32 inputs
    python benchmarks/exhaustive_functions.py --functions exp,log --processes 2
    python benchmarks/exhaustive_functions.py --functions sigmoid --limit 4 --spread   # a quick look

For each function, sealtrace's portable result ``numerics.apply(name, x)`` on each of the 2**32 float32
bit patterns must equal the oracle's bits exactly (any NaN equals any NaN; +0 and -0 differ). The oracle,
benchmarks/exhaustive_oracle.c, is a small C program on GNU MPFR (no NumPy, no libm, no gmpy2): one MPFR
function in an emulated binary32 (exp, log, tanh, ...), or the formula in interval arithmetic at rising
precision until both ends round alike (sigmoid, softplus, the activations). It is compiled here at run
time with the system's cc into a temporary folder (Debian/Ubuntu: apt-get install libmpfr-dev) and called
through ctypes, a chunk of 2**--chunk-bits inputs at a time, in --processes worker processes.

The parametrized functions take fixed parameters (PARAMETERS). Each worker also counts the inputs that
took sealtrace's exact (MPFR) path, by wrapping the ``settle`` that ``numerics.apply`` calls.

Progress is kept after every chunk in benchmarks/results/exhaustive/FUNCTION.json (--state), so an
interrupted run resumes where it stopped (as long as the numerics' source, the oracle and the chunk size
are the same: otherwise that function starts over), and --out (benchmarks/results/exhaustive_functions.md)
is rewritten from all of them. Exit status: 0 when every checked input agrees, 1 on any mismatch (the
first few are listed: bit pattern, ours, oracle) or an input the oracle could not decide, 2 when cc or
MPFR's headers (libmpfr-dev) are missing.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import hashlib
import json
import multiprocessing
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ORACLE_SOURCE = HERE / "exhaustive_oracle.c"
NUMERICS_SOURCE = ROOT / "src" / "sealtrace" / "ops" / "numerics"
DEFAULT_OUT = HERE / "results" / "exhaustive_functions.md"
DEFAULT_STATE = HERE / "results" / "exhaustive"
TOTAL_BITS = 32
SAMPLE_MISMATCHES = 10

# The fixed parameters of the parametrized functions (selu's are ONNX's defaults as float32 values).
PARAMETERS: dict[str, tuple[float, ...]] = {
    "elu": (1.0,),
    "selu": (1.67326319217681884765625, 1.05070102214813232421875),
    "celu": (1.0,),
    "swish": (1.0,),
}

Bits = np.ndarray[Any, np.dtype[np.uint32]]


class OracleUnavailableError(RuntimeError):
    """No C compiler or no MPFR development files: the oracle cannot be built (one line, how to fix)."""


# ---------------------------------------------------------------------------------------- the oracle


def build_oracle(directory: Path) -> Path:
    """Compile benchmarks/exhaustive_oracle.c into ``directory``/liboracle.so (OracleUnavailableError
    when cc or libmpfr-dev is missing)."""
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        raise OracleUnavailableError(f"no C compiler ({cc!r} not found; Debian/Ubuntu: apt-get install gcc "
                                     "libmpfr-dev)")
    library = directory / "liboracle.so"
    command = [cc, "-O2", "-shared", "-fPIC", "-o", str(library), str(ORACLE_SOURCE), "-lmpfr", "-lgmp"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        message = done.stderr.strip()
        if "mpfr.h" in message or "gmp.h" in message or "-lmpfr" in message or "-lgmp" in message:
            raise OracleUnavailableError("GNU MPFR's development files are missing (mpfr.h, libmpfr.so; "
                                         "Debian/Ubuntu: apt-get install libmpfr-dev)")
        first = message.splitlines()[0] if message else f"exit {done.returncode}"
        raise OracleUnavailableError(f"could not compile {ORACLE_SOURCE.name}: {first}")
    return library


class Oracle:
    """The compiled oracle, loaded through ctypes."""

    def __init__(self, library: Path) -> None:
        self._lib = ctypes.CDLL(str(library))
        self._lib.oracle_eval.restype = ctypes.c_int
        self._lib.oracle_eval.argtypes = [
            ctypes.c_char_p, ctypes.POINTER(ctypes.c_double), ctypes.c_int,
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t),
        ]
        self._lib.oracle_mpfr_version.restype = ctypes.c_char_p

    @property
    def mpfr_version(self) -> str:
        return str(self._lib.oracle_mpfr_version().decode())

    def __call__(self, name: str, bits: Bits, parameters: tuple[float, ...] = ()) -> Bits:
        """RN(f(x)) in float32 for each float32 bit pattern of ``bits``, as bit patterns."""
        bits = np.ascontiguousarray(bits, dtype=np.uint32)
        out = np.empty_like(bits)
        params = (ctypes.c_double * max(1, len(parameters)))(*parameters)
        failed = ctypes.c_size_t(0)
        rc = self._lib.oracle_eval(name.encode(), params, len(parameters), bits.ctypes.data, out.ctypes.data,
                                   bits.size, ctypes.byref(failed))
        if rc == -1:
            raise ValueError(f"the oracle has no function {name!r} with {len(parameters)} parameters")
        if rc != 0:
            raise RuntimeError(f"the oracle could not decide {name}(0x{int(bits[failed.value]):08x})")
        return out


# ---------------------------------------------------------------------------------------- ours


_EXACT_COUNT = [0]


def count_exact_path() -> None:
    """Count, in _EXACT_COUNT, the elements ``numerics.apply`` hands to its exact (MPFR) path."""
    import sealtrace.ops.numerics.functions as functions

    original = getattr(functions.settle, "__wrapped__", functions.settle)

    def settle(y: Any, err: Any, fmt: Any, exact: Any, relative: bool = False) -> Any:
        def counted(index: Any) -> Any:
            _EXACT_COUNT[0] += len(index)
            return exact(index)

        return original(y, err, fmt, counted, relative=relative)

    settle.__wrapped__ = original  # type: ignore[attr-defined]
    functions.settle = settle


def ours(name: str, bits: Bits) -> Bits:
    """sealtrace's portable float32 result for each bit pattern, as bit patterns."""
    from sealtrace.ops import numerics

    # errstate: apply's own float32 -> float64 conversion warns on signalling NaNs ("invalid value
    # encountered in cast"), which every exhaustive chunk of the NaN range holds
    with numerics.numerics_mode(numerics.PORTABLE), np.errstate(invalid="ignore"):
        result = numerics.apply(name, bits.view(np.float32), *PARAMETERS.get(name, ()))
    return np.asarray(result, dtype=np.float32).view(np.uint32)


def mismatches(a: Bits, b: Bits) -> np.ndarray[Any, np.dtype[np.intp]]:
    """Indices where two float32 bit arrays differ, any NaN equal to any NaN (+0 and -0 differ)."""
    nan_a = (a & 0x7FFFFFFF) > 0x7F800000
    nan_b = (b & 0x7FFFFFFF) > 0x7F800000
    return np.flatnonzero((a != b) & ~(nan_a & nan_b))


def describe(bits: int) -> str:
    value = np.array([bits], dtype=np.uint32).view(np.float32)[0]
    return f"{float(value)!r} (0x{bits:08x})"


def mismatch_records(name: str, bits: Bits, mine: Bits, theirs: Bits, limit: int) -> list[dict[str, str]]:
    return [{"input": describe(int(bits[i])), "ours": describe(int(mine[i])), "oracle": describe(int(theirs[i]))}
            for i in mismatches(mine, theirs)[:limit]]


# ---------------------------------------------------------------------------------------- workers

_ORACLE: Oracle | None = None


def _init_worker(library: str) -> None:
    global _ORACLE
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.path.insert(0, str(ROOT / "src"))
    _ORACLE = Oracle(Path(library))
    count_exact_path()


def check_chunk(task: tuple[str, int, int]) -> dict[str, Any]:
    """Inputs [index << chunk_bits, (index + 1) << chunk_bits) of ``name``: ours against the oracle."""
    name, chunk_bits, index = task
    assert _ORACLE is not None
    start = index << chunk_bits
    bits = np.arange(start, start + (1 << chunk_bits), dtype=np.uint64).astype(np.uint32)
    _EXACT_COUNT[0] = 0
    began = time.perf_counter()
    mine = ours(name, bits)
    ours_seconds = time.perf_counter() - began
    began = time.perf_counter()
    try:
        theirs = _ORACLE(name, bits, PARAMETERS.get(name, ()))
    except RuntimeError as exc:
        return {"name": name, "index": index, "error": str(exc)}
    oracle_seconds = time.perf_counter() - began
    bad = mismatches(mine, theirs)
    return {
        "name": name, "index": index, "checked": int(bits.size), "mismatches": int(bad.size),
        "examples": mismatch_records(name, bits, mine, theirs, SAMPLE_MISMATCHES),
        "exact": _EXACT_COUNT[0], "ours_seconds": ours_seconds, "oracle_seconds": oracle_seconds,
    }


# ---------------------------------------------------------------------------------------- state and report


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def fingerprint() -> str:
    """What a result depends on: the numerics' source and the oracle's."""
    digest = hashlib.sha256()
    for path in [*sorted(NUMERICS_SOURCE.glob("*.py")), ORACLE_SOURCE]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}"


def fresh_state(name: str, chunk_bits: int, print_fingerprint: str) -> dict[str, Any]:
    commit = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--", str(NUMERICS_SOURCE)))
    return {
        "function": name, "parameters": list(PARAMETERS.get(name, ())), "chunk_bits": chunk_bits,
        "fingerprint": print_fingerprint, "commit": commit + (" (numerics edited)" if dirty else ""),
        "done": [], "checked": 0, "mismatches": 0, "examples": [], "exact": 0, "ours_seconds": 0.0,
        "oracle_seconds": 0.0, "errors": [], "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "updated": "", "machine": machine(),
    }


def load_state(folder: Path, name: str, chunk_bits: int, print_fingerprint: str) -> dict[str, Any]:
    path = folder / f"{name}.json"
    if path.exists():
        state: dict[str, Any] = json.loads(path.read_text())
        if state.get("chunk_bits") == chunk_bits and state.get("fingerprint") == print_fingerprint \
                and state.get("parameters") == list(PARAMETERS.get(name, ())):
            return state
        print(f"{name}: the kept progress is for other code or another chunk size; starting over", flush=True)
    return fresh_state(name, chunk_bits, print_fingerprint)


def save_state(folder: Path, state: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{state['function']}.json"
    partial = path.with_suffix(".json.part")
    partial.write_text(json.dumps(state, indent=1))
    partial.replace(path)


def write_table(out: Path, folder: Path, order: list[str]) -> None:
    states = {}
    for path in sorted(folder.glob("*.json")):
        state = json.loads(path.read_text())
        states[state["function"]] = state
    names = [n for n in order if n in states] + sorted(set(states) - set(order))
    lines = [
        "## Exhaustive float32 check of the elementwise functions",
        "",
        "Command: `make exhaustive` (`python benchmarks/exhaustive_functions.py`). Every float32 bit pattern x of",
        "each function: `numerics.apply(name, x)` (portable) against an independent oracle, GNU MPFR through",
        "benchmarks/exhaustive_oracle.c (one MPFR function in an emulated binary32, or the formula in interval",
        "arithmetic at rising precision), bit for bit (any NaN equals any NaN; +0 and -0 differ). Exact path:",
        "inputs that sealtrace's Ziv test handed to MPFR. Seconds: worker time, ours + oracle's.",
        "",
        "| function | parameters | inputs checked | mismatches | exact path (ours) | seconds (ours + oracle) "
        "| commit | date | machine |",
        "|---|---|---:|---:|---:|---:|---|---|---|",
    ]
    for name in names:
        s = states[name]
        checked = f"{s['checked']:,}" + ("" if s["checked"] == 1 << TOTAL_BITS else " (partial)")
        mism = f"{s['mismatches']:,}" + (f" + {len(s['errors'])} undecided" if s["errors"] else "")
        params = ", ".join(repr(p) for p in s["parameters"]) or "-"
        seconds = f"{s['ours_seconds']:,.0f} + {s['oracle_seconds']:,.0f}"
        lines.append(f"| {name} | {params} | {checked} | {mism} | {s['exact']:,} | {seconds} | "
                     f"{s['commit'][:12]}{s['commit'][40:]} | {s['updated'][:10]} | {s['machine']} |")
    bad = [states[n] for n in names if states[n]["examples"] or states[n]["errors"]]
    if bad:
        lines += ["", "First mismatches (input: ours, oracle):", ""]
        for s in bad:
            for e in s["examples"]:
                lines.append(f"- {s['function']}({e['input']}): {e['ours']}, oracle {e['oracle']}")
            for e in s["errors"]:
                lines.append(f"- {s['function']}: {e}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


def chunk_indices(chunk_bits: int, limit: int | None, spread: bool) -> list[int]:
    count = 1 << (TOTAL_BITS - chunk_bits)
    if limit is None or limit >= count:
        return list(range(count))
    if spread:
        return sorted({(i * count) // limit for i in range(limit)})
    return list(range(limit))


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


# ---------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT / "src"))
    from sealtrace.ops.numerics import FUNCTIONS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--functions", default=",".join(FUNCTIONS),
                        help="comma-separated names (default: all %(default)s)")
    parser.add_argument("--chunk-bits", type=int, default=24, help="2**N inputs per chunk (default 24)")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1,
                        help="worker processes (default: the cores, %(default)s)")
    parser.add_argument("--limit", type=int, default=None, help="only N chunks per function (a quick run)")
    parser.add_argument("--spread", action="store_true",
                        help="with --limit: N chunks spread evenly over the 32-bit range, not the first N")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the Markdown table (default %(default)s)")
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE,
                        help="per-function progress, for resuming (default %(default)s)")
    args = parser.parse_args(argv)

    names = [n.strip() for n in args.functions.split(",") if n.strip()]
    unknown = [n for n in names if n not in FUNCTIONS]
    if unknown:
        parser.error(f"unknown functions {', '.join(unknown)} (known: {', '.join(FUNCTIONS)})")
    if not 8 <= args.chunk_bits <= TOTAL_BITS:
        parser.error("--chunk-bits must be between 8 and 32")

    with tempfile.TemporaryDirectory(prefix="sealtrace-oracle-") as tmp:
        try:
            library = build_oracle(Path(tmp))
        except OracleUnavailableError as exc:
            print(f"exhaustive_functions: {exc}", file=sys.stderr)
            return 2
        print(f"oracle: {ORACLE_SOURCE.name} on MPFR {Oracle(library).mpfr_version}; {args.processes} processes, "
              f"2**{args.chunk_bits} inputs per chunk", flush=True)
        return run(names, args, library, list(FUNCTIONS))


def run(names: list[str], args: argparse.Namespace, library: Path, order: list[str]) -> int:
    print_fingerprint = fingerprint()
    indices = chunk_indices(args.chunk_bits, args.limit, args.spread)
    states = {n: load_state(args.state, n, args.chunk_bits, print_fingerprint) for n in names}
    tasks = []
    for n in names:
        done = set(states[n]["done"])
        pending = [i for i in indices if i not in done]
        if len(done):
            print(f"{n}: resuming, {len(done)} chunks kept, {len(pending)} to go", flush=True)
        tasks += [(n, args.chunk_bits, i) for i in pending]
    remaining = {n: sum(1 for t in tasks if t[0] == n) for n in names}
    for n in names:
        if remaining[n] == 0:
            print(f"{n}: nothing to do ({states[n]['checked']:,} inputs checked, "
                  f"{states[n]['mismatches']} mismatches)", flush=True)
    began = time.perf_counter()
    done_tasks = 0
    failed = False
    context = multiprocessing.get_context("spawn")
    pool = context.Pool(args.processes, initializer=_init_worker, initargs=(str(library),))
    try:
        for result in pool.imap_unordered(check_chunk, tasks, chunksize=1):
            done_tasks += 1
            name = result["name"]
            state = states[name]
            remaining[name] -= 1
            if "error" in result:
                state["errors"].append(result["error"])
                print(f"{name}: chunk {result['index']}: {result['error']}", flush=True)
            else:
                state["done"].append(result["index"])
                for key in ("checked", "mismatches", "exact", "ours_seconds", "oracle_seconds"):
                    state[key] += result[key]
                state["examples"] = (state["examples"] + result["examples"])[:SAMPLE_MISMATCHES]
            state["updated"] = datetime.datetime.now().isoformat(timespec="seconds")
            save_state(args.state, state)
            write_table(args.out, args.state, order)
            elapsed = time.perf_counter() - began
            eta = elapsed / done_tasks * (len(tasks) - done_tasks)
            print(f"{name}: chunk {result['index']} ({len(state['done'])} done) "
                  f"{result.get('checked', 0):,} inputs, {result.get('mismatches', 0)} mismatches, "
                  f"exact path {result.get('exact', 0):,}, ours {result.get('ours_seconds', 0):.1f} s + "
                  f"oracle {result.get('oracle_seconds', 0):.1f} s; all: {done_tasks}/{len(tasks)} chunks, "
                  f"{_duration(elapsed)} elapsed, about {_duration(eta)} to go", flush=True)
            if remaining[name] == 0:
                print(f"== {name}: {state['checked']:,} inputs checked, {state['mismatches']:,} mismatches, "
                      f"{len(state['errors'])} undecided, exact path {state['exact']:,}", flush=True)
                for e in state["examples"]:
                    print(f"   {name}({e['input']}): ours {e['ours']}, oracle {e['oracle']}", flush=True)
    except KeyboardInterrupt:
        pool.terminate()
        print("interrupted: the progress is kept; run the same command again to resume", file=sys.stderr)
        return 130
    finally:
        pool.close()
        pool.join()
    write_table(args.out, args.state, order)
    for n in names:
        s = states[n]
        if s["mismatches"] or s["errors"]:
            failed = True
            print(f"MISMATCH {n}: {s['mismatches']:,} mismatching inputs, {len(s['errors'])} undecided",
                  file=sys.stderr)
            for e in s["examples"][:5]:
                print(f"   {n}({e['input']}): ours {e['ours']}, oracle {e['oracle']}", file=sys.stderr)
    print(f"done in {_duration(time.perf_counter() - began)}; table: {args.out}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
