"""TiDB's VECTOR value (``cdc_core.codec.vector``): bytes, text and input as pingcap/tidb ``pkg/types/vector.go``
has them, checked against the vectors of its ``vector_test.go``."""

from __future__ import annotations

import math
import struct

import pytest

from cdc_core.codec import vector as vec
from cdc_core.codec.vector import VectorError, VectorFloat32


def test_bytes_are_tidbs_little_endian_count_and_float32s() -> None:
    # TestVectorEndianess: [1.1, 2.2] serializes to these 12 bytes.
    golden = bytes([0x02, 0x00, 0x00, 0x00, 0xCD, 0xCC, 0x8C, 0x3F, 0xCD, 0xCC, 0x0C, 0x40])
    v = VectorFloat32.of([1.1, 2.2])
    assert v.to_bytes() == golden
    assert VectorFloat32.from_bytes(golden) == v
    # TestZeroVector: the zero vector is four zero bytes and prints [].
    assert VectorFloat32.of([]).to_bytes() == bytes(4)
    assert VectorFloat32.from_bytes(bytes(4)).text() == "[]"


@pytest.mark.parametrize(("data", "message"), [
    (bytes([0xF1, 0xFC]), "bad VectorFloat32 value header (len=2)"),  # TestVectorSerialize's short input
    (bytes([2, 0, 0, 0]) + bytes(4), "bad VectorFloat32 value (len=8, expected=12)"),
    (bytes([1, 0, 0, 0]) + bytes(8), "bad VectorFloat32 value (len=12, expected=8)"),  # TiDB lets it run on
])
def test_bytes_that_are_no_vector_are_refused_naming_the_sizes(data: bytes, message: str) -> None:
    with pytest.raises(VectorError, match=message.replace("(", r"\(").replace(")", r"\)")):
        VectorFloat32.from_bytes(data)


def test_text_is_the_shortest_float32_decimal_never_an_exponent() -> None:
    # TestVectorParse: "[1.1, 2.2, 3.3]" prints back as "[1.1,2.2,3.3]" (strconv 'f', -1, 32).
    assert vec.parse("[1.1, 2.2, 3.3]").text() == "[1.1,2.2,3.3]"
    assert VectorFloat32.of([1.0, -0.0, 1e-7, 123456789.0]).text() == "[1,-0,0.0000001,123456790]"
    assert VectorFloat32.of([3.4028234663852886e38]).text() == "[340282350000000000000000000000000000000]"
    assert str(VectorFloat32.of([0.5])) == "[0.5]"


def test_elements_are_float32_and_read_back_exactly() -> None:
    v = vec.parse("[0.1, 16777217]")
    assert v.elements == (struct.unpack("<f", struct.pack("<f", 0.1))[0], 16777216.0)
    assert vec.parse(v.text()) == v
    assert VectorFloat32.from_bytes(v.to_bytes()) == v


@pytest.mark.parametrize(("text", "message"), [
    ("abc", "Invalid vector text: abc"), ('"json_str"', "Invalid vector text"), ("123", "Invalid vector text"),
    ("[123", "Invalid vector text"), ("123]", "Invalid vector text"), ("[123,]", "Invalid vector text"),
    ("null", "Invalid vector text: null"),  # tidb#57143: no longer []
    ("[1, [2]]", "Invalid vector text"), ('[1, "2"]', "Invalid vector text"), ("[true]", "Invalid vector text"),
    ("[1,2]x", "Invalid vector text"), ("[NaN]", "Invalid vector text"),
    ("[1e999]", "infinite value not allowed in vector"), ("[1e39]", "value 1e+39 out of range for float32"),
])
def test_input_tidb_refuses_is_refused_with_its_message(text: str, message: str) -> None:
    with pytest.raises(VectorError, match=message.replace("[", r"\[").replace("+", r"\+")):
        vec.parse(text)


def test_elements_tidb_refuses() -> None:
    with pytest.raises(VectorError, match="NaN not allowed in vector"):
        VectorFloat32.of([math.nan])
    with pytest.raises(VectorError, match="infinite value not allowed in vector"):
        VectorFloat32.of([1.0, -math.inf])
    with pytest.raises(VectorError, match="cannot have more than 16383 dimensions"):
        VectorFloat32.of([0.0] * 16384)
    assert len(VectorFloat32.of([0.0] * 16383)) == vec.MAX_DIMENSION


def test_dimensions_of_a_column() -> None:
    v = vec.parse(" [ 1 , 2 ] ")  # whitespace anywhere, as JSON allows
    v.check_dimension(2)
    v.check_dimension(None)  # VECTOR: any
    with pytest.raises(VectorError, match=r"vector has 2 dimensions, does not fit VECTOR\(3\)"):
        v.check_dimension(3)
    vec.check_dimension_definition(0)
    vec.check_dimension_definition(16383)
    with pytest.raises(VectorError, match="at least 0"):
        vec.check_dimension_definition(-1)
    with pytest.raises(VectorError, match="more than 16383"):
        vec.check_dimension_definition(16384)
