"""A CycloneDX 1.6 ML-BOM of a sealed container (``sealtrace inspect MODEL.seal --cyclonedx``).

The container is verified first (every byte hashed, signatures checked against ``trust``), so the
hashes the BOM states are ones sealtrace checked. The model is one component of type
``machine-learning-model``: the container file's SHA-256, the source ONNX file's, the container and
Plan digests, opsets and signer key ids as properties, and the graph's inputs and outputs in its
model card. Each bound artifact (a binding record naming this container) is a component that
depends on it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from onnx import TensorProto, TypeProto, ValueInfoProto

from sealtrace import __version__
from sealtrace.binding import SCOPE_FILE, read_binding
from sealtrace.container import describe_container, open_container, verify_container
from sealtrace.container.verify import _graph
from sealtrace.errors import CheckFailedError

SPEC_VERSION = "1.6"


def _type(t: TypeProto) -> str:
    """An ONNX value type in words: ``float32 [1, 'batch', 3]``, ``sequence(int64 [?])``."""
    kind = t.WhichOneof("value")
    if kind == "tensor_type":
        dtype = TensorProto.DataType.Name(t.tensor_type.elem_type).lower()  # ONNX's names: float, int64, ...
        if not t.tensor_type.HasField("shape"):
            return dtype
        dims = [str(d.dim_value) if d.HasField("dim_value") else repr(d.dim_param) if d.dim_param else "?"
                for d in t.tensor_type.shape.dim]  # fmt: skip
        return f"{dtype} [{', '.join(dims)}]"
    if kind == "sequence_type":
        return f"sequence({_type(t.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({_type(t.optional_type.elem_type)})"
    if kind == "map_type":
        key = TensorProto.DataType.Name(t.map_type.key_type).lower()
        return f"map({key}, {_type(t.map_type.value_type)})"
    return kind or "unknown"


def _io(values: Sequence[ValueInfoProto], skip: Collection[str] = ()) -> list[dict[str, str]]:
    return [{"format": f"{v.name}: {_type(v.type)}"} for v in values if v.name not in skip]


def _property(name: str, value: Any) -> dict[str, str]:
    return {"name": f"sealtrace:{name}", "value": str(value)}


def container_bom(
    path: str | os.PathLike[str], *, artifacts: Sequence[str | os.PathLike[str]] = (), trust: Sequence[str] = ()
) -> dict[str, Any]:
    """The BOM document of the container at ``path`` (after verifying it: exit 1 when it fails)."""
    report = verify_container(path, trust=trust, file_sha256=True)
    info = describe_container(path)
    with open_container(path) as container:
        model = _graph(container)
    digest = info["container_digest"]
    ref = f"sealtrace:container:{digest}"
    initializers = {t.name for t in model.graph.initializer}
    properties = [
        _property("container_digest", digest),
        _property("plan_digest", info["plan_digest"]),
        _property("source_sha256", info["source"]["sha256"]),
        *(_property(f"opset:{o['domain'] or 'ai.onnx'}", o["version"]) for o in info["model"]["opset_imports"]),
        *(_property("signer_key_id", s.key_id) for s in report.signatures if s.valid),
        _property("tensors", report.tensors),
        _property("tensor_bytes", report.tensor_bytes),
    ]
    producer = " ".join(p for p in (info["model"]["producer_name"], info["model"]["producer_version"]) if p)
    component: dict[str, Any] = {
        "type": "machine-learning-model",
        "bom-ref": ref,
        "name": info["source"]["file_name"] or Path(path).name,
        "hashes": [{"alg": "SHA-256", "content": report.file_sha256}],
        "modelCard": {
            "modelParameters": {
                "inputs": _io(model.graph.input, initializers),
                "outputs": _io(model.graph.output),
            }
        },
        "properties": properties,
    }
    if producer:
        component["description"] = f"produced by {producer}"
    components, dependencies = [], [{"ref": ref, "dependsOn": []}]
    for artifact in artifacts:
        record = read_binding(artifact)
        if record.container_digest != digest:
            raise CheckFailedError(f"{artifact}: bound to container {record.container_digest}, not to {path} ({digest})")
        artifact_ref = f"sealtrace:artifact:{record.digest}"
        bound: dict[str, Any] = {
            "type": "machine-learning-model" if record.artifact_name.lower().endswith(".onnx") else "file",
            "bom-ref": artifact_ref,
            "name": record.artifact_name,
            "properties": [
                _property("binding_digest", record.digest),
                _property("artifact_digest", f"{record.artifact_digest_scope} {record.artifact_sha256}"),
                _property("transformation", record.transformation),
                _property("backend", f"{record.backend} {record.backend_version}"),
                *(_property("binding_signer_key_id", s.key_id) for s in record.signatures),
            ],
        }
        if record.artifact_digest_scope == SCOPE_FILE:  # the file's own bytes: a plain SHA-256
            bound["hashes"] = [{"alg": "SHA-256", "content": record.artifact_sha256}]
        components.append(bound)
        dependencies.append({"ref": artifact_ref, "dependsOn": [ref]})
    return {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        # The same container (and artifacts) gives the same BOM: its serial number is derived, not drawn.
        "serialNumber": uuid.uuid5(uuid.NAMESPACE_URL, f"{ref}:{','.join(c['bom-ref'] for c in components)}").urn,
        "version": 1,
        "metadata": {
            "tools": {"components": [{"type": "application", "name": "sealtrace", "version": __version__}]},
            "component": component,
        },
        "components": components,
        "dependencies": dependencies,
    }
