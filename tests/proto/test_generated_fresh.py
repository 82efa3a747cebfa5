"""The committed generated modules must equal what `make proto` produces from the .proto files."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_modules_are_not_stale(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "scripts/gen_proto.py"), "--out", str(tmp_path)], check=True)
    fresh = sorted((tmp_path / "cdc_core/proto").glob("*_pb2*"))
    committed = sorted((ROOT / "cdc_core/proto").glob("*_pb2*"))
    assert [p.name for p in fresh] == [p.name for p in committed], "generated file set differs: run `make proto`"
    stale = [p.name for p, q in zip(fresh, committed, strict=True) if p.read_bytes() != q.read_bytes()]
    assert not stale, f"stale generated modules (run `make proto`): {stale}"
