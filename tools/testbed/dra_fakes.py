"""Stand-ins for the two Kubernetes components vgpu's DRA plugin talks to,
for its tests on the host (tests/host/test_dra_plugin.py) and in the VM
(tests/vm/test_dra.py): ``ApiServer``, the few API-server paths it uses
(http.server in a thread), and ``Kubelet``, the kubelet's calls over the
plugin's real sockets (registration, prepare, unprepare) in either
version of the DRA API.  The real API server and kubelet are not here: no
cluster runs on the test bed."""

from __future__ import annotations

import http.server
import json
import threading

import grpc

#: the node the tests' claims are allocated on
NODE = "node-1"

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


class ApiServer:
    """The few API-server paths the plugin uses: GET of a ResourceClaim from
    ``claims`` ({(ns, name): object}), GET of a Node from ``nodes``, and
    ResourceSlices in ``slices`` (GET, POST, PUT with the stored
    resourceVersion, else 409); ``writes`` counts POSTs and PUTs; 404 for
    anything else."""

    def __init__(self):
        self.claims: dict[tuple[str, str], dict] = {}
        self.nodes: dict[str, dict] = {NODE: {"metadata": {"name": NODE, "uid": "node-uid-1"}}}
        self.slices: dict[str, dict] = {}
        self.writes = 0
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def reply(self, code, body):
                self.send_response(code)
                self.end_headers()
                self.wfile.write(json.dumps(body).encode())

            def do_GET(self):
                parts = self.path.split("/")
                body = None
                if len(parts) == 8 and parts[1:5] == ["apis", "resource.k8s.io", "v1",
                                                      "namespaces"]:
                    body = outer.claims.get((parts[5], parts[7]))
                elif self.path.startswith("/api/v1/nodes/"):
                    body = outer.nodes.get(parts[-1])
                elif self.path.startswith(SLICES + "/"):
                    body = outer.slices.get(parts[-1])
                self.reply(200, body) if body else self.reply(404, {"message": "not found"})

            def body(self):
                return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

            def do_POST(self):
                obj = self.body()
                name = obj["metadata"]["name"]
                if self.path != SLICES or name in outer.slices:
                    return self.reply(409, {"message": "exists"})
                obj["metadata"]["resourceVersion"] = "1"
                outer.slices[name] = obj
                outer.writes += 1
                self.reply(201, obj)

            def do_PUT(self):
                obj = self.body()
                name = self.path.rsplit("/", 1)[1]
                cur = outer.slices.get(name)
                if cur is None or obj["metadata"].get("resourceVersion") != \
                        cur["metadata"]["resourceVersion"]:
                    return self.reply(409, {"message": "conflict"})
                obj["metadata"]["resourceVersion"] = str(int(
                    cur["metadata"]["resourceVersion"]) + 1)
                outer.slices[name] = obj
                outer.writes += 1
                self.reply(200, obj)

            def log_message(self, *a):
                pass
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


class Kubelet:
    def __init__(self, services, dra_sock, reg_sock):
        """``services``: the plugin's vgpu.k8s.draplugin.DraServices (for its
        message classes); the two sockets it serves."""
        self.s = services
        self.dra = grpc.insecure_channel(f"unix://{dra_sock}")
        self.reg = grpc.insecure_channel(f"unix://{reg_sock}")

    def call(self, version: str, method: str, *claims):
        api = self.s.apis[f"{version}.DRAPlugin"]
        req_cls = api.msg[f"{method}Request"]
        out_cls = api.msg[f"{method}Response"]
        rpc = self.dra.unary_unary(f"/{api.package}.DRAPlugin/{method}",
                                   request_serializer=req_cls.SerializeToString,
                                   response_deserializer=out_cls.FromString)
        return rpc(req_cls(claims=[api.msg["Claim"](namespace=ns, name=n, uid=u)
                                   for ns, n, u in claims]), timeout=30)

    def info(self):
        r = self.s.reg
        rpc = self.reg.unary_unary("/pluginregistration.Registration/GetInfo",
                                   request_serializer=r.msg["InfoRequest"].SerializeToString,
                                   response_deserializer=r.msg["PluginInfo"].FromString)
        return rpc(r.msg["InfoRequest"](), timeout=10)

    def notify(self, ok: bool, error: str = ""):
        r = self.s.reg
        rpc = self.reg.unary_unary(
            "/pluginregistration.Registration/NotifyRegistrationStatus",
            request_serializer=r.msg["RegistrationStatus"].SerializeToString,
            response_deserializer=r.msg["RegistrationStatusResponse"].FromString)
        return rpc(r.msg["RegistrationStatus"](plugin_registered=ok, error=error), timeout=10)
