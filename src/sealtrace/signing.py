"""Ed25519 keys and signatures, shared by containers, audit logs, manifests and bindings.

Private keys are PKCS#8 PEM files, public keys SubjectPublicKeyInfo PEM files (what
``openssl genpkey -algorithm ed25519`` and ``openssl pkey -pubout`` write). A key id is the first
16 hex digits of sha256 over the raw 32-byte public key, so it names a key without revealing it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sealtrace.errors import SealtraceError
from sealtrace.limits import read_regular_file

ALGORITHM = "ed25519"


class KeyFileError(SealtraceError):
    """A key file is missing, unreadable, not PEM, or not an Ed25519 key."""


@dataclass(frozen=True)
class Signature:
    """One signature over a digest: which algorithm, which key, and the signature bytes (hex)."""

    algorithm: str
    key_id: str
    signature: str

    def to_json(self) -> dict[str, str]:
        return {"algorithm": self.algorithm, "key_id": self.key_id, "signature": self.signature}

    @classmethod
    def from_json(cls, data: object) -> Signature:
        if not isinstance(data, dict) or not all(
            isinstance(data.get(k), str) for k in ("algorithm", "key_id", "signature")
        ):
            raise SealtraceError("malformed signature entry: needs string algorithm, key_id, signature")
        return cls(data["algorithm"], data["key_id"], data["signature"])


def key_id(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def generate_keypair(private_path: str | os.PathLike[str], overwrite: bool = False) -> tuple[Path, Path]:
    """Write a new Ed25519 key to PATH (private, mode 0600) and PATH with suffix .pub (public)."""
    private = Path(private_path)
    public = private.with_suffix(".pub")
    for path in (private, public):
        if path.exists() and not overwrite:
            raise KeyFileError(f"{path}: already exists (refusing to overwrite a key)")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public.write_bytes(pub)
    return private, public


def load_private_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    data = _read(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{path}: not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path}: not an Ed25519 key")
    return key


def load_public_key(path: str | os.PathLike[str]) -> Ed25519PublicKey:
    data = _read(path)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        # A private key file also names its public key; accept it for --trust convenience.
        return load_private_key(path).public_key()
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"{path}: not an Ed25519 public key")
    return key


def _read(path: str | os.PathLike[str]) -> bytes:
    # A PEM key is a few hundred bytes: /dev/zero, a FIFO or a huge file is refused, never read forever.
    return read_regular_file(path, "key file", KeyFileError, max_bytes=1 << 16)


def sign_digest(private_key: Ed25519PrivateKey, digest_hex: str) -> Signature:
    """Sign the ASCII hex digest (what every sealtrace signature covers)."""
    signature = private_key.sign(digest_hex.encode("ascii"))
    return Signature(ALGORITHM, key_id(private_key.public_key()), signature.hex())


def verify_signature(public_key: Ed25519PublicKey, digest_hex: str, signature: Signature) -> bool:
    """True when ``signature`` is a valid Ed25519 signature by ``public_key`` over the digest."""
    if signature.algorithm != ALGORITHM or signature.key_id != key_id(public_key):
        return False
    try:
        public_key.verify(bytes.fromhex(signature.signature), digest_hex.encode("ascii"))
    except (InvalidSignature, ValueError):
        return False
    return True
