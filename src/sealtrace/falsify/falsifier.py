"""``falsify(model, property)``: search with the torch module, certify with the sealed container.

The result is ``sat`` only with a certificate (the reference interpreter, running the verified
container with an audit log, confirmed the counterexample exactly); otherwise ``unknown``. A
falsifier never answers ``unsat``: not finding a counterexample proves nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from onnx import ModelProto

from sealtrace.falsify.certify import Certificate, Certifier, sealed_container
from sealtrace.falsify.network import BatchedNetwork, layout_of
from sealtrace.falsify.property import Property
from sealtrace.falsify.search import Search, SearchSettings, SearchStats
from sealtrace.inputs import write_npz_atomically
from sealtrace.limits import open_regular_file
from sealtrace.outputs import atomic_output
from sealtrace.session import Session

# Rejected candidates kept in full in a result (all are counted).
KEEP_REJECTED = 16


@dataclass
class FalsifyResult:
    """What a falsification run found: ``status`` is 'sat' (with ``counterexample``) or 'unknown'."""

    status: str
    property_name: str
    model: str
    container: str
    container_digest: str | None
    counterexample: Certificate | None
    rejected: list[Certificate] = field(default_factory=list)
    rejected_count: int = 0
    stats: SearchStats = field(default_factory=SearchStats)
    setup_s: float = 0.0
    total_s: float = 0.0
    time_to_counterexample_s: float | None = None
    batching: str = ""
    seed: int = 0
    searched_inputs: list[str] = field(default_factory=list)
    # Why the answer is unknown beyond what the search's stats say (no region to search, reading ran out of time).
    reason: str = ""

    @property
    def certified(self) -> bool:
        return self.counterexample is not None and self.counterexample.confirmed

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "property": self.property_name,
            "model": self.model,
            "container": self.container,
            "container_digest": self.container_digest,
            "certified": self.certified,
            "counterexample": self.counterexample.to_json() if self.counterexample else None,
            "reason": self.reason,
            "rejected_count": self.rejected_count,
            "rejected": [c.to_json() for c in self.rejected],
            "search": self.stats.to_json(),
            "batching": self.batching,
            "seed": self.seed,
            "setup_s": round(self.setup_s, 6),
            "total_s": round(self.total_s, 6),
            "time_to_counterexample_s": None if self.time_to_counterexample_s is None
            else round(self.time_to_counterexample_s, 6),
        }

    def vnncomp_text(self) -> str:
        """The VNN-COMP result file: ``sat`` and the assignment ``((X_0 v) ... (Y_0 v) ...)``, or ``unknown``.

        Values are the shortest decimals that read back to exactly the floats that were run.
        """
        if not self.certified or self.counterexample is None:
            return "unknown\n"
        cex = self.counterexample
        pairs = [f"(X_{i} {float(v)!r})" for i, v in enumerate(cex.x)]
        pairs += [f"(Y_{j} {float(v)!r})" for j, v in enumerate(cex.y)]
        return "sat\n(" + "\n ".join(pairs) + ")\n"


def falsify(
    model: str | os.PathLike[str] | ModelProto,
    prop: Property,
    settings: SearchSettings | None = None,
    *,
    audit: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    module: torch.nn.Module | None = None,
    searched_inputs: Sequence[str] | None = None,
    fixed_inputs: Mapping[str, Any] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    on_progress: Callable[[SearchStats], None] | None = None,
    on_rejected: Callable[[Certificate], None] | None = None,
    deadline: float | None = None,
) -> FalsifyResult:
    """Search ``model`` for a counterexample to ``prop``; report one only once it is certified.

    ``model`` is a .seal container or an ONNX model (sealed into ``cache_dir`` first: the
    certificate must come from a verified container). ``module`` replaces the torch module the
    search runs (default: the torch bridge's conversion of the verified Plan); whatever it says,
    only the reference run decides. ``searched_inputs`` names the inputs X covers (default: all
    not in ``fixed_inputs``, which maps input names to fixed values). ``audit`` is where the
    certifying run's audit log goes (default: kept in memory; its run digest is still reported);
    an existing file there is refused unless ``overwrite``, and replaced only by a complete log.
    The time budget (``settings.timeout_s``) covers the search and the certifying runs; ``deadline``
    (a :func:`time.perf_counter` time, for a caller whose budget began earlier, e.g. before reading
    the property) replaces the end it sets.
    """
    settings = settings or SearchSettings()
    started = time.perf_counter()
    if audit is not None and not overwrite and Path(audit).exists():
        from sealtrace.audit import AuditLogExistsError

        raise AuditLogExistsError(f"{audit}: audit log exists; choose another path or remove it")
    if not isinstance(model, ModelProto):
        # Refused before it is read: /dev/zero or a FIFO as the network would be read forever.
        f, _size = open_regular_file(model, "model")
        f.close()
    container = sealed_container(model, cache_dir)
    # Opening the Session verifies the container; the torch module is built from the same verified Plan.
    session = Session(container, backend="reference")
    layout = layout_of(session.plan, searched_inputs, fixed_inputs)
    layout.check(prop.n_inputs, prop.n_outputs, prop.name)
    certifier = Certifier(session, prop, layout)
    if module is None:
        from sealtrace.torchbridge import to_torch

        module = to_torch(session.plan)
    network = BatchedNetwork(module, layout)
    setup_s = time.perf_counter() - started

    if deadline is None and settings.timeout_s is not None:
        deadline = started + settings.timeout_s
    search = Search(network, prop, settings, deadline=deadline, on_progress=on_progress)
    result = FalsifyResult(
        "unknown", prop.name, str(model) if not isinstance(model, ModelProto) else "<ModelProto>",
        str(container), certifier.container_digest, None, stats=search.stats, setup_s=setup_s,
        batching=network.mode, seed=settings.seed,
        searched_inputs=[slot.name for slot in layout.inputs if slot.start is not None],
        reason="; ".join(search.stats.skipped_regions) if not search.spaces else "",
    )
    candidates = search.candidates()
    try:
        for candidate in candidates:
            certificate = certifier.certify(candidate.x, audit, search_margin=candidate.margin,
                                            method=candidate.method)
            if certificate.confirmed:
                result.status = "sat"
                result.counterexample = certificate
                result.time_to_counterexample_s = time.perf_counter() - started
                search.stats.stopped_by = "found"
                break
            result.rejected_count += 1
            if len(result.rejected) < KEEP_REJECTED:
                result.rejected.append(certificate)
            if on_rejected is not None:
                on_rejected(certificate)
    finally:
        candidates.close()  # restores torch's thread count and records the search's time now
    result.total_s = time.perf_counter() - started
    return result


def unknown_before_search(prop_name: str, model: str, reason: str, elapsed_s: float) -> FalsifyResult:
    """The result of a run whose time ran out before the search began (while reading the property)."""
    return FalsifyResult("unknown", prop_name, model, "", None, None, stats=SearchStats(stopped_by="timeout"),
                         total_s=elapsed_s, reason=reason)


def save_counterexample(result: FalsifyResult, path: str | os.PathLike[str], *, force: bool = False) -> None:
    """Write the certified counterexample to ``path`` (.npz): every model input by name, exactly as the
    reference run was fed (``sealtrace run MODEL --inputs FILE`` runs it again). An existing file is
    kept unless ``force``."""
    if result.counterexample is None:
        raise ValueError("no counterexample to save")
    write_npz_atomically(Path(path), result.counterexample.feeds, force=force)


def save_violation(result: FalsifyResult, path: str | os.PathLike[str], *, force: bool = False) -> None:
    """Write the certified counterexample's input to ``path`` (.npy): the first searched input's shape
    when there is one searched input, else the flat X vector. An existing file is kept unless ``force``."""
    if result.counterexample is None:
        raise ValueError("no counterexample to save")
    cex = result.counterexample
    x = cex.feeds[result.searched_inputs[0]] if len(result.searched_inputs) == 1 else cex.x
    with atomic_output(path, force) as f:
        np.save(f, np.asarray(x), allow_pickle=False)
