"""The models a server serves: verified containers, each opened once into a Session."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sealtrace.backends import Backend, make_backend
from sealtrace.container import is_container
from sealtrace.errors import InputError
from sealtrace.serve.protocol import TensorSpec
from sealtrace.session import Session

MODEL_VERSION = "1"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


@dataclass
class ServedModel:
    """One served model: its name in URLs, its Session, and what the protocol says of it."""

    name: str
    path: str
    session: Session
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    version: str = MODEL_VERSION

    @property
    def container_digest(self) -> str | None:
        return self.session.origin.container_digest

    @property
    def plan_digest(self) -> str:
        return self.session.plan.digest

    @property
    def backend_name(self) -> str:
        return str(self.session.backend.name)

    @property
    def backend_version(self) -> str:
        return str(self.session.backend.version)

    @property
    def platform(self) -> str:
        # Not Triton's "onnxruntime_onnx": what runs is a verified container on sealtrace's backend.
        return f"sealtrace_{self.backend_name}"

    def metadata(self, audit: str) -> dict[str, Any]:
        """The OIP model metadata response, with the digests that identify what runs."""
        origin = self.session.origin
        return {
            "name": self.name,
            "versions": [self.version],
            "platform": self.platform,
            "inputs": [spec.metadata() for spec in self.inputs.values()],
            "outputs": [spec.metadata() for spec in self.outputs.values()],
            "parameters": {
                "container_digest": self.container_digest,
                "plan_digest": self.plan_digest,
                "backend": self.backend_name,
                "backend_version": self.backend_version,
                "audit": audit,
                "signed_by": ",".join(origin.signed_by),
                "trusted": origin.trusted,
                **self.device_parameters(),
            },
        }

    def device_parameters(self) -> dict[str, str]:
        """Where the model runs, as audit logs record it: the device (with the GPU's facts and the
        precision settings) for the torch backend; nothing for backends that run on the CPU only."""
        device = getattr(self.session.backend, "device_info", None)
        if device is None:
            return {}
        from sealtrace.audit.show import describe_device

        return {"device": device["name"], "device_facts": describe_device(device)}

    def config(self, audit: str) -> dict[str, Any]:
        """Triton's model configuration (model_config.proto in JSON): one version, no batching by the
        server (``max_batch_size`` 0: ``dims`` are the whole shape, -1 for a dynamic axis), and the
        digests that identify what runs as string parameters."""
        return {
            "name": self.name,
            "platform": self.platform,
            "backend": self.backend_name,
            "version_policy": {"specific": {"versions": [int(self.version)]}},
            "max_batch_size": 0,
            "input": [_config_tensor(spec) for spec in self.inputs.values()],
            "output": [_config_tensor(spec) for spec in self.outputs.values()],
            "parameters": {key: {"string_value": value} for key, value in (
                ("container_digest", self.container_digest or ""), ("plan_digest", self.plan_digest),
                ("backend_version", self.backend_version), ("audit", audit))},
        }


def _config_tensor(spec: TensorSpec) -> dict[str, Any]:
    # Triton spells the protocol's BYTES as TYPE_STRING; a datatype not known statically is TYPE_INVALID.
    datatype = {None: "INVALID", "BYTES": "STRING"}.get(spec.datatype, spec.datatype)
    return {"name": spec.name, "data_type": f"TYPE_{datatype}",
            "dims": list(spec.shape) if spec.shape is not None else [-1]}


def model_name_of(path: str | os.PathLike[str]) -> str:
    """A container's default name: its file stem ('resnet.seal' -> 'resnet')."""
    return Path(path).stem


def check_model_name(name: str) -> str:
    """A name that is safe in a URL path segment: letters, digits, '_', '.', '-' (at most 128)."""
    if not _NAME.fullmatch(name):
        raise InputError(f"model name {name!r}: use letters, digits, '_', '.' and '-' (at most 128, not starting "
                         "with a punctuation mark); choose one with --name")
    return name


def open_served_model(
    path: str | os.PathLike[str],
    name: str,
    backend: str | Backend,
    trust: Sequence[Any] = (),
    threads: int | None = None,
) -> ServedModel:
    """Verify the container at ``path`` (signed by a ``trust`` key when keys are given) and open it
    on ``backend``. Only containers are served, and only models whose inputs and outputs are tensors
    (the protocol carries nothing else)."""
    if not is_container(path):
        raise InputError(f"{path}: not a sealed container; `sealtrace seal` it first (only verified "
                         "containers are served)")
    engine = make_backend(backend, threads) if isinstance(backend, str) else backend
    session = Session(path, backend=engine, trust=trust)
    for kind, values in (("input", session.plan.inputs), ("output", session.plan.outputs)):
        for info in values:
            if info.kind != "tensor":
                raise InputError(f"{path}: {kind} {info.name!r} is a {info.kind}; the inference protocol "
                                 "carries tensors only")
    warm = getattr(session.backend, "session_for", None)
    if warm is not None:
        warm(session.plan)  # ONNX Runtime's session is made now, not by the first request
    return ServedModel(
        name=check_model_name(name),
        path=os.fspath(path),
        session=session,
        inputs={info.name: TensorSpec.of(info) for info in session.plan.inputs},
        outputs={info.name: TensorSpec.of(info) for info in session.plan.outputs},
    )
