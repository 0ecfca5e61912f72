"""The values operators type, one parser each: sizes, percentages, durations,
clock times, compute policies, priorities, container names, GPU lists,
process ids, profile names, labels and booleans; and the names of policies,
priorities and scheduler layers with the kernel's numbers for them.

Shared by the config file (vgpu.daemon.config), the admin API
(vgpu.daemon.api), vgpuctl (vgpu.cli.ctl) and the OCI hook (vgpu.cli.hook):
a value is accepted or refused by the same code, with the same words,
wherever it is typed.  Standard library only (and vgpu.abi.uapi, for the
kernel's names and limits), and cheap to import: vgpuctl and the hook
import it on every start.

Every parser raises BadValue, a ValueError whose message is the core text
"<quoted value> <reason>"; each caller words its own error around it once:

    config:   /etc/vgpu/vgpud.toml: profiles.small.memory: "4GB" is not a size: ...
    API:      args.memory: "4GB" is not a size: ...                  (bad-request)
    vgpuctl:  invalid --memory "4GB": not a size: ...                (usage error)
    hook:     container c1: bad vgpu.io/memory "4GB": is not a size: ...
"""

from __future__ import annotations

import math

from vgpu.abi import uapi

__all__ = [
    "BadValue",
    "quote",
    "read_utf8",
    "parse_size",
    "format_size",
    "parse_percent",
    "parse_compute",
    "format_percent",
    "parse_duration",
    "format_duration",
    "parse_policy",
    "parse_priority",
    "parse_container",
    "parse_gpu",
    "parse_gpus",
    "parse_pid",
    "parse_profile",
    "parse_label",
    "parse_labels",
    "parse_bool",
    "parse_flag",
    "POLICIES",
    "POLICY_CODES",
    "PRIORITIES",
    "PRIORITY_CODES",
    "LAYER_FLAGS",
]


# ------------------------------------------------------------ errors, quoting
class BadValue(ValueError):
    """A value its parser refuses.

    ``value``: the value as given; ``reason``: what is wrong with it, the
    phrase that follows the quoted value ("is not a size (use e.g. 4GiB,
    512MiB or bytes)"); ``at``: where in a list or object the bad item is
    ("[1]", ".team"), "" for the value itself (then ``value`` is the item).
    str() is the core text, ``<quote(value)> <reason>``."""

    def __init__(self, value: object, reason: str, at: str = ""):
        self.value = value
        self.reason = reason
        self.at = at
        super().__init__(f"{quote(value)} {reason}")


QUOTE_MAX = 80          # characters of a quoted value in a message


def quote(v: object) -> str:
    """A bad value quoted for an error message, as JSON and TOML write it:
    strings in double quotes with backslash escapes (non-printable
    characters escaped), true, false and null, lists and tables in
    brackets; anything else as its repr.  Cut to QUOTE_MAX characters."""
    if isinstance(v, str):
        s = _escape(v)
        return f'"{s[:QUOTE_MAX - 3]}..."' if len(s) > QUOTE_MAX else f'"{s}"'
    r = _render(v, 0)
    return r if len(r) <= QUOTE_MAX else r[:QUOTE_MAX - 3] + "..."


def _escape(s: str) -> str:
    s = s.replace("\\", "\\\\").replace('"', '\\"')
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def _render(v: object, depth: int) -> str:
    if isinstance(v, str):
        return f'"{_escape(v)}"'
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple, dict)):
        if depth >= 16:
            return "..."
        if isinstance(v, dict):
            return "{" + ", ".join(f"{_render(str(k), depth + 1)}: {_render(x, depth + 1)}"
                                   for k, x in v.items()) + "}"
        return "[" + ", ".join(_render(x, depth + 1) for x in v) + "]"
    return repr(v)


def read_utf8(path, error: type[Exception]) -> str:
    """The text of an operator's file (config, allow-list); error(message)
    for a file that cannot be read or is not UTF-8, naming the file (and
    the line of the first bad byte)."""
    name = str(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise error(f"{name}: cannot read: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise error(f"{name}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x})") from None


def _or(names) -> str:
    """("share", "fixed", "burst") -> "share, fixed or burst"."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# ------------------------------------------------------------ numbers with units
#: Kubernetes' binary suffixes (case as Kubernetes writes them) and the
#: IEC names (any case); Kubernetes' decimal suffixes, case exactly
_BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50,
           "Ei": 1 << 60}
_IEC = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
        "pib": 1 << 50, "eib": 1 << 60}
_SI = {"k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18}
#: forms refused with the message naming what to write instead: suffixes
#: that vgpu read as binary before it took Kubernetes quantities (matched as
#: written), and SI names with a B, "4GB" (any case), whose meaning people
#: disagree on
_REWRITE = {
    "K": "write {n}k (10^3 bytes) or {n}Ki (2^10)",
    "m": "m is milli in Kubernetes quantities: write {n}Mi (2^20 bytes) or {n}M (10^6)",
    "g": "write {n}Gi (2^30 bytes) or {n}G (10^9, as Kubernetes)",
    "t": "write {n}Ti (2^40 bytes) or {n}T (10^12, as Kubernetes)",
    "p": "write {n}Pi (2^50 bytes) or {n}P (10^15, as Kubernetes)",
}
_REWRITE_SI_B = {
    "kb": "write {n}k (10^3 bytes) or {n}Ki (2^10)",
    "mb": "write {n}M (10^6 bytes) or {n}Mi (2^20)",
    "gb": "write {n}G (10^9 bytes) or {n}Gi (2^30)",
    "tb": "write {n}T (10^12 bytes) or {n}Ti (2^40)",
    "pb": "write {n}P (10^15 bytes) or {n}Pi (2^50)",
    "eb": "write {n}E (10^18 bytes) or {n}Ei (2^60)",
}

_DUR_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "m": 60.0,
              "min": 60.0, "h": 3600.0}
_DIGITS = frozenset("0123456789")
_ALPHA = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _split(s: str) -> tuple[str, str] | None:
    """" 1.5 GiB " -> ("1.5", "GiB"): an unsigned decimal number (digits with
    at most one point) and an alphabetic unit (maybe empty), blanks around
    and between allowed.  None when `s` is not of that form.  (No regular
    expressions: importing re costs vgpuctl a few milliseconds.)"""
    s = s.strip()
    i = 0
    while i < len(s) and (s[i] in _DIGITS or s[i] == "."):
        i += 1
    num, unit = s[:i], s[i:].lstrip()
    if not num or num.count(".") > 1 or num == ".":
        return None
    if unit and not all(c in _ALPHA for c in unit):
        return None
    return num, unit

# The largest size we accept: 2**63 - 1 bytes (the kernel's u64 limits are
# checked by the kernel; this guards against absurd values early).
SIZE_MAX = (1 << 63) - 1

_NOT_SIZE = "is not a size (use e.g. 4Gi, 512Mi, 4G or bytes)"


def parse_size(v: str | int) -> int:
    """Bytes from an int or a string, as Kubernetes writes quantities:
    "4096", "8Gi", "512Mi", "1.5Gi" (binary: Ki Mi Gi Ti Pi Ei), "4G", "500M",
    "2k" (decimal: k M G T P E, 4G = 4x10^9), and the IEC names "8GiB",
    "512 MiB" (any case).  Fractions must come out as a whole number of
    bytes.  Refuses negatives, bools, floats, garbage, and the forms whose
    meaning changed or is unclear ("4g", "512m", "4GB"), naming what to
    write instead."""
    if isinstance(v, float):
        raise BadValue(v, 'is not a size (use an integer of bytes, or e.g. "1.5Gi")')
    if isinstance(v, bool):
        raise BadValue(v, _NOT_SIZE)
    if isinstance(v, int):
        if v < 0:
            raise BadValue(v, "is negative (a size is 0 or more bytes)")
        if v > SIZE_MAX:
            raise BadValue(v, "is too large")
        return v
    if not isinstance(v, str):
        raise BadValue(v, _NOT_SIZE)
    s = v.strip()
    if s.startswith("-"):
        raise BadValue(v, "is negative (a size is 0 or more bytes)")
    parts = _split(s)
    if parts is None:
        raise BadValue(v, _NOT_SIZE)
    num, unit = parts
    mult = _BINARY.get(unit) or _SI.get(unit) or _IEC.get(unit.lower())
    if mult is None:
        hint = _REWRITE.get(unit) or _REWRITE_SI_B.get(unit.lower())
        if hint is not None:
            raise BadValue(v, "is not a size: " + hint.format(n=num))
        raise BadValue(v, _NOT_SIZE)
    if "." in num:
        # exact arithmetic: "1.5Gi" -> 1610612736, "0.1" refused
        intpart, _, frac = num.partition(".")
        numer = int(intpart or "0") * 10 ** len(frac) + int(frac or "0")
        denom = 10 ** len(frac)
        total, rem = divmod(numer * mult, denom)
        if rem:
            raise BadValue(v, "is not a whole number of bytes")
    else:
        total = int(num) * mult
    if total > SIZE_MAX:
        raise BadValue(v, "is too large")
    return total


def format_size(n: int) -> str:
    """"8 GiB", "1.5 GiB", "512 MiB", "100 B": the largest binary unit in
    which the value is at least 1, with at most two decimals (trailing zeros
    dropped)."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"format_size wants an int, got {quote(n)}")
    sign = "-" if n < 0 else ""
    a = abs(n)
    for unit, mult in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if a >= mult:
            if a % mult == 0:
                return f"{sign}{a // mult} {unit}"
            text = f"{a / mult:.2f}".rstrip("0").rstrip(".")
            return f"{sign}{text} {unit}"
    return f"{sign}{a} B"


_NOT_PERCENT = "is not a percentage (use e.g. 30%)"


def parse_percent(v: str | int | float) -> float:
    """A percentage 0..100 from "30%", "30", "12.5%", 30 or 30.0."""
    if isinstance(v, bool):
        raise BadValue(v, _NOT_PERCENT)
    if isinstance(v, (int, float)):
        x = float(v)
    elif isinstance(v, str):
        s = v.strip()
        if s.endswith("%"):
            s = s[:-1].rstrip()
        neg = s[:1] == "-"
        if s[:1] in ("-", "+"):
            s = s[1:]
        parts = _split(s) if s[:1] not in (" ", "\t") else None
        if parts is None or parts[1]:
            raise BadValue(v, _NOT_PERCENT)
        x = -float(parts[0]) if neg else float(parts[0])
    else:
        raise BadValue(v, _NOT_PERCENT)
    if math.isnan(x) or x < 0 or x > 100:
        raise BadValue(v, "is out of range (a percentage is 0 to 100)")
    return x


def parse_compute(v: str | int | float) -> int | float:
    """A compute quota as vgpuctl and the hook send it: parse_percent(),
    a whole percentage as an int (30, not 30.0)."""
    x = parse_percent(v)
    return int(x) if x == int(x) else x


def format_percent(x: float) -> str:
    """30.0 -> "30%", 12.5 -> "12.5%"."""
    text = f"{x:.2f}".rstrip("0").rstrip(".")
    return f"{text}%"


_NOT_DURATION = "is not a duration (use e.g. 100ms, 10s, 2m, 1h)"


def parse_duration(v: str | int | float) -> float:
    """Seconds (> 0) from "100ms", "10s", "2m", "1h", "250us" or a plain
    number of seconds."""
    if isinstance(v, bool):
        raise BadValue(v, _NOT_DURATION)
    if isinstance(v, (int, float)):
        x = float(v)
    elif isinstance(v, str):
        parts = _split(v)
        if parts is None:
            if v.strip().startswith("-") and _split(v.strip()[1:]) is not None:
                raise BadValue(v, "is not positive (a duration is more than 0)")
            raise BadValue(v, _NOT_DURATION)
        unit = parts[1].lower()
        if unit not in _DUR_UNITS:
            raise BadValue(v, "is not a duration (units: ms, s, m, h)")
        x = float(parts[0]) * _DUR_UNITS[unit]
    else:
        raise BadValue(v, _NOT_DURATION)
    if math.isnan(x) or math.isinf(x):
        raise BadValue(v, _NOT_DURATION)
    if x <= 0:
        raise BadValue(v, "is not positive (a duration is more than 0)")
    return x


def format_duration(x: float) -> str:
    """0.1 -> "100ms", 10 -> "10s", 120 -> "2m", 3600 -> "1h"."""
    for unit, mult in (("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if x >= mult and (x / mult) == int(x / mult):
            return f"{int(x / mult)}{unit}"
    if x >= 1:
        return f"{x:g}s"
    ms = x * 1000
    if abs(ms - round(ms)) < 1e-9:
        return f"{int(round(ms))}ms"
    return f"{x * 1e6:g}us"


# ------------------------------------------------------------ names
#: the compute policies a slice may ask for, by the kernel's number
#: (enum vgpu_compute_policy; VGPU_COMPUTE_NONE is no setting, not a choice)
POLICY_CODES = {uapi.COMPUTE_POLICY_NAMES[c]: c
                for c in (uapi.VGPU_COMPUTE_SHARE, uapi.VGPU_COMPUTE_FIXED, uapi.VGPU_COMPUTE_BURST)}
POLICIES = tuple(POLICY_CODES)                  # ("share", "fixed", "burst")
#: the priorities, by the kernel's number (enum vgpu_priority), highest first
PRIORITY_CODES = {uapi.PRIORITY_NAMES[c]: c for c in (uapi.VGPU_PRIORITY_HIGH, uapi.VGPU_PRIORITY_LOW)}
PRIORITIES = tuple(PRIORITY_CODES)              # ("high", "low")


#: the layers of the per-GPU scheduler ([scheduler] layers), by the
#: kernel's VGPU_SCHED_L_* flag, in the order they are shown
LAYER_FLAGS = {"tsg": uapi.VGPU_SCHED_L_TSG, "doorbell": uapi.VGPU_SCHED_L_DOORBELL}


def parse_policy(v: object) -> str:
    """A compute policy: share, fixed or burst (docs/compute.md)."""
    if not isinstance(v, str) or v not in POLICY_CODES:
        raise BadValue(v, f"is not a policy ({_or(POLICIES)})")
    return v


def parse_priority(v: object) -> str:
    """A scheduling priority: high or low."""
    if not isinstance(v, str) or v not in PRIORITY_CODES:
        raise BadValue(v, f"is not a priority ({_or(PRIORITIES)})")
    return v


#: a container's name is its slice's name in vgpu.ko: at most
#: VGPU_SLICE_NAME_MAX bytes with the terminating NUL
CONTAINER_MAX = uapi.VGPU_SLICE_NAME_MAX - 1


def parse_container(v: object) -> str:
    """A container name (its slice's name, and a directory of vgpufs): 1 to
    CONTAINER_MAX bytes of UTF-8, one path component (no "/", not "." or
    ".."), no control characters."""
    if not isinstance(v, str):
        raise BadValue(v, f"is not a container name (a string of 1 to {CONTAINER_MAX} bytes)")
    if not v:
        raise BadValue(v, f"is empty (a container name is 1 to {CONTAINER_MAX} bytes)")
    try:
        n = len(v.encode())
    except UnicodeEncodeError:
        raise BadValue(v, "is not UTF-8 text") from None
    if n > CONTAINER_MAX:
        raise BadValue(v, f"is longer than {CONTAINER_MAX} bytes")
    if v in (".", ".."):
        raise BadValue(v, 'is not a container name (not "." or "..")')
    if any(ord(c) < 0x20 or c in "/\x7f" for c in v):
        raise BadValue(v, "contains '/' or control characters")
    return v


#: the largest GPU index a request may name; a UUID's longest spelling
GPU_INDEX_MAX = 1023
GPU_UUID_MAX = 128
#: GPUs a slice may have (the kernel's VGPU_MAX_SLICE_GPUS)
SLICE_GPUS_MAX = uapi.VGPU_MAX_SLICE_GPUS
_NOT_GPU_LIST = "is not a GPU list (e.g. 0, 0,1 or GPU-...)"


def _uuid_ok(s: str) -> bool:
    return 0 < len(s) <= GPU_UUID_MAX and not any(c.isspace() or c == "," or not c.isprintable()
                                                  for c in s)


def parse_gpu(v: object) -> int | str:
    """One GPU as the API and the config file name it: an index (an int,
    0 to GPU_INDEX_MAX) or a UUID (a string such as "GPU-8f6d...": no
    blanks or commas, at most GPU_UUID_MAX characters; an index is written
    as a number, not a string)."""
    if _is_int(v):
        if v < 0:
            raise BadValue(v, "is negative (GPU indexes start at 0)")
        if v > GPU_INDEX_MAX:
            raise BadValue(v, f"is out of range (GPU indexes are 0 to {GPU_INDEX_MAX})")
        return v
    if isinstance(v, str):
        if v.strip().isascii() and v.strip().isdigit():
            raise BadValue(v, "is not a GPU UUID (write an index as a number, without quotes)")
        if _uuid_ok(v):
            return v
        raise BadValue(v, f"is not a GPU UUID (e.g. GPU-8f6d...; no blanks or commas, at most "
                          f"{GPU_UUID_MAX} characters)")
    raise BadValue(v, "is not a GPU index or UUID")


def parse_gpus(v: object, most: int | None = SLICE_GPUS_MAX) -> list[int | str]:
    """The GPUs of a request: a list (API, config; each item as parse_gpu)
    or a comma-separated string (vgpuctl's --gpu, the vgpu.io/gpus
    annotation: "0", "0,1", "GPU-8f6d...", indexes become ints).  At least
    one, each once, at most ``most`` (None: no bound)."""
    if isinstance(v, str):
        out: list[int | str] = []
        for part in v.split(","):
            part = part.strip()
            if part.isascii() and part.isdigit():
                if int(part) > GPU_INDEX_MAX:
                    raise BadValue(v, f"names GPU index {part}, out of range (0 to "
                                      f"{GPU_INDEX_MAX})")
                g: int | str = int(part)
            elif _uuid_ok(part):
                g = part
            else:
                raise BadValue(v, _NOT_GPU_LIST)
            if g in out:
                raise BadValue(v, f"names GPU {part} twice")
            out.append(g)
        if most is not None and len(out) > most:
            raise BadValue(v, f"names more than {most} GPUs")
        return out
    if not isinstance(v, (list, tuple)):
        raise BadValue(v, "is not a list of GPU indexes or UUIDs")
    if not v:
        raise BadValue(v, "names no GPU (list GPU indexes or UUIDs)")
    if most is not None and len(v) > most:
        raise BadValue(v, f"names more than {most} GPUs")
    out = []
    for i, g in enumerate(v):
        try:
            g = parse_gpu(g)
        except BadValue as e:
            raise BadValue(e.value, e.reason, f"[{i}]") from None
        if g in out:
            raise BadValue(g, "is listed twice", f"[{i}]")
        out.append(g)
    return out


#: process ids are below Linux's PID_MAX_LIMIT
PID_LIMIT = 1 << 22


def parse_pid(v: object) -> int:
    """A process id: an int, or its decimal digits, 1 to PID_LIMIT - 1."""
    if isinstance(v, str) and v.isdigit() and v.isascii():
        n: object = int(v)
    else:
        n = v
    if not _is_int(n) or not 0 < n < PID_LIMIT:
        raise BadValue(v, "is not a process id")
    return n


_NAME_FIRST = frozenset("0123456789") | _ALPHA
_NAME_REST = _NAME_FIRST | frozenset("_.-")
PROFILE_MAX = 63


def parse_profile(v: object) -> str:
    """A profile's name (a [profiles.NAME] table of the config file):
    letters and digits, then also _ . -; at most PROFILE_MAX characters."""
    if not isinstance(v, str) or not 0 < len(v) <= PROFILE_MAX or v[0] not in _NAME_FIRST \
            or not all(c in _NAME_REST for c in v):
        raise BadValue(v, f"is not a profile name (letters, digits, _ . -; up to {PROFILE_MAX})")
    return v


#: labels a slice may carry; the longest key and value
LABELS_MAX = 64
LABEL_MAX = 253


def _label_key_ok(k: object) -> bool:
    return isinstance(k, str) and 0 < len(k) <= LABEL_MAX


def _label_value_ok(x: object) -> bool:
    return isinstance(x, str) and len(x) <= LABEL_MAX


_BAD_LABEL_KEY = f"is not a label key (1 to {LABEL_MAX} characters)"
_BAD_LABEL_VALUE = f"is not a label value (a string of at most {LABEL_MAX} characters)"


def parse_label(v: str) -> tuple[str, str]:
    """One label as vgpuctl takes it: "KEY=VALUE" -> (KEY, VALUE); the key
    is stripped of blanks."""
    k, sep, x = v.partition("=") if isinstance(v, str) else ("", "", "")
    if not sep or not k.strip():
        raise BadValue(v, "is not a label (use KEY=VALUE)")
    if not _label_key_ok(k.strip()):
        raise BadValue(v, f"has a key that {_BAD_LABEL_KEY}")
    if not _label_value_ok(x):
        raise BadValue(v, f"has a value that {_BAD_LABEL_VALUE}")
    return k.strip(), x


def parse_labels(v: object) -> dict[str, str]:
    """A slice's labels as the API takes them: an object of at most
    LABELS_MAX string values."""
    if not isinstance(v, dict) or len(v) > LABELS_MAX:
        raise BadValue(v, f"is not an object of at most {LABELS_MAX} string labels")
    for k, x in v.items():
        if not _label_key_ok(k):
            raise BadValue(k, _BAD_LABEL_KEY, f".{k}")
        if not _label_value_ok(x):
            raise BadValue(x, _BAD_LABEL_VALUE, f".{k}")
    return dict(v)


def parse_bool(v: object) -> bool:
    """true or false, as JSON and TOML write them (nothing else counts)."""
    if not isinstance(v, bool):
        raise BadValue(v, "is not true or false")
    return v


def parse_flag(v: object) -> bool:
    """"true" or "false" as an annotation or a variable writes them (a
    string; vgpu.io/rdma, VGPU_RDMA), or a JSON boolean; nothing else
    counts ("yes", "1", "True" are refused, not guessed at)."""
    if isinstance(v, bool):
        return v
    if v == "true":
        return True
    if v == "false":
        return False
    raise BadValue(v, "is not true or false")
