"""HTTP content codings of inference bodies, as Triton applies them (its clients'
``request_compression_algorithm`` and ``response_compression_algorithm``).

A request body may come ``Content-Encoding: gzip`` or ``deflate`` (the zlib format, RFC 9110) or
``identity``; it is inflated with the body limit applied to the *decompressed* size, never inflating
more than one byte past it (a zip bomb costs at most the limit). A response to an inference request is
compressed when ``Accept-Encoding`` asks for gzip or deflate. ``Inference-Header-Content-Length``
always counts the JSON of the uncompressed body, both ways.
"""

from __future__ import annotations

import zlib

from sealtrace.serve.protocol import PayloadTooLargeError, ProtocolError

# zlib's window bits for each coding: 16 + for the gzip wrapper, plain for the zlib wrapper.
CODINGS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def request_coding(header: str | None) -> str | None:
    """The coding of a request body that ``Content-Encoding`` names (None: identity); 415 for any other."""
    if header is None:
        return None
    coding = header.strip().lower()
    if coding in ("", "identity"):
        return None
    if coding not in CODINGS:
        raise ProtocolError(f"Content-Encoding: {header[:40]!r} is not supported (gzip, deflate or identity)",
                            status=415)
    return coding


def decode_content(body: bytes, coding: str | None, limit: int) -> bytes:
    """``body`` inflated from ``coding``: 413 once it would exceed ``limit`` bytes (inflation stops
    there), 400 naming Content-Encoding for a corrupt or truncated stream or bytes after its end."""
    if coding is None:
        return body
    inflater = zlib.decompressobj(CODINGS[coding])
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise ProtocolError(f"Content-Encoding: {coding}: the body is not a valid {coding} stream ({exc})") from None
    if len(data) > limit:
        raise PayloadTooLargeError(f"body: more than the server accepts once decompressed ({limit} bytes; "
                                   "see --max-body)")
    if not inflater.eof:
        raise ProtocolError(f"Content-Encoding: {coding}: the compressed body is truncated")
    if inflater.unused_data:
        raise ProtocolError(f"Content-Encoding: {coding}: {len(inflater.unused_data)} bytes after the end of the "
                            "compressed stream")
    return data


def response_coding(header: str | None) -> str | None:
    """The coding to compress a response with: of gzip and deflate, the one ``Accept-Encoding`` gives
    the higher q-value (gzip on a tie); None when it accepts neither."""
    chosen, best = None, 0.0
    for item in (header or "").split(","):
        name, _, parameters = item.partition(";")
        coding = name.strip().lower()
        if coding not in CODINGS:
            continue
        quality = 1.0
        for parameter in parameters.split(";"):
            key, _, value = parameter.partition("=")
            if key.strip().lower() == "q":
                quality = _quality(value)
        if quality > best or (quality == best and quality > 0 and coding == "gzip"):
            chosen, best = coding, quality
    return chosen


def _quality(value: str) -> float:
    try:
        quality = float(value)
    except ValueError:
        return 0.0
    return quality if 0.0 <= quality <= 1.0 else 0.0


def encode_content(body: bytes, coding: str) -> bytes:
    """``body`` compressed in ``coding`` (zlib's default level)."""
    deflater = zlib.compressobj(wbits=CODINGS[coding])
    return deflater.compress(body) + deflater.flush()
