"""Proof documents, and checking them with trusted keys and nothing else.

An inclusion proof (``sealtrace.ledger.inclusion-proof.v1``) holds a record's leaf bytes (its
canonical JSON, as a JSON string), its leaf index, the audit path, and a signed tree head. A
consistency proof (``sealtrace.ledger.consistency-proof.v1``) holds two signed tree heads and the
proof that the second tree extends the first. :func:`check_proof` needs the document and the
trusted public keys: no store, no network, no clock.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from sealtrace.ledger import merkle
from sealtrace.ledger.errors import LedgerCheckError, ProofFormatError
from sealtrace.ledger.records import parse_json, parse_record, schema_problem
from sealtrace.ledger.treehead import TREE_HEAD_FORMAT, TreeHead, TrustedKeys
from sealtrace.limits import read_regular_file

INCLUSION_FORMAT = "sealtrace.ledger.inclusion-proof.v1"
CONSISTENCY_FORMAT = "sealtrace.ledger.consistency-proof.v1"
MAX_PROOF_BYTES = 4 << 20


def inclusion_document(leaf: bytes, index: int, head: TreeHead, proof: list[bytes]) -> dict[str, Any]:
    """The inclusion-proof document of the leaf at ``index`` against ``head``."""
    return {
        "format": INCLUSION_FORMAT,
        # Leaves are ASCII (canonical JSON); a damaged stored leaf still yields a document, one that fails.
        "leaf": leaf.decode("ascii", "replace"),
        "index": index,
        "tree_head": head.to_json(),
        "proof": [h.hex() for h in proof],
    }


def consistency_document(first: TreeHead, second: TreeHead, proof: list[bytes]) -> dict[str, Any]:
    """The consistency-proof document from tree head ``first`` to ``second``."""
    return {"format": CONSISTENCY_FORMAT, "first": first.to_json(), "second": second.to_json(),
            "proof": [h.hex() for h in proof]}


@dataclass(frozen=True)
class Inclusion:
    """A checked inclusion proof: this record is leaf ``index`` of the tree ``tree_head`` signs."""

    record: dict[str, Any]
    index: int
    tree_head: TreeHead


@dataclass(frozen=True)
class Consistency:
    """A checked consistency proof: the tree of ``second`` extends the tree of ``first``."""

    first: TreeHead
    second: TreeHead


def read_proof(path: str | os.PathLike[str]) -> Any:
    """The JSON document in a proof file (bounded read; not yet checked)."""
    data = read_regular_file(path, "proof file", ProofFormatError, MAX_PROOF_BYTES)
    return parse_json(data, os.fspath(path), ProofFormatError, MAX_PROOF_BYTES)


def check_proof(document: Any, trusted: TrustedKeys, where: str = "proof") -> Inclusion | Consistency:
    """Check an inclusion or consistency proof document against ``trusted`` keys (by key id).

    Raises :class:`ProofFormatError` (exit 2) for a document that is not a proof, and
    :class:`LedgerCheckError` (exit 1) for one that does not prove what it claims or is not signed
    by a trusted key.
    """
    kind = document.get("format") if isinstance(document, dict) else None
    if kind == INCLUSION_FORMAT:
        return _check_inclusion(document, trusted, where)
    if kind == CONSISTENCY_FORMAT:
        return _check_consistency(document, trusted, where)
    raise ProofFormatError(f"{where}: not a sealtrace ledger proof (format {str(kind)[:80]!r}; "
                           f"expected {INCLUSION_FORMAT} or {CONSISTENCY_FORMAT})")


def held_tree_heads(document: Any, where: str) -> list[TreeHead]:
    """The tree heads in a proof document (or a bare tree head), signatures not yet checked."""
    kind = document.get("format") if isinstance(document, dict) else None
    if kind == TREE_HEAD_FORMAT:
        return [TreeHead.from_json(document, where)]
    if kind == INCLUSION_FORMAT:
        _hashes(document, "inclusion_proof", where)
        return [TreeHead.from_json(document["tree_head"], f"{where}: tree_head")]
    if kind == CONSISTENCY_FORMAT:
        _hashes(document, "consistency_proof", where)
        return [TreeHead.from_json(document[name], f"{where}: {name}") for name in ("first", "second")]
    raise ProofFormatError(f"{where}: not a sealtrace ledger proof or tree head (format {str(kind)[:80]!r})")


def _hashes(document: dict[str, Any], kind: str, where: str) -> list[bytes]:
    proof = document.get("proof")
    if isinstance(proof, list) and len(proof) > merkle.MAX_PROOF_LENGTH:  # refused before a schema walks it
        raise ProofFormatError(f"{where}: a proof of {len(proof)} hashes; no tree has one longer than "
                               f"{merkle.MAX_PROOF_LENGTH}")
    problem = schema_problem(document, kind)
    if problem is not None:
        raise ProofFormatError(f"{where}: {problem}")
    if any(len(h) != 2 * merkle.HASH_SIZE for h in document["proof"]):  # '$' also matches before a '\n'
        raise ProofFormatError(f"{where}: proof hashes must be 64 lowercase hex digits")
    if "index" in document and type(document["index"]) is not int:  # JSON Schema takes 5.0 for an integer
        raise ProofFormatError(f"{where}: index must be an integer")
    return [bytes.fromhex(h) for h in document["proof"]]


def _trusted(head: TreeHead, trusted: TrustedKeys, where: str) -> None:
    problem = head.problem(trusted)
    if problem is not None:
        raise LedgerCheckError([f"{where}: {problem}"])


def _check_inclusion(document: dict[str, Any], trusted: TrustedKeys, where: str) -> Inclusion:
    proof = _hashes(document, "inclusion_proof", where)
    head = TreeHead.from_json(document["tree_head"], f"{where}: tree_head")
    try:
        leaf = document["leaf"].encode("ascii")
    except UnicodeEncodeError:
        raise ProofFormatError(f"{where}: leaf is not ASCII, so not canonical JSON") from None
    record = parse_record(leaf, f"{where}: leaf")
    _trusted(head, trusted, where)
    index = document["index"]
    if not merkle.verify_inclusion(merkle.leaf_hash(leaf), index, head.tree_size, proof, head.root_hash):
        raise LedgerCheckError([
            f"{where}: record {record['id']} is not leaf {index} of the tree of {head.tree_size} records "
            f"signed by key {head.signature.key_id} (the inclusion proof does not lead to its root)"
        ])
    return Inclusion(record, index, head)


def _check_consistency(document: dict[str, Any], trusted: TrustedKeys, where: str) -> Consistency:
    proof = _hashes(document, "consistency_proof", where)
    first = TreeHead.from_json(document["first"], f"{where}: first")
    second = TreeHead.from_json(document["second"], f"{where}: second")
    _trusted(first, trusted, f"{where}: first")
    _trusted(second, trusted, f"{where}: second")
    if first.ledger != second.ledger:
        raise LedgerCheckError([f"{where}: the tree heads are of different ledgers ({first.ledger}, {second.ledger})"])
    ok = (
        not proof and first.root_hash == merkle.EMPTY_ROOT if first.tree_size == 0  # every tree extends it
        else merkle.verify_consistency(first.tree_size, second.tree_size, first.root_hash, second.root_hash, proof)
    )
    if not ok:
        raise LedgerCheckError([
            f"{where}: the tree of {second.tree_size} records does not extend the tree of {first.tree_size} "
            "(the consistency proof does not verify)"
        ])
    return Consistency(first, second)
