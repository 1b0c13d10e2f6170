"""Ed25519 signatures over a container or manifest digest (keys and primitives: sealtrace.signing).

Each stored signature carries its public key, so any damaged signature is caught even by a
reader without keys; a signature counts as trusted only when its key is one the reader trusts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sealtrace.container.errors import Mismatch
from sealtrace.container.format import SignatureEntry
from sealtrace.signing import (
    Signature,
    key_id,
    load_private_key,
    load_public_key,
    sign_digest,
    verify_signature,
)

KeySource = str | os.PathLike[str] | Ed25519PrivateKey
TrustSource = str | os.PathLike[str] | Ed25519PublicKey


def _raw(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def sign(digest: str, keys: Sequence[KeySource]) -> list[SignatureEntry]:
    """One signature over ``digest`` per private key (PEM path or key object)."""
    entries = []
    for source in keys:
        private = source if isinstance(source, Ed25519PrivateKey) else load_private_key(source)
        signature = sign_digest(private, digest)
        entries.append(
            SignatureEntry(signature.algorithm, signature.key_id, _raw(private.public_key()).hex(), signature.signature)
        )
    return entries


def trusted_keys(trust: Sequence[TrustSource]) -> dict[str, Ed25519PublicKey]:
    """Trusted public keys by key id (PEM paths or key objects)."""
    keys: dict[str, Ed25519PublicKey] = {}
    for source in trust:
        key = source if isinstance(source, Ed25519PublicKey) else load_public_key(source)
        keys[key_id(key)] = key
    return keys


@dataclass(frozen=True)
class SignatureCheck:
    """What was found of one stored signature."""

    key_id: str
    valid: bool
    trusted: bool

    def to_json(self) -> dict[str, object]:
        return {"key_id": self.key_id, "valid": self.valid, "trusted": self.trusted}


def check_signatures(
    digest: str,
    entries: Sequence[SignatureEntry],
    trust: dict[str, Ed25519PublicKey],
    require_signature: bool,
) -> tuple[list[SignatureCheck], list[Mismatch]]:
    """Check every stored signature; mismatches for invalid ones, and for the absence of a valid
    signature by a trusted key whenever trust keys are given (``require_signature`` is implied by
    ``trust``: a reader that names the keys it trusts refuses anything they did not sign)."""
    checks: list[SignatureCheck] = []
    problems: list[Mismatch] = []
    for i, entry in enumerate(entries):
        try:
            public = Ed25519PublicKey.from_public_bytes(bytes.fromhex(entry.public_key))
        except ValueError:
            public = None
        valid = (
            public is not None
            and key_id(public) == entry.key_id
            and verify_signature(public, digest, Signature(entry.algorithm, entry.key_id, entry.signature))
        )
        trusted_key = trust.get(entry.key_id)
        trusted = trusted_key is not None and public is not None and _raw(trusted_key) == _raw(public)
        checks.append(SignatureCheck(entry.key_id, valid, trusted and valid))
        if not valid:
            problems.append(
                Mismatch("signature", f"#{i} key {entry.key_id}", f"a valid ed25519 signature over {digest[:16]}...", "an invalid signature")
            )
    if (require_signature or trust) and not any(c.valid and c.trusted for c in checks):
        found = ", ".join(c.key_id for c in checks if c.valid) or "none"
        problems.append(
            Mismatch("signature", "trusted signature", f"a signature by {', '.join(sorted(trust)) or 'a trusted key'}", f"valid signatures by: {found}")
        )
    return checks, problems


def describe_signers(key_ids: Sequence[str], trusted: bool) -> str:
    """How an OK line says who signed: ``unsigned``, ``signed by trusted key K`` (``trusted``: the
    keys were checked against the reader's trust keys), or ``signed by key K (signer not checked:
    give --trust KEY.pub)``, so a reader never takes a signature by anyone for a trusted one."""
    if not key_ids:
        return "unsigned"
    keys = ", ".join(key_ids)
    if trusted:
        return f"signed by trusted key {keys}"
    return f"signed by key {keys} (signer not checked: give --trust KEY.pub)"


def signers(checks: Sequence[SignatureCheck], trust_given: bool) -> tuple[str, ...]:
    """The key ids an OK line names: the trusted ones when trust keys were given, else every valid one."""
    return tuple(c.key_id for c in checks if (c.trusted if trust_given else c.valid))
