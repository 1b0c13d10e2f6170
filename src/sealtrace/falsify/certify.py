"""Certification: a candidate counts only when the sealed container, run on the reference interpreter
with an audit log, confirms it.

The reference run takes the candidate exactly as the search produced it (same dtype, same bits).
Its outputs and the candidate are turned into exact fractions (every float is a fraction) and the
property is evaluated on them without rounding: the box bounds and constraint constants are the
exact decimals of the property. The certificate shows every value it used, the constraint values,
and the digest of the audit run that produced the outputs.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from onnx import ModelProto

from sealtrace.audit import AuditRecorder, audited_run, verify_log
from sealtrace.container import is_container, open_container, seal_model, verify_container
from sealtrace.errors import CheckFailedError, SealtraceError
from sealtrace.falsify.network import NetworkLayout
from sealtrace.falsify.property import OutputSet, Property
from sealtrace.plan.modelfile import ExternalFile, files_digest, model_file_digest
from sealtrace.session import Session


def default_cache_dir() -> Path:
    """Where ONNX models are sealed for certification: ``$SEALTRACE_CACHE_DIR`` or ~/.cache/sealtrace."""
    root = os.environ.get("SEALTRACE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sealtrace"
    )
    return Path(root) / "sealed"


def sealed_container(model: str | os.PathLike[str] | ModelProto, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``model`` itself when it is a .seal container; else a container sealed from it, cached by content.

    The cache is keyed by the model's identity (the sha256 of the ONNX bytes, or with external data
    the digest of the file and its external data files), so 45 networks times 10 properties are
    sealed 45 times. A cached ``<key>.seal`` is used only when it verifies and its header says it
    is the sealing of exactly these bytes (the same identity); anything else is sealed again.
    """
    if not isinstance(model, ModelProto) and is_container(model):
        return Path(model)
    try:
        key = _model_key(model)
    except SealtraceError:
        key = None  # seal_model below gives the precise error (missing file, not ONNX ...)
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = directory / f"{key or 'missing'}.seal"
    if key is not None and _is_sealing_of(target, key):
        return target
    directory.mkdir(parents=True, exist_ok=True)
    seal_model(model, target, force=True)
    return target


def _model_key(model: str | os.PathLike[str] | ModelProto) -> str:
    if isinstance(model, ModelProto):
        return hashlib.sha256(model.SerializeToString()).hexdigest()
    return model_file_digest(model)


def _is_sealing_of(target: Path, key: str) -> bool:
    """True when ``target`` is a container that verifies and was sealed from the model ``key`` names."""
    if not target.is_file():
        return False
    try:
        with open_container(target) as container:
            verify_container(container)
            source = container.body["source"]
            external = [ExternalFile(e["path"], e["sha256"], e["size"]) for e in source["external_data"]]
            return files_digest(source["sha256"], source["size"], external) == key
    except SealtraceError:
        return False


def as_fraction(value: Any) -> Fraction:
    """The exact value of a float (float16/32/64 widen to float64 without rounding)."""
    return Fraction(float(value))


def exact_decimal(value: Fraction) -> str:
    """A fraction as text: exact decimal when it has one of at most 60 digits, else ``p/q``."""
    if value.denominator == 1:
        return str(value.numerator)
    d = value.denominator
    twos = fives = 0
    while d % 2 == 0:
        d //= 2
        twos += 1
    while d % 5 == 0:
        d //= 5
        fives += 1
    if d != 1 or max(twos, fives) > 60:
        return f"{value.numerator}/{value.denominator}"
    digits = max(twos, fives)
    scaled = abs(value) * 10**digits
    assert scaled.denominator == 1
    text = str(scaled.numerator).rjust(digits + 1, "0")
    whole, frac = text[:-digits], text[-digits:].rstrip("0")
    return f"{'-' if value < 0 else ''}{whole}{'.' + frac if frac else ''}"


@dataclass(frozen=True)
class ConstraintValue:
    """One constraint evaluated exactly on the reference outputs: ``value`` <= 0 (or < 0) means it holds."""

    constraint: str
    value: Fraction
    holds: bool
    source: str = ""

    def value_text(self) -> str:
        """The exact value, and a short float form when the exact one is long."""
        text = exact_decimal(self.value)
        return text if len(text) <= 16 else f"{text} (~{float(self.value):.6g})"

    def to_json(self) -> dict[str, Any]:
        return {
            "constraint": self.constraint,
            "value": exact_decimal(self.value),
            "value_float": float(self.value),
            "holds": self.holds,
            "source": self.source,
        }


@dataclass(frozen=True)
class Certificate:
    """The reference interpreter's verdict on one candidate.

    ``confirmed`` says the candidate lies in a region's box and its reference outputs satisfy one of
    that region's output sets (``region``, ``output_set``); ``values`` are that output set's
    constraint values (for a rejected candidate: the closest output set's). ``x`` is the flat input
    as fed, ``y`` the flat reference outputs; ``run_digest`` identifies the audit run.
    """

    confirmed: bool
    x: np.ndarray
    y: np.ndarray
    feeds: dict[str, np.ndarray]
    inside_box: bool
    region: int | None
    output_set: int | None
    values: tuple[ConstraintValue, ...]
    reason: str
    run_digest: str | None
    audit_log: str | None
    search_margin: float | None = None
    method: str = ""
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "confirmed": self.confirmed,
            "reason": self.reason,
            "inside_box": self.inside_box,
            "region": self.region,
            "output_set": self.output_set,
            "x": [repr(float(v)) for v in self.x],
            "x_dtype": str(self.x.dtype),
            "y": [repr(float(v)) for v in self.y],
            "y_dtype": str(self.y.dtype),
            "constraints": [v.to_json() for v in self.values],
            "search_margin": self.search_margin,
            "method": self.method,
            "audit_run_digest": self.run_digest,
            "audit_log": self.audit_log,
        }


class Certifier:
    """Runs candidates through a sealed container on the reference backend, each run audited.

    ``session`` is a reference Session opened on the container (opening it verified every tensor).
    """

    def __init__(self, session: Session, prop: Property, layout: NetworkLayout) -> None:
        if session.origin.kind != "container" or session.origin.path is None:
            raise ValueError("a Certifier needs a Session opened on a sealed container")
        if session.backend.name != "reference":
            raise ValueError("a Certifier runs on the reference backend")
        self.container = Path(session.origin.path)
        self.session = session
        self.container_digest = session.origin.container_digest
        self.prop = prop
        self.layout = layout
        self.attempts = 0

    def certify(self, x: np.ndarray, audit_path: str | os.PathLike[str] | None = None, *,
                search_margin: float | None = None, method: str = "") -> Certificate:
        """Run ``x`` (flat, the searched dtype) audited and judge it exactly.

        With ``audit_path`` a confirmed run's log is left there (and verified against the container
        and the inputs); a rejected run's log is removed. Without it the log is kept in memory.
        """
        self.attempts += 1
        feeds = self.layout.feeds(x)
        log_file: Path | None = None
        if audit_path is not None:
            target = Path(audit_path)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent or ".")
            os.close(fd)
            os.unlink(tmp)  # the recorder creates the file itself and refuses an existing one
            log_file = Path(tmp)
            recorder = AuditRecorder(log_file)
        else:
            recorder = AuditRecorder(None)
        try:
            outputs = audited_run(self.session, feeds, audit=recorder)
        except BaseException:
            if log_file is not None:
                log_file.unlink(missing_ok=True)
            raise
        y = self.layout.flat_outputs(outputs)
        certificate = self._judge(x, y, feeds, recorder.run_digest, search_margin, method)
        if log_file is None:
            return certificate
        if not certificate.confirmed:
            log_file.unlink(missing_ok=True)
            return certificate
        target = Path(audit_path)  # type: ignore[arg-type]
        os.replace(log_file, target)
        check = verify_log(target, model=self.container, inputs=feeds)
        if not check.ok:
            raise CheckFailedError(f"the audit log of the certifying run does not verify: {check.problems[0]}")
        return _with_log(certificate, str(target), check.run_digest)

    def _judge(self, x: np.ndarray, y: np.ndarray, feeds: dict[str, np.ndarray], run_digest: str | None,
               search_margin: float | None, method: str) -> Certificate:
        xs = [as_fraction(v) for v in x]
        ys = [as_fraction(v) for v in y]
        def verdict(confirmed: bool, inside: bool, region: int | None, output_set: int | None,
                    values: tuple[ConstraintValue, ...], reason: str) -> Certificate:
            return Certificate(confirmed, x.copy(), y, feeds, inside, region, output_set, values, reason,
                               run_digest, None, search_margin, method)

        if not all(np.isfinite(y)):
            return verdict(False, False, None, None, (), "the reference outputs are not all finite")
        closest: tuple[Fraction, int, int, OutputSet] | None = None
        inside_any = False
        for r, region in enumerate(self.prop.regions):
            if not region.box.contains(xs):
                continue
            inside_any = True
            for s, output_set in enumerate(region.output_sets):
                values = [c.value(ys, xs) for c in output_set.constraints]
                if output_set.holds(ys, xs):
                    return verdict(True, True, r, s, _values(output_set, values), "confirmed")
                worst = max(values)
                if closest is None or worst < closest[0]:
                    closest = (worst, r, s, output_set)
        if not inside_any:
            return verdict(False, False, None, None, (), "the point lies outside every input box")
        assert closest is not None
        worst, r, s, output_set = closest
        values = [c.value(ys, xs) for c in output_set.constraints]
        return verdict(
            False, True, r, s, _values(output_set, values),
            f"the reference outputs satisfy no output set (closest: set {s} of region {r}, "
            f"largest constraint value {float(worst):.6g} > 0)",
        )


def _values(output_set: OutputSet, values: list[Fraction]) -> tuple[ConstraintValue, ...]:
    return tuple(
        ConstraintValue(c.describe(), v, v < 0 if c.strict else v <= 0, c.source)
        for c, v in zip(output_set.constraints, values, strict=True)
    )


def _with_log(certificate: Certificate, path: str, run_digest: str | None) -> Certificate:
    from dataclasses import replace

    return replace(certificate, audit_log=path, run_digest=run_digest or certificate.run_digest)
