"""The ledger's Merkle tree: RFC 9162 (Certificate Transparency v2) hashing, proofs and their checks.

- A leaf's hash is ``SHA-256(0x00 || leaf bytes)``, an interior node's ``SHA-256(0x01 || left || right)``,
  the empty tree's root ``SHA-256()`` (RFC 9162 section 2.1.1).
- The tree over n leaves has the RFC's shape: its left subtree holds the largest power of two below n
  leaves, its right subtree the rest, recursively. So every node is either a *complete* subtree (2^level
  leaves starting at a multiple of 2^level) or lies on the right border of some tree size.
- Inclusion proofs (2.1.3) and consistency proofs (2.1.4) are generated from complete-subtree hashes
  and checked with the RFC's own verification algorithms (2.1.3.2, 2.1.4.2).

Storage scheme: a ledger stores the hash of every complete subtree once, when its last leaf is
appended (2n - popcount(n) nodes for n leaves), keyed by :func:`node_position`, the order in which
they are created. Any RFC node is a complete subtree or a right-border node made of at most
log2(n) complete subtrees, so a proof needs O(log n) stored hashes, read in one query; nothing is
recomputed from the leaves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence

HASH_SIZE = 32
LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"
EMPTY_ROOT = hashlib.sha256(b"").digest()
# RFC 9162 sizes and indices are uint64; nothing outside this range is a tree this code will reason about.
MAX_TREE_SIZE = (1 << 64) - 1
# The longest proof any tree of at most MAX_TREE_SIZE leaves has: one hash per level (inclusion), one
# more for a consistency proof's first node.
MAX_PROOF_LENGTH = 65

# A complete subtree: (level, index); it holds leaves [index * 2^level, (index + 1) * 2^level).
Subtree = tuple[int, int]
# Reads stored complete-subtree hashes by position; positions it does not hold are left out.
NodeReader = Callable[[Sequence[int]], Mapping[int, bytes]]


def leaf_hash(leaf: bytes) -> bytes:
    """SHA-256(0x00 || leaf)."""
    return hashlib.sha256(LEAF_PREFIX + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right)."""
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def node_position(level: int, index: int) -> int:
    """Where complete subtree (level, index) is stored: the number of nodes created before it.

    Appending leaf i creates the leaf's node, then every complete subtree that leaf completes,
    lowest first; numbering them in that order lets a verifier stream stored nodes and recompute
    them in one pass. The subtree completes when leaf n - 1 is appended, n = (index + 1) * 2^level:
    2n - popcount(n) nodes exist then, and the ones above ``level`` come after it.
    """
    n = (index + 1) << level
    top = (n & -n).bit_length() - 1  # the highest level completed by leaf n - 1
    return 2 * n - n.bit_count() - 1 - (top - level)


def node_count(size: int) -> int:
    """How many complete subtrees a tree of ``size`` leaves has (stored nodes)."""
    return 2 * size - size.bit_count()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n > 1): the size of the RFC's left subtree."""
    return 1 << ((n - 1).bit_length() - 1)


def complete_subtrees(start: int, end: int) -> list[Subtree]:
    """The complete subtrees that make up leaves [start, end), left to right, largest first.

    For a node of an RFC tree (``start`` a multiple of the power of two at or above end - start) these
    are the bits of end - start, and the node's hash folds them from the right: H(c1, H(c2, ...)).
    """
    parts: list[Subtree] = []
    while start < end:
        level = (end - start).bit_length() - 1
        if start:
            level = min(level, (start & -start).bit_length() - 1)
        parts.append((level, start >> level))
        start += 1 << level
    return parts


def inclusion_ranges(index: int, size: int) -> list[tuple[int, int]]:
    """The leaf ranges whose hashes form PATH(index, D[0:size]) (RFC 9162 2.1.3.1), leaf level first."""
    ranges = []
    start, end = 0, size
    while end - start > 1:
        mid = start + _split(end - start)
        if index < mid:
            ranges.append((mid, end))
            end = mid
        else:
            ranges.append((start, mid))
            start = mid
    ranges.reverse()
    return ranges


def consistency_ranges(first: int, second: int) -> list[tuple[int, int]]:
    """The leaf ranges whose hashes form PROOF(first, D[0:second]) (RFC 9162 2.1.4.1), 0 < first <= second."""
    ranges = []
    start, end, m, whole = 0, second, first, True
    while True:
        n = end - start
        if m == n:
            if not whole:
                ranges.append((start, end))
            break
        k = _split(n)
        if m <= k:
            ranges.append((start + k, end))
            end = start + k
        else:
            ranges.append((start, start + k))
            start, m, whole = start + k, m - k, False
    ranges.reverse()
    return ranges


def _hashes(ranges: Sequence[tuple[int, int]], read: NodeReader) -> list[bytes]:
    """The hash of each RFC node in ``ranges``, from one read of the complete subtrees they need."""
    parts = [complete_subtrees(start, end) for start, end in ranges]
    wanted = sorted({node_position(*subtree) for subtrees in parts for subtree in subtrees})
    stored = read(wanted) if wanted else {}
    missing = [p for p in wanted if p not in stored]
    if missing:
        raise LookupError(f"tree node(s) at position {', '.join(map(str, missing[:5]))} missing from the store")
    result = []
    for subtrees in parts:
        hashes = [stored[node_position(*subtree)] for subtree in subtrees]
        value = hashes[-1]
        for left in reversed(hashes[:-1]):
            value = node_hash(left, value)
        result.append(value)
    return result


def root_hash(size: int, read: NodeReader) -> bytes:
    """MTH(D[0:size]) from stored complete subtrees (at most log2(size) of them)."""
    return _hashes([(0, size)], read)[0] if size else EMPTY_ROOT


def inclusion_proof(index: int, size: int, read: NodeReader) -> list[bytes]:
    """The audit path of leaf ``index`` in the tree of ``size`` leaves (RFC 9162 2.1.3.1)."""
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is not in a tree of {size} leaves")
    return _hashes(inclusion_ranges(index, size), read)


def consistency_proof(first: int, second: int, read: NodeReader) -> list[bytes]:
    """The consistency proof from the tree of ``first`` leaves to the tree of ``second`` (2.1.4.1)."""
    if not 0 < first <= second:
        raise ValueError(f"no consistency proof from a tree of {first} leaves to one of {second}")
    return _hashes(consistency_ranges(first, second), read) if first < second else []


def _well_formed(proof: Sequence[bytes], hashes: Sequence[bytes], numbers: Sequence[int]) -> bool:
    return (
        len(proof) <= MAX_PROOF_LENGTH
        and all(isinstance(h, bytes) and len(h) == HASH_SIZE for h in (*proof, *hashes))
        and all(type(n) is int for n in numbers)  # not bool, not 5.0
    )


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> bool:
    """RFC 9162 2.1.3.2: does ``proof`` show leaf hash ``leaf`` at ``index`` in the tree with ``root``?

    Runs in O(len(proof) + 64) steps whatever ``size`` claims.
    """
    if not (_well_formed(proof, (leaf, root), (index, size)) and 0 <= index < size <= MAX_TREE_SIZE):
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


def verify_consistency(first: int, second: int, first_root: bytes, second_root: bytes, proof: Sequence[bytes]) -> bool:
    """RFC 9162 2.1.4.2: is the tree (``second``, ``second_root``) an extension of (``first``, ``first_root``)?

    Equal sizes need an empty proof and equal roots. From the empty tree there is no proof (every tree
    extends it; RFC 9162 defines proofs for 0 < first only), so ``first == 0`` is refused here.
    """
    if not (_well_formed(proof, (first_root, second_root), (first, second)) and 0 < first <= second <= MAX_TREE_SIZE):
        return False
    if first == second:
        return not proof and first_root == second_root
    if not proof:
        return False
    path = list(proof)
    if first & (first - 1) == 0:  # first is a power of two: its root is a node of the second tree
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return fr == first_root and sr == second_root and sn == 0


class CompactRange:
    """The right border of a growing tree: the complete subtrees that make up its leaves, left to right.

    It is all an appender needs to hash new nodes and the root without reading the store.
    """

    def __init__(self, size: int = 0, hashes: Iterable[bytes] = ()) -> None:
        self.size = size
        self.hashes = list(hashes)
        if len(self.hashes) != size.bit_count() or any(len(h) != HASH_SIZE for h in self.hashes):
            raise ValueError(f"a tree of {size} leaves has {size.bit_count()} border hashes, not {len(self.hashes)}")

    @staticmethod
    def positions(size: int) -> list[int]:
        """Where the border subtrees of a tree of ``size`` leaves are stored, left to right."""
        return [node_position(*subtree) for subtree in complete_subtrees(0, size)]

    @classmethod
    def load(cls, size: int, read: NodeReader) -> CompactRange:
        """The border of the stored tree of ``size`` leaves."""
        positions = cls.positions(size)
        stored = read(positions) if positions else {}
        if any(p not in stored for p in positions):
            raise LookupError(f"the store lacks border nodes of its tree of {size} leaves")
        return cls(size, [stored[p] for p in positions])

    def append(self, leaf: bytes) -> list[tuple[int, bytes]]:
        """Add a leaf hash; (position, hash) of every node it creates, in position order."""
        index = self.size
        created = [(node_position(0, index), leaf)]
        value, level = leaf, 0
        self.size += 1
        while (index >> level) & 1:  # a left sibling of equal height is waiting: merge
            value = node_hash(self.hashes.pop(), value)
            level += 1
            created.append((node_position(level, index >> level), value))
        self.hashes.append(value)
        return created

    def root(self) -> bytes:
        """MTH of the leaves so far."""
        if not self.hashes:
            return EMPTY_ROOT
        value = self.hashes[-1]
        for left in reversed(self.hashes[:-1]):
            value = node_hash(left, value)
        return value
