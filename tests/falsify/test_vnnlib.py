"""The VNNLIB parser: every ACAS Xu property, the subset's corners, and malformed input (line and column)."""

from __future__ import annotations

import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from sealtrace import zoo
from sealtrace.falsify import (
    PropertyError,
    PropertyReadTimeoutError,
    VnnlibSyntaxError,
    load_vnnlib,
    parse_vnnlib,
    vnnlib,
)
from tests.conftest import require_material
from tests.falsify.conftest import write_box_property

HEADER = "".join(f"(declare-const X_{i} Real)\n" for i in range(2)) + "".join(
    f"(declare-const Y_{j} Real)\n" for j in range(2)
)
BOX = "(assert (>= X_0 0))\n(assert (<= X_0 1))\n(assert (>= X_1 -1))\n(assert (<= X_1 1))\n"


def acasxu_property(k: int) -> Path:
    """The ACAS Xu property file (missing material fails in CI, skips elsewhere)."""

    path: Path = require_material(lambda: zoo.acasxu_file(f"prop_{k}.vnnlib"))
    return path


# (regions, output sets per region, constraints per output set) of each ACAS Xu property.
ACASXU_SHAPES = {
    1: (1, 1, 1), 2: (1, 1, 4), 3: (1, 1, 4), 4: (1, 1, 4), 5: (1, 4, 1),
    6: (2, 4, 1), 7: (1, 2, 3), 8: (1, 3, 2), 9: (1, 4, 1), 10: (1, 4, 1),
}


@pytest.mark.parametrize("k", range(1, 11))
def test_every_acasxu_property(k: int) -> None:
    prop = load_vnnlib(acasxu_property(k))
    assert (prop.n_inputs, prop.n_outputs) == (5, 5)
    regions, sets, constraints = ACASXU_SHAPES[k]
    assert len(prop.regions) == regions
    for region in prop.regions:
        assert len(region.output_sets) == sets
        assert all(len(s.constraints) == constraints for s in region.output_sets)
        assert all(lo <= hi for lo, hi in zip(region.box.lower, region.box.upper, strict=True))
    if k == 6:
        return  # zoo's regex reader only knows one assert per bound; prop_6 puts its boxes in an (or ...)
    # The box agrees with the simple regex reader zoo uses for real inputs.
    lower, upper = zoo.acasxu_box(k)
    np.testing.assert_array_equal([float(v) for v in prop.regions[0].box.lower], lower)
    np.testing.assert_array_equal([float(v) for v in prop.regions[0].box.upper], upper)


def test_acasxu_constants_are_exact_decimals() -> None:
    prop = load_vnnlib(acasxu_property(1))
    (constraint,) = prop.regions[0].output_sets[0].constraints
    # (assert (>= Y_0 3.991125645861615)) -> -Y_0 + 3.991125645861615 <= 0, kept as the exact decimal
    assert constraint.y_terms == ((0, Fraction(-1)),)
    assert constraint.constant == Fraction("3.991125645861615")
    assert constraint.source.endswith(":") is False and "prop_1.vnnlib:" in constraint.source
    box = load_vnnlib(acasxu_property(1)).regions[0].box
    assert box.upper[0] == Fraction("0.679857769")


def test_prop6_disjunction_of_boxes_and_prop7_of_output_sets() -> None:
    prop6 = load_vnnlib(acasxu_property(6))
    assert prop6.regions[0].box.lower[1] == Fraction("0.11140846")
    assert prop6.regions[1].box.upper[1] == Fraction("-0.11140846")
    prop7 = load_vnnlib(acasxu_property(7))
    first, second = prop7.regions[0].output_sets
    assert [c.describe() for c in first.constraints] == ["-Y_0 + Y_3 <= 0", "-Y_1 + Y_3 <= 0", "-Y_2 + Y_3 <= 0"]
    assert second.constraints[0].describe() == "-Y_0 + Y_4 <= 0"


def test_terms_numbers_and_comparisons() -> None:
    text = HEADER + BOX + """
; every kind of term
(assert (or
  (and (<= (+ Y_0 (* 2 Y_1) (- 0.5)) 1e-3) (> Y_0 -2.5E+1))
  (and (< (- Y_0 Y_1 1) (* Y_1 .5 2)) (>= (/ Y_0 4) (- X_0)))
  (and (<= Y_0 Y_1 3))
))
"""
    prop = parse_vnnlib(text)
    (region,) = prop.regions
    a, b, c = region.output_sets
    assert [x.describe() for x in a.constraints] == ["Y_0 + 2*Y_1 - 0.501 <= 0", "-Y_0 - 25 < 0"]
    assert a.constraints[0].constant == Fraction(-501, 1000)
    assert [x.describe() for x in b.constraints] == ["Y_0 - 2*Y_1 - 1 < 0", "-0.25*Y_0 - X_0 <= 0"]
    assert b.constraints[1].x_terms == ((0, Fraction(-1)),)
    assert [x.describe() for x in c.constraints] == ["Y_0 - Y_1 <= 0", "Y_1 - 3 <= 0"]


def test_bounds_take_the_tightest_and_strictness() -> None:
    text = HEADER + BOX + "(assert (< X_0 0.5))\n(assert (>= X_0 0.25))\n(assert (<= (* 2 X_1) 1))\n(assert (<= Y_0 0))\n"
    box = parse_vnnlib(text).regions[0].box
    assert box.lower == (Fraction(1, 4), Fraction(-1))
    assert box.upper == (Fraction(1, 2), Fraction(1, 2))
    assert box.upper_strict == (True, False)
    assert not box.contains([Fraction(1, 2), Fraction(0)])
    assert box.contains([Fraction(1, 4), Fraction(1, 2)])


def test_empty_disjuncts_are_dropped_with_a_note() -> None:
    text = HEADER + BOX + "(assert (or (and (<= X_0 -1) (<= Y_0 0)) (and (<= Y_1 0)) (and (<= 1 0) (<= Y_0 0))))\n"
    prop = parse_vnnlib(text)
    (region,) = prop.regions
    assert len(region.output_sets) == 1 and len(prop.notes) == 2


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        ("(declare-const X_0 Real)\n(assert (<= X_0 1)", 2, 1, "never closed"),
        ("(declare-const X_0 Real))\n", 1, 25, "unbalanced"),
        ("(declare-const X_0 Int)\n", 1, 20, "sort 'Int'"),
        ("(declare-const Z_0 Real)\n", 1, 16, "not named X_<i> or Y_<j>"),
        ("(declare-const X_0 Real)\n(declare-const X_0 Real)\n", 2, 16, "declared twice"),
        ("(declare-const X_0 Real)\n(assert (<= X_0 Y_3))\n", 2, 17, "Y_3 is used but never declared"),
        ("(declare-const X_0 Real)\n(declare-const Y_0 Real)\n(assert (<= (* X_0 Y_0) 1))\n", 3, 13, "not linear"),
        ("(declare-const X_0 Real)\n(assert (not (<= X_0 1)))\n", 2, 10, "'not' is not supported"),
        ("(declare-const X_0 Real)\n(assert (<= X_0 1.2.3))\n", 2, 17, "expected a number"),
        ("(declare-const X_0 Real)\n(assert (<= X_0))\n", 2, 9, "at least two terms"),
        ("(declare-const X_0 Real)\n  (push 1)\n", 2, 4, "command 'push'"),
        ("X_0\n", 1, 1, "outside parentheses"),
        ("(declare-const X_0 Real)\n(assert (<= (/ X_0 0) 1))\n", 2, 20, "division by zero"),
        ("(declare-const X_0 Real)\n(assert (<= (% X_0 2) 1))\n", 2, 14, "'%' is not supported"),
        # Found by fuzzing: int() refuses 4,300+ digits (was exit 3); a huge exponent is a huge Fraction.
        ("(declare-const X_0 Real)\n(assert (<= X_0 " + "1" * 5000 + "))\n", 2, 17, "out of range"),
        ("(declare-const X_0 Real)\n(assert (<= X_0 1e999999))\n", 2, 17, "out of range"),
        ("(declare-const X_0 Real)\n(assert (<= X_0 -2.5E-1001))\n", 2, 17, "out of range"),
    ],
)
def test_malformed_input_names_line_and_column(text: str, line: int, column: int, message: str) -> None:
    with pytest.raises(VnnlibSyntaxError) as info:
        parse_vnnlib(text, "bad.vnnlib")
    error = info.value
    assert (error.line, error.column) == (line, column), str(error)
    assert message in str(error)
    assert str(error).startswith(f"bad.vnnlib:{line}:{column}: ")


def test_semantic_errors() -> None:
    with pytest.raises(PropertyError, match="X_1 has no lower bound"):
        parse_vnnlib(HEADER + "(assert (<= X_0 1))(assert (>= X_0 0))(assert (<= X_1 1))(assert (<= Y_0 0))")
    with pytest.raises(PropertyError, match="X_1 is not declared but X_2 is"):
        parse_vnnlib("(declare-const X_0 Real)(declare-const X_2 Real)(declare-const Y_0 Real)(assert (<= Y_0 0))")
    with pytest.raises(PropertyError, match="no \\(assert"):
        parse_vnnlib(HEADER)


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(PropertyError, match="cannot read"):
        load_vnnlib(tmp_path / "absent.vnnlib")
    bad = tmp_path / "bad.vnnlib"
    bad.write_bytes(b"\xff\xfe(")
    with pytest.raises(PropertyError, match="not UTF-8"):
        load_vnnlib(bad)


def test_reading_a_property_does_not_import_torch() -> None:
    """The search and the certifier need torch (over a second to import); reading VNNLIB does not."""
    import subprocess
    import sys

    script = (
        "import sys\nfrom sealtrace.falsify import parse_vnnlib\n"
        "parse_vnnlib('(declare-const X_0 Real)\\n(declare-const Y_0 Real)\\n(assert (<= X_0 1))\\n"
        "(assert (>= X_0 0))\\n(assert (<= Y_0 0))\\n')\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "from sealtrace.falsify import Certifier\nassert 'torch' in sys.modules\n"
    )
    src = Path(__file__).resolve().parents[2] / "src"
    done = subprocess.run([sys.executable, "-c", script], env={"PYTHONPATH": str(src)}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def large_property(path: Path, n_inputs: int) -> None:
    """A VNN-COMP-style file: a bound pair per input around distinct values, an output disjunction."""
    centers = (np.arange(n_inputs) * 7919 % 10007) / 10007
    write_box_property(path, centers - 0.01, centers + 0.01, 4, "(or (>= Y_0 1.5) (and (<= Y_1 0) (>= Y_2 1)))")


def test_a_large_property_reads_in_linear_time(tmp_path: Path) -> None:
    # Was quadratic: 40k inputs took 10.6 s and 100k over a minute; now about a second.
    path = tmp_path / "large.vnnlib"
    large_property(path, 100_000)
    started = time.perf_counter()
    prop = load_vnnlib(path)
    elapsed = time.perf_counter() - started
    assert (prop.n_inputs, prop.n_outputs, len(prop.regions)) == (100_000, 4, 1)
    box = prop.regions[0].box
    assert box.lower[7] == Fraction(repr(7 * 7919 % 10007 / 10007 - 0.01)) and box.upper[99_999] > box.lower[99_999]
    assert len(prop.regions[0].output_sets) == 2
    assert elapsed < 20, f"{elapsed:.1f} s to read 100,000 input bounds"


def test_reading_stops_at_the_deadline(tmp_path: Path) -> None:
    path = tmp_path / "large.vnnlib"
    large_property(path, 2000)
    with pytest.raises(PropertyReadTimeoutError, match=r"the time budget ran out while reading the property \(0 of"):
        load_vnnlib(path, deadline=time.perf_counter() - 1)


def test_streamed_reading_matches_whole_text_at_any_chunk_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Chunk edges fall inside tokens, comments, CRLF line ends and a multi-byte character.
    text = (HEADER + "; a comment with é and (parentheses)\r\n" + BOX.replace("\n", "\r\n")
            + "(assert (or (<= Y_0 0.5) ; é\n  (>= Y_1 -2e-1)))\n")
    path = tmp_path / "p.vnnlib"
    path.write_bytes(text.encode("utf-8"))
    whole = parse_vnnlib(text, str(path))
    for chunk in (1, 2, 3, 7, 64):
        monkeypatch.setattr(vnnlib, "READ_CHUNK", chunk)
        assert load_vnnlib(path) == whole
    path.write_bytes(text.encode("utf-8")[:200] + b"\xff" + text.encode("utf-8")[200:])
    monkeypatch.setattr(vnnlib, "READ_CHUNK", 7)
    with pytest.raises(PropertyError, match=r"not UTF-8 text \(byte 200\)"):
        load_vnnlib(path)


def test_bounds_on_their_own_lines_keep_the_general_rules() -> None:
    # A bound may come before its declaration; a bound of an undeclared input is refused where it is.
    text = "(assert (<= X_1 1))\n" + HEADER + "(assert (>= X_1 0))\n" + BOX
    assert parse_vnnlib(text).regions[0].box.upper[1] == 1
    with pytest.raises(VnnlibSyntaxError, match="X_7 is used but never declared") as info:
        parse_vnnlib(HEADER + BOX + "(assert (<= X_7 1))\n(assert (<= Y_0 0))\n", "p.vnnlib")
    assert (info.value.line, info.value.column) == (9, 13)
    # The earliest error wins, whether in a bound line or in a formula.
    with pytest.raises(VnnlibSyntaxError, match="Y_9 is used but never declared"):
        parse_vnnlib(HEADER + BOX + "(assert (<= Y_9 0))\n(assert (<= X_7 1))\n")
    # Strictness and the tightest bound, across bound lines and formulas.
    prop = parse_vnnlib(HEADER + BOX + "(assert (< X_0 1))\n(assert (and (<= X_0 0.5) (<= Y_0 0)))\n")
    box = prop.regions[0].box
    assert (box.upper[0], box.upper_strict[0], box.lower_strict[0]) == (Fraction(1, 2), False, False)
    prop = parse_vnnlib(HEADER + BOX + "(assert (< X_0 1))\n(assert (<= Y_0 0))\n")
    assert prop.regions[0].box.upper_strict == (True, False)
