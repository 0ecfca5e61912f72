"""JSON on a container's start path: json.loads and json.dumps (compact)
without importing the json package.

vgpu-runtime's slow path and the OCI hook each read JSON (the bundle's
config.json, the runtime's state, vgpud's replies) and write some, once per
container start.  ``import json`` costs about 8 ms of each: json.decoder
and json.encoder compile regular expressions at import (re, and with it
enum, functools, collections), more than the rest of the hook's own
modules together (bench/README.md, "container_start.py").  The parsing and
the encoding are done by the json package's C accelerator, ``_json``, which
imports nothing; this module drives it as json.JSONDecoder and
json.JSONEncoder do (CPython's Lib/json/decoder.py and encoder.py), with
their defaults, so the same bytes parse to the same values and the same
values encode to the same text (tests/host/test_fastjson.py compares both on
hostile inputs).  Where ``_json`` is missing or does not take the arguments
(another Python implementation, a later CPython), the json package is used.

The only differences: ``loads`` of ``bytes`` decodes UTF-8 only (RFC 8259
for JSON exchanged between systems; json.loads also guesses UTF-16 and -32),
and a parse error is a ValueError (json.JSONDecodeError where it is inside
a value: the C scanner raises json's own, so on that path, malformed JSON
only, the json package is imported after all)."""
from __future__ import annotations

__all__ = ["loads", "dumps"]

_WS = " \t\n\r"
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


def _no_default(o: object):
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


class _Context:
    """What _json.make_scanner reads from a JSONDecoder: json.loads' defaults."""
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


def _with_json(s: str):
    """json.loads(s), the json package imported now: loads' error path."""
    return __import__("json").loads(s)


def _skip_ws(s: str, i: int) -> int:
    n = len(s)
    while i < n and s[i] in _WS:
        i += 1
    return i


try:
    import _json

    _scan_once = _json.make_scanner(_Context())
    # json.JSONEncoder(separators=(",", ":")) with its other defaults:
    # check_circular (markers), ensure_ascii, allow_nan, no sort, no skip
    _tail = (None, ":", ",", False, False, True)
    _encoders = {True: (_no_default, _json.encode_basestring_ascii, *_tail),
                 False: (_no_default, _json.encode_basestring, *_tail)}
    _json.make_encoder({}, *_encoders[True])({"a": [1, 2.5, None, True, "\u00e9"]}, 0)
except (ImportError, AttributeError, TypeError):       # pragma: no cover
    _json = None

if _json is None:                                       # pragma: no cover
    import json as _std

    def loads(s: str | bytes | bytearray):
        if isinstance(s, (bytes, bytearray)):
            s = bytes(s).decode("utf-8")
        return _std.loads(s)

    def dumps(obj: object, ensure_ascii: bool = True) -> str:
        return _std.dumps(obj, separators=(",", ":"), ensure_ascii=ensure_ascii)
else:
    def loads(s: str | bytes | bytearray):
        """json.loads(s) for one JSON text (whitespace around it allowed)."""
        if isinstance(s, (bytes, bytearray)):
            s = bytes(s).decode("utf-8")
        elif not isinstance(s, str):
            raise TypeError(f"the JSON object must be str or bytes, not {type(s).__name__}")
        if s.startswith("\ufeff"):
            raise ValueError("Unexpected UTF-8 BOM (decode using utf-8-sig)")
        i = _skip_ws(s, 0)
        try:
            obj, end = _scan_once(s, i)
        except StopIteration as e:
            raise ValueError(f"Expecting value: char {e.value}") from None
        except SystemError:
            # The scanner raises a parse error inside a value as
            # json.decoder.JSONDecodeError, which it looks up in sys.modules
            # without importing it: with json.decoder not loaded it fails
            # with no exception set.  Only malformed JSON gets here; json
            # itself says what is wrong (the same scanner).
            return _with_json(s)
        end = _skip_ws(s, end)
        if end != len(s):
            raise ValueError(f"Extra data: char {end}")
        return obj

    def dumps(obj: object, ensure_ascii: bool = True) -> str:
        """json.dumps(obj, separators=(",", ":"), ensure_ascii=ensure_ascii)."""
        # a fresh markers dict per call: it detects circular references
        return "".join(_json.make_encoder({}, *_encoders[bool(ensure_ascii)])(obj, 0))
