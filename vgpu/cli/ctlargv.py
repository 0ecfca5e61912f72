"""vgpuctl's command-line vocabulary: the program's exit statuses, the
usage error, the value converters (each option's text -> the value sent,
vgpu.common.values' parsers where the daemon takes the value too), the
``Opt`` and ``Cmd`` shapes of the command table and the options commands
share, and ``resolve``, how the table names what it loads only when used.
The table itself (``COMMANDS``), the parser and the usage texts generated
from it are vgpu.cli.ctl's.  Standard library only."""
from __future__ import annotations

import importlib

from vgpu.common.values import (POLICIES, PRIORITIES, BadValue, parse_compute, parse_container,
                                parse_duration, parse_gpus, parse_label, parse_pid, parse_policy,
                                parse_priority, parse_profile, parse_size, quote)

PROG = "vgpuctl"

EXIT_OK = 0
EXIT_ERROR = 1          # vgpud refused or failed the request, or did not answer; a refused file
EXIT_USAGE = 2          # bad command line or value
EXIT_UNAVAILABLE = 3    # vgpud is not running
EXIT_PERMISSION = 4     # permission denied on the API socket
EXIT_NOT_FOUND = 5      # no such slice (container)

EXIT_TEXT = f"""\
exit status:
  {EXIT_OK}  success
  {EXIT_ERROR}  vgpud refused or failed the request (admission, kernel, ...), or did not
     answer within --timeout; runtime configure: the config was refused or
     could not be written
  {EXIT_USAGE}  usage error: unknown command or option, or a bad value (quoted)
  {EXIT_UNAVAILABLE}  vgpud is not running (no socket, or nothing listens on it)
  {EXIT_PERMISSION}  permission denied (not root, nor in the group set as api.group)
  {EXIT_NOT_FOUND}  no slice for that container"""


class UsageError(Exception):
    pass


# ------------------------------------------------------------ converters
# Each takes the option's text and returns the value sent on the wire, or
# raises vgpu.common.values.BadValue (the value and a reason: "is not a size
# (...)"); parse_args() turns it into one usage error (invalid()).  The
# values the daemon also takes are parsed by vgpu.common.values' own parsers.

c_size = parse_size
c_percent = parse_compute
c_duration = parse_duration
c_priority = parse_priority
c_policy = parse_policy
c_profile = parse_profile
c_pid = parse_pid
c_gpus = parse_gpus
c_label = parse_label
c_container = parse_container


def _choice(*choices: str):
    def conv(text: str) -> str:
        if text not in choices:
            raise BadValue(text, f"is not one of {', '.join(choices)}")
        return text
    conv.choices = choices
    return conv


def c_nonempty(text: str) -> str:
    if not text or "\0" in text:
        raise BadValue(text, "must be a non-empty string")
    return text


def c_count(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise BadValue(text, "is not a positive whole number")
    return int(text)


c_onoff = _choice("on", "off")


def c_one_gpu(text: str) -> int | str:
    gpus = parse_gpus(text)
    if len(gpus) != 1:
        raise BadValue(text, "names more than one GPU (give one index or UUID)")
    return gpus[0]


def c_label_sel(text: str) -> str:
    k, v = parse_label(text)
    return f"{k}={v}"


def c_hours(text: str) -> int:
    n = c_count(text)
    if n > 168:
        raise BadValue(text, "is more than 168 (a week)")
    return n


def c_step(text: str) -> float:
    x = parse_duration(text)
    if x < 1:
        raise BadValue(text, "is under a second")
    return x


def invalid(label: str, text: str, e: BadValue) -> UsageError:
    """The usage error for a value a converter refused: the value quoted,
    then the parser's reason (vgpu.common.values' core text, less its "is ")."""
    reason = e.reason.removeprefix("is ") if e.value == text and not e.at else str(e)
    return UsageError(f"invalid {label} {quote(text)}: {reason}")


# ------------------------------------------------------------ the table
#: A command's function and an option's converter are either the function
#: itself or a "module:name" reference, which ``resolve`` imports when that
#: command runs or that option is given.  vgpuctl's start (issue 34: --help
#: and list within 20 ms of a bare interpreter's) pays only for what its
#: command needs: the references name the modules of the commands with heavy
#: imports (vgpu.abi.trace's ctypes and dataclasses, the history's renderers,
#: rtconfig's tomllib and difflib).  This is the package's one import below
#: module level; tests/host/test_layers.py allows it here only and checks
#: that every reference in the table resolves.
def resolve(ref):
    """``ref`` itself, or for a "module:name" string that module's ``name``
    (the module imported now, once)."""
    if not isinstance(ref, str):
        return ref
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


class Opt:
    """``--name METAVAR``: ``conv`` validates (a function or a "module:name"
    reference, ``resolve``); ``multi`` collects repeats (lists are extended,
    pairs go into a dict); ``metavar=None`` is a flag; ``required``: the
    command refuses to run without it."""
    __slots__ = ("name", "metavar", "help", "conv", "dest", "multi", "required")

    def __init__(self, name, metavar, help, conv=None, dest=None, multi=False, required=False):
        self.name, self.metavar, self.help = name, metavar, help
        self.conv, self.multi, self.required = conv, multi, required
        self.dest = dest or name.lstrip("-").replace("-", "_")

    def spelling(self) -> str:
        return self.name if self.metavar is None else f"{self.name} {self.metavar}"


class Cmd:
    """A subcommand: ``run(client, options)`` is its function or a
    "module:name" reference to it (``resolve``)."""
    __slots__ = ("name", "args", "opts", "summary", "run", "groups")

    def __init__(self, name, args, opts, summary, run, groups=()):
        self.name, self.args, self.opts = name, args, opts
        self.summary, self.run, self.groups = summary, run, groups


GLOBAL_OPTS = (
    Opt("--socket", "PATH", "vgpud's API socket (default: $VGPU_SOCKET, else "
        "/run/vgpu/vgpud.sock)", c_nonempty),
    Opt("--timeout", "S", "how long to wait for vgpud's connect, send and each reply "
        "(default 5; e.g. 2, 500ms)", c_duration),
    Opt("--json", None, "machine-readable output: the API's result objects as JSON "
        "(events, top: JSON lines)"),
    Opt("--help", None, "this text (after a command: that command's)"),
    Opt("--version", None, "the version of vgpu"),
)

O_MEMORY = Opt("--memory", "SIZE", "memory quota per GPU, a Kubernetes quantity: 8Gi, "
               "512Mi, 1.5Gi, 4G (4x10^9) or bytes", c_size)
O_COMPUTE = Opt("--compute", "PCT", "compute quota: 30% (0 to 100)", c_percent)
O_PRIORITY = Opt("--priority", "|".join(PRIORITIES), "scheduling priority", c_priority)
O_POLICY = Opt("--policy", "|".join(POLICIES), "compute policy", c_policy)
O_PROFILE = Opt("--profile", "NAME", "a profile of the config file", c_profile)
O_GPU = Opt("--gpu", "GPU", "GPU index or UUID; repeat or comma-separate for several",
            c_gpus, dest="gpus", multi=True)
QUOTA_OPTS = (O_MEMORY, O_COMPUTE, O_PRIORITY, O_POLICY, O_PROFILE)
#: the rdma cgroup's limits on a slice's RDMA adapter (docs/rdma.md)
RDMA_OPTS = (Opt("--rdma-handles", "N", "RDMA user contexts (rdma.max hca_handle)", c_count),
             Opt("--rdma-objects", "N", "RDMA verbs objects (rdma.max hca_object)", c_count))
TIME_HELP = "-24h, -90m, yesterday, 08:00, 2026-12-01T08:00, @<unix seconds>"
HISTORY_OPTS = (
    Opt("--container", "C", "one container's slice", c_container),
    Opt("--label", "KEY=VALUE", "slices with this label; repeat: all of them", c_label,
        dest="labels", multi=True),
    Opt("--gpu", "GPU", "slices on this GPU (host index or UUID)", c_one_gpu),
    Opt("--since", "T", f"from (default -24h; {TIME_HELP})", "vgpu.cli.ctlhist:c_time"),
    Opt("--until", "T", "to (default now)", "vgpu.cli.ctlhist:c_time"),
    Opt("--step", "D", "bucket size (e.g. 1m, 5m, 1h; default: to fit the width)", c_step),
)


ARG_KEYS = {"on|off": "mode"}
ARG_LABELS = {"on|off": "audit mode"}
ARG_CONV = {"container": c_container, "mode": c_onoff, "label": c_label_sel}
