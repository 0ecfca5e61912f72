"""Ask gcc for sizes and macro values: write a C program, compile, run, parse.

Every number nvgen publishes about a layout comes from here, never from
arithmetic on header text.  One program per header set measures everything
at once (one compile costs about as much as a hundred), with one printf per
line; when gcc rejects some lines, the items on those lines are set aside with
gcc's reason and the rest is compiled again.  So a struct that a release does
not define, or cannot compile, is reported as unknown instead of failing the
release.  An error that cannot be pinned to a line (a broken header) fails
every item of the program, with that error as the reason.
"""

from __future__ import annotations

import platform
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

_DIAG = re.compile(r"^(.*?):(\d+):\d+: (fatal error|error|note): (.*)$")
_QUOTES = str.maketrans("\u2018\u2019", "''")
_COLUMN = re.compile(r"^(.*?:\d+):\d+:")
_SUGGESTION = re.compile(r"; did you mean '[^']*'\?")


@dataclass
class HeaderSet:
    """What a probe program includes and where the compiler looks for it."""
    headers: list[str]
    include: list[Path]
    include_after: list[Path] = field(default_factory=list)
    defines: list[str] = field(default_factory=list)

    def flags(self) -> list[str]:
        return ([f"-D{d}" for d in self.defines] + [f"-I{p}" for p in self.include]
                + [f"-idirafter{p}" for p in self.include_after])


@dataclass
class Result:
    sizes: dict[str, int]
    values: dict[str, int]
    failed: dict[tuple[str, str], str]   # (kind, name) -> gcc's reason


def _program(hset: HeaderSet, items: list[tuple[str, str]]) -> tuple[str, dict[int, tuple[str, str]]]:
    lines = ["#include <stdio.h>"] + [f'#include "{h}"' for h in hset.headers]
    lines += ["int main(void)", "{"]
    where = {}
    for kind, name in items:
        where[len(lines) + 1] = (kind, name)
        if kind == "sizeof":
            lines.append(f'    printf("sizeof %s %zu\\n", "{name}", sizeof({name}));')
        else:
            lines.append(f'    printf("value %s %llu\\n", "{name}", (unsigned long long)({name}));')
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n", where


def _reason(message: str, anchors: list[Path]) -> str:
    """gcc's message without what varies between runs and gcc versions:
    scratch paths (header paths are shown relative to their release),
    columns, typographic quotes and spelling suggestions."""
    message = _SUGGESTION.sub("", _COLUMN.sub(r"\1:", message.translate(_QUOTES)))
    for anchor in anchors:
        message = message.replace(f"{anchor}/", "")
    return message


def _blame(stderr: str, src: Path, where: dict, anchors: list[Path]):
    """Map gcc's errors to probe items.  An error inside a header counts
    against the probe line whose macro expansion led there ("note: in
    expansion of macro"); one that no probe line leads to is fatal."""
    bad, fatal, pending = {}, None, None
    for line in stderr.splitlines():
        m = _DIAG.match(line)
        if not m:
            continue
        path, lineno, kind, message = m.groups()
        item = where.get(int(lineno)) if path == str(src) else None
        if kind == "note":
            if pending and item:
                bad.setdefault(item, pending)
                pending = None
            continue
        fatal = fatal or pending
        pending = None
        if item:
            bad.setdefault(item, _reason(message, anchors))
        else:
            pending = _reason(line, anchors)
    return bad, fatal or pending


def measure(hset: HeaderSet, sizes: set[str], values: set[str], workdir: Path,
            anchors: list[Path]) -> Result:
    """sizeof every type in sizes and the integer value of every macro in
    values, compiled for and run on this x86_64 host.  Failure reasons show
    paths under workdir or an anchor relative to it."""
    if platform.machine() != "x86_64":
        raise RuntimeError("nvgen measures x86_64 layouts and must run on an x86_64 host")
    workdir.mkdir(parents=True, exist_ok=True)
    src, exe = workdir / "probe.c", workdir / "probe"
    items = sorted({("sizeof", n) for n in sizes} | {("value", n) for n in values})
    failed: dict[tuple[str, str], str] = {}
    while items:
        text, where = _program(hset, items)
        src.write_text(text)
        cc = subprocess.run(["gcc", "-w", "-O0", "-o", str(exe), str(src), *hset.flags()],
                            capture_output=True, text=True)
        if cc.returncode == 0:
            break
        bad, fatal = _blame(cc.stderr, src, where, [workdir, *anchors])
        if not bad:
            reason = fatal or _reason(cc.stderr.strip().splitlines()[-1], [workdir, *anchors])
            failed.update({item: reason for item in items})
            items = []
            break
        failed.update(bad)
        items = [i for i in items if i not in bad]

    result = Result({}, {}, failed)
    if items:
        run = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
        for line in run.stdout.splitlines():
            kind, name, number = line.split(" ")
            (result.sizes if kind == "sizeof" else result.values)[name] = int(number)
    return result
