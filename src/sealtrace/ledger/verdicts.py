"""The parity verdict of a replay, and the replay record that carries it.

A replay re-runs a recorded request's stored inputs and compares what it gets with what the record
says was answered. Two shells replay: the server's deferred audit (:mod:`sealtrace.serve.replay`) and
the cluster's ledger replays (:mod:`sealtrace.scale.replay`); both judge and record here, so the
verdicts mean the same wherever they were made. Nothing here runs a model: the callers do, and hand
over the values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sealtrace.audit.records import value_identity
from sealtrace.ledger.records import new_record, record_leaf, replay_link
from sealtrace.parity.metrics import compare_values
from sealtrace.parity.tolerance import Tolerance

MAX_DETAIL = 1000  # characters of a link's detail


def judge(
    reference: Mapping[str, Any],
    served: Mapping[str, Any] | None,
    original: Mapping[str, Any],
    tolerance: Tolerance,
) -> tuple[str, str | None]:
    """The parity verdict of a replay: ``identical`` (every output digest equals the record's),
    ``within-tolerance``, or ``diverged`` (naming the worst output), against the served outputs;
    ``failed`` when the digests differ and the served values are not available to compare with."""
    recorded = original["outputs"]
    if set(reference) != set(recorded):
        return "diverged", f"outputs differ: replay has {sorted(reference)}, the record {sorted(recorded)}"
    if all(value_identity(value) == recorded[name] for name, value in reference.items()):
        return "identical", None
    if served is None:
        return "failed", "outputs differ from the record's digests and the served values are not available"
    worst: tuple[float, str] | None = None
    with np.errstate(all="ignore"):
        for name, value in reference.items():
            diff = compare_values(name, value, served[name], tolerance, quiet=True)
            if diff.exceeds:
                reason = diff.shape_mismatch or diff.dtype_mismatch or f"max |diff| {diff.max_abs:.3g}"
                score = float("inf") if not np.isfinite(diff.max_abs) else diff.max_abs
                if worst is None or score > worst[0]:
                    worst = (score, f"output {name!r}: {reason} (atol {tolerance.atol:g}, rtol {tolerance.rtol:g})")
    if worst is not None:
        return "diverged", worst[1]
    return "within-tolerance", None


def reproduces(values: Mapping[str, Any], original: Mapping[str, Any]) -> bool:
    """Whether re-computed outputs are the ones a record names (every recorded output's digest):
    only then may they stand in for the served values a replay is compared with."""
    recorded = original["outputs"]
    return all(value_identity(values[name]) == identity for name, identity in recorded.items() if name in values)


def replay_record(
    original: Mapping[str, Any],
    *,
    plan_digest: str,
    container_digest: str | None,
    backend: str,
    backend_version: str,
    inputs: Mapping[str, Any],
    outputs: Mapping[str, Any],
    audit: str,
    trail: str | None,
    verdict: str,
    detail: str | None,
    record_id: str | None = None,
) -> dict[str, Any]:
    """The replay record of ``original``: the replay's own run, linked to the record it replays with
    the verdict (and its detail, clipped to :data:`MAX_DETAIL` characters)."""
    return new_record(
        model_name=original["model"]["name"], plan_digest=plan_digest, container_digest=container_digest,
        backend=backend, backend_version=backend_version, inputs=inputs, outputs=outputs, principal=None,
        audit=audit, trail=trail, kind="replay", links=[replay_link(original["id"], verdict, clip(detail))],
        record_id=record_id,
    )


def failed_record(original: Mapping[str, Any], detail: str, record_id: str | None = None,
                  backend: str = "reference") -> dict[str, Any]:
    """A replay record saying the replay could not be made (inputs removed, model gone, run failed)."""
    record = new_record(
        model_name=original["model"]["name"], plan_digest=original["model"]["plan_digest"],
        container_digest=original["model"]["container_digest"], backend=backend,
        backend_version=str(original.get("sealtrace_version", "")), inputs={}, outputs={}, principal=None,
        audit="full" if backend == "reference" else "io", kind="replay",
        links=[replay_link(original["id"], "failed", clip(detail))], record_id=record_id,
    )
    record["inputs"] = dict(original["inputs"])  # what should have been replayed, by digest
    record_leaf(record)
    return record


def clip(detail: str | None) -> str | None:
    """A link's detail, at most :data:`MAX_DETAIL` characters."""
    return None if detail is None else detail[:MAX_DETAIL]
