"""The host driver's user-space files a container with a slice needs
(docs/containers.md, "Driver files"): NVIDIA's libraries (libcuda,
libnvidia-ml, ...), its tools (nvidia-smi, ...) and its firmware, found the
way NVIDIA's container toolkit finds them, and the container edits that
bring them in (bind mounts of each file at the same path, read-only, and
one hook that makes the SONAME links and the container's ldcache).

One source of truth: ``vgpuctl cdi generate`` (vgpu.common.cdi) puts
driver_edits() into the CDI spec, and vgpu-runtime (vgpu.cli.runtime)
puts the same edits into config.json where the runtime has no CDI
(containerd 1.6).  The facts followed are NVIDIA's (nvidia-container-
toolkit, pkg/nvcdi/driver-nvml.go: NewDriverLibraryDiscoverer,
getVersionLibs, NewDriverBinariesDiscoverer; internal/discover/ldconfig.go
and the create-symlinks / update-ldcache hooks of nvidia-cdi-hook):

- libraries: the ldcache's entries whose file, symlinks resolved, is named
  ``lib*.so.<driver version>`` (the toolkit locates ``*.so.<version>``
  among the ldcache's libraries), for the host's own architecture only;
  plus the same names in extra library directories the operator lists (a
  user space unpacked outside the ldcache, e.g. $VGPU_CACHE's).  Each is
  mounted at its real path; its SONAME link (libcuda.so.1 ->
  libcuda.so.535.261.03), read from the file's ELF dynamic section, is
  made by the hook (a symlink is never mounted: it would be resolved on
  the host);
- binaries: nvidia-smi, nvidia-debugdump, nvidia-persistenced,
  nvidia-cuda-mps-control, nvidia-cuda-mps-server, looked up in the extra
  binary directories, then a fixed PATH (never the caller's), mounted at
  the path they were found at (the file its symlinks lead to is bound);
- firmware: /lib/firmware/nvidia/<version>/ where present (the GSP's).

Nothing else: a file whose name carries another version, or no version,
is not the driver's.  Standard library only (vgpu-runtime runs it on a
container's start path).
"""
from __future__ import annotations

import os
import select
from time import monotonic

from vgpu.common.elf import LDCONFIG, elf_is_static, elf_soname

__all__ = ["DRIVER_BINARIES", "LDCONFIG", "DriverFiles", "ParseError", "discover", "for_spec",
           "driver_edits", "driver_version", "elf_is_static", "env_dirs", "ENV_LIB_DIRS", "ENV_BIN_DIRS", "ENV_FILES", "elf_soname", "host_ldcache", "parse_ldconfig_p",
           "valid_version", "MOUNT_OPTIONS", "HOOK_LINK", "HOOK_LDCONFIG"]

#: the tools NVIDIA's toolkit mounts (NewDriverBinariesDiscoverer), less
#: nvidia-imex/-ctl (not in 535)
DRIVER_BINARIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced",
                   "nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
#: where binaries are looked up after the extra directories (not $PATH: the
#: runtime's environment is not the operator's word)
BIN_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
FIRMWARE_ROOT = "/lib/firmware/nvidia"
#: every driver file is bound read-only, no suid, no device nodes
MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "rbind")
#: runc's bound on the driver files' hook, in seconds: the container's
#: ldconfig rescans every library directory of its ld.so.conf (the hook
#: bounds ldconfig itself at 45 s: vgpu.cli.hook.driver)
DRIVER_HOOK_TIMEOUT = 60
#: vgpu-oci-hook's options for the driver files' hook
HOOK_LINK, HOOK_LDCONFIG = "--cdi-link", "--cdi-ldconfig"

#: vgpu-runtime's environment (and vgpuctl cdi generate's defaults):
#: ":"-separated absolute directories searched besides the ldcache and
#: PATH; "0" in ENV_FILES turns driver files off
ENV_LIB_DIRS, ENV_BIN_DIRS, ENV_FILES = ("VGPU_DRIVER_LIB_DIRS", "VGPU_DRIVER_BIN_DIRS",
                                         "VGPU_DRIVER_FILES")

#: the ldcache's architecture flag of this machine's libraries (glibc's
#: ldconfig prints it among the flags; 32-bit entries have none of these)
_ARCH_FLAG = {"x86_64": "x86-64", "aarch64": "AArch64", "ppc64le": "64bit"}


class ParseError(ValueError):
    pass


def valid_version(v: object) -> bool:
    """A driver version as NVIDIA writes it: 535.261.03, 595.45.04, 550.54
    (2 to 4 dot-separated runs of ASCII digits).  String work, not re: this
    module is on vgpu-runtime's path (issue 34)."""
    if not isinstance(v, str):
        return False
    parts = v.split(".")
    return 2 <= len(parts) <= 4 and all(p.isascii() and p.isdigit() for p in parts)


def _version_in(line: str) -> str | None:
    """The version after "Kernel Module" (or "Kernel Module for <arch>") in
    the driver's version line."""
    _, found, rest = line.partition("Kernel Module")
    words = rest.split()
    if not found or not rest[:1].isspace():
        return None
    if words[:1] == ["for"]:
        words = words[2:]
    v = words[0] if words else ""
    return v if valid_version(v) else None


def driver_version(proc: str = "/proc/driver/nvidia/version",
                   sysfs: str = "/sys/module/nvidia/version") -> str | None:
    """The loaded NVIDIA kernel module's version: /proc/driver/nvidia/version
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  ..." or
    "... Open Kernel Module for x86_64  595.45.04  ..."), else
    /sys/module/nvidia/version; None when neither says (nvsim, no driver)."""
    try:
        with open(proc, encoding="ascii", errors="replace") as f:
            for line in f.read(4096).splitlines():
                v = _version_in(line)
                if v:
                    return v
    except OSError:
        pass
    try:
        with open(sysfs, encoding="ascii", errors="replace") as f:
            v = f.read(64).strip()
        if valid_version(v):
            return v
    except OSError:
        pass
    return None


def env_dirs(name: str, environ=None) -> list[str]:
    """The absolute directories of the ":"-separated variable ``name``
    (relative entries are ignored: they would depend on a working
    directory)."""
    text = (os.environ if environ is None else environ).get(name, "")
    return [os.path.normpath(d) for d in text.split(":") if d.startswith("/")]


def parse_ldconfig_p(text: str, arch: str | None = None) -> list[tuple[str, str]]:
    """(name, path) of each entry of ``ldconfig -p``'s output that is of
    this machine's architecture (``arch``: uname's machine).  A line is
    "<whitespace>NAME (FLAGS) => /PATH"; any other is skipped."""
    flag = _ARCH_FLAG.get(arch or os.uname().machine)
    out = []
    for line in text.splitlines():
        if not line[:1].isspace():
            continue
        name, _, rest = line.strip().partition(" ")
        rest = rest.lstrip()
        flags, sep, rest = rest[1:].partition(")") if rest.startswith("(") else ("", "", "")
        arrow, _, path = rest.strip().partition(" ")
        path = path.strip()
        if not name or not sep or "(" in flags or arrow != "=>" or not path.startswith("/"):
            continue
        if flag is not None and flag not in [f.strip() for f in flags.split(",")]:
            continue
        out.append((name, path))
    return out


def host_ldcache(ldconfig: str = LDCONFIG, timeout: float = 10.0) -> list[tuple[str, str]]:
    """The host's ldcache, as ``<ldconfig> -p`` prints it (its fixed path,
    an empty environment); [] when it cannot be read."""
    out = _output_of([ldconfig, "-p"], timeout)
    return [] if out is None else parse_ldconfig_p(out.decode(errors="replace"))


def _output_of(argv: list[str], timeout: float) -> bytes | None:
    """The standard output of ``argv`` run with an empty environment and
    stdin and stderr on /dev/null; None where it cannot run, fails or takes
    longer than ``timeout`` s (then it is killed).  os.posix_spawn, not
    subprocess: subprocess imports selectors, signal, threading... (~5 ms)
    on vgpu-runtime's path (issue 34)."""
    r, w = os.pipe()
    try:
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        try:
            pid = os.posix_spawn(argv[0], argv, {}, file_actions=[
                (os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, w, 1),
                (os.POSIX_SPAWN_DUP2, null, 2)])
        finally:
            os.close(null)
    except OSError:
        os.close(r)
        return None
    finally:
        os.close(w)
    data = bytearray()
    deadline = monotonic() + timeout
    try:
        while True:
            left = deadline - monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                os.kill(pid, 9)                                 # SIGKILL
                os.waitpid(pid, 0)
                return None
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    return bytes(data) if os.waitstatus_to_exitcode(status) == 0 else None


# ------------------------------------------------------------ discovery
class DriverFiles:
    """What discover() found: host paths, each mounted at ``mounts``'
    container path; ``links`` (link path, target name) for the hook to
    make; ``lib_dirs`` for the container's ldconfig.  (A plain class: no
    dataclasses import on vgpu-runtime's path.)"""

    def __init__(self, version: str):
        self.version = version
        self.libraries: list[str] = []
        self.binaries: list[tuple[str, str]] = []       # (host file, container path)
        self.firmware: list[str] = []
        self.links: list[tuple[str, str]] = []
        self.lib_dirs: list[str] = []

    def mounts(self) -> list[tuple[str, str]]:
        """(hostPath, containerPath) of every file and directory bound."""
        return ([(p, p) for p in self.libraries] + list(self.binaries)
                + [(p, p) for p in self.firmware])


def _regular(path: str) -> bool:
    try:
        return os.path.isfile(path) and not os.path.islink(path)
    except OSError:
        return False


def discover(version: str, ldcache: list[tuple[str, str]] | None = None,
             lib_dirs: tuple[str, ...] | list[str] = (),
             bin_dirs: tuple[str, ...] | list[str] = (),
             path: tuple[str, ...] | list[str] = BIN_PATH,
             firmware_root: str = FIRMWARE_ROOT) -> DriverFiles:
    """The driver's files for ``version`` (see the module doc).  ``ldcache``:
    (name, path) entries (default: the host's, host_ldcache()); the other
    arguments name where else to look (tests give a fake root's)."""
    if not valid_version(version):
        raise ParseError(f"not a driver version: {version!r}")
    suffix = f".so.{version}"

    def ours(name: str) -> bool:
        return name.startswith("lib") and name.endswith(suffix) and len(name) > len(suffix) + 3

    df = DriverFiles(version)
    libs: dict[str, str | None] = {}        # real path -> a SONAME the ldcache gave
    for name, p in (host_ldcache() if ldcache is None else ldcache):
        real = os.path.realpath(p)
        if ours(os.path.basename(real)) and _regular(real):
            libs.setdefault(real, name if name != os.path.basename(real) else None)
    for d in lib_dirs:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for n in names:
            if not ours(n):
                continue
            real = os.path.realpath(os.path.join(d, n))
            if ours(os.path.basename(real)) and _regular(real):
                libs.setdefault(real, None)
    for real in sorted(libs):
        df.libraries.append(real)
        soname = elf_soname(real) or libs[real]
        base = os.path.basename(real)
        if soname and soname != base:
            df.links.append((os.path.join(os.path.dirname(real), soname), base))
        d = os.path.dirname(real)
        if d not in df.lib_dirs:
            df.lib_dirs.append(d)
    for b in DRIVER_BINARIES:
        for d in (*bin_dirs, *path):
            cand = os.path.join(d, b)
            real = os.path.realpath(cand)
            if _regular(real) and os.access(real, os.X_OK):
                df.binaries.append((real, os.path.normpath(cand)))
                break
    fw = os.path.join(firmware_root, version)
    if os.path.isdir(fw) and not os.path.islink(fw):
        df.firmware.append(fw)
    return df


def driver_edits(df: DriverFiles, hook: tuple[str, list[str], list[str]],
                 timeout: int = DRIVER_HOOK_TIMEOUT) -> dict:
    """CDI containerEdits for ``df``: a read-only bind of each file at its
    container path, and one createRuntime hook (``hook``: (path, args up to
    the stage, env)) that makes the SONAME links and runs the container's
    ldconfig on the libraries' directories (vgpu-oci-hook --cdi-link
    TARGET::LINK --cdi-ldconfig DIR ... createRuntime)."""
    mounts = [{"hostPath": h, "containerPath": c, "options": list(MOUNT_OPTIONS)}
              for h, c in df.mounts()]
    edits: dict = {"mounts": mounts} if mounts else {}
    args = []
    for link, target in df.links:
        args += [HOOK_LINK, f"{target}::{link}"]
    for d in df.lib_dirs:
        args += [HOOK_LDCONFIG, d]
    if args:
        path, pre, env = hook
        edits["hooks"] = [{"hookName": "createRuntime", "path": path,
                           "args": [*pre, *args, "createRuntime"], "env": list(env),
                           "timeout": timeout}]
    return edits


def for_spec(version: str | None, lib_dirs: list[str] | None = None,
             bin_dirs: list[str] | None = None) -> tuple[DriverFiles | None, str | None]:
    """The driver files a CDI spec carries (``vgpuctl cdi generate``, the DRA
    plugin): those of ``version`` (None: not known), looked for in the
    ldcache and ``lib_dirs``/``bin_dirs`` (default: $VGPU_DRIVER_LIB_DIRS,
    $VGPU_DRIVER_BIN_DIRS).  Returns (files or None, a warning or None)."""
    if not valid_version(version):
        return None, ("the NVIDIA driver's version is not known (no "
                      "/proc/driver/nvidia/version, none from vgpud): no driver files in the spec")
    files = discover(version, lib_dirs=lib_dirs or env_dirs(ENV_LIB_DIRS),
                     bin_dirs=bin_dirs or env_dirs(ENV_BIN_DIRS))
    if not files.libraries:
        return files, f"no library of driver {version} found (ldcache, the library directories)"
    return files, None
