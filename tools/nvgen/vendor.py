"""Unpack the vendor archives that nvgen reads, and only those parts of them.

The headers archive holds one directory per release; every file in it is a
header, so it is unpacked whole.  Of the 595.45.04 source tree nvgen needs a
handful of files (the ioctl size tables, the resource list, the generated
control export tables, UVM's uvm_types.h), so that archive is streamed and
only those members are written: the rest of the tree never touches the disk.
Everything goes under a scratch directory the caller owns; nothing here
writes into the repository.

Optionally (--nvidia-git), a clone of NVIDIA/open-gpu-kernel-modules with
its release tags gives the UVM type headers the headers archive lacks
(from_git): only the named files of the tag named after the release are
read, with git, and written under the scratch directory.
"""

from __future__ import annotations

import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

HEADERS_ARCHIVE = "nvidia-abi-headers-535-595.tar.xz"
TREE_ARCHIVE = "open-gpu-kernel-modules-595.45.04.tar.xz"
TREE_RELEASE = "595.45.04"
# Releases the headers archive lacks, each read from its own whole tree
# (open-gpu-kernel-modules-<release>.tar.xz): 535.261.03, the release whose
# user space Debian ships.  Of such a tree only what the headers archive
# carries for a release is unpacked as its header root (RELEASE_HEADER_DIRS,
# RELEASE_HEADER_FILES: the same 556 files the archive has for 535.288.01),
# its UVM type headers apart, as a tag of --nvidia-git would give them, and
# the RM files whose facts are the release's own (its control export tables
# and control.h, TREE_GENERATED and RELEASE_RM_FILES) apart again.
RELEASE_TREES = ("535.261.03",)
RELEASE_HEADER_DIRS = ("src/common/sdk/nvidia/inc/", "src/nvidia/arch/nvalloc/unix/include/",
                       "kernel-open/common/inc/")
RELEASE_HEADER_FILES = ("kernel-open/nvidia-uvm/uvm_ioctl.h",
                        "kernel-open/nvidia-uvm/uvm_linux_ioctl.h")
RELEASE_UVM_TYPES = ("kernel-open/nvidia-uvm/uvm_types.h",
                     "kernel-open/common/inc/nv_uvm_user_types.h")
RELEASE_RM_FILES = ("src/nvidia/inc/kernel/rmapi/control.h",)


def tree_archive(release: str) -> str:
    return f"open-gpu-kernel-modules-{release}.tar.xz"

# Files of the source tree that nvgen parses (see rmsrc.py for what each gives).
TREE_FILES = (
    "kernel-open/nvidia/nv.c",
    "src/nvidia/arch/nvalloc/unix/src/osapi.c",
    "src/nvidia/arch/nvalloc/unix/src/escape.c",
    "src/nvidia/src/kernel/rmapi/resource_list.h",
    "src/nvidia/inc/kernel/rmapi/control.h",
    "kernel-open/nvidia-uvm/uvm_types.h",
    "kernel-open/common/inc/nv_uvm_user_types.h",
)
# ... and every generated NVOC class body (the control export tables).
TREE_GENERATED = ("src/nvidia/generated/g_", "_nvoc.c")


# Refuse links and absolute paths where tarfile can (3.11.4 and later).
_SAFE = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}


@dataclass(frozen=True)
class Vendor:
    """Where the unpacked inputs lie: one header root per release, the tree;
    own, for a release read from its own tree, its UVM type headers; rm, for
    every release whose whole tree is vendored (the tree's included), the
    root holding its generated export tables and control.h."""
    releases: dict[str, Path]
    tree: Path
    own: dict[str, "GitFiles"] | None = None
    rm: dict[str, Path] | None = None


def _release_key(name: str) -> tuple[int, ...]:
    return tuple(int(p) for p in name.split("."))


def _wanted_from_tree(name: str) -> bool:
    if name in TREE_FILES:
        return True
    head, tail = TREE_GENERATED
    return name.startswith(head) and name.endswith(tail) and "/" not in name[len(head):]


def _wanted_rm_file(name: str) -> bool:
    head, tail = TREE_GENERATED
    return name in RELEASE_RM_FILES or (
        name.startswith(head) and name.endswith(tail) and "/" not in name[len(head):])


def _unpack_release_tree(archive: Path, release: str,
                         scratch: Path) -> tuple[Path, "GitFiles", Path]:
    """A release's header root from its whole tree, its UVM type headers
    (a GitFiles whose tag is the release, origin "tree"), and the root of
    its RM files (the control export tables, control.h)."""
    root = scratch / "release-trees" / release
    uvm_root = scratch / "release-uvm" / release
    rm_root = scratch / "release-rm" / release
    taken = []
    with tarfile.open(archive, "r|xz") as tar:
        for member in tar:
            name = member.name.removeprefix("./")
            if not member.isfile():
                continue
            if name in RELEASE_UVM_TYPES:
                member.name = name
                tar.extract(member, uvm_root, **_SAFE)
                taken.append(name)
            elif _wanted_rm_file(name):
                member.name = name
                tar.extract(member, rm_root, **_SAFE)
            elif (name.endswith(".h") and name.startswith(RELEASE_HEADER_DIRS)) \
                    or name in RELEASE_HEADER_FILES:
                member.name = name
                tar.extract(member, root, **_SAFE)
    missing = [f for f in RELEASE_HEADER_FILES + RELEASE_RM_FILES
               if not (root / f).is_file() and not (rm_root / f).is_file()]
    if missing or not any((rm_root / TREE_GENERATED[0]).parent.glob("g_*_nvoc.c")):
        raise ValueError(f"{archive.name}: missing {', '.join(missing) or 'the g_*_nvoc.c export tables'}")
    absent = tuple(f for f in RELEASE_UVM_TYPES if f not in taken)
    return root, GitFiles(release, uvm_root, tuple(sorted(taken)), absent, origin="tree"), rm_root


def unpack(vendor_dir: Path, scratch: Path) -> Vendor:
    """Unpack the archives under scratch; raise FileNotFoundError if absent."""
    headers, tree = vendor_dir / HEADERS_ARCHIVE, vendor_dir / TREE_ARCHIVE
    extra = {r: vendor_dir / tree_archive(r) for r in RELEASE_TREES}
    for archive in (headers, tree, *extra.values()):
        if not archive.is_file():
            raise FileNotFoundError(f"vendor archive missing: {archive}")

    with tarfile.open(headers, "r:xz") as tar:
        tar.extractall(scratch / "headers", **_SAFE)
    roots = [p for p in (scratch / "headers").iterdir() if p.is_dir()]
    if len(roots) != 1:
        raise ValueError(f"{headers.name}: expected one top directory, found {len(roots)}")
    found = {p.name: p for p in roots[0].iterdir()}
    own, rm = {}, {}
    for release, archive in extra.items():
        if release in found:
            raise ValueError(f"{release} is both in {headers.name} and {archive.name}")
        found[release], own[release], rm[release] = _unpack_release_tree(archive, release, scratch)
    releases = {r: found[r] for r in sorted(found, key=_release_key)}

    tree_root = scratch / "tree"
    with tarfile.open(tree, "r|xz") as tar:
        for member in tar:
            if member.isfile() and _wanted_from_tree(member.name):
                tar.extract(member, tree_root, **_SAFE)
    missing = [f for f in TREE_FILES if not (tree_root / f).is_file()]
    if missing:
        raise ValueError(f"{tree.name}: missing {', '.join(missing)}")
    rm[TREE_RELEASE] = tree_root
    return Vendor(releases=releases, tree=tree_root, own=own, rm=rm)


# ----------------------------------------------------------- --nvidia-git
@dataclass(frozen=True)
class GitFiles:
    """Files of one release taken from its tag in a clone of
    NVIDIA/open-gpu-kernel-modules, written under root at their own paths."""
    tag: str
    root: Path
    taken: tuple[str, ...]     # the files the tag has
    absent: tuple[str, ...]    # the files the tag does not have: the release has none
    origin: str = "git"        # "tree": from the release's own vendored tree


def _git(git_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(git_dir), *args], capture_output=True)


def check_git(git_dir: Path) -> None:
    """Raise FileNotFoundError unless git_dir is a git work tree or git directory."""
    if not git_dir.is_dir() or _git(git_dir, "rev-parse", "--git-dir").returncode != 0:
        raise FileNotFoundError(f"not a git directory (--nvidia-git, $NVGEN_NVIDIA_GIT): {git_dir}")


def from_git(git_dir: Path, tag: str, files: list[str], dest: Path) -> GitFiles | None:
    """Write each of files as the tag refs/tags/<tag> has it under dest;
    None if the clone has no such tag."""
    ref = f"refs/tags/{tag}"
    if _git(git_dir, "rev-parse", "-q", "--verify", f"{ref}^{{commit}}").returncode != 0:
        return None
    taken, absent = [], []
    for name in files:
        if _git(git_dir, "cat-file", "-e", f"{ref}:{name}").returncode != 0:
            absent.append(name)
            continue
        blob = _git(git_dir, "cat-file", "blob", f"{ref}:{name}")
        if blob.returncode != 0:
            raise RuntimeError(f"git cat-file {ref}:{name}: {blob.stderr.decode(errors='replace')}")
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(blob.stdout)
        taken.append(name)
    return GitFiles(tag, dest, tuple(taken), tuple(absent))
