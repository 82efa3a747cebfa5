"""Delta deletion vectors: their descriptor in the log, their bitmap format and the files that hold them.

The facts are Delta's protocol (delta-io/delta ``PROTOCOL.md``, "Deletion Vector Format" and "Deletion Vector
Descriptor Schema"; delta-spark's ``DeletionVectorDescriptor.scala`` / ``DeletionVectorStore.scala``):

- a deletion vector is a set of row positions of one data file (0-based, in the file's order), serialized as a
  64-bit "RoaringBitmapArray": the magic number ``1681511377`` (int32, little-endian), then the portable 64-bit
  Roaring format -- the same bytes as CRoaring's ``roaring64_bitmap_portable_serialize``, which is what
  ``pyroaring.BitMap64.serialize`` writes (checked against a file delta-spark wrote, in the tests);
- a DV file (``deletion_vector_<uuid>.bin`` in the table's directory) is a format version byte (1), then each
  vector as its size (int32, big-endian), its bytes and their CRC-32 (int32, big-endian); a descriptor's
  ``offset`` points at the size;
- a descriptor of storage type ``u`` names its file by the UUID in Z85 (ZeroMQ's base-85, 16 bytes -> 20 chars),
  optionally after a random prefix that is a subdirectory; ``i`` holds the vector itself, Z85, in the log;
- a file's live rows are ``numRecords - cardinality``; log replay tells files apart by ``(path, uniqueId)``, with
  ``uniqueId = storageType + pathOrInlineDv (+ '@' + offset)``.
"""

from __future__ import annotations

import os
import struct
import uuid
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyroaring import BitMap64

MAGIC = 1681511377
FORMAT_VERSION = 1

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85)}


def z85_encode(data: bytes) -> str:
    """Z85 of ``data`` (its length a multiple of 4, as the protocol's uses are)."""
    if len(data) % 4:
        raise ValueError(f"Z85 encodes multiples of 4 bytes, not {len(data)}")
    out: list[str] = []
    for (word,) in struct.iter_unpack(">I", data):
        chunk = []
        for _ in range(5):
            word, r = divmod(word, 85)
            chunk.append(_Z85[r])
        out.extend(reversed(chunk))
    return "".join(out)


def z85_decode(text: str) -> bytes:
    if len(text) % 5:
        raise ValueError(f"not Z85: {len(text)} characters is not a multiple of 5")
    out = bytearray()
    for i in range(0, len(text), 5):
        word = 0
        for c in text[i:i + 5]:
            if c not in _Z85_INDEX:
                raise ValueError(f"not Z85: {c!r} in {text!r}")
            word = word * 85 + _Z85_INDEX[c]
        if word > 0xFFFFFFFF:
            raise ValueError(f"not Z85: {text[i:i + 5]!r} is past 32 bits")
        out += struct.pack(">I", word)
    return bytes(out)


@dataclass(frozen=True)
class Descriptor:
    """A ``deletionVector`` of an ``add`` or ``remove`` action."""

    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Descriptor:
        return cls(d["storageType"], d["pathOrInlineDv"], int(d["sizeInBytes"]), int(d["cardinality"]),
                   None if d.get("offset") is None else int(d["offset"]))

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"storageType": self.storage_type, "pathOrInlineDv": self.path_or_inline_dv}
        if self.offset is not None:
            d["offset"] = self.offset
        d.update(sizeInBytes=self.size_in_bytes, cardinality=self.cardinality)
        return d

    @property
    def unique_id(self) -> str:
        base = self.storage_type + self.path_or_inline_dv
        return base if self.offset is None else f"{base}@{self.offset}"

    def file_path(self, table_dir: str) -> str:
        """The DV file a descriptor names (types ``u``, ``p``)."""
        if self.storage_type == "p":
            return self.path_or_inline_dv.removeprefix("file://")
        if self.storage_type != "u":
            raise ValueError(f"deletion vector of storage type {self.storage_type!r} has no file")
        prefix, encoded = self.path_or_inline_dv[:-20], self.path_or_inline_dv[-20:]
        name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
        return os.path.join(table_dir, prefix, name)


def encode(rows: BitMap64) -> bytes:
    """A vector's bytes: the magic number, then the portable 64-bit Roaring bitmap."""
    return struct.pack("<i", MAGIC) + rows.serialize()


def decode(data: bytes, where: str) -> BitMap64:
    if len(data) < 4 or struct.unpack("<i", data[:4])[0] != MAGIC:
        raise ValueError(f"{where}: not a deletion vector (no RoaringBitmapArray magic number)")
    return BitMap64.deserialize(data[4:])


def positions(rows: BitMap64) -> Any:
    """The row positions of ``rows`` as a sorted int64 numpy array (from the bitmap's own array, not one by one)."""
    import numpy as np

    return np.frombuffer(rows.to_array(), dtype=np.uint64).astype(np.int64)


def read(table_dir: str, dv: Descriptor) -> BitMap64:
    """The row positions a descriptor deletes (its checksum checked)."""
    if dv.storage_type == "i":
        return decode(z85_decode(dv.path_or_inline_dv)[:dv.size_in_bytes], f"inline deletion vector {dv.unique_id}")
    path = dv.file_path(table_dir)
    with open(path, "rb") as f:
        f.seek(dv.offset or 0)
        head = f.read(4)
        data = f.read(dv.size_in_bytes)
        crc = f.read(4)
    if len(head) < 4 or struct.unpack(">i", head)[0] != dv.size_in_bytes or len(data) != dv.size_in_bytes:
        raise ValueError(f"{path} at {dv.offset}: deletion vector of {dv.size_in_bytes} bytes not found there")
    if len(crc) < 4 or struct.unpack(">I", crc)[0] != zlib.crc32(data):
        raise ValueError(f"{path} at {dv.offset}: deletion vector checksum mismatch")
    rows = decode(data, path)
    if len(rows) != dv.cardinality:
        raise ValueError(f"{path} at {dv.offset}: {len(rows)} rows, the log says {dv.cardinality}")
    return rows


def write_file(table_dir: str, vectors: Sequence[BitMap64]) -> list[Descriptor]:
    """One new DV file holding ``vectors``; their descriptors, in order. The file is complete (fsynced) before
    any log entry can name it."""
    file_id = uuid.uuid4()
    path = os.path.join(table_dir, f"deletion_vector_{file_id}.bin")
    encoded_id = z85_encode(file_id.bytes)
    out, descriptors = bytearray([FORMAT_VERSION]), []
    for rows in vectors:
        data = encode(rows)
        descriptors.append(Descriptor("u", encoded_id, len(data), len(rows), offset=len(out)))
        out += struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    with open(path, "xb") as f:
        f.write(out)
        f.flush()
        os.fsync(f.fileno())
    return descriptors
