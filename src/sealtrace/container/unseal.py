"""Turn a verified container back into an ONNX file, weights bit-exact."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from sealtrace.container.signatures import TrustSource, signers
from sealtrace.container.verify import load_verified_model
from sealtrace.outputs import atomic_output, check_output


@dataclass(frozen=True)
class UnsealResult:
    """What :func:`unseal` wrote; ``same_as_source`` when the file equals the sealed ONNX file."""

    path: str
    sha256: str
    size: int
    same_as_source: bool
    # Who signed the container (the trusted signers when trust keys were given; see
    # sealtrace.container.signatures.signers), and whether trust keys were given and checked.
    signed_by: tuple[str, ...] = ()
    trusted: bool = False


def unseal(
    source: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    *,
    trust: Sequence[TrustSource] = (),
    require_signature: bool = False,
    force: bool = False,
) -> UnsealResult:
    """Verify ``source`` and write its model as one self-contained ONNX file at ``out_path``.

    ``trust`` (public keys) refuses a container not validly signed by one of them. An existing
    ``out_path`` is refused before the container is read, unless ``force``.

    A model sealed from a file without external data comes back byte-identical to that file
    (``same_as_source``); one sealed from external data comes back with its weights inline.
    """
    check_output(out_path, force, "-o")
    verified = load_verified_model(source, trust=trust, require_signature=require_signature)
    data = verified.model.SerializeToString()
    with atomic_output(out_path, force=force) as f:
        f.write(data)
    digest = hashlib.sha256(data).hexdigest()
    return UnsealResult(
        str(out_path), digest, len(data), digest == verified.source.get("sha256"),
        signers(verified.report.signatures, bool(trust)), bool(trust),
    )  # fmt: skip
