"""Turn a verified container back into an ONNX file, weights bit-exact."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from sealtrace.container.signatures import TrustSource
from sealtrace.container.verify import load_verified_model
from sealtrace.outputs import atomic_output


@dataclass(frozen=True)
class UnsealResult:
    """What :func:`unseal` wrote; ``same_as_source`` when the file equals the sealed ONNX file."""

    path: str
    sha256: str
    size: int
    same_as_source: bool


def unseal(
    source: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    *,
    trust: Sequence[TrustSource] = (),
    require_signature: bool = False,
    force: bool = False,
) -> UnsealResult:
    """Verify ``source`` and write its model as one self-contained ONNX file at ``out_path``.

    A model sealed from a file without external data comes back byte-identical to that file
    (``same_as_source``); one sealed from external data comes back with its weights inline.
    """
    verified = load_verified_model(source, trust=trust, require_signature=require_signature)
    data = verified.model.SerializeToString()
    with atomic_output(out_path, force=force) as f:
        f.write(data)
    digest = hashlib.sha256(data).hexdigest()
    return UnsealResult(str(out_path), digest, len(data), digest == verified.source.get("sha256"))
