"""What the host tests of vgpu's .proto files share: compiling one with
grpcio-tools' protoc (``compile_fds``, optionally dropping gogoproto from
an upstream file first) and what of it the wire depends on (``shape``)."""

from __future__ import annotations

import re
from pathlib import Path

from google.protobuf import descriptor_pb2
from grpc_tools import protoc

#: gogoproto's import, file options and field options in an upstream
#: Kubernetes .proto: Go code generation only, nothing on the wire
_GOGO = re.compile(r'^import "github\.com/gogo/protobuf/gogoproto/gogo\.proto";\n|'
                   r'^option \(gogoproto\.[a-z_]+\) = +[a-z]+;\n|'
                   r' \[\(gogoproto\.customname\) = "[A-Za-z]+"\]', re.M)


def without_gogo(text: str) -> str:
    return _GOGO.sub("", text)


def compile_fds(path: Path, tmp: Path, drop_gogo: bool = False
                ) -> descriptor_pb2.FileDescriptorProto:
    path = Path(path)
    if drop_gogo:
        d = tmp / ("nogogo-" + path.parent.name)
        d.mkdir(exist_ok=True)
        (d / path.name).write_text(without_gogo(path.read_text()))
        path = d / path.name
    out = tmp / (path.parent.name + "-" + path.stem + ".pb")
    rc = protoc.main(["protoc", f"--proto_path={path.parent}", f"--descriptor_set_out={out}",
                      path.name])
    assert rc == 0, f"protoc could not compile {path}"
    fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    assert len(fds.file) == 1
    return fds.file[0]


def shape(f: descriptor_pb2.FileDescriptorProto) -> dict:
    """What the wire depends on: services, methods, messages (map entries
    included), field names, numbers, types and labels."""
    def msg(m):
        return {"fields": sorted((x.number, x.name, x.type, x.label, x.type_name)
                                 for x in m.field),
                "nested": {n.name: msg(n) for n in m.nested_type},
                "map_entry": m.options.map_entry, "enums": len(m.enum_type)}
    return {"package": f.package, "syntax": f.syntax, "enums": len(f.enum_type),
            "services": {s.name: sorted((m.name, m.input_type, m.output_type,
                                         m.client_streaming, m.server_streaming)
                                        for m in s.method) for s in f.service},
            "messages": {m.name: msg(m) for m in f.message_type}}
