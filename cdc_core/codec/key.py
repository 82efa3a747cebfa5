"""TiDB-shaped keys: ``t{table_id}_r{handle}`` with 8-byte sign-flipped big-endian integers.

Sign flipping makes the byte order of encoded integers equal their numeric order, so a table's
rows form one contiguous, ordered span ``[t{id}_r, t{id}_s)``.
"""

from __future__ import annotations

import struct

TABLE_PREFIX = b"t"
RECORD_SEP = b"_r"
INDEX_SEP = b"_i"
_SIGN = 1 << 63
_U64 = struct.Struct(">Q")
# t{table id: 8 bytes}_r{handle}: where a row key's parts sit (pkg/tablecodec/tablecodec.go in pingcap/tidb,
# EncodeRowKeyWithHandle). Readers that take the handle without this module (the Spark mount's column expressions)
# use these offsets.
TABLE_ID_OFFSET = len(TABLE_PREFIX)
SEP_OFFSET = TABLE_ID_OFFSET + 8
HANDLE_OFFSET = SEP_OFFSET + len(RECORD_SEP)  # 11: an integer handle is the 8 bytes from here
ROW_KEY_LEN = HANDLE_OFFSET + 8


def encode_int(v: int) -> bytes:
    """8-byte comparable encoding of a signed 64-bit integer."""
    if not -(1 << 63) <= v < (1 << 63):
        raise ValueError(f"{v} does not fit a signed 64-bit integer")
    return _U64.pack(v + _SIGN)


def decode_int(b: bytes) -> int:
    if len(b) != 8:
        raise ValueError(f"an encoded integer has 8 bytes, got {len(b)}")
    return int(_U64.unpack(b)[0]) - _SIGN


def table_prefix(table_id: int) -> bytes:
    return TABLE_PREFIX + encode_int(table_id)


def row_key(table_id: int, handle: int) -> bytes:
    return table_prefix(table_id) + RECORD_SEP + encode_int(handle)


def common_row_key(table_id: int, handle: bytes) -> bytes:
    """The row key of a common-handle table: ``t{id}_r`` and the PK's memcomparable datums (``datum_key``)."""
    return table_prefix(table_id) + RECORD_SEP + handle


def record_key(table_id: int, handle: int | bytes) -> bytes:
    """The row key of an integer handle (``row_key``) or a common handle (``common_row_key``)."""
    return common_row_key(table_id, handle) if isinstance(handle, bytes) else row_key(table_id, handle)


def record_handle(key: bytes, common: bool) -> int | bytes:
    """The handle of a row key: its datums (a common handle) or its integer."""
    if common:
        if len(key) <= HANDLE_OFFSET or key[:1] != TABLE_PREFIX or key[SEP_OFFSET:HANDLE_OFFSET] != RECORD_SEP:
            raise ValueError(f"not a common-handle row key: {key.hex()}")
        return key[HANDLE_OFFSET:]
    return decode_row_key(key)[1]


def index_key(table_id: int, index_id: int, encoded_values: bytes) -> bytes:
    return table_prefix(table_id) + INDEX_SEP + encode_int(index_id) + encoded_values


def decode_row_key(key: bytes) -> tuple[int, int]:
    """``(table_id, handle)`` of a row key; a clear error for anything else."""
    if len(key) != ROW_KEY_LEN or key[:1] != TABLE_PREFIX or key[SEP_OFFSET:HANDLE_OFFSET] != RECORD_SEP:
        raise ValueError(f"not a row key: {key.hex()}")
    return decode_int(key[TABLE_ID_OFFSET:SEP_OFFSET]), decode_int(key[HANDLE_OFFSET:ROW_KEY_LEN])


def table_span(table_id: int) -> tuple[bytes, bytes]:
    """The span ``[t{id}_r, t{id}_s)`` holding every row key of the table."""
    p = table_prefix(table_id)
    return p + RECORD_SEP, p + b"_s"


def table_id_of(key: bytes) -> int:
    if len(key) < SEP_OFFSET or key[:1] != TABLE_PREFIX:
        raise ValueError(f"not a table key: {key.hex()}")
    return decode_int(key[TABLE_ID_OFFSET:SEP_OFFSET])


def min_end(a: bytes, b: bytes) -> bytes:
    """The smaller of two range ends, where ``b""`` means "end of the key space"."""
    if not a:
        return b
    if not b:
        return a
    return min(a, b)
