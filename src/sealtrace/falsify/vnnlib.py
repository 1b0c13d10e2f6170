"""VNNLIB (the VNN-COMP property format) -> :class:`Property`.

The supported subset is what VNN-COMP benchmarks use: ``(declare-const X_i Real)`` and
``(declare-const Y_j Real)``; ``(assert F)`` where ``F`` is built from ``and``, ``or`` and the
comparisons ``<= >= < >`` (chainable, as in SMT-LIB) over linear terms: variables, constants
(decimal or scientific, optionally signed), ``(+ t ...)``, ``(- t)``, ``(- t u ...)``, ``(* c t)``
with all factors but one constant, and ``(/ t c)``. Comments run from ``;`` to the end of a line.

The asserts are conjoined and brought into disjunctive normal form; in each disjunct the
comparisons of a single X variable with a constant become the input box and the rest become linear
constraints. Disjuncts with the same box are grouped into one :class:`Region`. Anything else is
refused with a :class:`VnnlibSyntaxError` naming the line and column.
"""

from __future__ import annotations

import codecs
import itertools
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import BinaryIO

from sealtrace.errors import InputError
from sealtrace.falsify.errors import PropertyError, PropertyReadTimeoutError, VnnlibSyntaxError
from sealtrace.falsify.property import Box, LinearConstraint, OutputSet, Property, Region
from sealtrace.limits import ENV_VAR as BUDGET_ENV_VAR
from sealtrace.limits import format_size, memory_budget, open_regular_file

# Parsing text into tokens and expressions costs this many times its size in memory, at most.
TEXT_PARSE_COST = 16
# Disjunctive normal form can blow up (a product of disjunctions); past this many disjuncts we refuse.
MAX_DISJUNCTS = 100_000
# Constants are exact fractions: a 10,000-digit constant or an exponent of a million would make every
# later product slow and large (and Python refuses int() of more than 4,300 digits). float64 needs
# 17 significant digits and exponents within +-324; these bounds leave a wide margin.
MAX_NUMBER_DIGITS = 1_000
MAX_NUMBER_EXPONENT = 1_000

# A file is read this many bytes at a time (the deadline is checked between chunks).
READ_CHUNK = 1 << 20

_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_VARIABLE = re.compile(r"([XY])_(\d+)")
_SYMBOL_CHARS = re.compile(r"[^\s();\"|]+")
_COMPARISONS = ("<=", ">=", "<", ">")
_TOKEN = re.compile(r"(?P<space>\s+)|(?P<comment>;.*)|(?P<atom>[()]|[^\s();\"|]+)|(?P<bad>.)")
# The lines that make up the bulk of a VNN-COMP property, read without building expressions: a
# declaration, or one bound of one input. Numbers here are well inside MAX_NUMBER_DIGITS/EXPONENT;
# anything else (X_01, a long number, two commands on a line) goes through the general reader.
_SIMPLE_LINE = re.compile(
    r"\s*\((?:declare-const ([XY]_(?:0|[1-9]\d{0,9})) Real|assert \((<=|>=|<|>) (X_(0|[1-9]\d{0,9})) "
    r"([-+]?(?:\d{1,40}(?:\.\d{0,40})?|\.\d{1,40})(?:[eE][-+]?\d{1,3})?)\))\)\s*"
)


@dataclass(frozen=True)
class Token:
    """One token: '(' or ')' or an atom, with its 1-based line and column."""

    text: str
    line: int
    column: int


@dataclass(frozen=True)
class SExpr:
    """A parenthesized list (``items``) or an atom (``atom``), located where it starts."""

    line: int
    column: int
    atom: str | None = None
    items: tuple[SExpr, ...] = ()

    @property
    def head(self) -> str | None:
        """The first item's text for a list that starts with an atom."""
        return self.items[0].atom if self.items else None


class _Reader:
    """Tokenizer and s-expression reader that remember where each piece came from.

    Text arrives a line at a time (:meth:`feed`), so a file is read in bounded chunks; each finished
    top-level expression is handed to ``on_command`` at once and not kept.
    """

    def __init__(self, path: str, on_command: Callable[[SExpr], None]) -> None:
        self.path = path
        self.on_command = on_command
        self.stack: list[tuple[Token, list[SExpr]]] = []

    def error(self, message: str, line: int, column: int) -> VnnlibSyntaxError:
        return VnnlibSyntaxError(message, self.path, line, column)

    def feed(self, text: str, line: int) -> None:
        """Read one line (without its newline); a comment or an atom never spans lines."""
        for match in _TOKEN.finditer(text):
            kind = match.lastgroup
            if kind == "space" or kind == "comment":
                continue
            column = match.start() + 1
            token = match.group()
            if kind == "bad":
                raise self.error(f"unexpected character {token!r}", line, column)
            self.token(Token(token, line, column))

    def token(self, token: Token) -> None:
        stack = self.stack
        if token.text == "(":
            stack.append((token, []))
        elif token.text == ")":
            if not stack:
                raise self.error("unbalanced ')'", token.line, token.column)
            opener, items = stack.pop()
            expr = SExpr(opener.line, opener.column, items=tuple(items))
            if stack:
                stack[-1][1].append(expr)
            else:
                self.on_command(expr)
        else:
            if not stack:
                raise self.error(f"{token.text!r} outside parentheses", token.line, token.column)
            stack[-1][1].append(SExpr(token.line, token.column, atom=token.text))

    def finish(self) -> None:
        if self.stack:
            opener = self.stack[-1][0]
            raise self.error("'(' is never closed", opener.line, opener.column)


@dataclass
class _Linear:
    """A linear term: coefficients of X and Y variables plus a constant."""

    x: dict[int, Fraction]
    y: dict[int, Fraction]
    constant: Fraction

    @classmethod
    def const(cls, value: Fraction) -> _Linear:
        return cls({}, {}, value)

    def scaled(self, k: Fraction) -> _Linear:
        return _Linear({i: c * k for i, c in self.x.items()}, {j: c * k for j, c in self.y.items()}, self.constant * k)

    def plus(self, other: _Linear) -> _Linear:
        x, y = dict(self.x), dict(self.y)
        for i, c in other.x.items():
            x[i] = x.get(i, Fraction(0)) + c
        for j, c in other.y.items():
            y[j] = y.get(j, Fraction(0)) + c
        return _Linear(x, y, self.constant + other.constant)

    def is_constant(self) -> bool:
        return not any(self.x.values()) and not any(self.y.values())


# A disjunct while normalizing: a conjunction of atoms, each ``linear <= 0`` (strict flag) with its source.
_Atom = tuple[_Linear, bool, str]


class _Normalizer:
    """Collects commands as they are read: declarations, one-variable bounds of X (the bulk of a
    property, kept as per-variable bounds, not as formulas) and the other asserts (kept as formulas)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.declared: set[str] = set()
        self.asserts: list[SExpr] = []
        self.assert_count = 0
        # Top-level bounds hold in every disjunct: X index -> (bound, strict).
        self.lower: dict[int, tuple[Fraction, bool]] = {}
        self.upper: dict[int, tuple[Fraction, bool]] = {}
        # Bounds read before their variable's declaration: (name, line, column), checked at the end.
        self.forward: list[tuple[str, int, int]] = []

    def error(self, message: str, at: SExpr) -> VnnlibSyntaxError:
        return VnnlibSyntaxError(message, self.path, at.line, at.column)

    def source(self, at: SExpr) -> str:
        return f"{self.path}:{at.line}:{at.column}"

    def declare(self, name: str, line: int, column: int) -> None:
        if name in self.declared:
            raise VnnlibSyntaxError(f"{name} is declared twice", self.path, line, column)
        self.declared.add(name)

    def simple_line(self, match: re.Match[str], line: int) -> None:
        """A line :data:`_SIMPLE_LINE` matched: ``(declare-const V Real)`` or ``(assert (OP X_i NUMBER))``."""
        declared, op, variable, index, number = match.groups()
        if declared is not None:
            self.declare(declared, line, match.start(1) + 1)
            return
        self.assert_count += 1
        if variable not in self.declared:
            self.forward.append((variable, line, match.start(3) + 1))
        # X <= c is an upper bound, X >= c a lower one; < and > are strict.
        _tighten(self.upper if op[0] == "<" else self.lower, int(index), _exact_number(number), len(op) == 1,
                 op[0] == "<")

    def command(self, expr: SExpr) -> None:
        if expr.atom is not None or not expr.items or expr.head is None:
            raise self.error("expected a command such as (declare-const ...) or (assert ...)", expr)
        head = expr.head
        if head == "declare-const":
            if len(expr.items) != 3 or expr.items[1].atom is None or expr.items[2].atom is None:
                raise self.error("expected (declare-const NAME Real)", expr)
            name, sort = expr.items[1], expr.items[2]
            assert name.atom is not None
            if sort.atom != "Real":
                raise self.error(f"sort {sort.atom!r} is not supported (only Real)", sort)
            if _VARIABLE.fullmatch(name.atom) is None:
                raise self.error(f"variable {name.atom!r} is not named X_<i> or Y_<j>", name)
            self.declare(name.atom, name.line, name.column)
        elif head == "assert":
            if len(expr.items) != 2:
                raise self.error("expected (assert FORMULA)", expr)
            self.assert_count += 1
            self.asserts.append(expr.items[1])
        elif head in ("set-logic", "set-info", "set-option", "check-sat", "get-model", "exit"):
            pass  # SMT-LIB housekeeping some generators emit; it does not change the property
        else:
            raise self.error(f"command {head!r} is not supported", expr.items[0])

    def formula(self, expr: SExpr) -> list[list[_Atom]]:
        """``expr`` in disjunctive normal form: a list of conjunctions of atoms."""
        if expr.atom is not None:
            if expr.atom == "true":
                return [[]]
            if expr.atom == "false":
                return []
            raise self.error(f"expected a formula, found {expr.atom!r}", expr)
        head = expr.head
        if head is None:
            raise self.error("expected (and ...), (or ...) or a comparison", expr)
        args = expr.items[1:]
        if head == "and":
            result: list[list[_Atom]] = [[]]
            for arg in args:
                part = self.formula(arg)
                if len(result) * len(part) > MAX_DISJUNCTS:
                    raise self.error(f"the formula has more than {MAX_DISJUNCTS} disjuncts in normal form", expr)
                if len(part) == 1:
                    # In place: copying every conjunction for each conjunct would be quadratic.
                    for conjunction in result:
                        conjunction.extend(part[0])
                else:
                    result = [left + right for left in result for right in part]
            return result
        if head == "or":
            disjuncts: list[list[_Atom]] = []
            for arg in args:
                disjuncts.extend(self.formula(arg))
                if len(disjuncts) > MAX_DISJUNCTS:
                    raise self.error(f"the formula has more than {MAX_DISJUNCTS} disjuncts", expr)
            return disjuncts
        if head in _COMPARISONS:
            if len(args) < 2:
                raise self.error(f"({head} ...) needs at least two terms", expr)
            terms = [self.term(arg) for arg in args]
            atoms: list[_Atom] = []
            for left, right in itertools.pairwise(terms):
                # a <= b  ->  a - b <= 0;  a >= b  ->  b - a <= 0
                smaller, larger = (left, right) if head in ("<=", "<") else (right, left)
                atoms.append((smaller.plus(larger.scaled(Fraction(-1))), head in ("<", ">"), self.source(expr)))
            return [atoms]
        raise self.error(f"{head!r} is not supported in a formula (expected and, or, <=, >=, <, >)", expr.items[0])

    def term(self, expr: SExpr) -> _Linear:
        if expr.atom is not None:
            text = expr.atom
            if _NUMBER.fullmatch(text):
                mantissa, _, exponent = text.lower().partition("e")
                if len(mantissa) > MAX_NUMBER_DIGITS or (exponent and abs(int(exponent[:12])) > MAX_NUMBER_EXPONENT):
                    raise self.error(
                        f"number {text[:24]}... is out of range (at most {MAX_NUMBER_DIGITS} digits and an "
                        f"exponent within +-{MAX_NUMBER_EXPONENT})", expr)
                return _Linear.const(_exact_number(text))
            if text in self.declared:
                kind, index = text[0], int(text[2:])
                return _Linear({index: Fraction(1)}, {}, Fraction(0)) if kind == "X" else \
                    _Linear({}, {index: Fraction(1)}, Fraction(0))
            if _VARIABLE.fullmatch(text):
                raise self.error(f"{text} is used but never declared", expr)
            raise self.error(f"expected a number or a declared variable, found {text!r}", expr)
        head = expr.head
        args = expr.items[1:]
        if head is None or not args:
            raise self.error("expected a term such as (+ ...), (- ...), (* ...) or (/ ...)", expr)
        parts = [self.term(arg) for arg in args]
        if head == "+":
            total = parts[0]
            for part in parts[1:]:
                total = total.plus(part)
            return total
        if head == "-":
            if len(parts) == 1:
                return parts[0].scaled(Fraction(-1))
            total = parts[0]
            for part in parts[1:]:
                total = total.plus(part.scaled(Fraction(-1)))
            return total
        if head == "*":
            variable = [p for p in parts if not p.is_constant()]
            if len(variable) > 1:
                raise self.error("(* ...) multiplies two variables: the term is not linear", expr)
            factor = Fraction(1)
            for p in parts:
                if p.is_constant():
                    factor *= p.constant
            return variable[0].scaled(factor) if variable else _Linear.const(factor)
        if head == "/":
            if len(parts) != 2 or not parts[1].is_constant():
                raise self.error("(/ t c) divides by a constant only", expr)
            if parts[1].constant == 0:
                raise self.error("division by zero", expr.items[2])
            return parts[0].scaled(1 / parts[1].constant)
        raise self.error(f"{head!r} is not supported in a term (expected +, -, *, /)", expr.items[0])


def parse_vnnlib(text: str, path: str = "<vnnlib>", name: str | None = None) -> Property:
    """Parse VNNLIB ``text`` into a :class:`Property`; ``path`` is used in error messages.

    Raises :class:`VnnlibSyntaxError` (with line and column) for malformed input and
    :class:`PropertyError` for a property that parses but cannot be searched (an input without bounds).
    """
    return _parse([(1, text.split("\n"))], path, name)


def load_vnnlib(path: str | os.PathLike[str], *, deadline: float | None = None) -> Property:
    """Read and parse a VNNLIB file (see :func:`parse_vnnlib`), streamed in bounded chunks.

    Its size is bounded as :func:`read_text_input` bounds it. ``deadline`` (a :func:`time.perf_counter`
    time) stops the reading with :class:`PropertyReadTimeoutError` once it has passed.
    """
    where = os.fspath(path)
    try:
        f, size = _open_text_input(path, "property file")
    except InputError as exc:
        reason = str(exc).removeprefix(f"{where}: ")
        raise PropertyError(f"cannot read the property file ({reason})", where) from None
    with f:
        return _parse(_file_lines(f, where, size, deadline), where, None)


def _file_lines(f: BinaryIO, where: str, size: int, deadline: float | None) -> Iterator[tuple[int, list[str]]]:
    """The lines of ``f`` a chunk at a time, each block with its first line's number, decoded as UTF-8;
    the deadline is checked per chunk."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    number, carry, offset = 1, "", 0
    while True:
        if deadline is not None and time.perf_counter() > deadline:
            raise PropertyReadTimeoutError(where, offset, size)
        try:
            chunk = f.read(READ_CHUNK)
        except OSError as exc:
            raise PropertyError(f"cannot read the property file ({exc.strerror or exc})", where) from None
        try:
            buffered = len(decoder.getstate()[0])
            text = carry + decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            raise PropertyError(f"cannot read the property file (not UTF-8 text (byte "
                                f"{offset - buffered + exc.start}))", where) from None
        offset += len(chunk)
        lines = text.split("\n")
        carry = lines.pop() if chunk else ""
        yield number, lines
        number += len(lines)
        if not chunk:
            yield number, [carry]
            return


def _parse(blocks: Iterable[tuple[int, list[str]]], path: str, name: str | None) -> Property:
    """The property in ``blocks`` of lines (each with its first line's number)."""
    normalizer = _Normalizer(path)
    reader = _Reader(path, normalizer.command)
    simple, simple_line = _SIMPLE_LINE.fullmatch, normalizer.simple_line
    for first, lines in blocks:
        for number, line in enumerate(lines, first):
            if not reader.stack:
                # The bulk of a property (declarations, one bound per line) skips the general reader.
                match = simple(line)
                if match is not None:
                    simple_line(match, number)
                    continue
            reader.feed(line, number)
    reader.finish()
    if not normalizer.assert_count:
        raise PropertyError("no (assert ...): the property says nothing", path)
    # Formulas first: an error inside one is reported at its line and column (the earliest error wins).
    forward = next((use for use in normalizer.forward if use[0] not in normalizer.declared), None)
    try:
        disjuncts: list[list[_Atom]] = [[]]
        if normalizer.asserts:
            opening = normalizer.asserts[0]
            conjunction = SExpr(opening.line, opening.column, items=(SExpr(0, 0, atom="and"), *normalizer.asserts))
            disjuncts = normalizer.formula(conjunction)
    except VnnlibSyntaxError as exc:
        if forward is None or (exc.line, exc.column) < forward[1:]:
            raise
        disjuncts = []
    if forward is not None:
        variable, at_line, at_column = forward
        raise VnnlibSyntaxError(f"{variable} is used but never declared", path, at_line, at_column)
    n_inputs = _count(normalizer, "X", path)
    n_outputs = _count(normalizer, "Y", path)

    # Disjuncts with the same own X bounds share one box (built once: it has a bound per input).
    boxes: dict[tuple[object, ...], Box | None] = {}
    regions: list[tuple[Box, list[OutputSet]]] = []
    notes: list[str] = []
    for k, atoms in enumerate(disjuncts):
        split = _split_disjunct(atoms)
        box = None
        if split is not None:
            lower, upper, constraints = split
            key = (tuple(sorted(lower.items())), tuple(sorted(upper.items())))
            if key not in boxes:
                boxes[key] = _box(normalizer, lower, upper, n_inputs, k)
            box = boxes[key]
        if box is None:
            notes.append(f"disjunct {k} is unsatisfiable (empty box or false constant comparison); dropped")
            continue
        output_set = OutputSet(tuple(constraints))
        sets = next((sets for existing, sets in regions if existing == box), None)
        if sets is None:
            regions.append((box, [output_set]))
        elif output_set not in sets:
            sets.append(output_set)
    return Property(
        tuple(Region(box, tuple(sets)) for box, sets in regions),
        n_inputs,
        n_outputs,
        name or Path(path).name,
        tuple(notes),
    )


def read_text_input(path: str | os.PathLike[str], what: str) -> str:
    """A UTF-8 text file the falsifier reads (a property, an instances list), refused when it is not a
    regular file (``/dev/zero``) or larger than 1/16 of the memory budget: parsing it costs many
    times its size, so a larger budget (``--memory-budget``) admits a larger file."""
    where = os.fspath(path)
    f, size = _open_text_input(path, what)
    with f:
        try:
            data = f.read(size)
        except OSError as exc:
            raise InputError(f"{where}: cannot read ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text (byte {exc.start})") from None


def _open_text_input(path: str | os.PathLike[str], what: str) -> tuple[BinaryIO, int]:
    """The open file and its size, refused before anything is read when it is larger than the budget admits."""
    where = os.fspath(path)
    f, size = open_regular_file(path, what)
    limit = max(memory_budget() // TEXT_PARSE_COST, 1 << 20)
    if size > limit:
        f.close()
        raise InputError(
            f"{where}: {format_size(size)}, more than a {what} may be ({format_size(limit)}, 1/{TEXT_PARSE_COST} "
            f"of the memory budget; raise it with --memory-budget or {BUDGET_ENV_VAR})"
        )
    return f, size


def _exact_number(text: str) -> Fraction:
    """A decimal's exact value (checked against :data:`_NUMBER` by the caller).

    ``Fraction(text)`` parses in Python and reduces again; a Decimal's ratio is already in lowest
    terms with a positive denominator, so it is set directly: three times faster, and the bulk of
    the time a large property takes to read.
    """
    numerator, denominator = Decimal(text).as_integer_ratio()
    value = object.__new__(Fraction)
    object.__setattr__(value, "_numerator", numerator)
    object.__setattr__(value, "_denominator", denominator)
    return value


def _count(normalizer: _Normalizer, kind: str, path: str) -> int:
    indices = sorted(int(name[2:]) for name in normalizer.declared if name[0] == kind)
    if not indices:
        raise PropertyError(f"no {kind}_<i> variable is declared", path)
    if indices != list(range(len(indices))):
        missing = min(set(range(indices[-1] + 1)) - set(indices))
        raise PropertyError(f"{kind}_{missing} is not declared but {kind}_{indices[-1]} is", path)
    return len(indices)


def _tighten(bounds: dict[int, tuple[Fraction, bool]], index: int, value: Fraction, strict: bool,
             upper: bool) -> None:
    """Keep the tighter of ``bounds[index]`` and the new bound (at equal values, the strict one)."""
    current = bounds.get(index)
    if current is None or (value < current[0] if upper else value > current[0]) or (value == current[0] and strict):
        bounds[index] = (value, strict)


def _split_disjunct(atoms: list[_Atom]) -> tuple[
        dict[int, tuple[Fraction, bool]], dict[int, tuple[Fraction, bool]], list[LinearConstraint]] | None:
    """One conjunction's own X bounds (lower, upper) and remaining constraints; None when a constant
    comparison in it is false."""
    lower: dict[int, tuple[Fraction, bool]] = {}
    upper: dict[int, tuple[Fraction, bool]] = {}
    constraints: list[LinearConstraint] = []
    for linear, strict, source in atoms:
        x = {i: c for i, c in linear.x.items() if c != 0}
        y = {j: c for j, c in linear.y.items() if c != 0}
        if not x and not y:
            holds = linear.constant < 0 if strict else linear.constant <= 0
            if not holds:
                return None
            continue
        if not y and len(x) == 1:
            # c*X_i + b <= 0: an upper bound -b/c when c > 0, a lower bound when c < 0.
            ((i, c),) = x.items()
            _tighten(upper if c > 0 else lower, i, -linear.constant / c, strict, c > 0)
            continue
        constraints.append(
            LinearConstraint(tuple(sorted(y.items())), linear.constant, tuple(sorted(x.items())), strict, source)
        )
    return lower, upper, constraints


def _box(normalizer: _Normalizer, lower: dict[int, tuple[Fraction, bool]], upper: dict[int, tuple[Fraction, bool]],
         n_inputs: int, index: int) -> Box | None:
    """The box of disjunct ``index``: the top-level bounds tightened by its own; None when it is empty."""
    merged = []
    for own, common, is_upper in ((lower, normalizer.lower, False), (upper, normalizer.upper, True)):
        bounds = common
        if own:
            bounds = dict(common)
            for i, (value, strict) in own.items():
                _tighten(bounds, i, value, strict, is_upper)
        merged.append(bounds)
    low, high = merged
    if len(low) < n_inputs or len(high) < n_inputs:
        # The first variable without a bound, its lower side first.
        every = set(range(n_inputs))
        first_low, first_high = min(every - low.keys(), default=n_inputs), min(every - high.keys(), default=n_inputs)
        side = "lower" if first_low <= first_high else "upper"
        raise PropertyError(f"X_{min(first_low, first_high)} has no {side} bound (in disjunct {index}); a falsifier "
                            "needs a box", normalizer.path)
    lows = [low[i] for i in range(n_inputs)]
    highs = [high[i] for i in range(n_inputs)]
    box = Box(tuple(v for v, _ in lows), tuple(v for v, _ in highs), tuple(s for _, s in lows),
              tuple(s for _, s in highs))
    return None if box.is_empty() else box
