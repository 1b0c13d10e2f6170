"""String operators and TfIdfVectorizer: against onnxruntime where it runs them (StringSplit, RegexFullMatch,
StringConcat, TfIdfVectorizer), against the spec otherwise (StringNormalizer needs a locale ORT lacks here)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sealtrace.ops.text import string_normalizer
from tests.ops.oneop import assert_same, both


def strings(*values: str) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


@pytest.mark.parametrize(
    "words",
    [("a,b,,c", ",", "", "abc"), ("  a  b ", "", " ", "x y  z")],
)
@pytest.mark.parametrize("delimiter", [None, ",", ""])
@pytest.mark.parametrize("maxsplit", [None, 0, 1, 2])
def test_string_split_matches_onnxruntime(
    words: tuple[str, ...], delimiter: str | None, maxsplit: int | None
) -> None:
    attrs: dict[str, Any] = {}
    if delimiter is not None:
        attrs["delimiter"] = delimiter
    if maxsplit is not None:
        attrs["maxsplit"] = maxsplit
    got, want = both("StringSplit", {"x": strings(*words).reshape(2, 2)}, 20, n_out=2, **attrs)
    assert_same(got, want)


def test_string_split_whitespace_includes_tabs_and_newlines() -> None:
    # The spec says "whitespace characters"; onnxruntime only splits on ' '.
    from sealtrace.ops.text import string_split

    parts, counts = string_split(strings("a\tb\nc "), delimiter=None, maxsplit=None)
    assert parts.tolist() == [["a", "b", "c"]] and counts.tolist() == [3]


def test_string_concat_broadcasts() -> None:
    x = strings("cat", "dog", "的").reshape(3, 1)
    y = strings("s", "")
    got, want = both("StringConcat", {"x": x, "y": y}, 20)
    assert_same(got, want)


@pytest.mark.parametrize(
    "pattern", [r"www\.[\w.-]+\.\bcom\b", r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)", r"a*b?"]
)
def test_regex_full_match_matches_onnxruntime(pattern: str) -> None:
    x = strings("www.google.com", "account@gmail.com", "aaab", "", "b", "www.bbc.co.uk").reshape(2, 3)
    got, want = both("RegexFullMatch", {"x": x}, 20, pattern=pattern)
    assert_same(got, want)


def _normalize(words: list[str], **attrs: Any) -> list[str]:
    settings: dict[str, Any] = {
        "case_change_action": "NONE",
        "is_case_sensitive": 0,
        "locale": None,
        "stopwords": None,
    }
    settings.update(attrs)
    return string_normalizer(strings(*words), **settings).tolist()


def test_string_normalizer_drops_whole_stopword_elements() -> None:
    words = ["Monday", "tuesday", "MONDAY", "monday morning"]
    assert _normalize(words, stopwords=("monday",)) == ["tuesday", "monday morning"]
    assert _normalize(words, stopwords=("monday",), is_case_sensitive=1) == [
        "Monday",
        "tuesday",
        "MONDAY",
        "monday morning",
    ]
    assert _normalize(words, stopwords=("monday",), case_change_action="UPPER") == [
        "TUESDAY",
        "MONDAY MORNING",
    ]


def test_string_normalizer_keeps_rank_when_everything_is_dropped() -> None:
    x = strings("a", "A").reshape(1, 2)
    y = string_normalizer(x, case_change_action="LOWER", is_case_sensitive=0, locale=None, stopwords=("a",))
    assert y.shape == (1, 1) and y.tolist() == [[""]]


def test_string_normalizer_changes_case_one_character_at_a_time() -> None:
    assert _normalize(["Straße", "École"], case_change_action="UPPER") == ["STRAßE", "ÉCOLE"]
    assert _normalize(["ÀB"], case_change_action="LOWER") == ["àb"]


@pytest.mark.parametrize(
    ("mode", "weighted"), [("TF", False), ("IDF", False), ("IDF", True), ("TFIDF", True)]
)
@pytest.mark.parametrize("kind", ["int64", "int32", "string"])
@pytest.mark.parametrize(("min_gram", "max_gram", "max_skip"), [(1, 1, 0), (1, 2, 2), (2, 3, 1), (2, 2, 0)])
def test_tfidf_vectorizer_matches_onnxruntime(
    mode: str, weighted: bool, kind: str, min_gram: int, max_gram: int, max_skip: int
) -> None:
    rng = np.random.default_rng(min_gram * 10 + max_gram + max_skip)
    pool_items = [1, 2, 3, 4, 5, 6]
    unigrams = [2, 5, 6]
    bigrams = [2, 3, 5, 4, 6, 2, 3, 3]
    trigrams = [1, 2, 3, 5, 5, 5]
    pool = unigrams + bigrams + trigrams
    n_grams = len(unigrams) + len(bigrams) // 2 + len(trigrams) // 3
    attrs: dict[str, Any] = {
        "mode": mode,
        "min_gram_length": min_gram,
        "max_gram_length": max_gram,
        "max_skip_count": max_skip,
        "ngram_counts": [0, len(unigrams), len(unigrams) + len(bigrams)],
        "ngram_indexes": [int(i) for i in rng.permutation(n_grams + 2)[:n_grams]],
    }
    if weighted:
        attrs["weights"] = [float(w) for w in rng.random(n_grams)]
    rows = rng.choice([*pool_items, 9], (3, 10))
    if kind == "string":
        attrs["pool_strings"] = [f"w{i}" for i in pool]
        x = np.array([[f"w{i}" for i in row] for row in rows], dtype=object)
    else:
        attrs["pool_int64s"] = pool
        x = rows.astype(np.int64 if kind == "int64" else np.int32)
    got, want = both("TfIdfVectorizer", {"x": x}, 9, **attrs)
    assert_same(got, want, rtol=1e-6)
    got, want = both("TfIdfVectorizer", {"x": x[0]}, 9, **attrs)
    assert_same(got, want, rtol=1e-6)
