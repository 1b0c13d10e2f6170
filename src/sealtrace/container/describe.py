"""What a container says about itself, without hashing its data (``sealtrace inspect``)."""

from __future__ import annotations

import os
from typing import Any

from sealtrace.container.format import open_container


def describe_container(source: str | os.PathLike[str] | bytes) -> dict[str, Any]:
    """The header of a container as a JSON-ready dict. Structure is checked; data is not hashed,
    so nothing here is vouched for until :func:`verify_container` passes."""
    with open_container(source) as container:
        body = container.body
        return {
            "path": container.where,
            "size": container.size,
            "format_version": container.format_version,
            "container_digest": container.digest,
            "plan_digest": container.plan_digest,
            "sealtrace_version": body["sealtrace_version"],
            "chunk_size": container.chunk_size,
            "model": body["model"],
            "source": body["source"],
            "sections": [{"name": e.name, "encoding": e.encoding, "offset": container.data_start + e.offset, "length": e.length} for e in container.sections],
            "tensors": [
                {
                    "name": e.name,
                    "dtype": e.dtype,
                    "shape": list(e.shape or ()),
                    "storage": e.storage,
                    "offset": container.data_start + e.offset,
                    "length": e.length,
                }
                for e in container.tensors
            ],
            "tensor_bytes": sum(e.length for e in container.tensors),
            "signatures": [{"algorithm": s.algorithm, "key_id": s.key_id} for s in container.signatures],
        }
