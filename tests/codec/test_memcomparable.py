"""Memcomparable bytes (EncodeBytes/DecodeBytes) against TiKV's and TiDB's own test vectors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_core.codec import key as keycodec
from cdc_core.codec.memcomparable import KeyDecodeError, decode_bytes, decode_key, encode_bytes, encode_key, encoded_len

# TiKV components/codec/src/byte.rs (test_memcmp_encode_all) and TiDB pkg/util/codec/bytes_test.go.
VECTORS = [
    (b"", [0, 0, 0, 0, 0, 0, 0, 0, 247]),
    (b"\x00", [0, 0, 0, 0, 0, 0, 0, 0, 248]),
    (b"\x01\x02\x03", [1, 2, 3, 0, 0, 0, 0, 0, 250]),
    (b"\x01\x02\x03\x00", [1, 2, 3, 0, 0, 0, 0, 0, 251]),
    (bytes([1, 2, 3, 4, 5, 6, 7]), [1, 2, 3, 4, 5, 6, 7, 0, 254]),
    (bytes(8), [0, 0, 0, 0, 0, 0, 0, 0, 255, 0, 0, 0, 0, 0, 0, 0, 0, 247]),
    (bytes([1, 2, 3, 4, 5, 6, 7, 8]), [1, 2, 3, 4, 5, 6, 7, 8, 255, 0, 0, 0, 0, 0, 0, 0, 0, 247]),
    (bytes([1, 2, 3, 4, 5, 6, 7, 8, 9]), [1, 2, 3, 4, 5, 6, 7, 8, 255, 9, 0, 0, 0, 0, 0, 0, 0, 248]),
]


@pytest.mark.parametrize(("raw", "encoded"), VECTORS)
def test_tikv_vectors(raw: bytes, encoded: list[int]) -> None:
    assert encode_bytes(raw) == bytes(encoded)
    assert decode_bytes(bytes(encoded) + b"rest") == (raw, len(encoded))
    assert encoded_len(len(raw)) == len(encoded)


def test_a_table_prefix_as_pd_keeps_it() -> None:
    # t42_r: the row-key prefix of table 42, as it appears in PD's region boundaries
    assert encode_bytes(keycodec.table_prefix(42) + b"_r").hex() == "7480000000000000ff2a5f720000000000fa"


@pytest.mark.parametrize("bad", [bytes([1, 2, 3, 4]), bytes([0] * 8 + [246]), bytes([0] * 7 + [1, 247]),
                                 bytes([1] * 8 + [255])])
def test_malformed_keys_are_refused(bad: bytes) -> None:
    with pytest.raises(KeyDecodeError):
        decode_bytes(bad)


def test_unbounded_ends_stay_empty_and_nothing_may_trail() -> None:
    assert encode_key(b"") == b"" and decode_key(b"") == b""
    with pytest.raises(KeyDecodeError, match="bytes follow"):
        decode_key(encode_bytes(b"a") + b"x")


@given(st.binary(max_size=40), st.binary(max_size=40))
def test_round_trip_and_order(a: bytes, b: bytes) -> None:
    ea, eb = encode_bytes(a), encode_bytes(b)
    assert decode_key(ea) == a
    assert (a < b) == (ea < eb) and (a == b) == (ea == eb)


def test_a_key_cut_inside_is_read_to_its_last_whole_group() -> None:
    encoded = encode_bytes(b"user-00042-with-a-long-name")
    assert decode_bytes(encoded[:20], partial=True) == (b"user-00042-with-", 18)
    assert decode_bytes(encoded, partial=True)[0] == b"user-00042-with-a-long-name"
    with pytest.raises(KeyDecodeError, match="truncated"):
        decode_bytes(encoded[:20])
