"""OpenSSF model-signing signatures of a model directory, written and checked key-based (ECDSA).

The format is model-signing 1.x's (``model_signing sign key`` / ``verify key``): a Sigstore bundle
v0.3 holding a DSSE envelope of an in-toto Statement v1 with predicate type
``https://model_signing/signature/v1.0``. Its predicate lists one resource per file ("files") or
per shard of each file ("shards"), each a sha256; its one subject is the model's name with the
sha256 over the resources' digests in their sorted order (the root digest). Nothing here reaches a
Sigstore instance: no certificate, no transparency log entry, only a public key hint.

sealtrace adds a ``sealtrace`` field to the predicate: the per-tensor sha256 of each safetensors,
.npy and .npz file and of an ONNX model's external data (as manifests format 1 record them), and the
arrays of each orbax OCDBT checkpoint (as format 3 records them, with sha256), so a changed file is
reported with the tensors that changed. v1.0 verifiers ignore fields they do not know.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sealtrace import __version__
from sealtrace.container import manifest as manifests
from sealtrace.container.errors import IntegrityError, Mismatch
from sealtrace.container.manifest import ManifestReport, RefusedEntry
from sealtrace.container.manifest_arrays import ArraySetError, compare_sets, find_array_sets
from sealtrace.container.signatures import SignatureCheck
from sealtrace.errors import CheckFailedError, InputError
from sealtrace.hashpool import hash_map
from sealtrace.limits import BudgetExceededError
from sealtrace.outputs import atomic_output, check_output
from sealtrace.provenance.dsse import (
    ProvenanceFormatError,
    SignatureInvalidError,
    envelope,
    open_envelope,
    public_key_hint,
    read_json,
    statement_bytes,
    trusted,
)
from sealtrace.provenance.hashcache import HashCache, open_cache, stat_key
from sealtrace.provenance.safetensors_sets import read_weight_map, safetensors_sets, set_mismatches
from sealtrace.signing import PublicKey, load_signing_key

BUNDLE_MEDIA_TYPES = ("application/vnd.dev.sigstore.bundle.v0.3+json", "application/vnd.dev.sigstore.bundle+json;version=0.3")
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
# What model-signing leaves out of a model by default (its hashing.Config, ignore_git_paths).
GIT_PATHS = (".git", ".gitattributes", ".github", ".gitignore")


@dataclass(frozen=True)
class SignedModel:
    """What :func:`sign_directory` wrote."""

    path: str
    root_digest: str
    resources: int
    files: int
    tensors: int
    reused: int | None = None  # files whose digests came from the hash cache (None: no cache)


@dataclass
class BundleReport(ManifestReport):
    """A check against a model-signing bundle: a partial one lists the signed files it did not check."""

    unchecked: list[str] = field(default_factory=list)  # signed, left out by --only: not checked
    ignored: list[str] = field(default_factory=list)  # on disk, not signed, left out by --ignore-unsigned-files
    reused: int | None = None  # files whose digests came from the hash cache (None: no cache)

    @property
    def partial(self) -> bool:
        return bool(self.unchecked)

    def to_json(self) -> dict[str, Any]:
        extra = {"partial": self.partial, "unchecked": self.unchecked, "ignored_unsigned": self.ignored, "cached_files": self.reused}
        return {**super().to_json(), **extra}


def looks_like_bundle(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a Sigstore bundle rather than a sealtrace manifest (canonical JSON
    that starts with its "manifest" key)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False  # never opened here (a FIFO would block): the manifest reader refuses it
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return False  # the manifest reader says why, in its words
    return not head.startswith(b'{"manifest":') and (b"dsseEnvelope" in head or b"sigstore.bundle" in head)


def _ignored(rel: str, ignore: list[str]) -> bool:
    return any(rel == p or rel.startswith(p.rstrip("/") + "/") for p in ignore)


def _files(root: Path, ignore: list[str], follow_symlinks: bool) -> tuple[list[tuple[str, Path]], list[RefusedEntry]]:
    """Every file of ``root`` that the signature covers, and every entry that cannot be hashed
    (a link not followed, a device, a name that cannot be recorded)."""
    found, refused = manifests._walk(root, follow_symlinks, set())
    return [f for f in found if not _ignored(f[0], ignore)], [r for r in refused if not _ignored(r.path, ignore)]


def _inside(root: Path, path: str | os.PathLike[str]) -> str | None:
    real_root, real = root.resolve(), Path(path).resolve()
    return real.relative_to(real_root).as_posix() if real_root in real.parents else None


def _shards(path: Path, size: int, shard_size: int) -> list[tuple[int, int, str]]:
    """(start, end, sha256) of each shard, as model-signing splits a file (none for an empty one)."""
    ends = [*range(shard_size, size, shard_size), size] if size else []
    starts = [0, *ends[:-1]]
    with path.open("rb") as f:
        return [(start, end, manifests._range_sha256(f, start, end - start)) for start, end in zip(starts, ends, strict=True)]


def _resource_order(name: str, shards: bool) -> tuple[Any, ...]:
    """model-signing sorts resources by path (part by part, not as a string), then shard offsets."""
    if not shards:
        return (PurePosixPath(name).parts,)
    path, start, end = name.rsplit(":", 2)
    return (PurePosixPath(path).parts, int(start), int(end))


def _root_digest(resources: list[dict[str, str]]) -> str:
    digest = hashlib.sha256()
    for resource in resources:
        digest.update(bytes.fromhex(resource["digest"]))
    return digest.hexdigest()


def _orbax_sets(root: Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The arrays of each orbax OCDBT checkpoint in the directory, by name, dtype, shape and sha256
    of their values (manifests format 3's array sets): the tensors of a checkpoint whose files
    name none (safetensors and .npz tensors are listed by file)."""
    as_listed = [{"path": r["path"], "format": r.get("format"), "digest": r["sha256"], "tensors": []} for r in records]
    return [s for s in find_array_sets(root, as_listed, hashlib.sha256) if s["kind"] == "orbax-ocdbt"]


def _describe(
    files: list[tuple[str, Path]], shard_size: int | None, tensors: bool, cache: HashCache | None = None
) -> list[dict[str, Any]]:
    """Per file: sha256 and size, with ``tensors`` its format and tensors too (manifest format 1),
    and its shards when sharding; taken from ``cache`` for a file whose stat it holds."""
    ranges = manifests._external_data_ranges(dict(files)) if tensors else {}
    shards = f"shards-{shard_size}"
    needs = ["size", "sha256", *(["format", "tensors"] if tensors else []), *([shards] if shard_size is not None else [])]

    def read(rel: str, path: Path) -> dict[str, Any]:
        if tensors:
            external = manifests._range_tensors(path, ranges[rel]) if rel in ranges else None
            fields = manifests._describe_file(rel, path, external or None)
            del fields["path"]
        else:
            digest, size = manifests._file_sha256(path)
            fields = {"size": size, "sha256": digest}
        if shard_size is not None:
            fields[shards] = _shards(path, fields["size"], shard_size)
        return fields

    def describe(item: tuple[str, Path]) -> tuple[dict[str, Any], bool]:
        rel, path = item
        cached = None
        if cache is not None:
            external = [list(r) for r in ranges.get(rel, [])] or None  # a data file's tensors depend on its .onnx
            key = stat_key(path)
            cached = cache.lookup(rel, key, needs, external)
        fields = cached or read(rel, path)
        if cache is not None and cached is None:
            cache.store(rel, key, path, fields, external)
        record = {"path": rel, **{n: fields[n] for n in needs}}
        if shard_size is not None:
            record["shards"] = record.pop(shards)
        return record, cached is not None

    described = hash_map(describe, files)
    if cache is not None:
        cache.reused = sum(reused for _, reused in described)
    return [record for record, _ in described]


def sign_directory(
    directory: str | os.PathLike[str],
    key_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    *,
    shard_size: int | None = None,
    follow_symlinks: bool = False,
    force: bool = False,
    cache_path: str | os.PathLike[str] | None = None,
) -> SignedModel:
    """Write a model-signing bundle of ``directory`` signed with the ECDSA key at ``key_path``;
    with ``cache_path``, re-read only the files whose stat the hash cache there does not hold."""
    check_output(out_path, force, "-o")
    if shard_size is not None and shard_size < 1:
        raise InputError(f"--shard-size {shard_size}: must be a positive number of bytes")
    key = load_signing_key(key_path)
    if isinstance(key, Ed25519PrivateKey):
        raise InputError(f"{key_path}: an Ed25519 key; model-signing verifies ECDSA keys only "
                         "(make one: sealtrace keygen --algorithm ecdsa-p256 -o KEY.pem)")  # fmt: skip
    root = Path(directory)
    if not root.is_dir():
        raise manifests.ManifestPathError(f"{root}: not a directory")
    ignore = list(GIT_PATHS)
    ignore += [rel for path in (out_path, cache_path) if path is not None and (rel := _inside(root, path)) is not None]
    files, refused = _files(root, ignore, follow_symlinks)
    manifests._refuse_unrecordable([], refused)  # model-signing refuses them too
    cache = open_cache(cache_path, root) if cache_path is not None else None
    records = _describe(files, shard_size, tensors=True, cache=cache)
    if shard_size is None:
        resources = [{"name": r["path"], "algorithm": "sha256", "digest": r["sha256"]} for r in records]
        serialization: dict[str, Any] = {"method": "files", "hash_type": "sha256"}
    else:
        resources = [
            {"name": f"{r['path']}:{start}:{end}", "algorithm": f"sha256-sharded-{shard_size}", "digest": digest}
            for r in records for start, end, digest in r["shards"]
        ]  # fmt: skip
        serialization = {"method": "shards", "hash_type": "sha256", "shard_size": shard_size}
    resources.sort(key=lambda r: _resource_order(r["name"], shard_size is not None))
    serialization |= {"allow_symlinks": follow_symlinks, "ignore_paths": ignore}
    tensors = [{"name": r["path"], "format": r["format"], "tensors": r["tensors"]} for r in records if r["tensors"]]
    extra = {
        "version": __version__, "tensor_digest": "sha256", "files": tensors, "arrays": _orbax_sets(root, records),
        "safetensors_sets": safetensors_sets(files),
    }  # fmt: skip
    predicate = {"serialization": serialization, "resources": resources, "sealtrace": extra}
    root_digest = _root_digest(resources)
    name = root.name or os.path.basename(root.resolve())
    payload = statement_bytes([{"name": name, "digest": {"sha256": root_digest}}], PREDICATE_TYPE, predicate)
    bundle = {
        "mediaType": BUNDLE_MEDIA_TYPES[0],
        "verificationMaterial": {"publicKey": {"hint": public_key_hint(key.public_key())}, "tlogEntries": []},
        "dsseEnvelope": envelope(payload, key),
    }
    with atomic_output(out_path, force=force) as f:
        f.write(json.dumps(bundle, indent=2).encode("utf-8") + b"\n")
    if cache is not None:
        cache.save({rel for rel, _ in files})
    return SignedModel(os.fspath(out_path), root_digest, len(resources), len(records), sum(len(t["tensors"]) for t in tensors),
                       cache.reused if cache is not None else None)  # fmt: skip


def _trusted_for(bundle: dict[str, Any], keys: list[PublicKey], where: str) -> list[PublicKey]:
    """The trusted keys that the bundle's key hint names (all of them when it has none)."""
    material = bundle.get("verificationMaterial")
    hint = material.get("publicKey", {}).get("hint") if isinstance(material, dict) else None
    if not hint:
        return keys
    named = [key for key in keys if public_key_hint(key) == hint]
    if not named:
        raise SignatureInvalidError(f"{where}: signed by another key (public key hint {str(hint)[:16]}...), "
                                    "not by a trusted one")  # fmt: skip
    return named


def _predicate(statement: dict[str, Any], where: str) -> tuple[str, list[dict[str, str]], dict[str, Any]]:
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise ProvenanceFormatError(f"{where}: predicate type {statement.get('predicateType')!r}, not {PREDICATE_TYPE}")
    subjects = statement["subject"]
    predicate = statement["predicate"]
    resources = predicate.get("resources")
    serialization = predicate.get("serialization")
    root = subjects[0].get("digest", {}).get("sha256") if len(subjects) == 1 and isinstance(subjects[0], dict) else None
    if not isinstance(root, str) or not isinstance(resources, list) or not isinstance(serialization, dict) or not all(
        isinstance(r, dict) and all(isinstance(r.get(k), str) for k in ("name", "algorithm", "digest")) for r in resources
    ):
        raise ProvenanceFormatError(f"{where}: not a model-signing v1.0 predicate (one subject, resources, serialization)")
    try:
        recomputed = _root_digest(resources)
    except ValueError:
        raise ProvenanceFormatError(f"{where}: a resource digest is not hex") from None
    if recomputed != root:
        raise CheckFailedError(f"{where}: the signed resources hash to {recomputed}, not the root digest {root}")
    return root, resources, serialization


def verify_directory(
    directory: str | os.PathLike[str],
    bundle_path: str | os.PathLike[str],
    trust: tuple[str, ...] | list[str],
    *,
    raise_on_failure: bool = True,
    only: tuple[str, ...] | list[str] = (),
    ignore_unsigned_files: bool = False,
    cache_path: str | os.PathLike[str] | None = None,
) -> BundleReport:
    """Check ``directory`` against a model-signing bundle signed by one of the ``trust`` keys: name
    every changed, missing and extra file, and every changed tensor the bundle's sealtrace field
    lists. A signature no trusted key verifies raises :class:`SignatureInvalidError` (exit 1).
    The report's digest is the bundle's root digest.

    ``only`` (glob patterns over paths in the directory) checks just the signed files they match, a
    partial check whose report lists the signed files left unchecked; the signature and root digest
    still cover every resource. ``ignore_unsigned_files`` leaves out files the bundle does not list
    (model-signing's option of that name). With ``cache_path``, a file whose stat the hash cache
    holds is not re-read."""
    where = os.fspath(bundle_path)
    keys = trusted(trust, "checking a model-signing bundle")
    bundle = read_json(bundle_path, "Sigstore bundle")
    if not isinstance(bundle, dict) or bundle.get("mediaType") not in BUNDLE_MEDIA_TYPES:
        raise ProvenanceFormatError(f"{where}: not a Sigstore bundle v0.3 (mediaType {BUNDLE_MEDIA_TYPES[0]})")
    if "dsseEnvelope" not in bundle:
        raise ProvenanceFormatError(f"{where}: the bundle holds no DSSE envelope (a message signature is not a model signature)")
    opened = open_envelope(bundle["dsseEnvelope"], _trusted_for(bundle, keys, where), where)
    root_digest, resources, serialization = _predicate(opened.statement, where)
    method = serialization.get("method")
    if method not in ("files", "shards") or serialization.get("hash_type") != "sha256":
        raise InputError(f"{where}: serialization {method!r} with {serialization.get('hash_type')!r} is not supported "
                         "(sealtrace checks sha256 by files or shards)")  # fmt: skip
    shard_size = _shard_size(serialization, where) if method == "shards" else None
    root = Path(directory)
    if not root.is_dir():
        raise manifests.ManifestPathError(f"{root}: not a directory")
    ignore = [*GIT_PATHS, *(str(p) for p in serialization.get("ignore_paths", []))]
    if (rel := _inside(root, bundle_path)) is not None:
        ignore.append(rel)
    if cache_path is not None and (rel := _inside(root, cache_path)) is not None:
        ignore.append(rel)
    on_disk, refused = _files(root, ignore, bool(serialization.get("allow_symlinks")))
    signed = set(_signed_files(resources, shard_size is not None))
    checked = _selected(signed, only, where)
    files = [f for f in on_disk if f[0] in checked or (f[0] not in signed and _matches(f[0], only))]
    refused = [r for r in refused if r.path in checked or (r.path not in signed and _matches(r.path, only))]
    ignored = sorted(rel for rel, _ in files if rel not in signed) if ignore_unsigned_files else []
    files = [f for f in files if f[0] not in ignored]
    refused = [r for r in refused if not (ignore_unsigned_files and r.path not in signed)]
    cache = open_cache(cache_path, root) if cache_path is not None else None
    records = _describe(files, shard_size, tensors=False, cache=cache)  # tensors only of the files that changed, below
    if cache is not None:
        cache.save({rel for rel, _ in on_disk})

    @functools.cache
    def tensors_of(rel: str) -> list[dict[str, str]]:
        external = manifests._external_data_tensors(dict(files), verifying=True)
        return manifests._describe_file(rel, dict(files)[rel], external.get(rel), verifying=True)["tensors"]

    report = BundleReport(os.fspath(directory), root_digest, files=len(records),
                          signatures=[SignatureCheck(opened.signed_by, valid=True, trusted=True)],
                          unchecked=sorted(signed - checked), ignored=ignored,
                          reused=cache.reused if cache is not None else None)  # fmt: skip
    extra = opened.statement["predicate"].get("sealtrace")
    sharded = shard_size is not None
    in_checked = [r for r in resources if (r["name"].rsplit(":", 2)[0] if sharded else r["name"]) in checked]
    report.mismatches = _compare(records, in_checked, shard_size, extra, tensors_of)
    report.mismatches = set_mismatches(extra, report.mismatches, lambda rel: read_weight_map(rel, root / rel),
                                       lambda rel: {t["name"] for t in tensors_of(rel)}, {rel for rel, _ in files})  # fmt: skip
    report.mismatches[:0] = _changed_arrays(root, records, extra, {m.name for m in report.mismatches})
    # What cannot be hashed is a mismatch (a link planted in the directory fails the check, exit 1).
    report.mismatches += [Mismatch("file", r.path, "a regular file, or nothing", r.reason) for r in refused]
    if raise_on_failure and report.mismatches:
        raise IntegrityError(os.fspath(directory), report.mismatches)
    return report


def _matches(rel: str, patterns: tuple[str, ...] | list[str]) -> bool:
    return not patterns or any(fnmatch.fnmatchcase(rel, p) for p in patterns)


def _selected(signed: set[str], only: tuple[str, ...] | list[str], where: str) -> set[str]:
    """The signed files that ``only`` matches (all of them without patterns); a pattern that
    matches none is refused, so that a typo cannot pass as a check of nothing."""
    for pattern in only:
        if not any(fnmatch.fnmatchcase(rel, pattern) for rel in signed):
            raise InputError(f"--only {pattern}: matches no file that {where} signs")
    return {rel for rel in signed if _matches(rel, only)}


def _changed_arrays(root: Path, records: list[dict[str, Any]], extra: Any, changed: set[str]) -> list[Mismatch]:
    """Each array that changed in the orbax checkpoints (recorded in the bundle's sealtrace field)
    whose files changed."""
    recorded = extra.get("arrays", []) if isinstance(extra, dict) else []
    touched = [s for s in recorded if isinstance(s, dict) and isinstance(s.get("files"), list) and changed & set(s["files"])]
    if not touched:
        return []
    try:
        current = _orbax_sets(root, records)
    except (ArraySetError, BudgetExceededError) as exc:
        return [Mismatch("arrays", str(s.get("path")) or ".", "orbax-ocdbt arrays", f"unreadable: {exc}") for s in touched]
    try:
        return compare_sets(touched, current)[0]
    except (KeyError, TypeError):
        raise ProvenanceFormatError("the bundle's sealtrace arrays are malformed") from None


def _shard_size(serialization: dict[str, Any], where: str) -> int:
    size = serialization.get("shard_size")  # 1024.0 once through model-signing's protobuf Struct
    if not isinstance(size, int | float) or isinstance(size, bool) or size != int(size) or size < 1:
        raise ProvenanceFormatError(f"{where}: shard_size {size!r} is not a positive whole number")
    return int(size)


def _signed_files(resources: list[dict[str, str]], sharded: bool) -> dict[str, str]:
    """Per file, what the bundle says of it: its sha256, or its shards and their digests."""
    by_file: dict[str, list[str]] = {}
    for r in resources:
        path = r["name"].rsplit(":", 2)[0] if sharded else r["name"]
        by_file.setdefault(path, []).append(f"{r['name'].removeprefix(path)} {r['digest']}" if sharded else r["digest"])
    return {path: ", ".join(parts) for path, parts in by_file.items()}


def _compare(
    records: list[dict[str, Any]],
    resources: list[dict[str, str]],
    shard_size: int | None,
    extra: Any,
    tensors_of: Callable[[str], list[dict[str, str]]],
) -> list[Mismatch]:
    sharded = shard_size is not None
    expected = _signed_files(resources, sharded)
    actual = {
        r["path"]: ", ".join(f":{start}:{end} {digest}" for start, end, digest in r["shards"]) if sharded else r["sha256"]
        for r in records
        if not sharded or r["shards"]  # model-signing leaves empty files out when sharding
    }
    recorded_tensors: dict[str, dict[str, str]] = {
        f["name"]: {str(t.get("name")): str(t.get("sha256")) for t in f.get("tensors", []) if isinstance(t, dict)}
        for f in (extra.get("files", []) if isinstance(extra, dict) else []) if isinstance(f, dict)
    }  # fmt: skip
    what = "shards" if sharded else "sha256"
    mismatches: list[Mismatch] = []
    for rel in sorted(set(expected) | set(actual)):
        want, got = expected.get(rel), actual.get(rel)
        if want == got:
            continue
        if got is None:
            mismatches.append(Mismatch("file", rel, f"{what} {want}", "missing"))
            continue
        if want is None:
            mismatches.append(Mismatch("file", rel, "no such file (not in the signature)", f"extra file, {what} {got}"))
            continue
        mismatches.append(Mismatch("file", rel, f"{what} {want}", f"{what} {got}"))
        before = recorded_tensors.get(rel)
        if not before:
            continue
        after = {t["name"]: t["sha256"] for t in tensors_of(rel)}
        for name in sorted(set(before) | set(after)):
            if before.get(name) != after.get(name):
                mismatches.append(Mismatch("tensor", f"{rel}:{name}", f"sha256 {before.get(name, 'absent')}",
                                           f"sha256 {after.get(name, 'absent')}"))  # fmt: skip
    return mismatches

