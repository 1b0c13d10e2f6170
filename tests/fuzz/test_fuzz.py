"""The fuzz suite's invariant on every reader of outside bytes (docs/security.md).

The default run generates a few dozen inputs per reader and replays the kept corpus; the long run
(``make fuzz``: benchmarks/fuzz_readers.py) generates 100,000 per reader.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fuzz.driver import CORPUS, fuzz, prepare, run_reader
from tests.fuzz.material import Material, build_material
from tests.fuzz.readers import BY_NAME, READERS

EXAMPLES = int(os.environ.get("SEALTRACE_FUZZ_EXAMPLES", "40"))


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> Material:
    made = build_material(tmp_path_factory.mktemp("fuzz"))
    prepare(made)
    return made


@pytest.mark.parametrize("reader", READERS, ids=lambda r: r.name)
def test_generated_inputs_keep_the_invariant(reader: object, material: Material) -> None:
    tally = fuzz(reader, material, EXAMPLES)  # type: ignore[arg-type]
    assert tally.inputs >= EXAMPLES // 2
    shown = "\n".join(f"{v.problem} (input {v.data[:120]!r})" for v in tally.violations[:5])
    assert not tally.violations, f"{len(tally.violations)} of {tally.inputs} inputs break the invariant:\n{shown}"


def _corpus() -> list[tuple[str, Path]]:
    return [(d.name, f) for d in sorted(CORPUS.iterdir()) if d.is_dir() for f in sorted(d.glob("*.bin"))] \
        if CORPUS.is_dir() else []


@pytest.mark.parametrize(("reader", "path"), _corpus(), ids=lambda v: v if isinstance(v, str) else v.name)
def test_kept_inputs_keep_the_invariant(reader: str, path: Path, material: Material) -> None:
    result = run_reader(BY_NAME[reader], material, path.read_bytes())
    assert result.problem is None, f"{path}: {result.problem}"


def test_the_seeds_themselves_pass(material: Material) -> None:
    # The unmutated material is valid: every reader accepts it (so a failure above is the mutation's).
    for reader in READERS:
        result = run_reader(reader, material, reader.target(material).read_bytes())
        assert (result.outcome, result.problem) == ("exit 0", None), reader.name


def test_a_slow_input_is_a_timeout_not_an_internal_error(material: Material, monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit's exception must pass through the handlers that turn any Exception into exit 3 (the
    long run reported two inputs paused past the limit as internal errors)."""
    import time

    from tests.fuzz import driver
    from tests.fuzz.mutations import byte_edits
    from tests.fuzz.readers import Reader

    def slow_reader(target: Path) -> None:
        try:
            time.sleep(10)
        except Exception as exc:  # as the CLI's last-resort handler does
            raise AssertionError("the time limit was caught as an Exception") from exc

    monkeypatch.setattr(driver, "TIME_LIMIT_S", 1)
    slow = Reader("slow", lambda m: m.vnnlib, byte_edits, api=slow_reader)
    result = run_reader(slow, material, material.vnnlib.read_bytes())
    assert result.outcome == "timeout"
