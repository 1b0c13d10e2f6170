"""String and token operators, and ImageDecoder: these run their NumPy reference kernels.

torch has no string dtype, so StringNormalizer, StringConcat, StringSplit and RegexFullMatch (and
any other op given strings, an Equal or a Reshape included) work on NumPy object arrays inside the
module. TfIdfVectorizer counts n-grams of tokens (integers or strings) and ImageDecoder decodes
encoded bytes: their outputs are piecewise constant in their inputs, so there is no gradient to
keep, and the reference kernel is the exact forward we check against.
"""

from __future__ import annotations

from sealtrace.torchops.registry import reference_versions, register_reference_kernel

_STRINGS = "torch has no string dtype: the strings stay NumPy object arrays and the reference kernel runs on them"

for _op in ("StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch"):
    register_reference_kernel(_op, *reference_versions(_op), reason=_STRINGS)

register_reference_kernel(
    "TfIdfVectorizer", *reference_versions("TfIdfVectorizer"),
    reason="n-gram counts over tokens (integers or strings): piecewise constant, nothing to differentiate",
)
register_reference_kernel(
    "ImageDecoder", *reference_versions("ImageDecoder"),
    reason="decodes encoded image bytes (Pillow): integer pixels from bytes, nothing to differentiate",
)
