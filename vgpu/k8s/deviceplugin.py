"""vgpu-device-plugin: the kubelet device plugin of vgpu (docs/kubernetes.md).

Owned here: the two extended resources a node advertises,
``vgpu.io/memory-gib`` (one device per GiB of a GPU's memory) and
``vgpu.io/compute-percent`` (100 devices per GPU), each served as its own
device plugin (API v1beta1, gRPC on a Unix socket in the kubelet's
device-plugins directory, one Register each); which devices of which GPU a
container gets (GetPreferredAllocation: all of one GPU, by vgpud's placement
policy); and the annotations Allocate hands the container runtime, which the
OCI hook turns into the container's slice.  With them goes one mount, the
guard (--guard-file at vgpu.common.request.RUNTIME_GUARD_DEST, inside
/proc): vgpu-runtime takes it out, runc refuses it, so a container started
without ``runtimeClassName: vgpu`` fails to start, naming it, instead of
running without its slice.

What it must never do: talk to vgpu.ko, create or change slices (the hook
asks vgpud when the container is created), put env or device nodes into a
container (the hook makes the slice and mounts its nodes), or import
vgpu.daemon: it is a client of vgpud's admin API (vgpu.common.apiclient, `status`
and `gpus`), polled every --poll-interval; once vgpud has not answered for
--unhealthy-after, the last known devices are advertised Unhealthy (not
withdrawn: pods holding them keep their accounting).  One plugin per
kubelet directory (server.claim): a second one is refused.

The kubelet's API is loaded at start from deviceplugin_v1beta1.proto beside
this file: protoc (grpcio-tools, in process) writes the file's descriptor set
to a temporary directory, and the message classes come from a private
descriptor pool, so nothing generated is kept and nothing clashes with other
users of the default pool.  Measured on the development machine (2 cores,
Python 3.11, grpcio 1.85, protobuf 7.36): importing grpc, grpc_tools and
protobuf about 200 ms, protoc on the file about 4 ms, the message classes
about 2 ms; the start is dominated by importing grpc, not by the .proto.

Kubelet restarts: the kubelet removes every socket in its directory and
makes a new kubelet.sock.  Every --watch-interval the plugin checks that its
sockets are the ones it bound and that kubelet.sock is the one it registered
with; if not, it serves again and registers again.  Every call to the
kubelet and to vgpud is bounded by --timeout; registration is retried with a
back-off (1 s doubling to 30 s).  Logs are plain lines on stderr.

    vgpu-device-plugin [--socket PATH] [--kubelet-dir DIR] [--profile NAME]
                       [--oversubscribe-factor N] [--poll-interval D]
                       [--watch-interval D] [--timeout D] [--guard-file PATH | --no-guard]
                       [--log-level L]
    vgpu-device-plugin --list        # ask vgpud once, print the devices, exit

Its rooms, as NVIDIA's device plugin keeps its resource manager apart from
its gRPC server: vgpu.k8s.devices (the resources, devices and allocation;
no I/O, no gRPC), vgpu.k8s.watch (vgpud, polled), vgpu.k8s.server (the
kubelet's API, the endpoints, registration) and this module, the program.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from pathlib import Path

from vgpu import __version__
from vgpu.common import apiclient as ac
from vgpu.common.request import RUNTIME_GUARD_DEST, RUNTIME_GUARD_SOURCE
from vgpu.common.values import BadValue, parse_duration, parse_profile, quote
from vgpu.k8s.devices import RESOURCES, node_from_api
from vgpu.k8s.server import API_VERSION, DEVICE_PLUGIN_PATH, PROTO, AlreadyServed, Plugin

log = logging.getLogger("vgpu-device-plugin")

PROG = "vgpu-device-plugin"

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_PERMISSION = 0, 1, 2, 3, 4
FACTOR_MAX = 16.0


# ---------------------------------------------------------------- CLI
def _duration(opt: str, lo: float, hi: float):
    def conv(v: str) -> float:
        if lo == 0 and v in ("0", "0s"):
            return 0.0              # "at once", which parse_duration does not take
        try:
            x = parse_duration(v)
        except BadValue as e:
            raise argparse.ArgumentTypeError(f"{opt}: {e}") from None
        if not lo <= x <= hi:
            raise argparse.ArgumentTypeError(f"{opt}: {quote(v)} is out of range "
                                             f"({lo:g} s to {hi:g} s)")
        return x
    return conv


def _profile(v: str) -> str:
    if v == "":
        return ""
    try:
        return parse_profile(v)
    except BadValue as e:
        raise argparse.ArgumentTypeError(f"--profile: {e}") from None


def _factor(v: str) -> float:
    try:
        x = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--oversubscribe-factor: {quote(v)} is not a "
                                         f"number (1 to {FACTOR_MAX:g})") from None
    if not 1.0 <= x <= FACTOR_MAX:
        raise argparse.ArgumentTypeError(f"--oversubscribe-factor: {quote(v)} is out of "
                                         f"range (1 to {FACTOR_MAX:g})")
    return x


def _abs(opt: str):
    def check(v: str) -> Path:
        if not v.startswith("/"):
            raise argparse.ArgumentTypeError(f"{opt}: {quote(v)} is not an absolute path")
        return Path(v)
    return check


_dir = _abs("--kubelet-dir")


class _Parser(argparse.ArgumentParser):
    def error(self, message):       # vgpuctl's exit status for a usage error
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{PROG}: {message}\n")
        sys.exit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The kubelet device plugin of vgpu: advertises vgpu.io/memory-gib (one "
                    "device per GiB of each GPU vgpud slices) and vgpu.io/compute-percent "
                    "(100 per GPU) to the kubelet, keeps a container's memory on one GPU, "
                    "and hands each container's request to the OCI hook as annotations.  "
                    "vgpud starts it when its config says [kubernetes] device_plugin = true; "
                    "it runs by hand too.",
        epilog=f"""exit status:
  {EXIT_OK}  stopped by SIGTERM or SIGINT (or --list printed the devices)
  {EXIT_ERROR}  a fatal error: the plugin's sockets cannot be made in --kubelet-dir,
     or another vgpu-device-plugin serves it
  {EXIT_USAGE}  usage error: unknown option or a bad value (quoted)
  {EXIT_UNAVAILABLE}  --list: vgpud is not running
  {EXIT_PERMISSION}  --list: permission denied on vgpud's socket
Without --list, a vgpud that does not answer is waited for (its devices are
advertised Unhealthy) and a kubelet that is absent is waited for; see
docs/kubernetes.md.""")
    p.add_argument("--socket", metavar="PATH", default=None,
                   help="vgpud's admin API socket (default $VGPU_SOCKET or "
                        f"{ac.DEFAULT_SOCKET})")
    p.add_argument("--kubelet-dir", metavar="DIR", type=_dir, default=Path(DEVICE_PLUGIN_PATH),
                   help="the kubelet's device-plugins directory, where kubelet.sock is and "
                        f"the plugin's sockets go (default {DEVICE_PLUGIN_PATH})")
    p.add_argument("--profile", metavar="NAME", type=_profile, default="",
                   help="a vgpud profile every container's request names "
                        "(vgpu.io/container-profile); default none")
    p.add_argument("--oversubscribe-factor", metavar="N", type=_factor, default=2.0,
                   help="memory devices per GiB of a GPU while vgpud oversubscribes memory "
                        "(node.oversubscribe_memory), 1 to 16 (default 2)")
    p.add_argument("--poll-interval", metavar="D", default=5.0,
                   type=_duration("--poll-interval", 0.05, 3600),
                   help="how often vgpud is asked for its GPUs (default 5s)")
    p.add_argument("--watch-interval", metavar="D", default=1.0,
                   type=_duration("--watch-interval", 0.01, 60),
                   help="how often the kubelet's directory is checked for a restart "
                        "(default 1s)")
    p.add_argument("--unhealthy-after", metavar="D", default=30.0,
                   type=_duration("--unhealthy-after", 0, 3600),
                   help="how long vgpud may not answer before its devices are advertised "
                        "Unhealthy (default 30s: a restart keeps every slice; 0: at once)")
    p.add_argument("--timeout", metavar="D", default=5.0, type=_duration("--timeout", 0.1, 300),
                   help="the bound on every call to the kubelet and to vgpud (default 5s)")
    p.add_argument("--guard-file", metavar="PATH", type=_abs("--guard-file"),
                   default=RUNTIME_GUARD_SOURCE,
                   help="the file every allocated container gets a mount of at "
                        f"{RUNTIME_GUARD_DEST}, which vgpu-runtime takes out and runc refuses: "
                        "a container started without runtimeClassName: vgpu fails, naming it "
                        f"(default {RUNTIME_GUARD_SOURCE}; written at start)")
    p.add_argument("--no-guard", action="store_true",
                   help="no guard mount: for nodes where containers get their slice without "
                        "vgpu-runtime (OCI hooks.d under CRI-O, CDI), where runc would refuse it")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    p.add_argument("--list", action="store_true",
                   help="ask vgpud once, print each resource's devices per GPU, and exit")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    return p


def list_devices(args) -> int:
    try:
        with ac.ApiClient(args.socket, args.timeout) as c:
            node = node_from_api(c.request("status"), c.request("gpus"))
    except ac.DaemonUnavailable as e:
        sys.stderr.write(f"{PROG}: {e}\n")
        return EXIT_UNAVAILABLE
    except ac.PermissionDenied as e:
        sys.stderr.write(f"{PROG}: permission denied: {e.message}\n")
        return EXIT_PERMISSION
    except (ac.ClientError, ValueError) as e:
        sys.stderr.write(f"{PROG}: {e}\n")
        return EXIT_ERROR
    for res, (kind, _) in RESOURCES.items():
        per = ", ".join(f"GPU {g.index}: {node.count(kind, g, args.oversubscribe_factor)}"
                        for g in node.gpus) or "no GPU"
        total = sum(node.count(kind, g, args.oversubscribe_factor) for g in node.gpus)
        print(f"{res}: {total} ({per})")
    return EXIT_OK


def setup_logging(level: str) -> None:
    h = logging.StreamHandler(sys.stderr)
    fmt = f"%(levelname)s {PROG}: %(message)s" if os.environ.get("JOURNAL_STREAM") else \
        f"%(asctime)s %(levelname)s {PROG}: %(message)s"
    h.setFormatter(logging.Formatter(fmt))
    log.addHandler(h)
    log.setLevel(level.upper())
    log.propagate = False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        return list_devices(args)
    setup_logging(args.log_level)
    if not args.kubelet_dir.is_dir():
        log.error("--kubelet-dir: %s is not a directory", quote(str(args.kubelet_dir)))
        return EXIT_ERROR
    t0 = time.monotonic()
    plugin = Plugin(args.kubelet_dir, args.socket, profile=args.profile,
                    factor=args.oversubscribe_factor, poll_interval=args.poll_interval,
                    watch_interval=args.watch_interval, timeout=args.timeout,
                    unhealthy_after=args.unhealthy_after,
                    guard_file=None if args.no_guard else args.guard_file)
    log.info("%s %s: API %s loaded from %s in %.0f ms; kubelet directory %s, vgpud %s%s",
             PROG, __version__, API_VERSION, PROTO.name, (time.monotonic() - t0) * 1e3,
             args.kubelet_dir, ac.socket_path(args.socket),
             f", profile {args.profile}" if args.profile else "")

    def on_signal(signum, frame):
        log.info("%s: stopping", signal.Signals(signum).name)
        plugin.stop()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        plugin.run()
    except AlreadyServed as e:
        log.error("%s", e.strerror)
        return EXIT_ERROR
    except OSError as e:
        log.error("%s", e)
        return EXIT_ERROR
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
