"""Compare cdcflow's protocol files with kvproto's: every message, field (number, type, label, type name), enum
value and service method cdcflow declares in pdpb, cdcpb, metapb, errorpb, kvrpcpb and tikvpb must exist in
kvproto with the same definition. (Fields kvproto has and cdcflow leaves out are fine: protobuf skips unknown fields.)

Usage: ``python scripts/check_kvproto.py /path/to/pingcap/kvproto`` (a checkout: its ``proto/`` and
``include/``). Exits 1 and lists the differences when there are any. Not part of ``make test``: it needs a
kvproto checkout, which the project does not vendor.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# cdcflow keeps raft_cmdpb's admin messages opaque (bytes on the same field numbers): not compared.
OPAQUE = {"cdcpb.Event.Admin"}


def _index(files: list[descriptor_pb2.FileDescriptorProto]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}

    def walk(prefix: str, msgs: Any, enums: Any) -> None:
        for m in msgs:
            name = f"{prefix}.{m.name}"
            out[name] = {f.name: (f.number, f.type, f.type_name.rsplit(".", 1)[-1], f.label) for f in m.field}
            walk(name, m.nested_type, m.enum_type)
        for e in enums:
            out[f"{prefix}.{e.name}"] = {v.name: v.number for v in e.value}

    for fd in files:
        walk(fd.package, fd.message_type, fd.enum_type)
        for svc in fd.service:
            out[f"{fd.package}.{svc.name} (service)"] = {
                m.name: (m.input_type, m.output_type, m.client_streaming, m.server_streaming) for m in svc.method}
    return out


def kvproto_index(kvproto: Path) -> dict[str, dict[str, Any]]:
    include = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "kvproto.desc"
        args = ["protoc", f"-I{kvproto / 'proto'}", f"-I{kvproto / 'include'}", f"-I{include}",
                f"--descriptor_set_out={out}", "--include_imports", "cdcpb.proto", "pdpb.proto",
                "tikvpb.proto"]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc could not compile kvproto's cdcpb/pdpb/tikvpb.proto under {kvproto}")
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return _index(list(fds.file))


def cdcflow_index() -> dict[str, dict[str, Any]]:
    from cdc_core.proto import cdcpb_pb2, errorpb_pb2, kvrpcpb_pb2, metapb_pb2, pdpb_pb2, tikvpb_pb2

    files = []
    for mod in (cdcpb_pb2, errorpb_pb2, kvrpcpb_pb2, metapb_pb2, pdpb_pb2, tikvpb_pb2):
        fd = descriptor_pb2.FileDescriptorProto()
        mod.DESCRIPTOR.CopyToProto(fd)
        files.append(fd)
    return _index(files)


def differences(mine: dict[str, dict[str, Any]], real: dict[str, dict[str, Any]]) -> list[str]:
    out = []
    for name, fields in sorted(mine.items()):
        if name in OPAQUE:
            continue
        if name not in real:
            out.append(f"{name}: not in kvproto")
            continue
        for field, definition in fields.items():
            if field not in real[name]:
                out.append(f"{name}.{field}: not in kvproto")
            elif real[name][field] != definition:
                out.append(f"{name}.{field}: cdcflow {definition}, kvproto {real[name][field]}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kvproto", type=Path, help="a pingcap/kvproto checkout")
    ns = parser.parse_args()
    mine = cdcflow_index()
    diffs = differences(mine, kvproto_index(ns.kvproto))
    for d in diffs:
        print(d)
    print(f"{len(mine)} messages, enums and services compared; {len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
