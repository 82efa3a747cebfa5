"""Delta deletion vectors byte for byte: Z85, the bitmap and file formats, against what delta-spark writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyroaring import BitMap64

from spark_jobs.load import deletion_vector as dv


def test_z85_is_zeromqs_base85():
    # ZeroMQ's RFC 32 test vector
    assert dv.z85_encode(bytes.fromhex("864FD26FB559F75B")) == "HelloWorld"
    assert dv.z85_decode("HelloWorld") == bytes.fromhex("864FD26FB559F75B")
    with pytest.raises(ValueError, match="multiples of 4 bytes"):
        dv.z85_encode(b"abc")
    with pytest.raises(ValueError, match="not Z85"):
        dv.z85_decode("Hello~orld")


def test_written_vectors_read_back_with_their_descriptors(tmp_path: Path):
    vectors = [BitMap64([0, 3, 7]), BitMap64(range(0, 200_000, 2)), BitMap64([5 << 32, 1])]
    descriptors = dv.write_file(str(tmp_path), vectors)
    assert [d.cardinality for d in descriptors] == [3, 100_000, 2]
    assert descriptors[0].offset == 1  # after the format version byte
    for d, want in zip(descriptors, vectors, strict=True):
        assert dv.read(str(tmp_path), dv.Descriptor.from_json(d.to_json())) == want
        assert Path(d.file_path(str(tmp_path))).exists()
    # a flipped byte is refused, naming the file
    f = Path(descriptors[1].file_path(str(tmp_path)))
    data = bytearray(f.read_bytes())
    data[descriptors[1].offset + 40] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"{f.name} at {descriptors[1].offset}: deletion vector checksum mismatch"):
        dv.read(str(tmp_path), descriptors[1])


@pytest.mark.spark
def test_delta_sparks_vectors_read_and_encode_to_the_same_bytes(spark, tmp_path: Path):
    """A table delta-spark deleted from with deletion vectors: each vector read here deletes exactly the rows it
    did, and encodes back to delta-spark's bytes."""
    path = str(tmp_path / "t")
    spark.range(0, 3000).coalesce(1).write.format("delta") \
        .option("delta.enableDeletionVectors", "true").save(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 7 = 0")
    log = sorted((tmp_path / "t" / "_delta_log").glob("*.json"))[-1]
    adds = [json.loads(line)["add"] for line in log.read_text().splitlines() if '"add"' in line]
    assert len(adds) == 1 and adds[0].get("deletionVector"), adds
    d = dv.Descriptor.from_json(adds[0]["deletionVector"])
    assert d.to_json() == adds[0]["deletionVector"]
    rows = dv.read(path, d)
    assert list(rows) == list(range(0, 3000, 7))  # one file in id order: the position is the id
    with open(d.file_path(path), "rb") as f:
        f.seek(d.offset + 4)
        assert dv.encode(rows) == f.read(d.size_in_bytes)
