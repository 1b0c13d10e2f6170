"""Drive one reader over generated inputs and check the invariant on each.

The invariant, for every input: the outcome is exit 0, 1 or 2 (never 3: an internal error), within
a time limit; the peak resident memory of the call stays within the memory budget plus a fixed
allowance for sealtrace's own working set; and a reader of signed data never accepts a mutation
(exit 0) unless the mutated bytes mean the same. Inputs that break it are kept in
``tests/fuzz/corpus/<reader>/`` and replayed by the default test run.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import shutil
import signal
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings

from sealtrace.cli import main
from sealtrace.errors import SealtraceError
from sealtrace.limits import memory_budget_of
from tests.fuzz.material import Material
from tests.fuzz.readers import Reader

CORPUS = Path(__file__).parent / "corpus"
FUZZ_BUDGET = 32 << 20
# sealtrace's own working set on the tiny material (ORT session, Plan, imports) on top of the budget.
MEMORY_ALLOWANCE = 160 << 20
TIME_LIMIT_S = 30


@dataclass(frozen=True)
class Violation:
    reader: str
    problem: str
    data: bytes

    def save(self, corpus: Path = CORPUS) -> Path:
        """Keep the input in the corpus (named by its digest); returns its path."""
        directory = corpus / self.reader
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{hashlib.sha256(self.data).hexdigest()[:16]}.bin"
        path.write_bytes(self.data)
        return path


@dataclass(frozen=True)
class Result:
    """What one input did: 'exit N' or 'timeout', the invariant it broke (if any), peak memory growth."""

    outcome: str
    problem: str | None = None
    peak_growth: int = 0


@dataclass
class Tally:
    """Outcomes of one reader's run: counts by exit code, the violations, the largest memory growth."""

    reader: str
    outcomes: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    peak_growth: int = 0

    @property
    def inputs(self) -> int:
        return sum(self.outcomes.values())


def _rss_kib(field_name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM (Linux)
    except OSError:
        return False
    return True


class _TimeoutError(BaseException):
    """Not an Exception: the CLI turns any Exception into an internal error (exit 3), which would
    report a slow input as a crash instead of as a timeout."""


@contextlib.contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise _TimeoutError

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_reader(reader: Reader, material: Material, data: bytes, seed: bytes | None = None) -> Result:
    """Feed ``data`` to ``reader`` as its target file and check the invariant.

    ``seed`` is the pristine target the mutation was made from: the file is put back to it afterwards
    and "a mutation was accepted" means accepted bytes other than it. Without it, the file as found.
    """
    target = reader.target(material)
    original = target.read_bytes() if seed is None else seed
    measure = _reset_peak()
    before = _rss_kib("VmRSS")
    try:
        target.write_bytes(data)
        out, err = io.StringIO(), io.StringIO()
        with _time_limit(TIME_LIMIT_S), memory_budget_of(FUZZ_BUDGET), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            if reader.argv is not None:
                code = main(reader.argv(material))
            else:
                assert reader.api is not None
                try:
                    reader.api(target)
                    code = 0
                except SealtraceError as exc:
                    code = exc.exit_code
                except Exception as exc:  # what the CLI would report as an internal error
                    err.write(f"internal error: {type(exc).__name__}: {exc}")
                    code = 3
    except _TimeoutError:
        return Result("timeout", f"no answer within {TIME_LIMIT_S} s")
    finally:
        target.write_bytes(original)
    grown = (_rss_kib("VmHWM") - before) * 1024 if measure else 0
    outcome = f"exit {code}"
    if code not in (0, 1, 2):
        return Result(outcome, f"exit {code}: {err.getvalue().strip()[:300]}", grown)
    if grown > FUZZ_BUDGET + MEMORY_ALLOWANCE:
        return Result(outcome, f"peak memory grew by {grown >> 20} MiB (budget {FUZZ_BUDGET >> 20} MiB)", grown)
    if code == 0 and reader.signed and data != original and not (reader.same and reader.same(original, data)):
        return Result(outcome, "a mutation of signed data was accepted", grown)
    return Result(outcome, None, grown)


def fuzz(reader: Reader, material: Material, examples: int, random_seed: int = 0) -> Tally:
    """Run ``examples`` generated inputs through ``reader``; every violation is collected, not raised."""
    tally = Tally(reader.name)
    original = reader.target(material).read_bytes()
    # One untallied run of the seed first: imports and caches it loads once (torch behind the
    # falsify package, ORT's first session) are not memory that an input made the reader take.
    run_reader(reader, material, original, seed=original)

    @seed(random_seed)
    @settings(max_examples=examples, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(reader.mutations(original))
    def one(data: bytes) -> None:
        result = run_reader(reader, material, data, seed=original)
        tally.outcomes[result.outcome] += 1
        tally.peak_growth = max(tally.peak_growth, result.peak_growth)
        if result.problem is not None:
            tally.violations.append(Violation(reader.name, result.problem, data))

    one()
    return tally


def corpus_inputs(reader: Reader, corpus: Path = CORPUS) -> list[Path]:
    """The kept inputs of ``reader``, in name order."""
    directory = corpus / reader.name
    return sorted(directory.glob("*.bin")) if directory.is_dir() else []


def prepare(material: Material) -> None:
    """Set-up some readers need besides their target: a pristine copy for diff-audit-logs."""
    shutil.copyfile(material.log, str(material.log) + ".orig")
