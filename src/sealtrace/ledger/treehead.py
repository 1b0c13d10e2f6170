"""Signed tree heads: a ledger's signed statement "my tree of N records has root R, at time T".

The signed body is the canonical JSON of ``format``, ``ledger`` (the ledger's id), ``tree_size``,
``root_hash`` (hex), ``timestamp`` (milliseconds since the Unix epoch) and ``previous`` (the SHA-256
of the previous tree head's canonical JSON, or null); as everywhere in sealtrace
(:mod:`sealtrace.signing`) the Ed25519 signature covers the ASCII hex SHA-256 of those bytes.
docs/ledger.md spells the bytes out. ``previous`` chains the heads: a head removed from the middle of
a store, or one put in, breaks the chain, as a removed record breaks the tree.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sealtrace.digest import canonical_json
from sealtrace.ledger.errors import ProofFormatError
from sealtrace.ledger.records import parse_json, schema_problem
from sealtrace.signing import Signature, key_id, load_public_key, sign_digest, verify_signature

TREE_HEAD_FORMAT = "sealtrace.ledger.tree-head.v1"
MAX_TREE_HEAD_BYTES = 4096

TrustedKeys = Mapping[str, Ed25519PublicKey]


@dataclass(frozen=True)
class TreeHead:
    """A signed tree head (STH): tree size, root hash, timestamp, and the signature over them."""

    ledger: str
    tree_size: int
    root_hash: bytes
    timestamp: int
    previous: str | None
    signature: Signature

    def body(self) -> dict[str, Any]:
        """The signed part."""
        return _body(self.ledger, self.tree_size, self.root_hash, self.timestamp, self.previous)

    @property
    def digest(self) -> str:
        """The hex SHA-256 of the body's canonical JSON: what the signature covers."""
        return hashlib.sha256(canonical_json(self.body())).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {**self.body(), "signature": self.signature.to_json()}

    def to_bytes(self) -> bytes:
        """The head as stored and served: canonical JSON."""
        return canonical_json(self.to_json())

    @property
    def chain_digest(self) -> str:
        """The hex SHA-256 of the whole head's canonical JSON: what the next head's ``previous`` names."""
        return hashlib.sha256(self.to_bytes()).hexdigest()

    @classmethod
    def sign(cls, key: Ed25519PrivateKey, ledger: str, tree_size: int, root_hash: bytes,
             previous: str | None, timestamp: int | None = None) -> TreeHead:
        """A new head signed by ``key``, after the head whose chain digest is ``previous``;
        ``timestamp`` defaults to now."""
        stamp = int(time.time() * 1000) if timestamp is None else timestamp
        digest = hashlib.sha256(canonical_json(_body(ledger, tree_size, root_hash, stamp, previous))).hexdigest()
        return cls(ledger, tree_size, root_hash, stamp, previous, sign_digest(key, digest))

    @classmethod
    def from_json(cls, document: Any, where: str) -> TreeHead:
        """A head from its JSON object; the structure is checked, the signature is not (see :meth:`check`)."""
        problem = schema_problem(document, "tree_head")
        if problem is not None:
            raise ProofFormatError(f"{where}: not a {TREE_HEAD_FORMAT} tree head ({problem})")
        head = cls(
            document["ledger"],
            document["tree_size"],
            bytes.fromhex(document["root_hash"]),
            document["timestamp"],
            document["previous"],
            Signature.from_json(document["signature"]),
        )
        # Python's regex '$' also matches before a final newline, and JSON Schema takes 5.0 for an
        # integer: only the exact form is accepted.
        if head.to_json() != document or type(head.tree_size) is not int or type(head.timestamp) is not int:
            raise ProofFormatError(f"{where}: tree head fields are not in their canonical form")
        return head

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> TreeHead:
        return cls.from_json(parse_json(data, where, ProofFormatError, MAX_TREE_HEAD_BYTES), where)

    def problem(self, trusted: TrustedKeys) -> str | None:
        """Why this head is not to be believed (untrusted key, bad signature), or None."""
        key = trusted.get(self.signature.key_id)
        if key is None:
            return (f"tree head of size {self.tree_size} is signed by key {self.signature.key_id}, "
                    f"not by a trusted key ({', '.join(sorted(trusted)) or 'none given'})")
        if not verify_signature(key, self.digest, self.signature):
            return f"tree head of size {self.tree_size}: the signature by key {self.signature.key_id} is not valid"
        return None


def _body(ledger: str, tree_size: int, root_hash: bytes, timestamp: int, previous: str | None) -> dict[str, Any]:
    return {
        "format": TREE_HEAD_FORMAT,
        "ledger": ledger,
        "tree_size": tree_size,
        "root_hash": root_hash.hex(),
        "timestamp": timestamp,
        "previous": previous,
    }


def trusted_keys(keys: Iterable[str | os.PathLike[str] | Ed25519PublicKey]) -> dict[str, Ed25519PublicKey]:
    """Trusted public keys by key id, from PEM paths (public or private key files) or key objects."""
    result: dict[str, Ed25519PublicKey] = {}
    for source in keys:
        key = source if isinstance(source, Ed25519PublicKey) else load_public_key(source)
        result[key_id(key)] = key
    return result
