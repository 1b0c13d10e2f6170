"""Session: run a model the way onnxruntime.InferenceSession does, on any sealtrace backend."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from onnx import ModelProto

from sealtrace.backends import Backend, get_backend, make_backend
from sealtrace.container import IntegrityError, Mismatch, is_container, load_sealed_plan
from sealtrace.container.signatures import describe_signers, signers
from sealtrace.errors import InputError
from sealtrace.plan import ModelSource, Plan, ValueInfo, build_plan
from sealtrace.plan.builder import load_model_file
from sealtrace.plan.events import StepObserver
from sealtrace.plan.feeds import check_feeds


@dataclass(frozen=True)
class ModelOrigin:
    """Where a session's model came from; audit logs link runs to it.

    ``kind`` is 'onnx' (a plain ONNX file), 'proto' (an in-memory ModelProto or bytes), 'plan',
    'container' (a verified .seal file) or 'artifact' (a derived model bound to a container).
    ``sha256`` identifies the model: for a file, the sha256 of its bytes, or with external data the
    digest of the file and its external data files (sealtrace.plan.modelfile.files_digest); for a
    proto, of its serialization; for a container, of the .seal file;
    ``container_digest`` is the container's, for containers and bound artifacts.
    """

    kind: str
    path: str | None = None
    sha256: str | None = None
    container_digest: str | None = None
    # For a bound artifact (kind 'artifact'): the digest of the binding record that tied it to
    # ``container_digest``.
    binding_digest: str | None = None
    # Key ids of the signatures on the container (kind 'container') or on the binding record (kind
    # 'artifact'): with trust keys given (``trusted``), those that verified with one of them.
    signed_by: tuple[str, ...] = ()
    trusted: bool = False

    def provenance(self) -> str:
        """One line for people: what was verified, and whether (and by whom) it is signed."""
        name = os.path.basename(self.path) if self.path else "the model"
        if self.kind == "container":
            return f"{name}: verified container {self.container_digest}; {describe_signers(self.signed_by, self.trusted)}"
        if self.kind == "artifact":
            return (
                f"{name}: bound artifact, checked against container {self.container_digest}; "
                f"binding {describe_signers(self.signed_by, self.trusted)}"
            )
        if self.kind == "onnx":
            return f"{name}: not sealed: a plain ONNX file, run without verification (seal it to verify it)"
        return f"{name}: not sealed: run without verification"


def _origin_of(model: ModelSource | Plan) -> ModelOrigin:
    if isinstance(model, Plan):
        return ModelOrigin("plan")
    if isinstance(model, ModelProto):
        return ModelOrigin("proto", sha256=hashlib.sha256(model.SerializeToString()).hexdigest())
    if isinstance(model, bytes):
        return ModelOrigin("proto", sha256=hashlib.sha256(model).hexdigest())
    raise TypeError(f"not a model source: {type(model).__name__}")  # paths are read in open_model


def open_model(
    model: ModelSource | Plan,
    *,
    trust: Sequence[Any] = (),
    require_signature: bool = False,
    require_kernels: bool = True,
) -> tuple[Plan, ModelOrigin]:
    """The Plan of an ONNX model or of a sealed container (verified first), and where it came from.

    A container that fails verification raises an IntegrityError naming every part that changed.
    A path that claims to be a container (it starts with the container magic, or is named *.seal)
    is opened as one, so a renamed ONNX file is refused, not run unverified. ``trust`` (public
    keys) refuses anything not validly signed by one of them: an unsigned or otherwise-signed
    container, and any model that is not a container at all (IntegrityError, exit 1).
    """
    if require_signature and not trust:
        raise InputError("require_signature (--require-signature) needs at least one trusted public key (--trust KEY.pub)")
    if isinstance(model, (str, os.PathLike)) and is_container(model):
        plan, report = load_sealed_plan(model, trust=trust, require_signature=require_signature)
        origin = ModelOrigin(
            "container", path=os.fspath(model), sha256=report.file_sha256, container_digest=report.digest,
            signed_by=signers(report.signatures, bool(trust)), trusted=bool(trust),
        )  # fmt: skip
        return plan, origin
    if trust:
        where = os.fspath(model) if isinstance(model, (str, os.PathLike)) else f"<{type(model).__name__}>"
        raise IntegrityError(
            where,
            [Mismatch("signature", "trusted signature", "a sealed container signed by a trusted key",
                      "a model that is not a sealed container (nothing is signed)")],
        )  # fmt: skip
    if isinstance(model, (str, os.PathLike)):
        # One read of the file and of each external data file: the digest in the audit linkage is
        # of the bytes the Plan was built from, external data included.
        read = load_model_file(model)
        plan = build_plan(read.model, require_kernels=require_kernels)
        return plan, ModelOrigin("onnx", path=os.fspath(model), sha256=read.digest)
    plan = model if isinstance(model, Plan) else build_plan(model, require_kernels=require_kernels)
    return plan, _origin_of(model)


def _refuse_engine_without_container(model: str | os.PathLike[str]) -> None:
    """A compiled engine is loaded only once checked against its container: without one, refused."""
    from sealtrace.engines.tvm import is_tvm_library

    if is_tvm_library(model):
        raise InputError(
            f"{os.fspath(model)} is a compiled engine: give the container it was compiled from "
            "(container=..., --container MODEL.seal); it is checked against it before it is loaded"
        )


@dataclass(frozen=True)
class RunOptions:
    """Settings of one run, like ``onnxruntime.RunOptions``: the observers that see each step."""

    observers: Sequence[StepObserver] = ()


class Session:
    """Compile a model once into a Plan and run it on a backend.

    ``Session(path).run(None, {"x": array})`` mirrors ``onnxruntime.InferenceSession``.
    """

    def __init__(
        self,
        model: ModelSource | Plan,
        backend: str | Backend = "reference",
        *,
        trust: Sequence[Any] = (),
        require_signature: bool = False,
        container: str | os.PathLike[str] | None = None,
        strict: bool = False,
        device: str | None = None,
    ) -> None:
        """``model`` is an ONNX path, bytes, ModelProto, Plan, or a sealed ``.seal`` container.

        A container is verified before anything else (every tensor and every signature); a
        container that fails is refused with an IntegrityError naming each part that changed.
        There is no bypass. ``trust`` (public keys) refuses anything not validly signed by one of
        them: a container without such a signature, or a model that is not a container at all
        (``require_signature`` is implied by ``trust`` and kept for compatibility).

        With ``container=``, ``model`` is a derived artifact (e.g. from ``sealtrace compile``): it is
        read once, and loaded only after its binding to that container checks out (artifact and its
        external data unmodified, bound to this container, the binding signed by a ``trust`` key
        when trust is given; a different backend version is refused under ``strict``). With
        ``backend="tvm"`` the artifact is a compiled engine (a shared library, docs/tvm.md): its binding
        is checked before it is loaded, it is loaded from the bytes that were checked, and the
        container and Plan digests it carries must be this container's.

        ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``) is where a backend named by ``backend`` runs:
        only torch runs on a GPU (faithful float32: docs/torchbridge.md); other backends take ``"cpu"``
        only. A device that is not there is a BackendError, raised before the model is read.
        """
        if device is not None:
            if not isinstance(backend, str):
                raise InputError("device= goes with a backend given by name; a Backend instance has its own device")
            self.backend = make_backend(backend, device=device)
        else:
            self.backend = get_backend(backend) if isinstance(backend, str) else backend
        require_kernels = bool(getattr(self.backend, "needs_kernels", True))
        if container is not None:
            from sealtrace.binding import load_bound_model

            if not isinstance(model, (str, os.PathLike)):
                raise InputError("container= needs the artifact's file path")
            if require_signature and not trust:
                raise InputError("require_signature (--require-signature) needs at least one trusted public key (--trust KEY.pub)")
            load_engine = getattr(self.backend, "load", None)
            if load_engine is not None:
                # A compiled engine (a shared library): checked before it is loaded, loaded from the
                # bytes that were checked, then its own stamp checked (sealtrace.engines).
                self.plan, engine = load_engine(model, container, trust=trust, require_signature=require_signature,
                                                strict=strict)  # fmt: skip
                check, identity = engine.check, engine.identity
            else:
                # One read of the artifact (and of its external data): the bytes checked are the bytes run.
                bound = load_bound_model(model, container, trust=trust, require_signature=require_signature,
                                         strict=strict)  # fmt: skip
                self.plan = build_plan(bound.model, require_kernels=require_kernels)
                check, identity = bound.check, bound.identity
            record = check.record
            self.origin = ModelOrigin(
                "artifact",
                path=os.fspath(model),
                sha256=identity,
                container_digest=record.container_digest,
                binding_digest=record.digest,
                signed_by=check.trusted_by if trust else check.signed_by,
                trusted=bool(trust),
            )
        else:
            if getattr(self.backend, "load", None) is not None and isinstance(model, (str, os.PathLike)):
                _refuse_engine_without_container(model)
            self.plan, self.origin = open_model(
                model, trust=trust, require_signature=require_signature, require_kernels=require_kernels
            )

    def get_inputs(self) -> list[ValueInfo]:
        """The inputs a run must feed (weights excluded), like InferenceSession.get_inputs()."""
        return list(self.plan.inputs)

    def get_outputs(self) -> list[ValueInfo]:
        """The graph outputs, in order."""
        return list(self.plan.outputs)

    def run(
        self,
        output_names: Sequence[str] | None,
        feeds: Mapping[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[Any]:
        """Run the Plan; return the requested outputs (all graph outputs when None) in order.

        Shaped like ``onnxruntime.InferenceSession.run``. ``run_options`` carries the observers that
        see each executed step; recording a run (audit log, capture, ledger record) is
        :func:`sealtrace.audit.audited_run` and :func:`sealtrace.ledger.record_run`, built on this.
        """
        if output_names:
            wanted = list(output_names)
            known = self.plan.output_names
            unknown = [n for n in wanted if n not in known]
            if unknown:
                raise InputError(
                    f"unknown output(s) {', '.join(map(repr, unknown))}; outputs are: {', '.join(known)}"
                )
        else:
            wanted = self.plan.output_names
        checked = check_feeds(self.plan, feeds)
        observers = list(run_options.observers) if run_options is not None else []
        results = self.backend.run(self.plan, checked, observers)
        return [results[name] for name in wanted]
