"""Values operators type: sizes, percentages, durations, clock times.

Shared by the config file (vgpu.daemon.config), the admin API (vgpu.daemon.api) and vgpuctl
(vgpu.cli.ctl).  Standard library only, and cheap to import: vgpuctl and the OCI
hook import it on every start.

Every parser raises ValueError whose message quotes the bad value, in the
form "<repr of value> <reason>", so that callers can prefix a file and key:
``profiles.small.memory: "4GB" is not a size (...)``.
"""

from __future__ import annotations

import math

__all__ = [
    "parse_size",
    "format_size",
    "parse_percent",
    "format_percent",
    "parse_duration",
    "format_duration",
    "parse_clock",
    "quote",
]

_BINARY = {
    "": 1,
    "b": 1,
    "k": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tib": 1 << 40,
}
# Decimal units we refuse on purpose: "4GB" is ambiguous (4e9 or 4 GiB?).
_DECIMAL = {"kb": "KiB", "mb": "MiB", "gb": "GiB", "tb": "TiB",
            "pb": "PiB", "p": "PiB", "pib": "PiB"}

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


def quote(v: object) -> str:
    """Quote a bad value for an error message: strings in double quotes
    (JSON-style), everything else as its repr."""
    if isinstance(v, str):
        s = v.replace("\\", "\\\\").replace('"', '\\"')
        s = "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)
        if len(s) > 80:
            s = s[:77] + "..."
        return f'"{s}"'
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def parse_size(v: str | int) -> int:
    """Bytes from an int or a string: "4096", "8GiB", "512MiB", "1.5GiB",
    "4 g".  Suffixes KiB/MiB/GiB/TiB and K/M/G/T (and B) are binary and
    case-insensitive.  Fractions must come out as a whole number of bytes.
    Refuses negatives, bools, floats, decimal units ("4GB") and garbage."""
    if isinstance(v, bool):
        raise ValueError(f"{quote(v)} is not a size (use e.g. 4GiB, 512MiB or bytes)")
    if isinstance(v, int):
        if v < 0:
            raise ValueError(f"{quote(v)} is negative (a size is 0 or more bytes)")
        if v > SIZE_MAX:
            raise ValueError(f"{quote(v)} is too large")
        return v
    if not isinstance(v, str):
        raise ValueError(f"{quote(v)} is not a size (use e.g. 4GiB, 512MiB or bytes)")
    s = v.strip()
    if s.startswith("-"):
        raise ValueError(f"{quote(v)} is negative (a size is 0 or more bytes)")
    parts = _split(s)
    if parts is None:
        raise ValueError(f"{quote(v)} is not a size (use e.g. 4GiB, 512MiB or bytes)")
    num, unit = parts[0], parts[1].lower()
    if unit in _DECIMAL:
        raise ValueError(
            f"{quote(v)} is not a size: decimal units are not accepted "
            f"(use binary units, e.g. {num}{_DECIMAL[unit]})")
    if unit not in _BINARY:
        raise ValueError(f"{quote(v)} is not a size (use e.g. 4GiB, 512MiB or bytes)")
    mult = _BINARY[unit]
    if "." in num:
        # exact arithmetic: "1.5GiB" -> 1610612736, "0.1B" refused
        intpart, _, frac = num.partition(".")
        numer = int(intpart or "0") * 10 ** len(frac) + int(frac or "0")
        denom = 10 ** len(frac)
        total, rem = divmod(numer * mult, denom)
        if rem:
            raise ValueError(f"{quote(v)} is not a whole number of bytes")
    else:
        total = int(num) * mult
    if total > SIZE_MAX:
        raise ValueError(f"{quote(v)} is too large")
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


def parse_percent(v: str | int | float) -> float:
    """A percentage 0..100 from "30%", "30", "12.5%", 30 or 30.0."""
    if isinstance(v, bool):
        raise ValueError(f"{quote(v)} is not a percentage (use e.g. 30%)")
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
            raise ValueError(f"{quote(v)} is not a percentage (use e.g. 30%)")
        x = -float(parts[0]) if neg else float(parts[0])
    else:
        raise ValueError(f"{quote(v)} is not a percentage (use e.g. 30%)")
    if math.isnan(x) or x < 0 or x > 100:
        raise ValueError(f"{quote(v)} is out of range (a percentage is 0 to 100)")
    return x


def format_percent(x: float) -> str:
    """30.0 -> "30%", 12.5 -> "12.5%"."""
    text = f"{x:.2f}".rstrip("0").rstrip(".")
    return f"{text}%"


def parse_duration(v: str | int | float) -> float:
    """Seconds (> 0) from "100ms", "10s", "2m", "1h", "250us" or a plain
    number of seconds."""
    if isinstance(v, bool):
        raise ValueError(f"{quote(v)} is not a duration (use e.g. 100ms, 10s, 2m, 1h)")
    if isinstance(v, (int, float)):
        x = float(v)
    elif isinstance(v, str):
        parts = _split(v)
        if parts is None:
            if v.strip().startswith("-") and _split(v.strip()[1:]) is not None:
                raise ValueError(f"{quote(v)} is not positive (a duration is more than 0)")
            raise ValueError(f"{quote(v)} is not a duration (use e.g. 100ms, 10s, 2m, 1h)")
        unit = parts[1].lower()
        if unit not in _DUR_UNITS:
            raise ValueError(f"{quote(v)} is not a duration (units: ms, s, m, h)")
        x = float(parts[0]) * _DUR_UNITS[unit]
    else:
        raise ValueError(f"{quote(v)} is not a duration (use e.g. 100ms, 10s, 2m, 1h)")
    if math.isnan(x) or math.isinf(x):
        raise ValueError(f"{quote(v)} is not a duration (use e.g. 100ms, 10s, 2m, 1h)")
    if x <= 0:
        raise ValueError(f"{quote(v)} is not positive (a duration is more than 0)")
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


def parse_clock(v: str) -> "datetime.time":
    """A local wall-clock time "HH:MM" (00:00 to 23:59; "24:00" is refused:
    write "00:00")."""
    if not isinstance(v, str):
        raise ValueError(f"{quote(v)} is not a time of day (use HH:MM, e.g. 08:00)")
    hh, colon, mm = v.strip().partition(":")
    if (not colon or not 1 <= len(hh) <= 2 or len(mm) != 2
            or not all(c in _DIGITS for c in hh + mm)):
        raise ValueError(f"{quote(v)} is not a time of day (use HH:MM, e.g. 08:00)")
    h, mi = int(hh), int(mm)
    if h > 23 or mi > 59:
        raise ValueError(f"{quote(v)} is not a time of day (00:00 to 23:59)")
    import datetime   # here, not at the top: vgpuctl never needs it
    return datetime.time(h, mi)
