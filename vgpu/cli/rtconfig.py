"""`vgpuctl runtime configure`: add the vgpu runtime handler to containerd's
config, for containerd 1.x (config version 2) and 2.x (version 3).

Owns: reading containerd's config files (tomllib), deciding what to change
(``plan``: files in, new texts out, no I/O but reads), the TOML text it
adds (a small emitter for the few tables it writes), and writing (``apply``:
a backup once, temp file + rename, mode and owner kept).

Must never: rewrite a table it did not add (it appends tables, and edits in
place only the ``imports`` list, ``default_runtime_name``, the annotation
lists of a handler an older vgpuctl wrote (``older_own``), and with --force
the handler's own tables); write a text it has not re-read with tomllib and
found equal to exactly what it meant; write anything on --dry-run.

Where the handler goes, and why (checked against containerd itself):

- version 2: in place, in the main file.  containerd 1.x merges an imported
  file's ``plugins."io.containerd.grpc.v1.cri"`` by replacing the main
  file's whole section (``containerd --config F config dump`` on 1.6.20:
  a drop-in naming only the vgpu handler drops the main file's
  sandbox_image and runc handler), so a drop-in would wipe the CRI config.
  Also in 1.x a ``runtimes`` table replaces the default one, so a config
  without a runc handler gets containerd's default runc handler written out
  next to ours (else ``default_runtime_name = "runc"`` names nothing).
- version 3: a drop-in (CONFIGDIR/conf.d/vgpu.toml) and an ``imports``
  entry for it in the main file.  containerd 2.x merges imported plugin
  tables key by key (cmd/containerd/server/config/config.go, mergeConfig:
  mergo.Merge with override, since containerd commit a21e379b, v2.0.0;
  lists are replaced), imports after the main file.

Standard library only.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import fnmatch
import glob
import json
import os
import re
import sys
import tomllib

from vgpu.cli.rtdefaults import (DEFAULT_CONFIG, DEFAULT_HANDLER, DEFAULT_RUNTIME_PATH,
                                 DROP_IN_NAME, TOOLKIT_CONFIG)
from vgpu.common import request
from vgpu.common.files import atomic_write
from vgpu.common.values import BadValue

RESTART = "restart containerd to load it: systemctl restart containerd"

#: the pod-level request, key by key: a pod cannot forge the container-scope keys
POD_ANNOTATIONS = request.POD_ANNOTATIONS
#: what the device plugin's Allocate sets per container
CONTAINER_ANNOTATIONS = (request.CONTAINER_PREFIX + "*",)

RUNC_TYPE = "io.containerd.runc.v2"
#: where the CRI plugin's runtime config lives, by config version
CRI = {2: ("plugins", "io.containerd.grpc.v1.cri"),
       3: ("plugins", "io.containerd.cri.v1.runtime")}
VERSIONS_TEXT = "2 (containerd 1.x) and 3 (containerd 2.x)"

_HANDLER_RE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")
_COMMENT = "# The vgpu runtime handler, written by `vgpuctl runtime configure`."


class Refused(Exception):
    """A config vgpuctl will not change: the message says why and what to do."""


# ------------------------------------------------------------ option values
def parse_handler(text: str) -> str:
    """A RuntimeClass handler name: a DNS label (Kubernetes' rule)."""
    if not _HANDLER_RE.match(text):
        raise BadValue(text, "is not a runtime handler name (a DNS label: lowercase letters, "
                           "digits and '-', at most 63)")
    return text


def parse_abs_path(text: str) -> str:
    if not text.startswith("/") or "\0" in text or "\n" in text:
        raise BadValue(text, "is not an absolute path")
    return os.path.normpath(text)


def parse_path(text: str) -> str:
    """A file path, made absolute (containerd resolves imports from its directory)."""
    if not text or "\0" in text or "\n" in text:
        raise BadValue(text, "is not a file path")
    return os.path.abspath(text)


def parse_config_version(text: str) -> int:
    if text not in ("2", "3"):
        raise BadValue(text, f"is not a config version vgpuctl writes ({VERSIONS_TEXT})")
    return int(text)


# ------------------------------------------------------------ TOML out
def _str(s: str) -> str:
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _key(k: str) -> str:
    return k if _BARE_KEY.match(k) else _str(k)


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return _str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")


def _header(path) -> str:
    return "[" + ".".join(_key(p) for p in path) + "]"


def emit_table(path: tuple, table: dict) -> list[str]:
    """``[path]`` with its scalars, then each sub-table as its own header."""
    lines = [_header(path)]
    lines += [f"  {_key(k)} = {_value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for k, v in table.items():
        if isinstance(v, dict):
            lines += [""] + emit_table((*path, k), v)
    return lines


# ------------------------------------------------------------ dict helpers
def _dig(doc, path):
    for p in path:
        if not isinstance(doc, dict) or p not in doc:
            return None
        doc = doc[p]
    return doc


def _put(doc: dict, path, value) -> None:
    for p in path[:-1]:
        doc = doc.setdefault(p, {})
    doc[path[-1]] = value


def _nest(path, value) -> dict:
    out: dict = {}
    _put(out, path, value)
    return out


def _merge_v3(to: dict, frm: dict) -> None:
    """containerd 2.x: tables merged key by key, anything else replaced."""
    for k, v in frm.items():
        if isinstance(v, dict) and isinstance(to.get(k), dict):
            _merge_v3(to[k], v)
        else:
            to[k] = copy.deepcopy(v)


def _merge_v2(to: dict, frm: dict) -> None:
    """containerd 1.x: top-level scalars and tables merged, but each plugin's
    table replaced whole (services/server/config: mergeConfig)."""
    for k, v in frm.items():
        if k == "plugins" and isinstance(v, dict) and isinstance(to.get(k), dict):
            to[k].update(copy.deepcopy(v))
        elif isinstance(v, dict) and isinstance(to.get(k), dict):
            _merge_v3(to[k], v)
        else:
            to[k] = copy.deepcopy(v)


def _differences(have, want, at="") -> list[str]:
    """What of ``want`` ``have`` lacks or has otherwise (keys beyond it are fine)."""
    out = []
    for k, w in want.items():
        name = f"{at}{k}"
        if k not in have:
            out.append(f"{name} is missing (want {_show(w)})")
        elif isinstance(w, dict):
            if isinstance(have[k], dict):
                out += _differences(have[k], w, name + ".")
            else:
                out.append(f"{name} is not a table")
        elif have[k] != w or type(have[k]) is not type(w):
            out.append(f"{name} is {_show(have[k])} (want {_value(w)})")
    return out


def _show(v) -> str:
    try:
        return _value(v)
    except TypeError:
        return "a table" if isinstance(v, dict) else repr(v)


# ------------------------------------------------------------ files in
def parse(text: str, path: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise Refused(f"{path}: cannot parse it as TOML: {e}; nothing changed") from None


def read_text(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Refused(f"{path}: cannot read it: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Refused(f"{path}: not UTF-8 text (byte {e.start}); nothing changed") from None


def _imports_of(path: str, doc: dict, new: tuple = ()) -> list[str]:
    """containerd's resolveImports: relative to the file's directory; a path
    with ``*`` is a glob (``new``: files about to exist, matched too)."""
    imports = doc.get("imports", [])
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise Refused(f"{path}: imports is {_show(imports)}, not a list of paths")
    out = []
    for i in imports:
        p = os.path.normpath(i if os.path.isabs(i) else os.path.join(os.path.dirname(path), i))
        if "*" not in p:
            out.append(p)
            continue
        found = set(glob.glob(p)) | {n for n in new if _glob_match(p, n)}
        out += sorted(found)
    return out


def _glob_match(pattern: str, path: str) -> bool:
    """Go's filepath.Match: ``*`` stays within one path element."""
    a, b = pattern.split("/"), path.split("/")
    return len(a) == len(b) and all(fnmatch.fnmatchcase(y, x) for x, y in zip(a, b))


def effective(main: str, doc: dict, version: int,
              files: dict[str, str | None]) -> tuple[dict, list]:
    """The config containerd loads from ``main`` (parsed ``doc``) and its
    imports, breadth first as LoadConfig does; ``files`` holds texts to use
    instead of the disk's (the ones about to be written).  -> (merged doc,
    [(path, doc)] of each file loaded)."""
    merge = _merge_v2 if version == 2 else _merge_v3
    out: dict = {}
    loaded: list = []
    seen: set = set()
    pending = [(main, doc)]
    while pending:
        path, d = pending.pop(0)
        if path in seen:
            continue
        seen.add(path)
        if d is None:
            text = files[path] if path in files else read_text(path)
            if text is None:
                continue
            d = parse(text, path)
        merge(out, d)
        loaded.append((path, d))
        pending += [(p, None) for p in _imports_of(path, d, tuple(files))]
    return out, loaded


# ------------------------------------------------------------ text edits
def _header_path(line: str):
    """The key path of a table header line, or None: tomllib reads the line."""
    s = line.strip()
    if not s.startswith("["):
        return None
    try:
        d = tomllib.loads(s)
    except tomllib.TOMLDecodeError:
        return None
    path = []
    while isinstance(d, dict) and len(d) == 1:
        k, d = next(iter(d.items()))
        path.append(k)
        if isinstance(d, list):     # [[array of tables]]
            d = d[-1] if d else {}
    return tuple(path) if path and d == {} else None


def _sections(lines: list[str]) -> list[tuple[int, tuple]]:
    return [(i, p) for i, ln in enumerate(lines) if (p := _header_path(ln)) is not None]


def _top_key(lines: list[str], key: str):
    """(start, end) of a top-level ``key = ...`` (before the first table; a
    multi-line array included), or None."""
    first = next((i for i, _ in _sections(lines)), len(lines))
    pat = re.compile(rf"\s*{re.escape(key)}\s*=")
    for i in range(first):
        if pat.match(lines[i]):
            for j in range(i, first):
                try:
                    if key in tomllib.loads("\n".join(lines[i:j + 1])):
                        return i, j + 1
                except tomllib.TOMLDecodeError:
                    continue
    return None


def _set_top_key(text: str, key: str, value, after: str | None = None) -> str:
    lines = text.split("\n")
    span = _top_key(lines, key)
    new = f"{_key(key)} = {_value(value)}"
    if span:
        lines[span[0]:span[1]] = [new]
    else:
        at = _top_key(lines, after) if after else None
        lines.insert(at[1] if at else 0, new)
    return "\n".join(lines)


def _remove_tables(text: str, prefix: tuple) -> str:
    """Drop the sections whose header is ``prefix`` or below it."""
    lines = text.split("\n")
    secs = _sections(lines) + [(len(lines), None)]
    drop = set()
    for (i, p), (j, _) in zip(secs, secs[1:]):
        if p[:len(prefix)] == prefix:
            drop.update(range(i, j))
            if i > 0 and lines[i - 1] == _COMMENT:
                drop.add(i - 1)
    return "\n".join(ln for k, ln in enumerate(lines) if k not in drop)


def _set_in_table(text: str, table: tuple, key: str, value) -> str:
    """``key = value`` in the section ``[table]``: the line replaced, or added
    after the header; the section appended when the file has no header for it."""
    lines = text.split("\n")
    secs = _sections(lines) + [(len(lines), None)]
    pat = re.compile(rf"(\s*){re.escape(key)}\s*=")
    for (i, p), (j, _) in zip(secs, secs[1:]):
        if p == table:
            for k in range(i + 1, j):
                if m := pat.match(lines[k]):
                    lines[k] = f"{m.group(1)}{_key(key)} = {_value(value)}"
                    return "\n".join(lines)
            lines.insert(i + 1, f"  {_key(key)} = {_value(value)}")
            return "\n".join(lines)
    return _append(text, [_header(table), f"  {_key(key)} = {_value(value)}"])


def _append(text: str, block: list[str]) -> str:
    if text and not text.endswith("\n"):
        text += "\n"
    sep = "\n" if text.strip() else ""
    return text + sep + "\n".join(block) + "\n"


# ------------------------------------------------------------ the plan
@dataclasses.dataclass
class Change:
    path: str
    old: str | None      # None: a new file
    new: str


@dataclasses.dataclass
class Plan:
    config: str
    version: int
    method: str          # "in-place" | "drop-in"
    handler: str
    wanted: dict
    changes: list[Change]
    notes: list[str]
    summary: str

    @property
    def changed(self) -> bool:
        return bool(self.changes)


#: what of the handler it clones the vgpu handler keeps: the runc shim's
#: options (all but BinaryName, which is vgpu-runtime) and these handler keys,
#: which say how containerd sets the container up rather than which runtime
#: runs it (containerd's pkg/cri/config Runtime struct)
CLONED_KEYS = ("privileged_without_host_devices",
               "privileged_without_host_devices_all_devices_allowed", "base_runtime_spec",
               "cni_conf_dir", "cni_max_conf_num", "snapshotter", "sandboxer", "io_type")


def cloned_settings(source: dict | None) -> tuple[dict, dict]:
    """-> (handler keys, runc options) the vgpu handler copies from the
    handler ``source`` (the one pods get by default, else runc): only from a
    runc shim (no runtime_type means runc.v2 in both versions), whose options
    vgpu-runtime's runc understands."""
    if not isinstance(source, dict) or source.get("runtime_type", RUNC_TYPE) != RUNC_TYPE:
        return {}, {}
    keys = {k: copy.deepcopy(source[k]) for k in CLONED_KEYS if _plain(source.get(k))}
    opts = source.get("options")
    opts = {k: copy.deepcopy(v) for k, v in opts.items() if k != "BinaryName" and _plain(v)} \
        if isinstance(opts, dict) else {}
    return keys, opts


def _plain(v) -> bool:
    """A value the emitter writes (runc's options are scalars)."""
    scalar = (bool, int, str)
    return isinstance(v, scalar) or (isinstance(v, list) and all(isinstance(x, scalar)
                                                                  for x in v))


def wanted_handler(runtime_path: str, source: dict | None = None) -> dict:
    keys, options = cloned_settings(source)
    options["BinaryName"] = runtime_path
    return {"runtime_type": RUNC_TYPE, **keys, "pod_annotations": list(POD_ANNOTATIONS),
            "container_annotations": list(CONTAINER_ANNOTATIONS), "options": options}


#: the handler's keys whose lists grew with vgpu (a request key added to
#: POD_ANNOTATIONS): what an older vgpuctl wrote lacks the new entries
GROWN_LISTS = ("pod_annotations", "container_annotations")


def older_own(existing: dict, wanted: dict) -> list[str] | None:
    """The keys to bring up to date when ``existing`` is the handler an
    older vgpuctl wrote: it has everything ``wanted`` has but GROWN_LISTS
    as wanted, and each of those is missing or a list of some of the
    wanted entries, in no other order than theirs.  None when it is not
    (another handler of that name, or one edited: --force decides)."""
    rest = {k: v for k, v in wanted.items() if k not in GROWN_LISTS}
    if _differences(existing, rest):
        return None
    keys = []
    for k in GROWN_LISTS:
        have, want = existing.get(k, []), wanted[k]
        if have == want:
            continue
        if not isinstance(have, list) or not all(isinstance(x, str) for x in have) or \
                have != [x for x in want if x in have] or len(set(have)) != len(have):
            return None
        keys.append(k)
    return keys or None


# ------------------------------------------------------------ NVIDIA's toolkit
#: its key, true unless set (the toolkit's getDefaultConfig: AcceptEnvvarUnprivileged)
TOOLKIT_ENVVAR_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"


def toolkit_handlers(runtimes_table) -> list[str]:
    """The handlers `nvidia-ctk runtime configure` writes: a runc shim whose
    BinaryName is nvidia-container-runtime (or its .cdi / .legacy modes)."""
    out = []
    for name, h in (runtimes_table or {}).items():
        b = _dig(h, ("options", "BinaryName"))
        if isinstance(b, str) and os.path.basename(b).startswith("nvidia-container-runtime"):
            out.append(name)
    return sorted(out)


def toolkit_takes_envvar(path: str) -> bool:
    """Whether the toolkit gives an unprivileged container the GPUs its
    NVIDIA_VISIBLE_DEVICES names: its key, else its default (true).  An
    unreadable config counts as the default: the toolkit then runs on it."""
    text = read_text(path)
    try:
        doc = tomllib.loads(text) if text else {}
    except tomllib.TOMLDecodeError:
        return True
    return doc.get(TOOLKIT_ENVVAR_KEY, True) is not False


def _check_tables(doc: dict, path: tuple, where: str) -> None:
    d = doc
    for i, p in enumerate(path):
        if not isinstance(d, dict):
            raise Refused(f"{where}: {'.'.join(path[:i])} is not a table")
        d = d.get(p, {})
    if not isinstance(d, dict):
        raise Refused(f"{where}: {'.'.join(path)} is {_show(d)}, not a table")


def _verify(path: str, text: str, expected: dict) -> None:
    try:
        got = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        got = e
    if got != expected:
        raise Refused(f"{path}: cannot add the tables to this file safely (its layout: inline "
                      f"tables or dotted keys where vgpuctl appends [tables]); add the snippet "
                      f"by hand (deploy/containerd/containerd-config*.toml); nothing changed")


def plan(config: str = DEFAULT_CONFIG, *, handler: str = DEFAULT_HANDLER,
         runtime_path: str = DEFAULT_RUNTIME_PATH, set_default: bool = False,
         force: bool = False, drop_in: str | None = None, in_place: bool = False,
         new_version: int = 2, toolkit_config: str = TOOLKIT_CONFIG) -> Plan:
    """Decide what to write; reads files, writes none.  Raises Refused."""
    notes: list[str] = []
    text = read_text(config)
    doc = parse(text, config) if text is not None else None
    created = not doc          # missing, empty or only comments
    if created:
        version = new_version
        base = (text or "") + ("\n" if text and not text.endswith("\n") else "")
        base += f"version = {version}\n"
        doc = {"version": version}
        notes.append(f"{config} {'does not exist' if text is None else 'is empty'}: containerd "
                     f"runs on its defaults; writing version {version} with the vgpu handler"
                     + (" and containerd's default runc handler (a runtimes table replaces "
                        "the default one in containerd 1.x)" if version == 2 else ""))
    else:
        base = text
        version = doc.get("version", 1)
        if version == 1 or version == 0:
            raise Refused(f"{config}: a version 1 config (no version key, or version = 1): "
                          f"its plugin names differ; convert it first: `containerd --config "
                          f"{config} config dump` prints it as version 2 (containerd 1.x), "
                          f"`containerd config migrate` as version 3 (2.x); nothing changed")
        if type(version) is not int or version not in CRI:
            raise Refused(f"{config}: unknown config version {_show(version)}: vgpuctl knows "
                          f"{VERSIONS_TEXT}; nothing changed")
    cri = CRI[version]
    ctd = (*cri, "containerd")
    runtimes = (*ctd, "runtimes")
    hpath = (*runtimes, handler)
    for p in (runtimes, hpath, (*hpath, "options")):
        _check_tables(doc, p, config)

    use_drop_in = version == 3 and not in_place and not created
    dropin = os.path.normpath(drop_in or os.path.join(os.path.dirname(os.path.abspath(config)),
                                                      DROP_IN_NAME))
    eff, loaded = effective(config, doc, version, {})
    if version == 2 and len(loaded) > 1:
        for path, d in loaded[1:]:
            if _dig(d, cri) is not None:
                raise Refused(f"{path} (imported by {config}) sets {'.'.join(cri)}, which "
                              f"containerd 1.x puts in place of the main file's whole section: "
                              f"configure that file instead (--config {path}); nothing changed")
    default_name = _dig(eff, (*ctd, "default_runtime_name")) or "runc"
    # Set up as the handler pods get by default (not our own, after
    # --set-default), else as runc
    source = default_name if default_name != handler else "runc"
    if not any(cloned_settings(_dig(eff, (*runtimes, source)))) and source != "runc":
        source = "runc"
    wanted = wanted_handler(runtime_path, _dig(eff, (*runtimes, source)))
    toolkit = toolkit_handlers(_dig(eff, runtimes))
    if set_default and default_name not in ("runc", handler) and not force:
        raise Refused(f'containerd\'s default runtime in {config} is "{default_name}"'
                      + (" (NVIDIA Container Toolkit's)" if default_name in toolkit else "")
                      + f': --set-default moves every pod that names no runtimeClassName '
                      f'from it to "{handler}"'
                      + (", where pods that asked the toolkit for GPUs get none"
                         if default_name in toolkit else "")
                      + "; --force replaces it; nothing changed")
    if set_default and default_name not in ("runc", handler):
        notes.append(f'--force: replacing the default runtime "{default_name}" with '
                     f'"{handler}"')
    if toolkit and toolkit_takes_envvar(toolkit_config):
        notes.append(f"NVIDIA Container Toolkit's runtime handler{'s' * (len(toolkit) > 1)} "
                     f"{', '.join(toolkit)} "
                     + ("(the default runtime) " if default_name in toolkit else "")
                     + f"give{'s' * (len(toolkit) == 1)} an unprivileged container every GPU its "
                     f"NVIDIA_VISIBLE_DEVICES names (CUDA images set it to all): the host's "
                     f"real /dev/nvidia*, outside any slice.  Set {TOOLKIT_ENVVAR_KEY} = false in "
                     f"{toolkit_config} (docs/containers.md, Beside NVIDIA's Container Toolkit)")
    existing = _dig(eff, hpath)
    diffs = _differences(existing, wanted) if isinstance(existing, dict) else None
    want_default = set_default and _dig(eff, (*ctd, "default_runtime_name")) != handler
    where = [p for p, d in loaded if _dig(d, hpath) is not None]

    def result(method, changes, summary):
        return Plan(config, version, method, handler, wanted, changes, notes, summary)

    if diffs == [] and not want_default:
        return result("drop-in" if use_drop_in and dropin in where else "in-place", [],
                      f'the "{handler}" runtime handler is already there as wanted '
                      f'({", ".join(where)}); nothing changed')
    # an older vgpuctl's handler, in the one file this run writes: its lists
    # brought up to date, nothing else of it touched
    upgrade = older_own(existing, wanted) if diffs and not force else None
    if upgrade and where != [dropin if use_drop_in else config]:
        upgrade = None
    if diffs and not force and not upgrade:
        raise Refused(f'a different "{handler}" runtime handler is already in '
                      f'{", ".join(where)}: {"; ".join(diffs)}; --force replaces it '
                      f'(keys vgpuctl does not set are lost); nothing changed')
    if upgrade:
        added = [x for k in upgrade for x in wanted[k] if x not in (existing.get(k) or [])]
        notes.append(f'the "{handler}" runtime handler in {where[0]} is an older vgpuctl\'s: '
                     f'adding {", ".join(added)} to its {" and ".join(upgrade)}')

    if not use_drop_in:
        new = base
        expected = copy.deepcopy(doc)
        if upgrade:
            for k in upgrade:
                new = _set_in_table(new, hpath, k, wanted[k])
                _put(expected, (*hpath, k), wanted[k])
        elif diffs:
            new = _remove_tables(new, hpath)
            _dig(expected, runtimes).pop(handler, None)
        if want_default:
            new = _set_in_table(new, ctd, "default_runtime_name", handler)
            _put(expected, (*ctd, "default_runtime_name"), handler)
        block = [_COMMENT]
        if version == 2 and default_name == "runc" and _dig(eff, (*runtimes, "runc")) is None:
            block += emit_table((*runtimes, "runc"), {"runtime_type": RUNC_TYPE}) + [""]
            _put(expected, (*runtimes, "runc"), {"runtime_type": RUNC_TYPE})
            if not created:
                notes.append(f"{config} has no runc handler: writing containerd's default one "
                             f"too (in containerd 1.x a runtimes table replaces the default)")
        if not upgrade:
            block += emit_table(hpath, wanted)
            _put(expected, hpath, wanted)
        if len(block) > 1:
            new = _append(new, block)
        _verify(config, new, expected)
        changes = [Change(config, text, new)]
        what = (f"{config}: {'updated' if upgrade else 'replaced' if diffs else 'added'} the "
                f"\"{handler}\" runtime handler")
    else:
        old_drop = read_text(dropin)
        content = {}
        if want_default:
            _put(content, (*ctd, "default_runtime_name"), handler)
        _put(content, hpath, wanted)
        lines = [_COMMENT, f"# Imported by {config}; run it again rather than edit this file.",
                 "version = 3", ""]
        if want_default:
            lines += emit_table(ctd, {"default_runtime_name": handler}) + [""]
        lines += emit_table(hpath, wanted)
        new_drop = "\n".join(lines) + "\n"
        _verify(dropin, new_drop, {"version": 3, **content})
        changes = []
        if new_drop != old_drop:
            changes.append(Change(dropin, old_drop, new_drop))
        if dropin not in _imports_of(config, doc, (dropin,)):
            imports = [*doc.get("imports", []), dropin]
            new_main = _set_top_key(base, "imports", imports, after="version")
            _verify(config, new_main, {**doc, "imports": imports})
            # after the drop-in: an import of a missing file stops containerd 2.x
            changes.append(Change(config, text, new_main))
        what = (f"{dropin}: {'updated' if upgrade else 'replaced' if diffs else 'added'} the "
                f"\"{handler}\" runtime handler")
        if changes and changes[-1].path == config:
            notes.append(f"{config}: adding {dropin} to its imports")
    # what containerd will see: the files as they are about to be
    after = {c.path: c.new for c in changes}
    new_doc = parse(after[config], config) if config in after else doc
    eff2, _ = effective(config, new_doc, version, after)
    if _differences(_dig(eff2, hpath) or {}, wanted) or (
            set_default and _dig(eff2, (*ctd, "default_runtime_name")) != handler):
        raise Refused(f"{config}: an imported file would still override the \"{handler}\" "
                      f"handler vgpuctl writes ({', '.join(where) or 'imports'}); "
                      f"nothing changed")
    how = (f"as a drop-in (config version {version})" if use_drop_in
           else f"in place (config version {version})")
    keys, opts = cloned_settings(_dig(eff, (*runtimes, source)))
    copied = [f"{k} = {_value(v)}" for k, v in {**opts, **keys}.items()]
    extra = f", {', '.join(copied)} as the {source} handler" if copied else ""
    if want_default:
        extra += f", default_runtime_name = \"{handler}\""
    return result("drop-in" if use_drop_in else "in-place", changes,
                  f"{what} {how}: BinaryName {runtime_path}{extra}")


# ------------------------------------------------------------ files out
def backup_path(path: str) -> str:
    return path + ".vgpu-backup"


def write_atomic(path: str, text: str, like: str | None) -> None:
    """Temp file in the same directory, fsync, rename over ``path``; mode and
    owner of ``like`` (the file replaced), else 0644."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
    atomic_write(path, text, mode=0o644, like=like or None)


def apply(p: Plan) -> list[str]:
    """Write the plan's files (symlinks followed: their target is replaced).
    An existing file gets PATH.vgpu-backup first, once: the file as it was
    before vgpuctl first changed it.  -> the backups made now."""
    made = []
    for c in p.changes:
        target = os.path.realpath(c.path)
        try:
            if c.old is not None:
                b = backup_path(target)
                if not os.path.exists(b):
                    write_atomic(b, c.old, target)
                    made.append(b)
            write_atomic(target, c.new, target if c.old is not None else None)
        except OSError as e:
            raise Refused(f"{e.filename or c.path}: cannot write it: {e.strerror or e}"
                          + (f" (written before: {', '.join(made)})" if made else "")) from None
    return made


def diff(p: Plan) -> str:
    out = []
    for c in p.changes:
        out += difflib.unified_diff((c.old or "").splitlines(True), c.new.splitlines(True),
                                    c.path if c.old is not None else "/dev/null", c.path)
    return "".join(out)


# ------------------------------------------------------------ the command
def run(o: dict, out=None) -> int:
    """`vgpuctl runtime configure` with ctl's parsed options ``o``.  Raises
    Refused (exit 1 for the caller)."""
    out = out or sys.stdout
    config = o.get("config") or DEFAULT_CONFIG
    p = plan(config, handler=o.get("handler") or DEFAULT_HANDLER,
             runtime_path=o.get("runtime_path") or DEFAULT_RUNTIME_PATH,
             set_default=bool(o.get("set_default")), force=bool(o.get("force")),
             drop_in=o.get("drop_in"), in_place=bool(o.get("in_place")),
             new_version=o.get("config_version") or 2,
             toolkit_config=o.get("toolkit_config") or TOOLKIT_CONFIG)
    if p.version == 2 and o.get("drop_in"):
        p.notes.append("--drop-in is for version 3 configs only: ignored")
    rp = p.wanted["options"]["BinaryName"]
    if not os.access(rp, os.X_OK):
        p.notes.append(f"{rp} is not an executable file yet (make install puts vgpu-runtime "
                       f"there; --runtime-path names another)")
    dry = bool(o.get("dry_run"))
    backups = [] if dry else apply(p)
    if o.get("json"):
        out.write(json.dumps({
            "config": p.config, "version": p.version, "method": p.method, "handler": p.handler,
            "changed": p.changed, "dry_run": dry,
            "files": [{"path": c.path, "action": "create" if c.old is None else "update"}
                      for c in p.changes],
            "backups": backups, "runtime": p.wanted, "notes": p.notes, "summary": p.summary,
            "diff": diff(p) if dry else None,
        }, indent=2) + "\n")
        return 0
    for n in p.notes:
        out.write(f"note: {n}\n")
    if dry and p.changed:
        out.write(diff(p))
        out.write(f"dry run: {p.summary}; nothing written\n")
        return 0
    out.write(p.summary + "\n")
    for b in backups:
        out.write(f"backup of the original: {b}\n")
    if p.changed and not dry:
        out.write(RESTART + "\n")
    return 0
