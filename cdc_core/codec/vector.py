"""TiDB's VECTOR type (``VECTOR`` / ``VECTOR(D)``, TiDB v8.4+): its value, stored bytes, text form and input parsing.

The facts, from pingcap/tidb ``pkg/types/vector.go`` (``VectorFloat32``), ``pkg/util/rowcodec/encoder.go`` /
``decoder.go`` and ``pkg/util/codec/codec.go``:

- A value is a sequence of float32 elements; storage and exchange are little-endian: a u32 element count, then each
  element's 4 bytes (``SerializeTo``; ``TestVectorEndianess``: ``[1.1, 2.2]`` is ``02000000 cdcc8c3f cdcc0c40``).
  rowcodec v2 stores those bytes as the column's value; the datum format puts ``vectorFloat32Flag`` (20) first.
- Its text (``String``) is ``[`` elements ``,`` ``]``, each the shortest decimal that reads back as the same float32,
  never in exponent form (``strconv.AppendFloat(buf, v, 'f', -1, 32)``): ``[1.1,2.2,3.3]``, ``[]``, ``[-0]``.
- Its input (``ParseVectorFloat32``) is a JSON array of numbers, whitespace allowed; ``null``, other JSON values,
  trailing text, NaN or an infinity (``NaN not allowed in vector``, ``infinite value not allowed in vector``) and a
  number outside float32 (``value ... out of range for float32``) are refused; at most 16383 dimensions
  (``CheckVectorDimValid``). A column of ``VECTOR(D)`` takes only D elements (``CheckDimsFitColumn``: ``vector has
  %d dimensions, does not fit VECTOR(%d)``).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass

MAX_DIMENSION = 16383  # types.CheckVectorDimValid's maxVectorDimension
_FLOAT32_MAX = 3.4028234663852886e38


class VectorError(ValueError):
    """Vector text, bytes or elements TiDB refuses; the message is TiDB's where it has one."""


@dataclass(frozen=True)
class VectorFloat32:
    """A VECTOR value: its float32 elements (as Python floats, each exactly a float32)."""

    elements: tuple[float, ...]

    @classmethod
    def of(cls, values: Iterable[float]) -> VectorFloat32:
        """``CreateVectorFloat32``: ``values`` rounded to float32; NaN, infinities and values past float32 refused.
        O(elements)."""
        out = []
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise VectorError(f"vector element {v!r} is not a number")
            f = float(v)
            if math.isnan(f):
                raise VectorError("NaN not allowed in vector")
            if math.isinf(f):
                raise VectorError("infinite value not allowed in vector")
            if abs(f) > _FLOAT32_MAX:
                raise VectorError(f"value {v} out of range for float32")
            out.append(struct.unpack("<f", struct.pack("<f", f))[0])
        if len(out) > MAX_DIMENSION:
            raise VectorError(f"vector cannot have more than {MAX_DIMENSION} dimensions")
        return cls(tuple(out))

    def __len__(self) -> int:
        return len(self.elements)

    def text(self) -> str:
        """``VectorFloat32.String``: ``[1.1,2.2]``, each element the shortest text that reads back as its float32."""
        import numpy as np  # on the paths that print vectors only: loading a schema stays light

        return "[" + ",".join(np.format_float_positional(np.float32(e), unique=True, trim="-")
                              for e in self.elements) + "]"

    def __str__(self) -> str:
        return self.text()

    def to_bytes(self) -> bytes:
        """``SerializeTo``: u32 little-endian count, then the float32 elements little-endian. O(elements)."""
        return struct.pack(f"<I{len(self.elements)}f", len(self.elements), *self.elements)

    @classmethod
    def from_bytes(cls, data: bytes) -> VectorFloat32:
        """The value of exactly ``4 + 4n`` bytes (``ZeroCopyDeserializeVectorFloat32``; TiDB lets bytes run on past
        the value, a row value here may not). Raises :class:`VectorError` naming the sizes."""
        if len(data) < 4:
            raise VectorError(f"bad VectorFloat32 value header (len={len(data)})")
        n = int.from_bytes(data[:4], "little")
        if len(data) != 4 + 4 * n:
            raise VectorError(f"bad VectorFloat32 value (len={len(data)}, expected={4 + 4 * n})")
        return cls(struct.unpack(f"<{n}f", data[4:]))

    def check_dimension(self, dimension: int | None) -> None:
        """``CheckDimsFitColumn``: a ``VECTOR(dimension)`` column (None: ``VECTOR``, any) takes this value."""
        if dimension is not None and len(self.elements) != dimension:
            raise VectorError(f"vector has {len(self.elements)} dimensions, does not fit VECTOR({dimension})")


def parse(text: str) -> VectorFloat32:
    """``ParseVectorFloat32``: the value of vector text (a JSON array of numbers). Raises :class:`VectorError`
    (``Invalid vector text: <text>`` for text that is not such an array, TiDB's messages for the rest)."""
    if text.strip() == "null":  # tidb#57143: jsoniter read null as []
        raise VectorError(f"Invalid vector text: {text}")
    try:
        doc = json.loads(text, parse_constant=_constant, parse_int=float)  # jsoniter ReadFloat64: "-0" is -0.0
    except (json.JSONDecodeError, VectorError):
        raise VectorError(f"Invalid vector text: {text}") from None
    if not isinstance(doc, list) or any(isinstance(v, bool) or not isinstance(v, int | float) for v in doc):
        raise VectorError(f"Invalid vector text: {text}")
    return VectorFloat32.of(doc)


def _constant(name: str) -> float:
    raise VectorError(name)  # NaN / Infinity are no JSON numbers


def check_dimension_definition(dimension: int | None) -> None:
    """``CheckVectorDimValid`` of a column's ``VECTOR(D)``."""
    if dimension is None:
        return
    if dimension < 0:
        raise VectorError("dimensions for type vector must be at least 0")
    if dimension > MAX_DIMENSION:
        raise VectorError(f"vector cannot have more than {MAX_DIMENSION} dimensions")


__all__ = ["MAX_DIMENSION", "VectorError", "VectorFloat32", "check_dimension_definition", "parse"]
