"""Properties: where a counterexample may lie (input boxes) and what makes it one (linear output constraints).

A :class:`Property` describes the UNSAFE set, as VNNLIB does: an input ``x`` is a counterexample
when, for some :class:`Region`, ``x`` lies in the region's :class:`Box` and the network's outputs
``y`` satisfy every constraint of one of the region's :class:`OutputSet` s. Each
:class:`LinearConstraint` reads ``a·y + c·x + b <= 0`` (``< 0`` when strict); coefficients are exact
fractions, so certification evaluates them without rounding (the decimal constants of a VNNLIB file
are kept exactly as written).

``X_0 .. X_{n-1}`` are the values of the searched inputs, flattened and concatenated in order;
``Y_0 .. Y_{m-1}`` the model's outputs, likewise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

import numpy as np

from sealtrace.falsify.errors import PropertyError

Number = int | float | Fraction | str


def exact(value: Number) -> Fraction:
    """``value`` as an exact fraction: a float keeps its binary value, a string its decimal value."""
    if isinstance(value, Fraction):
        return value
    if isinstance(value, float) and not np.isfinite(value):
        raise PropertyError(f"coefficient {value} is not finite")
    return Fraction(value)


@dataclass(frozen=True)
class LinearConstraint:
    """``sum(a_j * Y_j) + sum(c_i * X_i) + b <= 0``, or ``< 0`` when ``strict``.

    ``source`` says where the constraint came from (``file:line:column``), for reports.
    """

    y_terms: tuple[tuple[int, Fraction], ...]
    constant: Fraction = Fraction(0)
    x_terms: tuple[tuple[int, Fraction], ...] = ()
    strict: bool = False
    source: str = ""

    @classmethod
    def of(
        cls,
        y: Mapping[int, Number] | None = None,
        constant: Number = 0,
        *,
        x: Mapping[int, Number] | None = None,
        strict: bool = False,
    ) -> LinearConstraint:
        """``y`` and ``x`` map variable index -> coefficient: ``of({0: 1, 3: -1})`` is ``Y_0 - Y_3 <= 0``."""
        return cls(_terms(y or {}), exact(constant), _terms(x or {}), strict)

    @classmethod
    def less_equal(cls, left: int, right: int, *, strict: bool = False) -> LinearConstraint:
        """``Y_left <= Y_right`` (``<`` when strict)."""
        return cls.of({left: 1, right: -1}, strict=strict)

    def value(self, y: Sequence[Fraction], x: Sequence[Fraction] = ()) -> Fraction:
        """The exact left-hand side ``a·y + c·x + b`` for exact values ``y`` and ``x``."""
        total = self.constant
        for j, a in self.y_terms:
            total += a * y[j]
        for i, c in self.x_terms:
            total += c * x[i]
        return total

    def holds(self, y: Sequence[Fraction], x: Sequence[Fraction] = ()) -> bool:
        """Whether the constraint is satisfied, exactly."""
        v = self.value(y, x)
        return v < 0 if self.strict else v <= 0

    def describe(self) -> str:
        """The constraint as text, e.g. ``Y_0 - Y_3 <= 0``."""
        parts = []
        for name, terms in (("Y", self.y_terms), ("X", self.x_terms)):
            for index, coef in terms:
                sign = "-" if coef < 0 else "+"
                size = abs(coef)
                factor = "" if size == 1 else f"{_decimal(size)}*"
                parts.append(f"{sign} {factor}{name}_{index}")
        if self.constant or not parts:
            parts.append(f"{'-' if self.constant < 0 else '+'} {_decimal(abs(self.constant))}")
        text = " ".join(parts)
        text = text[2:] if text.startswith("+ ") else "-" + text[2:]
        return f"{text} {'<' if self.strict else '<='} 0"


def _terms(coefficients: Mapping[int, Number]) -> tuple[tuple[int, Fraction], ...]:
    merged: dict[int, Fraction] = {}
    for index, coef in coefficients.items():
        if int(index) < 0:
            raise PropertyError(f"variable index {index} is negative")
        merged[int(index)] = merged.get(int(index), Fraction(0)) + exact(coef)
    return tuple(sorted((i, c) for i, c in merged.items() if c != 0))


def _decimal(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return repr(float(value))


@dataclass(frozen=True)
class OutputSet:
    """A conjunction of linear constraints; the unsafe outputs of one disjunct."""

    constraints: tuple[LinearConstraint, ...]

    @classmethod
    def argmax(cls, label: int, n_outputs: int, *, strict: bool = False) -> OutputSet:
        """``Y_label`` is at least every other output (``Y_j <= Y_label`` for all j)."""
        return cls(tuple(LinearConstraint.less_equal(j, label, strict=strict) for j in range(n_outputs) if j != label))

    @classmethod
    def argmin(cls, label: int, n_outputs: int, *, strict: bool = False) -> OutputSet:
        """``Y_label`` is at most every other output."""
        return cls(tuple(LinearConstraint.less_equal(label, j, strict=strict) for j in range(n_outputs) if j != label))

    def holds(self, y: Sequence[Fraction], x: Sequence[Fraction] = ()) -> bool:
        """Whether every constraint holds."""
        return all(c.holds(y, x) for c in self.constraints)


@dataclass(frozen=True)
class Box:
    """Per-variable bounds ``lower[i] <= X_i <= upper[i]`` (``<`` where the strict flag is set)."""

    lower: tuple[Fraction, ...]
    upper: tuple[Fraction, ...]
    lower_strict: tuple[bool, ...] = ()
    upper_strict: tuple[bool, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.lower)
        if len(self.upper) != n:
            raise PropertyError(f"box has {n} lower but {len(self.upper)} upper bounds")
        # Empty strict flags mean closed bounds; stored in full so equality and hashing are simple.
        object.__setattr__(self, "lower_strict", tuple(self.lower_strict) or (False,) * n)
        object.__setattr__(self, "upper_strict", tuple(self.upper_strict) or (False,) * n)
        if len(self.lower_strict) != n or len(self.upper_strict) != n:
            raise PropertyError("box strictness flags do not match its bounds")

    @classmethod
    def of(cls, lower: Iterable[Number], upper: Iterable[Number]) -> Box:
        """A closed box from two sequences (floats keep their binary value, strings their decimal)."""
        lo = tuple(exact(v) for v in np.asarray(lower, dtype=object).reshape(-1))
        hi = tuple(exact(v) for v in np.asarray(upper, dtype=object).reshape(-1))
        return cls(lo, hi)

    @property
    def size(self) -> int:
        return len(self.lower)

    def is_empty(self) -> bool:
        """Whether no real number satisfies some variable's bounds."""
        return any(
            lo > hi or (lo == hi and (ls or us))
            for lo, hi, ls, us in zip(self.lower, self.upper, self.lower_strict, self.upper_strict, strict=True)
        )

    def contains(self, x: Sequence[Fraction]) -> bool:
        """Whether exact values ``x`` lie inside, strictness included."""
        if len(x) != self.size:
            return False
        for v, lo, hi, ls, us in zip(x, self.lower, self.upper, self.lower_strict, self.upper_strict, strict=True):
            if v < lo or v > hi or (ls and v == lo) or (us and v == hi):
                return False
        return True

    def extend(self, lower: Iterable[Number], upper: Iterable[Number]) -> Box:
        """This box with more variables appended (extra network inputs; fixed where lower == upper)."""
        more = Box.of(lower, upper)
        return Box(
            self.lower + more.lower,
            self.upper + more.upper,
            self.lower_strict + more.lower_strict,
            self.upper_strict + more.upper_strict,
        )


@dataclass(frozen=True)
class Region:
    """One input box with the output sets that make a point of it a counterexample (a disjunction)."""

    box: Box
    output_sets: tuple[OutputSet, ...]


@dataclass(frozen=True)
class Property:
    """A disjunction of regions over ``n_inputs`` X and ``n_outputs`` Y variables (the unsafe set).

    ``name`` is for reports (the VNNLIB file name, or what the caller chose).
    """

    regions: tuple[Region, ...]
    n_inputs: int
    n_outputs: int
    name: str = "property"
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        for k, region in enumerate(self.regions):
            if region.box.size != self.n_inputs:
                raise PropertyError(f"region {k} has a box of {region.box.size} variables, expected {self.n_inputs}")
            for output_set in region.output_sets:
                for c in output_set.constraints:
                    if any(j >= self.n_outputs for j, _ in c.y_terms):
                        raise PropertyError(f"constraint {c.describe()} names Y beyond Y_{self.n_outputs - 1}")
                    if any(i >= self.n_inputs for i, _ in c.x_terms):
                        raise PropertyError(f"constraint {c.describe()} names X beyond X_{self.n_inputs - 1}")

    @classmethod
    def unsafe(
        cls, box: Box, output_sets: Iterable[OutputSet], n_outputs: int, *, name: str = "property"
    ) -> Property:
        """One region: a point of ``box`` whose outputs fall in any of ``output_sets`` is a counterexample."""
        return cls((Region(box, tuple(output_sets)),), box.size, n_outputs, name)

    @classmethod
    def robustness(
        cls, center: np.ndarray, epsilon: float, label: int, n_outputs: int, *,
        lower: float | None = None, upper: float | None = None, name: str = "robustness",
    ) -> Property:
        """Local robustness: within ``epsilon`` (L-inf) of ``center``, some other class scores >= ``label``.

        ``lower``/``upper`` clip the box to the valid input range (e.g. 0 and 1 for images).
        """
        flat = np.asarray(center, dtype=np.float64).reshape(-1)
        lo = flat - epsilon if lower is None else np.maximum(flat - epsilon, lower)
        hi = flat + epsilon if upper is None else np.minimum(flat + epsilon, upper)
        sets = [OutputSet((LinearConstraint.less_equal(label, j),)) for j in range(n_outputs) if j != label]
        return cls.unsafe(Box.of(lo.tolist(), hi.tolist()), sets, n_outputs, name=name)

    def with_extra_inputs(self, lower: Iterable[Number], upper: Iterable[Number]) -> Property:
        """Append input variables (for a network's further inputs) with the same bounds in every region."""
        lo = list(np.asarray(lower, dtype=object).reshape(-1))
        hi = list(np.asarray(upper, dtype=object).reshape(-1))
        regions = tuple(replace(r, box=r.box.extend(lo, hi)) for r in self.regions)
        return replace(self, regions=regions, n_inputs=self.n_inputs + len(lo))

    def violated_by(self, x: Sequence[Fraction], y: Sequence[Fraction]) -> tuple[int, int] | None:
        """``(region, output set)`` of the first disjunct that exact ``x``, ``y`` satisfy, or None."""
        for r, region in enumerate(self.regions):
            if region.box.contains(x):
                for s, output_set in enumerate(region.output_sets):
                    if output_set.holds(y, x):
                        return r, s
        return None

    def describe(self) -> str:
        """One line: regions, output sets and constraints."""
        sets = sum(len(r.output_sets) for r in self.regions)
        constraints = sum(len(s.constraints) for r in self.regions for s in r.output_sets)
        return (
            f"{self.name}: {self.n_inputs} inputs, {self.n_outputs} outputs, {len(self.regions)} input region(s), "
            f"{sets} output set(s), {constraints} constraint(s)"
        )
