"""Searching for counterexamples: random sampling, then projected gradient descent with restarts.

Every search works on a margin: for one output set (a conjunction) the largest constraint value
``max_k (a_k·y + c_k·x + b_k)``, for a region's disjunction of output sets the smallest of those.
A point whose margin is at most zero (below zero where a constraint is strict) violates the
property, as far as the torch module says; the certifier decides. Searches run in the unit cube of each region's box (``x = lower + u·width``),
so one step size suits every input whatever its range, and many starts share one forward pass.

Rounds cycle through a schedule: sign-gradient PGD (the FGSM step, iterated with a cosine-decaying
step) and Adam, each at three step sizes (full, 1/10, 1/100: large steps cross the box, small ones
stay inside the narrow pockets where some counterexamples hide), and through the regions of a
property. Each round takes ``batch`` starts: a region's first from its best random samples, later
ones half fresh uniform points and half perturbations of the best points seen so far (with a spread
that shrinks with the step size); after one pass of the schedule every round also samples a few
thousand more points. A candidate is yielded as soon as its margin is below ``-slack`` (a little room
for the reference interpreter's different rounding), and at the end of a round when it is at most zero.
Everything random comes from one seeded generator, so a run is reproducible.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import torch

from sealtrace.falsify.network import BatchedNetwork
from sealtrace.falsify.property import Box, Property, Region
from sealtrace.limits import memory_budget

METHODS = ("pgd", "adam")
# Most rows a sampling batch draws at once (small inputs); large inputs get fewer (rows_within_budget).
SAMPLE_ROWS = 4096
# Copies of a row one batch holds at once: u, x and its clamp, the gradient and Adam's moments, and
# as much again for the network's activations (a guess: their sizes are the network's business).
ROW_COPIES = 16
# Batches one sampling pass draws at most (8,192 points of a small network are two).
SAMPLE_BATCHES = 64
# Best points kept per region to seed later rounds, at most.
ELITES = 64
# Candidates within the slack certified at the end of a round, at most.
LATE_PER_ROUND = 8


@dataclass(frozen=True)
class SearchSettings:
    """Knobs of the search. ``timeout_s`` and ``max_starts`` are the budgets (None: unlimited)."""

    seed: int = 0
    timeout_s: float | None = 60.0
    max_starts: int | None = None
    batch: int = 256
    steps: int = 60
    samples: int = 8192
    methods: tuple[str, ...] = METHODS
    step_size: float = 0.1
    adam_lr: float = 0.05
    slack: float = 1e-5
    # Log-sum-exp smoothing of the margin's max/min for the gradient (0: the plain max/min).
    temperature: float = 0.0
    # One thread is fastest for small networks on a shared machine (thread hand-offs cost more
    # than the matmuls); None keeps torch's setting.
    threads: int | None = 1

    def __post_init__(self) -> None:
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise ValueError(f"methods must be a non-empty subset of {METHODS}, got {self.methods}")
        if self.batch < 1 or self.steps < 1 or self.samples < 0:
            raise ValueError("batch and steps must be >= 1, samples >= 0")


@dataclass(frozen=True)
class Candidate:
    """A point the torch module says violates the property: X (searched dtype) and its margin there."""

    x: np.ndarray
    region: int
    margin: float
    method: str  # 'sample', 'pgd' or 'adam'
    round: int
    step: int


@dataclass
class SearchStats:
    """What a search did: points sampled, starts and gradient steps spent, candidates yielded."""

    samples: int = 0
    starts: int = 0
    rounds: int = 0
    steps: int = 0
    candidates: int = 0
    best_margin: float = math.inf
    elapsed_s: float = 0.0
    stopped_by: str = ""  # 'found', 'timeout', 'starts', 'no-region'
    skipped_regions: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "starts": self.starts,
            "rounds": self.rounds,
            "steps": self.steps,
            "candidates": self.candidates,
            "best_margin": None if math.isinf(self.best_margin) else self.best_margin,
            "elapsed_s": round(self.elapsed_s, 6),
            "stopped_by": self.stopped_by,
            "skipped_regions": list(self.skipped_regions),
        }


def float_bounds(box: Box, dtype: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The box rounded inward to ``dtype``: the smallest/largest representable values inside it.

    A point built from these bounds lies inside the exact box, so rounding never moves a candidate
    out of it (a strict bound moves one more step inward).
    """
    return (_inward(box.lower, box.lower_strict, dtype, upward=True),
            _inward(box.upper, box.upper_strict, dtype, upward=False))


def _inward(bounds: Sequence[Fraction], strict: Sequence[bool], dtype: np.dtype[Any], *, upward: bool) -> np.ndarray:
    """Each bound rounded to ``dtype``, then one step toward the box's inside where that left it."""
    nearest64 = np.array([_as_float(v) for v in bounds], dtype=np.float64)
    with np.errstate(over="ignore"):
        value = nearest64.astype(dtype)
    value64 = value.astype(np.float64)
    # Rounding to float64 keeps order and value64 is a float64, so where value64 and nearest64 differ
    # their order is that of value and the exact bound; only ties need the exact comparison.
    outside = value64 < nearest64 if upward else value64 > nearest64
    for i in np.flatnonzero(value64 == nearest64).tolist():
        exact = Fraction(float(value64[i])) if np.isfinite(value64[i]) else None
        if exact is None:
            outside[i] = (value64[i] < 0) == upward
        else:
            outside[i] = (exact < bounds[i] if upward else exact > bounds[i]) or (strict[i] and exact == bounds[i])
    value[outside] = np.nextafter(value[outside], dtype.type(np.inf if upward else -np.inf))
    return value


def _as_float(value: Fraction) -> float:
    try:
        return float(value)
    except OverflowError:  # beyond float64: as far as any float goes
        return math.inf if value > 0 else -math.inf


def no_point_reason(box: Box, lo: np.ndarray, hi: np.ndarray) -> str:
    """Why no point of ``lo``'s dtype lies inside ``box``: the first variable whose bounds admit none."""
    i = int(np.flatnonzero(lo > hi)[0])
    below, above = (Decimal(float(v)) for v in (hi[i], lo[i]))
    lower, upper = box.lower[i], box.upper[i]
    where = (f"pinned to {_decimal_text(lower)}" if lower == upper
             else f"within [{_decimal_text(lower)}, {_decimal_text(upper)}]")
    return (f"X_{i} is {where}, and no {lo.dtype} lies there: the nearest are {below} and {above} "
            "(bounds equal to exactly such a value would admit it)")


def _decimal_text(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    exact = Decimal(value.numerator) / Decimal(value.denominator)
    return str(exact) if Fraction(exact) == value else f"{float(value)!r}..."


class Objective:
    """The margin of one region, as torch tensors: ``margin(x, y)`` -> [B] (below 0: violated)."""

    def __init__(self, region: Region, n_inputs: int, n_outputs: int, dtype: torch.dtype) -> None:
        self.sets: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]] = []
        for output_set in region.output_sets:
            m = len(output_set.constraints)
            ay = np.zeros((m, n_outputs))
            ax = np.zeros((m, n_inputs))
            b = np.zeros(m)
            for k, c in enumerate(output_set.constraints):
                for j, a in c.y_terms:
                    ay[k, j] = float(a)
                for i, a in c.x_terms:
                    ax[k, i] = float(a)
                b[k] = float(c.constant)
            self.sets.append((
                torch.as_tensor(ay.T, dtype=dtype),
                torch.as_tensor(ax.T, dtype=dtype) if ax.any() else None,
                torch.as_tensor(b, dtype=dtype),
            ))

    def margin(self, x: torch.Tensor, y: torch.Tensor, temperature: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        """The margin per row, and the surrogate that gradients follow.

        With ``temperature`` > 0 the surrogate replaces max and min by their log-sum-exp smoothings,
        so one step moves every nearly-active constraint instead of only the largest one.
        """
        hard, soft = [], []
        for ay, ax, b in self.sets:
            if b.numel() == 0:
                # An empty conjunction: every point of the box is a counterexample.
                constant = torch.full((x.shape[0],), -1.0, dtype=y.dtype)
                hard.append(constant)
                soft.append(constant)
                continue
            g = y @ ay + b
            if ax is not None:
                g = g + x @ ax
            hard.append(g.max(dim=1).values)
            if temperature > 0:
                soft.append(temperature * torch.logsumexp(g / temperature, dim=1))
        hard_m = torch.stack(hard, dim=1).min(dim=1).values
        if temperature <= 0:
            return hard_m, hard_m
        soft_m = -temperature * torch.logsumexp(-torch.stack(soft, dim=1) / temperature, dim=1)
        return hard_m, soft_m


@dataclass
class _RegionSpace:
    index: int
    objective: Objective
    lo: torch.Tensor  # inward-rounded float bounds, the search dtype
    hi: torch.Tensor
    width: torch.Tensor
    elites: torch.Tensor  # best points seen (u coordinates), for later rounds' starts
    elite_margins: torch.Tensor


class Search:
    """One search of ``prop`` on ``network``: iterate :meth:`candidates`; stop when one is accepted.

    ``on_progress`` (if given) is called after every round with the stats so far.
    """

    def __init__(
        self,
        network: BatchedNetwork,
        prop: Property,
        settings: SearchSettings | None = None,
        *,
        deadline: float | None = None,
        on_progress: Callable[[SearchStats], None] | None = None,
    ) -> None:
        self.network = network
        self.prop = prop
        self.settings = settings or SearchSettings()
        self.stats = SearchStats()
        self.on_progress = on_progress
        self._started = time.perf_counter()
        budget = self.settings.timeout_s
        self._deadline = deadline if deadline is not None else (
            self._started + budget if budget is not None else math.inf
        )
        self.generator = torch.Generator().manual_seed(self.settings.seed)
        self.dtype = network.dtype
        np_dtype = np.dtype(torch.empty((), dtype=self.dtype).numpy().dtype)
        self.spaces: list[_RegionSpace] = []
        for r, region in enumerate(prop.regions):
            lo, hi = float_bounds(region.box, np_dtype)
            if np.any(lo > hi):
                # No float of the model's input type lies inside this box: no input can violate it.
                self.stats.skipped_regions.append(
                    f"region {r}: no {np_dtype} point inside the box ({no_point_reason(region.box, lo, hi)})")
                continue
            lo_t, hi_t = torch.from_numpy(lo), torch.from_numpy(hi)
            self.spaces.append(_RegionSpace(
                r, Objective(region, prop.n_inputs, prop.n_outputs, self.dtype), lo_t, hi_t, hi_t - lo_t,
                torch.empty((0, prop.n_inputs), dtype=self.dtype), torch.empty(0, dtype=self.dtype),
            ))

    def rows_within_budget(self) -> int:
        """Rows one batch may hold: a quarter of the memory budget (``sealtrace.limits``) over what a
        row costs, at least one."""
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        per_row = ROW_COPIES * itemsize * (self.prop.n_inputs + self.prop.n_outputs)
        return max(1, memory_budget() // 4 // per_row)

    def _sample_cap(self) -> int:
        """Most points one sampling pass draws: SAMPLE_BATCHES batches. Where the budget makes batches
        small (large inputs) sampling is no longer cheap, and the gradient rounds get the time."""
        return SAMPLE_BATCHES * min(SAMPLE_ROWS, self.rows_within_budget())

    def _time_left(self) -> bool:
        return time.perf_counter() < self._deadline

    def _points(self, space: _RegionSpace, u: torch.Tensor) -> torch.Tensor:
        # Straight-through clamp: the value is clamped into the float box (rounding of lo + u*w can
        # step one ulp out), the gradient is that of lo + u*w, so a coordinate at a bound can leave it.
        raw = space.lo + u * space.width
        return raw + (torch.minimum(torch.maximum(raw, space.lo), space.hi) - raw).detach()

    def _evaluate(self, space: _RegionSpace, u: torch.Tensor, temperature: float = 0.0
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self._points(space, u)
        margins, surrogate = space.objective.margin(x, self.network(x), temperature)
        return x, margins, surrogate

    def _remember(self, space: _RegionSpace, u: torch.Tensor, margins: torch.Tensor) -> None:
        # The best 64 points, or a batch's worth where rows are large: copying them is per batch.
        keep = min(ELITES, self.rows_within_budget())
        pool_u = torch.cat([space.elites, u.detach()])
        pool_m = torch.cat([space.elite_margins, margins.detach()])
        order = torch.argsort(pool_m)[:keep]
        space.elites, space.elite_margins = pool_u[order], pool_m[order]
        if len(pool_m):
            self.stats.best_margin = min(self.stats.best_margin, float(pool_m.min()))

    def _uniform(self, n: int) -> torch.Tensor:
        return torch.rand((n, self.prop.n_inputs), generator=self.generator, dtype=self.dtype)

    def _candidate(self, space: _RegionSpace, x: torch.Tensor, margin: float, method: str, rnd: int,
                   step: int) -> Candidate:
        self.stats.candidates += 1
        return Candidate(x.detach().numpy().copy(), space.index, margin, method, rnd, step)

    def candidates(self) -> Generator[Candidate, None, None]:
        """Yield candidates, best first within a batch, until the budgets run out or the caller stops."""
        previous_threads = torch.get_num_threads()
        if self.settings.threads is not None:
            torch.set_num_threads(self.settings.threads)
        try:
            yield from self._run()
        finally:
            torch.set_num_threads(previous_threads)
            self.stats.elapsed_s = time.perf_counter() - self._started

    def _run(self) -> Iterator[Candidate]:
        s = self.settings
        if not self.spaces:
            self.stats.stopped_by = "no-region"
            return
        yield from self._sample()
        # Each method at three step sizes (full, 1/10, 1/100): big steps cross the box, small ones
        # stay inside the narrow pockets where some counterexamples hide.
        schedule = [(method, level) for level in range(3) for method in s.methods]
        rnd = 0
        while True:
            if not self._time_left():
                self.stats.stopped_by = "timeout"
                return
            if s.max_starts is not None and self.stats.starts >= s.max_starts:
                self.stats.stopped_by = "starts"
                return
            batch = min(s.batch, self.rows_within_budget())
            if s.max_starts is not None:
                batch = min(batch, s.max_starts - self.stats.starts)
            space = self.spaces[rnd % len(self.spaces)]
            method, level = schedule[(rnd // len(self.spaces)) % len(schedule)]
            if rnd >= len(self.spaces) * len(schedule):
                # After one full pass of the schedule, keep sampling a little each round: the best
                # points seen seed later rounds, and narrow violated regions are found that way.
                yield from self._sample_region(space, min(s.batch * 8, self._sample_cap()))
            u0 = self._starts(space, batch, rnd, level)
            self.stats.starts += batch
            yield from self._descend(space, u0, method, rnd, s.step_size * 10.0**-level)
            self.stats.rounds += 1
            if self.on_progress is not None:
                self.on_progress(self.stats)
            rnd += 1

    def _sample(self) -> Iterator[Candidate]:
        """The cheap pass: uniform points (a quarter of them box corners), no gradients."""
        per_region = min(self.settings.samples // max(1, len(self.spaces)), self._sample_cap())
        for space in self.spaces:
            yield from self._sample_region(space, per_region)

    def _sample_region(self, space: _RegionSpace, count: int) -> Iterator[Candidate]:
        chunk = min(SAMPLE_ROWS, self.rows_within_budget())
        done = 0
        while done < count and self._time_left():
            n = min(chunk, count - done)
            u = self._uniform(n)
            corners = n // 4
            if corners:
                u[:corners] = torch.round(u[:corners])
            with torch.no_grad():
                x, margins, _ = self._evaluate(space, u)
            done += n
            self.stats.samples += n
            self._remember(space, u, margins)
            hits = torch.nonzero(margins < 0).reshape(-1)
            for i in hits[torch.argsort(margins[hits])].tolist():
                yield self._candidate(space, x[i], float(margins[i]), "sample", -1, 0)

    def _starts(self, space: _RegionSpace, n: int, rnd: int, level: int) -> torch.Tensor:
        u = self._uniform(n)
        if len(space.elites) and rnd >= len(self.spaces):
            # Half the starts explore around the best points seen, at a spread that shrinks with
            # the step size; the other half are fresh.
            k = n // 2
            pick = torch.randint(len(space.elites), (k,), generator=self.generator)
            spread = 0.03 * 10.0 ** -level
            noise = torch.randn((k, self.prop.n_inputs), generator=self.generator, dtype=self.dtype) * spread
            u[:k] = (space.elites[pick] + noise).clamp(0, 1)
        elif len(space.elites):
            # A region's first round starts from its best random samples.
            k = min(n // 2, len(space.elites))
            u[:k] = space.elites[:k]
        return u

    def _descend(self, space: _RegionSpace, u0: torch.Tensor, method: str, rnd: int, step_size: float
                 ) -> Iterator[Candidate]:
        s = self.settings
        u = u0.clone().requires_grad_(True)
        lr = s.adam_lr * step_size / s.step_size
        # Adam written out: torch.optim's first use imports the compiler stack (seconds), and
        # moments per row let a restarted start forget its history.
        first = torch.zeros_like(u0)
        second = torch.zeros_like(u0)
        beta1, beta2 = 0.9, 0.999
        yielded = torch.zeros(len(u0), dtype=torch.bool)
        margins = torch.full((len(u0),), math.inf, dtype=self.dtype)
        x = u0
        for step in range(s.steps):
            if not self._time_left():
                break
            x, margins, surrogate = self._evaluate(space, u, s.temperature)
            self.stats.steps += 1
            found = (margins.detach() < -s.slack) & ~yielded
            if bool(found.any()):
                idx = torch.nonzero(found).reshape(-1)
                for i in idx[torch.argsort(margins.detach()[idx])].tolist():
                    yielded[i] = True
                    yield self._candidate(space, x[i], float(margins[i].detach()), method, rnd, step)
            else:
                idx = None
            grad = torch.autograd.grad(surrogate.sum(), u)[0]
            # Cosine decay from the full step to 1% of it over the round.
            scale = 0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * step / s.steps))
            with torch.no_grad():
                if method == "pgd":
                    u -= step_size * scale * torch.sign(grad)
                else:
                    first.mul_(beta1).add_(grad, alpha=1 - beta1)
                    second.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                    corrected = (first / (1 - beta1 ** (step + 1))) / (
                        (second / (1 - beta2 ** (step + 1))).sqrt() + 1e-12
                    )
                    u -= lr * scale * corrected
                u.clamp_(0, 1)
                if idx is not None:
                    # Those candidates were not accepted: their starts are spent and restart elsewhere.
                    u[idx] = self._uniform(len(idx))
                    yielded[idx] = False
                    first[idx] = 0
                    second[idx] = 0
        with torch.no_grad():
            x, margins, _ = self._evaluate(space, u)
        self._remember(space, u, margins)
        # End of round: points inside the slack, down to a margin of exactly 0 (a tie satisfies a
        # non-strict constraint), still deserve certification; a few per round bound the cost.
        late = torch.nonzero((margins <= 0) & ~yielded).reshape(-1)
        for i in late[torch.argsort(margins[late])][:LATE_PER_ROUND].tolist():
            yield self._candidate(space, x[i], float(margins[i]), method, rnd, s.steps)
