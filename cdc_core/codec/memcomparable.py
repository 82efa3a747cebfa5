"""TiKV/TiDB's memcomparable bytes encoding (``EncodeBytes``/``DecodeBytes``): how PD and TiKV keep region
boundaries and how TiKV expects EventFeed ranges (row keys inside events stay raw).

The input is cut into groups of 8 bytes; each group is written padded with zeros to 8 bytes, followed by a marker
byte ``255 - padding`` (255 for a full group that more groups follow). The last group always has padding, so
``b""`` becomes 8 zeros and 247. Byte order of encoded keys equals byte order of raw keys, which is the point.
Sources: TiDB ``pkg/util/codec/bytes.go`` (``EncodeBytes``), TiKV ``components/codec/src/byte.rs``
(``MemComparableByteCodec``); the vectors in ``tests/codec/test_memcomparable.py`` are theirs.

Cost: O(n) for either direction; a key of n bytes encodes to ``(n // 8 + 1) * 9`` bytes.
"""

from __future__ import annotations

from cdc_core.errors import CdcflowError

GROUP = 8
MARKER = 0xFF
_PAD = bytes(GROUP)


class KeyDecodeError(CdcflowError):
    """Bytes that are not a memcomparable-encoded key (wrong length, marker or padding)."""


def encoded_len(n: int) -> int:
    """The encoded length of ``n`` raw bytes."""
    return (n // GROUP + 1) * (GROUP + 1)


def encode_bytes(raw: bytes) -> bytes:
    """``raw`` memcomparable-encoded, e.g.
    ``encode_bytes(b"\\x01\\x02\\x03") == b"\\x01\\x02\\x03" + bytes(5) + b"\\xfa"``."""
    out = bytearray()
    full = len(raw) // GROUP * GROUP
    for i in range(0, full, GROUP):
        out += raw[i:i + GROUP]
        out.append(MARKER)
    tail = raw[full:]
    pad = GROUP - len(tail)
    out += tail + _PAD[:pad]
    out.append(MARKER - pad)
    return bytes(out)


def decode_bytes(data: bytes, *, partial: bool = False) -> tuple[bytes, int]:
    """The raw bytes of the encoded key at the start of ``data`` and how many bytes it took.

    ``partial``: ``data`` may stop inside the key (a region boundary cut within a row key's datum); what its whole
    groups hold is returned. Raises ``KeyDecodeError`` on a truncated group (unless ``partial``), a marker below 247
    or non-zero padding."""
    out = bytearray()
    pos = 0
    while True:
        group = data[pos:pos + GROUP + 1]
        if len(group) < GROUP + 1:
            if partial:
                return bytes(out), pos
            raise KeyDecodeError(f"memcomparable key truncated at byte {pos} of {len(data)}: {data.hex()}")
        pos += GROUP + 1
        marker = group[GROUP]
        pad = MARKER - marker
        if pad == 0:
            out += group[:GROUP]
            continue
        if pad > GROUP:
            raise KeyDecodeError(f"memcomparable key has marker {marker} at byte {pos - 1}: {data.hex()}")
        if any(group[GROUP - pad:GROUP]):
            raise KeyDecodeError(f"memcomparable key has non-zero padding before byte {pos - 1}: {data.hex()}")
        out += group[:GROUP - pad]
        return bytes(out), pos


def decode_key(data: bytes) -> bytes:
    """The raw key of a whole encoded key (nothing may follow it); ``b""`` stays ``b""`` (an unbounded end)."""
    if not data:
        return b""
    raw, used = decode_bytes(data)
    if used != len(data):
        raise KeyDecodeError(f"{len(data) - used} bytes follow the memcomparable key: {data.hex()}")
    return raw


def encode_key(raw: bytes) -> bytes:
    """A region boundary or range key: ``raw`` encoded, except ``b""`` (unbounded), which stays empty."""
    return encode_bytes(raw) if raw else b""
