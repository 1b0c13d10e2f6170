"""DSSE envelopes (https://github.com/secure-systems-lab/dsse, protocol v1) over in-toto Statements v1.

What sealtrace signs here is read by tools nobody here wrote: model-signing (inside a Sigstore
bundle), securesystemslib and in-toto (a bare envelope). A signature covers the pre-authentication
encoding (PAE) of the payload type and the payload bytes, never re-serialized JSON: the verifier
checks the bytes it was given, then parses them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sealtrace.errors import CheckFailedError, InputError
from sealtrace.limits import read_regular_file
from sealtrace.signing import PrivateKey, PublicKey, key_id, load_verifying_key
from sealtrace.strictjson import loads_strict

IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
# Bundles and envelopes hold digests, not weights; anything near this size is not one.
MAX_DOCUMENT_SIZE = 256 << 20


class ProvenanceFormatError(InputError):
    """A bundle, envelope or statement that is not well formed (exit 2)."""


class SignatureInvalidError(CheckFailedError):
    """An envelope whose signature no trusted key verifies (exit 1)."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what each signature covers."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def _ecdsa_hash(curve: ec.EllipticCurve) -> hashes.HashAlgorithm:
    """The hash paired with each curve, as model-signing and Sigstore's specs pair them."""
    return {256: hashes.SHA256(), 384: hashes.SHA384()}.get(curve.key_size, hashes.SHA512())


def sign_bytes(key: PrivateKey, message: bytes) -> bytes:
    if isinstance(key, Ed25519PrivateKey):
        return key.sign(message)
    return key.sign(message, ec.ECDSA(_ecdsa_hash(key.curve)))


def verify_bytes(key: PublicKey, message: bytes, signature: bytes) -> bool:
    try:
        if isinstance(key, Ed25519PublicKey):
            key.verify(signature, message)
        else:
            key.verify(signature, message, ec.ECDSA(_ecdsa_hash(key.curve)))
    except InvalidSignature:
        return False
    return True


def public_key_hint(key: PublicKey) -> str:
    """model-signing's key hint in a bundle: sha256 of the public key's PEM (SubjectPublicKeyInfo)."""
    pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(pem).hexdigest()


def statement_bytes(subjects: list[dict[str, Any]], predicate_type: str, predicate: dict[str, Any]) -> bytes:
    statement = {"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": predicate_type, "predicate": predicate}
    return json.dumps(statement, indent=2, sort_keys=True, ensure_ascii=False).encode("utf-8")


def envelope(payload: bytes, key: PrivateKey, keyid: str | None = None) -> dict[str, Any]:
    """A DSSE envelope of ``payload`` (an in-toto Statement) signed by ``key``; ``keyid`` defaults
    to sealtrace's key id (model-signing writes an empty one)."""
    signature = sign_bytes(key, pae(IN_TOTO_PAYLOAD_TYPE, payload))
    return {
        "payload": base64.b64encode(payload).decode("ascii"),
        "payloadType": IN_TOTO_PAYLOAD_TYPE,
        "signatures": [{"keyid": key_id(key.public_key()) if keyid is None else keyid,
                        "sig": base64.b64encode(signature).decode("ascii")}],
    }  # fmt: skip


@dataclass(frozen=True)
class VerifiedStatement:
    """An in-toto Statement whose envelope a trusted key signed."""

    statement: dict[str, Any]
    signed_by: str  # the key id of the trusted key that verified it


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise ProvenanceFormatError(f"{what}: not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ProvenanceFormatError(f"{what}: not valid base64") from None


def open_envelope(document: Any, keys: list[PublicKey], where: str) -> VerifiedStatement:
    """Check a DSSE envelope against ``keys`` (any one suffices) and parse its in-toto Statement.
    Raises :class:`SignatureInvalidError` when no key verifies a signature."""
    if not isinstance(document, dict):
        raise ProvenanceFormatError(f"{where}: the DSSE envelope is not a JSON object")
    if document.get("payloadType") != IN_TOTO_PAYLOAD_TYPE:
        raise ProvenanceFormatError(f"{where}: payloadType is {document.get('payloadType')!r}, not {IN_TOTO_PAYLOAD_TYPE}")
    payload = _b64(document.get("payload"), f"{where}: payload")
    signatures = document.get("signatures")
    if not isinstance(signatures, list) or not signatures or not all(isinstance(s, dict) for s in signatures):
        raise ProvenanceFormatError(f"{where}: the envelope has no signatures")
    message = pae(IN_TOTO_PAYLOAD_TYPE, payload)
    signed_by = next(
        (key_id(key) for entry in signatures for key in keys
         if verify_bytes(key, message, _b64(entry.get("sig"), f"{where}: signature"))),
        None,
    )  # fmt: skip
    if signed_by is None:
        which = "the trusted key" if len(keys) == 1 else f"any of the {len(keys)} trusted keys"
        raise SignatureInvalidError(f"{where}: the envelope's signature is not valid for {which}")
    try:
        statement = loads_strict(payload)
    except ValueError as exc:
        raise ProvenanceFormatError(f"{where}: the signed payload is not JSON ({exc})") from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise ProvenanceFormatError(f"{where}: the signed payload is not an in-toto Statement v1")
    if not isinstance(statement.get("subject"), list) or not isinstance(statement.get("predicate"), dict):
        raise ProvenanceFormatError(f"{where}: the in-toto Statement needs a subject list and a predicate object")
    return VerifiedStatement(statement, signed_by)


def read_json(path: str | os.PathLike[str], what: str) -> Any:
    data = read_regular_file(path, what, ProvenanceFormatError, max_bytes=MAX_DOCUMENT_SIZE)
    try:
        return loads_strict(data)
    except ValueError as exc:
        raise ProvenanceFormatError(f"{path}: not a JSON {what} ({exc})") from None


def trusted(trust: tuple[str, ...] | list[str], what: str) -> list[PublicKey]:
    if not trust:
        raise InputError(f"{what} needs at least one trusted public key (--trust KEY.pub)")
    return [load_verifying_key(path) for path in trust]
