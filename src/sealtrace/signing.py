"""Keys and signatures: Ed25519 for sealtrace's own formats (containers, audit logs, manifests,
bindings), and ECDSA (P-256, P-384, P-521) beside it for the ecosystem's (Sigstore bundles that
OpenSSF model-signing verifies, DSSE envelopes: sealtrace.provenance).

Private keys are PKCS#8 PEM files, public keys SubjectPublicKeyInfo PEM files (what
``openssl genpkey -algorithm ed25519`` and ``openssl pkey -pubout`` write). A key id is the first
16 hex digits of sha256 over the raw public key (Ed25519's 32 bytes, an ECDSA key's uncompressed
point), so it names a key without revealing it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sealtrace.errors import SealtraceError
from sealtrace.limits import read_regular_file
from sealtrace.outputs import OutputExistsError, OutputPathError, check_output

ALGORITHM = "ed25519"

# keygen --algorithm: the curves model-signing (and Sigstore's specs) accept.
ECDSA_CURVES: dict[str, ec.EllipticCurve] = {
    "ecdsa-p256": ec.SECP256R1(), "ecdsa-p384": ec.SECP384R1(), "ecdsa-p521": ec.SECP521R1(),
}  # fmt: skip
KEY_ALGORITHMS = (ALGORITHM, *ECDSA_CURVES)

PrivateKey = Ed25519PrivateKey | ec.EllipticCurvePrivateKey
PublicKey = Ed25519PublicKey | ec.EllipticCurvePublicKey


class KeyFileError(SealtraceError):
    """A key file is missing, unreadable, not PEM, or not a key of a kind sealtrace uses."""


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


def key_id(public_key: PublicKey) -> str:
    if isinstance(public_key, Ed25519PublicKey):
        raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    else:
        raw = public_key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return hashlib.sha256(raw).hexdigest()[:16]


def generate_keypair(
    private_path: str | os.PathLike[str], overwrite: bool = False, algorithm: str = ALGORITHM
) -> tuple[Path, Path]:
    """Write a new key (``algorithm``: one of KEY_ALGORITHMS) to PATH (private, mode 0600) and PATH
    with suffix .pub (public).

    Each file is written under a fresh name in the same directory (created with O_CREAT|O_EXCL,
    so the private key is never readable by others, not even for a moment) and renamed into place:
    an existing file's permissions, or a symbolic link at PATH, never carry over to the new key.
    Existing files are refused unless ``overwrite``.
    """
    private = Path(private_path)
    public = private.with_suffix(".pub")
    for path in (private, public):
        try:
            check_output(path, overwrite, "key file")
        except OutputExistsError:
            raise KeyFileError(f"{path}: already exists (refusing to overwrite a key; use --force)") from None
        except OutputPathError as exc:
            raise KeyFileError(str(exc)) from None
    if algorithm not in KEY_ALGORITHMS:
        raise KeyFileError(f"unknown key algorithm {algorithm!r} (one of {', '.join(KEY_ALGORITHMS)})")
    key: PrivateKey = (
        Ed25519PrivateKey.generate() if algorithm == ALGORITHM else ec.generate_private_key(ECDSA_CURVES[algorithm])
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    umask = os.umask(0)
    os.umask(umask)
    staged = [_stage(private, pem, 0o600)]
    installed: list[Path] = []
    try:
        staged.append(_stage(public, pub, 0o644 & ~umask))
        for tmp, path in zip(staged, (private, public), strict=True):
            _install(tmp, path, overwrite)
            installed.append(path)
    except BaseException:
        if not overwrite:  # these names were free: leave no half of a pair behind
            for path in installed:
                path.unlink(missing_ok=True)
        raise
    finally:
        for tmp in staged:
            tmp.unlink(missing_ok=True)
    return private, public


def _stage(target: Path, data: bytes, mode: int) -> Path:
    """``data`` in a new file beside ``target``: mkstemp opens it O_CREAT|O_EXCL with mode 0600."""
    directory = target.parent if str(target.parent) else Path(".")
    try:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise KeyFileError(f"{target}: cannot create a file in {directory} ({exc.strerror})") from None
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def _install(tmp: Path, target: Path, overwrite: bool) -> None:
    """Rename ``tmp`` to ``target``; without ``overwrite`` a name taken meanwhile is not clobbered."""
    if overwrite:
        os.replace(tmp, target)
        return
    try:
        os.link(tmp, target)  # fails if the name exists
    except FileExistsError:
        raise KeyFileError(f"{target}: already exists (refusing to overwrite a key; use --force)") from None
    except OSError:
        if target.exists() or target.is_symlink():  # a filesystem without hard links: best effort
            raise KeyFileError(f"{target}: already exists (refusing to overwrite a key; use --force)") from None
        os.replace(tmp, target)


def load_signing_key(path: str | os.PathLike[str]) -> PrivateKey:
    """An Ed25519 or ECDSA (P-256, P-384, P-521) private key from a PEM file."""
    data = _read(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{path}: not an unencrypted PEM private key ({exc})") from None
    if isinstance(key, ec.EllipticCurvePrivateKey):
        _check_curve(path, key.curve)
    elif not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path}: not an Ed25519 or ECDSA key")
    return key


def load_verifying_key(path: str | os.PathLike[str]) -> PublicKey:
    """An Ed25519 or ECDSA public key from a PEM file (or the public half of a private key file)."""
    data = _read(path)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        # A private key file also names its public key; accept it for --trust convenience.
        return load_signing_key(path).public_key()
    if isinstance(key, ec.EllipticCurvePublicKey):
        _check_curve(path, key.curve)
    elif not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"{path}: not an Ed25519 or ECDSA public key")
    return key


def _check_curve(path: str | os.PathLike[str], curve: ec.EllipticCurve) -> None:
    if not any(curve.name == known.name for known in ECDSA_CURVES.values()):
        raise KeyFileError(f"{path}: an ECDSA key on curve {curve.name}, not P-256, P-384 or P-521")


# sealtrace's own signatures (containers, logs, manifests, bindings, tree heads) are Ed25519 only.
def load_private_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    key = load_signing_key(path)
    if isinstance(key, Ed25519PrivateKey):
        return key
    raise _not_ed25519(path)


def load_public_key(path: str | os.PathLike[str]) -> Ed25519PublicKey:
    key = load_verifying_key(path)
    if isinstance(key, Ed25519PublicKey):
        return key
    raise _not_ed25519(path)


def _not_ed25519(path: str | os.PathLike[str]) -> KeyFileError:
    return KeyFileError(f"{path}: an ECDSA key; sealtrace's own signatures are Ed25519 "
                        "(ECDSA keys are for model-signing bundles and attestations)")


# A PEM Ed25519 key is about 120 bytes; anything near this size is not one.
MAX_KEY_FILE_SIZE = 64 << 10


def _read(path: str | os.PathLike[str]) -> bytes:
    """A key file's bytes: a regular file (never /dev/zero or a directory), bounded in size."""
    return read_regular_file(path, "key file", KeyFileError, max_bytes=MAX_KEY_FILE_SIZE)


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
