"""String and text operators: StringNormalizer, StringConcat, StringSplit, RegexFullMatch,
TfIdfVectorizer. String tensors are numpy object arrays of Python str."""

from __future__ import annotations

import operator
import re
from typing import Any

import numpy as np

from sealtrace.ops.registry import register

_concat = np.frompyfunc(operator.add, 2, 1)


def _per_char(text: str, convert: Any) -> str:
    # ONNX Runtime converts character by character (towupper/towlower): 'ß' stays 'ß', never 'SS'.
    out = []
    for ch in text:
        converted = convert(ch)
        out.append(converted if len(converted) == 1 else ch)
    return "".join(out)


@register("StringNormalizer", 10)
def string_normalizer(
    x: np.ndarray,
    *,
    case_change_action: str,
    is_case_sensitive: int,
    locale: str | None,
    stopwords: tuple[str, ...] | None,
) -> np.ndarray:
    """StringNormalizer-10: drop stopword elements of a [C] or [1, C] tensor, then change case."""
    if x.ndim not in (1, 2) or (x.ndim == 2 and x.shape[0] != 1):
        raise ValueError(f"StringNormalizer takes a [C] or [1, C] tensor, got shape {x.shape}")
    words = [str(w) for w in x.reshape(-1)]
    if stopwords:
        if is_case_sensitive:
            stops = set(stopwords)
            words = [w for w in words if w not in stops]
        else:
            folded = {_per_char(s, str.lower) for s in stopwords}
            words = [w for w in words if _per_char(w, str.lower) not in folded]
    if case_change_action == "LOWER":
        words = [_per_char(w, str.lower) for w in words]
    elif case_change_action == "UPPER":
        words = [_per_char(w, str.upper) for w in words]
    elif case_change_action != "NONE":
        raise ValueError(f"unknown case_change_action {case_change_action!r}")
    if not words:
        # Everything was dropped: one empty string, keeping the input's rank.
        words = [""]
    out = np.empty(len(words), dtype=object)
    out[:] = words
    return out if x.ndim == 1 else out.reshape(1, -1)


@register("StringConcat", 20)
def string_concat(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """StringConcat-20: element-wise concatenation with broadcasting."""
    return np.asarray(_concat(x, y), dtype=object)


def _split(text: str, sep: str | None, limit: int) -> list[str]:
    if not text:
        # An empty string has no substrings (ONNX Runtime), whatever the delimiter.
        return []
    parts = text.split(sep, limit)
    if sep is None and parts:
        # Whitespace mode trims the unsplit remainder too ("trailing whitespace is removed").
        parts[-1] = parts[-1].rstrip()
    return parts


@register("StringSplit", 20)
def string_split(
    x: np.ndarray, *, delimiter: str | None, maxsplit: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """StringSplit-20: substrings padded with "" to the longest split, and the substring counts."""
    sep = delimiter or None  # unset or "": split on runs of whitespace
    limit = -1 if maxsplit is None else maxsplit
    parts = [_split(str(s), sep, limit) for s in x.reshape(-1)]
    counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(x.shape)
    width = max((len(p) for p in parts), default=0)
    out = np.full((len(parts), width), "", dtype=object)
    for row, pieces in enumerate(parts):
        out[row, : len(pieces)] = pieces
    return out.reshape((*x.shape, width)), counts


@register("RegexFullMatch", 20)
def regex_full_match(x: np.ndarray, *, pattern: str | None) -> np.ndarray:
    """RegexFullMatch-20: whether each string fully matches the pattern (RE2 syntax via Python re)."""
    regex = re.compile(pattern or "")
    out = np.fromiter((regex.fullmatch(str(s)) is not None for s in x.reshape(-1)), dtype=bool, count=x.size)
    return out.reshape(x.shape)


def _pool_ngrams(
    pool: list[Any], ngram_counts: tuple[int, ...], min_gram: int, max_gram: int
) -> dict[int, dict[tuple[Any, ...], int]]:
    """n -> {n-gram: its index in the pool}; n-grams are numbered across all sizes in pool order."""
    by_size: dict[int, dict[tuple[Any, ...], int]] = {}
    ngram_id = 0
    for level, start in enumerate(ngram_counts):
        size = level + 1
        end = ngram_counts[level + 1] if level + 1 < len(ngram_counts) else len(pool)
        count = max(end - start, 0) // size
        if min_gram <= size <= max_gram:
            table = by_size.setdefault(size, {})
            for k in range(count):
                # A repeated n-gram keeps its last index, as ONNX Runtime's trie does.
                table[tuple(pool[start + k * size : start + (k + 1) * size])] = ngram_id + k
        ngram_id += count
    return by_size


@register("TfIdfVectorizer", 9)
def tfidf_vectorizer(
    x: np.ndarray,
    *,
    max_gram_length: int,
    max_skip_count: int,
    min_gram_length: int,
    mode: str,
    ngram_counts: tuple[int, ...],
    ngram_indexes: tuple[int, ...],
    pool_int64s: tuple[int, ...] | None,
    pool_strings: tuple[str, ...] | None,
    weights: tuple[float, ...] | None,
) -> np.ndarray:
    """TfIdfVectorizer-9: counts of pool n-grams (with skips) per row, weighted by TF / IDF / TFIDF."""
    if x.ndim > 2:
        raise ValueError(f"TfIdfVectorizer takes a [C] or [B, C] tensor, got shape {x.shape}")
    pool: list[Any] = list(pool_strings) if pool_strings else list(pool_int64s or ())
    output_size = max(ngram_indexes) + 1
    rows = x.reshape(1, -1) if x.ndim < 2 else x
    # Items as integer codes into the pool vocabulary (-1: not in the pool) so that n-grams can be
    # matched with array operations.
    vocabulary = {item: code for code, item in enumerate(dict.fromkeys(pool))}
    as_key = str if pool_strings else int
    flat = [vocabulary.get(as_key(v), -1) for v in rows.reshape(-1).tolist()]
    codes = np.array(flat, dtype=np.int64).reshape(rows.shape)
    radix = len(vocabulary) + 1
    counts = np.zeros((rows.shape[0], output_size), dtype=np.int64)
    index_of = np.asarray(ngram_indexes, dtype=np.int64)
    length = rows.shape[1]
    for size, table in _pool_ngrams(pool, ngram_counts, min_gram_length, max_gram_length).items():
        if not table:
            continue
        keys = np.array([_encode([vocabulary[i] for i in gram], radix) for gram in table], dtype=object)
        ids = np.array(list(table.values()), dtype=np.int64)
        # Unigrams are counted once; longer n-grams once per skip distance 1 .. max_skip_count + 1.
        for skip in range(1, (max_skip_count if size > 1 else 0) + 2):
            span = (size - 1) * skip
            if span >= length:
                break
            windows = [codes[:, j * skip : length - span + j * skip] for j in range(size)]
            valid = np.all([w >= 0 for w in windows], axis=0)
            if not valid.any():
                continue
            encoded = _encode_arrays(windows, radix)
            hits = _lookup(encoded[valid], keys, ids)
            row_index = np.nonzero(valid)[0][hits >= 0]
            np.add.at(counts, (row_index, index_of[hits[hits >= 0]]), 1)
    return _weighted(counts, mode, weights, index_of).reshape(
        (output_size,) if x.ndim < 2 else (-1, output_size)
    )


def _encode(codes: list[int], radix: int) -> int:
    value = 0
    for c in codes:
        value = value * radix + c
    return value


def _encode_arrays(windows: list[np.ndarray], radix: int) -> np.ndarray:
    """One exact key per n-gram; Python ints (object arrays) once int64 could overflow."""
    if radix ** len(windows) < 2**62:
        value = np.zeros(windows[0].shape, dtype=np.int64)
        for w in windows:
            value = value * radix + np.maximum(w, 0)
        return value
    value_obj = np.zeros(windows[0].shape, dtype=object)
    for w in windows:
        value_obj = value_obj * radix + np.maximum(w, 0).astype(object)
    return value_obj


def _lookup(encoded: np.ndarray, keys: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The pool id of every encoded n-gram, -1 where it is not in the pool."""
    if encoded.dtype == object:
        table = dict(zip(keys.tolist(), ids.tolist(), strict=True))
        return np.array([table.get(k, -1) for k in encoded.tolist()], dtype=np.int64)
    sorted_keys = keys.astype(np.int64)
    order = np.argsort(sorted_keys, kind="stable")
    sorted_keys = sorted_keys[order]
    position = np.clip(np.searchsorted(sorted_keys, encoded), 0, len(sorted_keys) - 1)
    found = sorted_keys[position] == encoded
    return np.where(found, ids[order][position], -1)


def _weighted(
    counts: np.ndarray, mode: str, weights: tuple[float, ...] | None, index_of: np.ndarray
) -> np.ndarray:
    w = None
    if weights:
        # weights[i] belongs to the i-th pool n-gram, so it lands on that n-gram's output coordinate.
        w = np.zeros(counts.shape[1], dtype=np.float32)
        w[index_of] = np.asarray(weights, dtype=np.float32)[: len(index_of)]
    if mode == "TF":
        return counts.astype(np.float32)
    if mode == "IDF":
        present = (counts > 0).astype(np.float32)
        return present * w if w is not None else present
    if mode == "TFIDF":
        return counts.astype(np.float32) * w if w is not None else counts.astype(np.float32)
    raise ValueError(f"unknown TfIdfVectorizer mode {mode!r}")
