"""Generate the Python modules for cdc_core/proto/*.proto (run by `make proto`).

With --check DIR it writes into DIR instead, so a test can compare against the committed files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "cdc_core" / "proto"


def generate(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    include = Path(protoc.__file__).parent / "_proto"
    protos = sorted(str(p.relative_to(ROOT)) for p in PROTO_DIR.glob("*.proto"))
    args = [
        "grpc_tools.protoc",
        f"-I{ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT, help="root under which cdc_core/proto/ is written")
    ns = parser.parse_args()
    generate(ns.out)


if __name__ == "__main__":
    sys.exit(main())
