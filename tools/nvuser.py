"""NVIDIA's own user-space libraries of 535.261.03 (libcuda, NVML,
nvidia-smi, the PTX JIT libcuda loads) for the test bed: fetched from
Debian's non-free component by `make deps`, unpacked into a cache, never
installed into the machine's system and never committed.

    python3 -m tools.nvuser fetch    # `make deps` (idempotent: a second run only checks)
    python3 -m tools.nvuser check    # exit 1, saying why, unless fetched

Layout: $VGPU_CACHE/nvidia-userspace/535.261.03/ (VGPU_CACHE defaults to
/var/cache/vgpu) is the union of `dpkg-deb -x` of the four packages, so
the libraries lie in usr/lib/x86_64-linux-gnu/nvidia/current/ and
nvidia-smi is usr/lib/nvidia/current/nvidia-smi.  apt's lists and the
downloaded .debs are kept beside it, in $VGPU_CACHE/nvidia-userspace/apt/,
with apt pointed there by -o options: /etc/apt is not read for sources
and not written.  bookworm-security carries newer releases of the same
packages (535.309.01 at the time of writing); the versions are pinned, and
each .deb's own control fields are checked before it is unpacked.

Tests locate the files with libdir() and smi(), or require() to fail with
the reason when `make deps` has not fetched them (the VM sees the cache at
the same path: tools/vm/vm.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

RELEASE = "535.261.03"
DEB_VERSION = f"{RELEASE}-1"
PACKAGES = ("libcuda1", "libnvidia-ml1", "nvidia-smi", "libnvidia-ptxjitcompiler1")
SUITE = "bookworm"
SOURCES = ("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
           f"http://deb.debian.org/debian {SUITE} non-free\n")
LIB_SUBDIR = Path("usr/lib/x86_64-linux-gnu/nvidia/current")
SMI = Path("usr/lib/nvidia/current/nvidia-smi")
# What a complete unpack holds (a stamp is written only after all are there).
EXPECTED = (LIB_SUBDIR / f"libcuda.so.{RELEASE}", LIB_SUBDIR / "libcuda.so.1",
            LIB_SUBDIR / f"libnvidia-ml.so.{RELEASE}", LIB_SUBDIR / "libnvidia-ml.so.1",
            LIB_SUBDIR / f"libnvidia-ptxjitcompiler.so.{RELEASE}",
            LIB_SUBDIR / "libnvidia-ptxjitcompiler.so.1", SMI)
STAMP = ".vgpu-fetched"


def cache() -> Path:
    return Path(os.environ.get("VGPU_CACHE") or "/var/cache/vgpu") / "nvidia-userspace"


def root(release: str = RELEASE) -> Path:
    return cache() / release


def _stamp_text() -> str:
    return "".join(f"{p}={DEB_VERSION}\n" for p in PACKAGES)


def missing(release: str = RELEASE) -> str | None:
    """Why the release's user space is not usable here, or None."""
    r = root(release)
    if not r.is_dir():
        return f"{r} does not exist"
    absent = [str(f) for f in EXPECTED if not (r / f).exists()]
    if absent:
        return f"{r} lacks {', '.join(absent)}"
    return None


def require(release: str = RELEASE) -> Path:
    """The unpacked root; raises FileNotFoundError saying what to run."""
    why = missing(release)
    if why:
        raise FileNotFoundError(f"NVIDIA {release} user space not fetched ({why}): "
                                "run `make deps` (python3 -m tools.nvuser fetch)")
    return root(release)


def libdir(release: str = RELEASE) -> Path:
    """The directory to put in LD_LIBRARY_PATH (libcuda.so.1, libnvidia-ml.so.1)."""
    return require(release) / LIB_SUBDIR


def smi(release: str = RELEASE) -> Path:
    return require(release) / SMI


def env(release: str = RELEASE, base: dict | None = None) -> dict:
    """An environment in which libcuda and NVML load from the cache."""
    e = dict(os.environ if base is None else base)
    d = str(libdir(release))
    e["LD_LIBRARY_PATH"] = d + (":" + e["LD_LIBRARY_PATH"] if e.get("LD_LIBRARY_PATH") else "")
    return e


def _apt_opts(apt: Path) -> list[str]:
    return ["-o", f"Dir::Etc::SourceList={apt / 'etc' / 'sources.list'}",
            "-o", "Dir::Etc::SourceParts=/dev/null",
            "-o", f"Dir::State::Lists={apt / 'lists'}",
            "-o", f"Dir::Cache={apt / 'cache'}",
            "-q"]


def _deb_field(deb: Path, field: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), field], check=True,
                          capture_output=True, text=True).stdout.strip()


def fetch(quiet: bool = False) -> Path:
    """Fetch and unpack the pinned packages unless the stamp says they are
    there; return the unpacked root."""
    out = root()
    stamp = out / STAMP
    if stamp.is_file() and stamp.read_text() == _stamp_text() and missing() is None:
        if not quiet:
            print(f"deps: NVIDIA {RELEASE} user space present ({out})")
        return out
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            sys.exit(f"deps: {tool} not found: the test bed is Debian 12 (README.md)")
    apt = cache() / "apt"
    for d in ("etc", "lists/partial", "cache/archives/partial"):
        (apt / d).mkdir(parents=True, exist_ok=True)
    (apt / "etc" / "sources.list").write_text(SOURCES)
    opts = _apt_opts(apt)
    if not quiet:
        print(f"deps: fetching NVIDIA {RELEASE} user space from Debian {SUITE} non-free")
    subprocess.run(["apt-get", *opts, "update"], check=True,
                   stdout=subprocess.DEVNULL if quiet else None)
    debs = apt / "debs"
    debs.mkdir(exist_ok=True)
    # apt-get download writes into the current directory; as root it hands the
    # download to the _apt user, which must be able to write there.
    os.chmod(debs, 0o777)
    subprocess.run(["apt-get", *opts, "download", *(f"{p}={DEB_VERSION}" for p in PACKAGES)],
                   check=True, cwd=debs, stdout=subprocess.DEVNULL if quiet else None)
    os.chmod(debs, 0o755)
    files = {}
    for p in PACKAGES:
        found = sorted(debs.glob(f"{p}_*.deb"))
        got = [d for d in found if _deb_field(d, "Package") == p
               and _deb_field(d, "Version") == DEB_VERSION]
        if not got:
            sys.exit(f"deps: no {p} {DEB_VERSION} among {[d.name for d in found]}")
        files[p] = got[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    # Unpack beside the target and rename into place, so an interrupted run
    # leaves no half tree behind the stamp.
    tmp = Path(tempfile.mkdtemp(prefix=f".{RELEASE}-", dir=out.parent))
    try:
        for p in PACKAGES:
            subprocess.run(["dpkg-deb", "-x", str(files[p]), str(tmp)], check=True)
        absent = [str(f) for f in EXPECTED if not (tmp / f).exists()]
        if absent:
            sys.exit(f"deps: the packages lack {', '.join(absent)}")
        (tmp / STAMP).write_text(_stamp_text())
        os.chmod(tmp, 0o755)
        if out.exists():
            old = out.with_name(f".{RELEASE}-old")
            if old.exists():
                shutil.rmtree(old)
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old)
        else:
            tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    if not quiet:
        print(f"deps: NVIDIA {RELEASE} user space in {out}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m tools.nvuser", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("fetch", "check"))
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    if a.what == "check":
        why = missing()
        if why:
            print(f"NVIDIA {RELEASE} user space not fetched: {why} (run `make deps`)",
                  file=sys.stderr)
            return 1
        print(root())
        return 0
    try:
        fetch(a.quiet)
    except subprocess.CalledProcessError as e:
        print(f"deps: {' '.join(map(str, e.cmd[:2]))} failed ({e.returncode})", file=sys.stderr)
        return 1
    except PermissionError as e:
        print(f"deps: {e}: run 'make deps' as root (or set VGPU_CACHE to a directory of yours)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
