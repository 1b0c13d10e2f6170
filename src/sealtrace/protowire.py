"""Just enough of the protobuf wire format to split a message into its field records, for bytes
that may be anything: every read is bounded by the bytes at hand, nothing is allocated by a size the
bytes declare, and a message that is not well-formed raises :class:`WireError`. The rules are the
ones docs/container-format.md ("The graph index") specifies, which the Go verifier implements too.
"""

from __future__ import annotations

from typing import NamedTuple

BYTES = 2  # the wire type of strings and embedded messages
_MAX_GROUP_DEPTH = 100  # protobuf's own default recursion limit


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message."""


class Record(NamedTuple):
    """One field record: its field number, wire type, where its bytes start and end, and (wire
    type 2) where its payload starts and ends."""

    number: int
    wire: int
    start: int
    end: int
    payload_start: int
    payload_end: int


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A varint of at most 10 bytes (bits past 64 dropped, as protobuf readers do)."""
    if pos < len(data) and data[pos] < 0x80:  # most varints here are one byte
        return data[pos], pos + 1
    value = 0
    for i in range(10):
        if pos + i >= len(data):
            raise WireError("truncated varint")
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value & 0xFFFF_FFFF_FFFF_FFFF, pos + i + 1
    raise WireError("varint longer than 10 bytes")


def _field(data: bytes, pos: int, depth: int) -> tuple[int, int, int, int, int]:
    """(number, wire type, payload start, payload end, next position) of the record at ``pos``."""
    start = pos
    tag, pos = _varint(data, pos)
    if pos - start > 5 or tag > 0xFFFF_FFFF:
        raise WireError("tag out of range")
    number, wire = tag >> 3, tag & 7
    if number == 0 or number > (1 << 29) - 1:
        raise WireError("field number out of range")
    if wire == BYTES:
        length, payload = _varint(data, pos)
        if length > len(data) - payload:
            raise WireError("length beyond the message")
        return number, wire, payload, payload + length, payload + length
    if wire == 0:
        _, pos = _varint(data, pos)
    elif wire == 1 or wire == 5:
        pos += 8 if wire == 1 else 4
        if pos > len(data):
            raise WireError("truncated fixed-size value")
    elif wire == 3:
        if depth >= _MAX_GROUP_DEPTH:
            raise WireError(f"groups nested more than {_MAX_GROUP_DEPTH} deep")
        while True:
            inner, inner_wire, _, _, pos = _field(data, pos, depth + 1)
            if inner_wire == 4:
                if inner != number:
                    raise WireError("group ends with another field's end tag")
                break
    elif wire != 4:
        raise WireError(f"wire type {wire}")
    return number, wire, pos, pos, pos


def records(data: bytes) -> list[Record]:
    """The field records of a message, in order; :class:`WireError` if it is not well-formed."""
    found: list[Record] = []
    pos, size = 0, len(data)
    while pos < size:
        # Fast path: a one-byte tag of a length-delimited field with a one-byte length (most of a
        # graph: names, inputs, outputs, small attributes); anything else takes the general reader.
        tag = data[pos]
        if tag & 7 == BYTES and tag < 0x80 and tag >= 8 and pos + 1 < size and data[pos + 1] < 0x80:
            end = pos + 2 + data[pos + 1]
            if end > size:
                raise WireError("length beyond the message")
            found.append(Record(tag >> 3, BYTES, pos, end, pos + 2, end))
            pos = end
            continue
        number, wire, payload_start, payload_end, end = _field(data, pos, 0)
        if wire == 4:
            raise WireError("end-group tag outside a group")
        found.append(Record(number, wire, pos, end, payload_start, payload_end))
        pos = end
    return found
