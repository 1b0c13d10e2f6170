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

import itertools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from sealtrace.errors import InputError
from sealtrace.falsify.errors import PropertyError, VnnlibSyntaxError
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

_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_VARIABLE = re.compile(r"([XY])_(\d+)")
_SYMBOL_CHARS = re.compile(r"[^\s();\"|]+")
_COMPARISONS = ("<=", ">=", "<", ">")


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
    """Tokenizer and s-expression reader that remember where each piece came from."""

    def __init__(self, text: str, path: str) -> None:
        self.text = text
        self.path = path

    def error(self, message: str, line: int, column: int) -> VnnlibSyntaxError:
        return VnnlibSyntaxError(message, self.path, line, column)

    def tokens(self) -> Iterator[Token]:
        text = self.text
        line, line_start, i = 1, 0, 0
        while i < len(text):
            ch = text[i]
            if ch == "\n":
                line, line_start, i = line + 1, i + 1, i + 1
            elif ch.isspace():
                i += 1
            elif ch == ";":
                end = text.find("\n", i)
                i = len(text) if end < 0 else end
            elif ch in "()":
                yield Token(ch, line, i - line_start + 1)
                i += 1
            else:
                match = _SYMBOL_CHARS.match(text, i)
                if match is None:
                    raise self.error(f"unexpected character {ch!r}", line, i - line_start + 1)
                yield Token(match.group(), line, i - line_start + 1)
                i = match.end()

    def expressions(self) -> list[SExpr]:
        stack: list[tuple[Token, list[SExpr]]] = []
        top: list[SExpr] = []
        for token in self.tokens():
            if token.text == "(":
                stack.append((token, []))
            elif token.text == ")":
                if not stack:
                    raise self.error("unbalanced ')'", token.line, token.column)
                opener, items = stack.pop()
                expr = SExpr(opener.line, opener.column, items=tuple(items))
                (stack[-1][1] if stack else top).append(expr)
            else:
                atom = SExpr(token.line, token.column, atom=token.text)
                if not stack:
                    raise self.error(f"{token.text!r} outside parentheses", token.line, token.column)
                stack[-1][1].append(atom)
        if stack:
            opener = stack[-1][0]
            raise self.error("'(' is never closed", opener.line, opener.column)
        return top


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
    def __init__(self, reader: _Reader) -> None:
        self.reader = reader
        self.declared: dict[str, SExpr] = {}

    def error(self, message: str, at: SExpr) -> VnnlibSyntaxError:
        return self.reader.error(message, at.line, at.column)

    def source(self, at: SExpr) -> str:
        return f"{self.reader.path}:{at.line}:{at.column}"

    def command(self, expr: SExpr, asserts: list[SExpr]) -> None:
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
            if name.atom in self.declared:
                raise self.error(f"{name.atom} is declared twice", name)
            self.declared[name.atom] = name
        elif head == "assert":
            if len(expr.items) != 2:
                raise self.error("expected (assert FORMULA)", expr)
            asserts.append(expr.items[1])
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
                return _Linear.const(Fraction(text))
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
    reader = _Reader(text, path)
    normalizer = _Normalizer(reader)
    asserts: list[SExpr] = []
    for expr in reader.expressions():
        normalizer.command(expr, asserts)
    if not asserts:
        raise PropertyError("no (assert ...): the property says nothing", path)
    # Formulas first: an error inside one is reported at its line and column.
    conjunction = SExpr(asserts[0].line, asserts[0].column, items=(SExpr(0, 0, atom="and"), *asserts))
    disjuncts = normalizer.formula(conjunction)
    n_inputs = _count(normalizer, "X", path)
    n_outputs = _count(normalizer, "Y", path)

    regions: dict[Box, list[OutputSet]] = {}
    notes: list[str] = []
    for k, atoms in enumerate(disjuncts):
        built = _disjunct(atoms, n_inputs, path, k)
        if built is None:
            notes.append(f"disjunct {k} is unsatisfiable (empty box or false constant comparison); dropped")
            continue
        box, output_set = built
        sets = regions.setdefault(box, [])
        if output_set not in sets:
            sets.append(output_set)
    prop = Property(
        tuple(Region(box, tuple(sets)) for box, sets in regions.items()),
        n_inputs,
        n_outputs,
        name or Path(path).name,
        tuple(notes),
    )
    return prop


def load_vnnlib(path: str | os.PathLike[str]) -> Property:
    """Read and parse a VNNLIB file (see :func:`parse_vnnlib`); its size is bounded (:func:`read_text_input`)."""
    where = os.fspath(path)
    try:
        text = read_text_input(path, "property file")
    except InputError as exc:
        reason = str(exc).removeprefix(f"{where}: ")
        raise PropertyError(f"cannot read the property file ({reason})", where) from None
    return parse_vnnlib(text, where)


def read_text_input(path: str | os.PathLike[str], what: str) -> str:
    """A UTF-8 text file the falsifier reads (a property, an instances list), refused when it is not a
    regular file (``/dev/zero``) or larger than 1/16 of the memory budget: parsing it costs many
    times its size, so a larger budget (``--memory-budget``) admits a larger file."""
    where = os.fspath(path)
    f, size = open_regular_file(path, what)
    with f:
        limit = max(memory_budget() // TEXT_PARSE_COST, 1 << 20)
        if size > limit:
            raise InputError(
                f"{where}: {format_size(size)}, more than a {what} may be ({format_size(limit)}, 1/{TEXT_PARSE_COST} "
                f"of the memory budget; raise it with --memory-budget or {BUDGET_ENV_VAR})"
            )
        try:
            data = f.read(size)
        except OSError as exc:
            raise InputError(f"{where}: cannot read ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text (byte {exc.start})") from None


def _count(normalizer: _Normalizer, kind: str, path: str) -> int:
    indices = sorted(int(name[2:]) for name in normalizer.declared if name[0] == kind)
    if not indices:
        raise PropertyError(f"no {kind}_<i> variable is declared", path)
    if indices != list(range(len(indices))):
        missing = min(set(range(indices[-1] + 1)) - set(indices))
        raise PropertyError(f"{kind}_{missing} is not declared but {kind}_{indices[-1]} is", path)
    return len(indices)


def _disjunct(atoms: list[_Atom], n_inputs: int, path: str, index: int) -> tuple[Box, OutputSet] | None:
    """Split one conjunction into its box and its remaining constraints; None when unsatisfiable."""
    lower: list[Fraction | None] = [None] * n_inputs
    upper: list[Fraction | None] = [None] * n_inputs
    lower_strict = [False] * n_inputs
    upper_strict = [False] * n_inputs
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
            bound = -linear.constant / c
            if c > 0:
                current = upper[i]
                if current is None or bound < current or (bound == current and strict):
                    upper[i], upper_strict[i] = bound, strict
            else:
                current = lower[i]
                if current is None or bound > current or (bound == current and strict):
                    lower[i], lower_strict[i] = bound, strict
            continue
        constraints.append(
            LinearConstraint(tuple(sorted(y.items())), linear.constant, tuple(sorted(x.items())), strict, source)
        )
    for i in range(n_inputs):
        for bounds, side in ((lower, "lower"), (upper, "upper")):
            if bounds[i] is None:
                raise PropertyError(f"X_{i} has no {side} bound (in disjunct {index}); a falsifier needs a box", path)
    box = Box(
        tuple(v for v in lower if v is not None),
        tuple(v for v in upper if v is not None),
        tuple(lower_strict),
        tuple(upper_strict),
    )
    if box.is_empty():
        return None
    return box, OutputSet(tuple(constraints))
