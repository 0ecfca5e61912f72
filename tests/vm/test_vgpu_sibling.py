"""Issue 11, findings 2 and 3: a hostile sibling thread (and process).

A container's other threads share its memory and descriptor table for the
whole of every call.  tests/vm/sibling.c is such a thread, loaded into this
very process; nvsim's debugfs delay (delay_nr/delay_ms, a test hook) holds
the driver call open before the driver reads its parameters, so the thread
gets its chance every time instead of once in a while.

- Parameters: whatever vgpu.ko maps into the caller's mm for the driver to
  read (the call page, call.c) must not be writable by the thread, and a
  mapping put over it must be caught.  The forged parameters ask for 64 MiB
  of FB under the caller's own client: had the driver read them, nvsim's
  FB use would rise without the slice being charged.
- Descriptors: whatever vgpu.ko installs in the caller's table for the
  driver to resolve must be worthless to a thread that dup()s it.

Each of these failed on the mediator that bounced parameters through an
anonymous mapping and installed the real file (issue 11's main).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import subprocess
import time
from pathlib import Path

import pytest

from vgpu.abi import uapi as U
from vgpu_fixtures import MiB, nvsim_fb, read_vstate
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, sl, vgpu_leak_check, vstate  # noqa: F401

from vgpu.abi import nvabi as A

NVSIM = Path("/sys/kernel/debug/nvsim")
MODE_WRITE, MODE_REPLACE, MODE_DUP = 1, 2, 3
DELAY_MS = 400


class Result(ctypes.Structure):
    _fields_ = [("attempts", ctypes.c_int), ("writes", ctypes.c_int),
                ("faults", ctypes.c_int), ("replaced", ctypes.c_int),
                ("dups", ctypes.c_int * 16), ("ndups", ctypes.c_int)]


@pytest.fixture(scope="module")
def sibling(tmp_path_factory):
    src = Path(__file__).with_name("sibling.c")
    out = tmp_path_factory.mktemp("sibling") / "libsibling.so"
    subprocess.run(["gcc", "-O2", "-Wall", "-shared", "-fPIC", "-pthread", "-o", str(out),
                    str(src)], check=True)
    lib = ctypes.CDLL(str(out))
    lib.sibling_start.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    lib.sibling_stop.argtypes = [ctypes.POINTER(Result)]
    return lib


@pytest.fixture
def delay():
    """delay(nr): nvsim sleeps DELAY_MS before reading escape nr's parameters."""
    def _set(nr: int, ms: int = DELAY_MS) -> None:
        (NVSIM / "delay_nr").write_text(str(nr))
        (NVSIM / "delay_ms").write_text(str(ms))
    yield _set
    (NVSIM / "delay_ms").write_text("0")
    (NVSIM / "delay_nr").write_text("0")


def _forged_fb_alloc(client, parent: int):
    """NVOS21 asking for 64 MiB of FB under the caller's own client; the
    buffers it points to are returned too (keep them alive)."""
    mp = A.NV_MEMORY_ALLOCATION_PARAMS(owner=0x5647, type=0, size=64 * MiB)
    p = A.NVOS21_PARAMETERS(hRoot=client.hClient, hObjectParent=parent,
                            hObjectNew=0xbeef0001, hClass=A.NV01_MEMORY_LOCAL_USER,
                            pAllocParms=ctypes.addressof(mp),
                            paramsSize=ctypes.sizeof(mp), status=0)
    raw = ctypes.create_string_buffer(bytes(p), ctypes.sizeof(p))
    return raw, mp


def _root_alloc(fd: int) -> A.NVOS21_PARAMETERS:
    """A root client, as the caller asks for it: NVOS21 on the control fd."""
    p = A.NVOS21_PARAMETERS(hRoot=0, hObjectParent=0, hObjectNew=0,
                            hClass=A.NV01_ROOT_CLIENT)
    buf = bytearray(bytes(p))
    fcntl.ioctl(fd, A.nv_ioctl(A.NV_ESC_RM_ALLOC, len(buf)), buf, True)
    return A.NVOS21_PARAMETERS.from_buffer_copy(bytes(buf))


def _attack_root_alloc(sibling, delay, sl, mode):
    c = sl.client()
    g = c.open_gpus()[0]
    fb0, used0 = nvsim_fb(0), sl.used(0)
    raw, mp = _forged_fb_alloc(c, g.hDevice)
    delay(A.NV_ESC_RM_ALLOC)
    assert sibling.sibling_start(mode, ctypes.addressof(raw), len(raw)) == 0
    err = None
    try:
        out = _root_alloc(c.fd)
    except OSError as e:
        out, err = None, e.errno
    finally:
        res = Result()
        sibling.sibling_stop(ctypes.byref(res))
    return c, g, res, out, err, fb0, used0


def test_sibling_cannot_write_the_parameters(sibling, delay, sl):
    """Finding 2: while a call uses it, every write of the sibling into the
    page vgpu.ko mapped for the driver faults (between calls the page may
    take writes: nothing reads it then, and the next call revokes them
    before filling it); the driver reads vgpu.ko's parameters, not its."""
    c, g, res, out, err, fb0, used0 = _attack_root_alloc(sibling, delay, sl, MODE_WRITE)
    assert res.attempts >= 1, "the sibling never saw a mapping appear: the test proves nothing"
    assert res.faults >= 1, f"no write faulted ({res.writes} landed)"
    assert err is None and out.status == 0, (err, out)
    assert out.hObjectNew and out.hObjectNew != 0xbeef0001
    # Nothing was allocated behind the quota's back.
    assert nvsim_fb(0) == fb0 and sl.used(0) == used0
    # The file stays usable: it was not attacked successfully.
    g.alloc(MiB)
    assert sl.used(0) == used0 + MiB


def test_mapping_put_over_the_parameters_is_caught(sibling, delay, sl, vstate, kern,
                                                   make_slice):
    """Finding 2: a sibling cannot write the call page, but it can unmap it
    or map over it (MAP_FIXED) before the driver reads.  vgpu.ko sees its
    VMA go, answers EIO, refuses the file from now on and frees everything
    the file's clients hold: no FB outlives the call uncharged.  What the
    driver made from the other mapping exists until that undo; so that a
    new file per attempt cannot repeat the window, the whole slice is
    quarantined (every open and call refused), and says so."""
    other = make_slice()
    oc = other.client()
    og = oc.open_gpus()[0]
    broken0 = vstate().get("calls_broken", 0)
    with kern.subscribe(timeout=5) as ev:
        c, g, res, out, err, fb0, used0 = _attack_root_alloc(sibling, delay, sl, MODE_REPLACE)
        q = ev.wait_for(lambda e: e.type == U.VGPU_EVENT_SLICE_QUARANTINED
                        and e.slice_id == sl.id)
    assert q is not None and q.pid == os.getpid(), "no SLICE_QUARANTINED event"
    assert sl.get().quarantined and not other.get().quarantined
    with pytest.raises(OSError) as e:
        os.open(sl.path("nvidiactl"), os.O_RDWR)
    assert e.value.errno == errno.EIO, "a new file would open the window again"
    with pytest.raises(OSError) as e:
        g.alloc(MiB)
    assert e.value.errno == errno.EIO
    assert res.replaced >= 1, "the sibling never replaced a mapping: the test proves nothing"
    assert err == errno.EIO, (err, out)
    assert vstate().get("calls_broken") == broken0 + 1
    # Undone: the file's clients are gone in the driver, with any FB the
    # driver may have allocated from the forged parameters.
    assert nvsim_fb(0) <= fb0 and sl.used(0) == 0
    with pytest.raises(OSError) as e:
        _root_alloc(c.fd)
    assert e.value.errno == errno.EIO
    c.hClient = 0           # freed by vgpu.ko; nothing for close() to free
    og.alloc(MiB)                       # another slice is not touched
    assert other.used(0) == MiB


def test_descriptor_a_sibling_dups_is_worthless(sibling, delay, sl):
    """Finding 3: REGISTER_FD names the control file; what the driver
    resolves for it sits in the caller's table during the call.  A sibling
    that dup()s it gets a file that the driver would take for the slice's own
    control file, but that answers no ioctl and maps nothing."""
    gpu = sl.open("nvidia0")
    ctl = sl.open("nvidiactl")
    delay(A.NV_ESC_REGISTER_FD)
    assert sibling.sibling_start(MODE_DUP, None, 0) == 0
    try:
        p = A.nv_ioctl_register_fd_t(ctl_fd=ctl)
        buf = bytearray(bytes(p))
        fcntl.ioctl(gpu, A.nv_ioctl(A.NV_ESC_REGISTER_FD, len(buf)), buf, True)
    finally:
        res = Result()
        sibling.sibling_stop(ctypes.byref(res))
    dups = [res.dups[i] for i in range(res.ndups)]
    assert dups, "the sibling never saw a descriptor appear: the test proves nothing"
    try:
        for fd in dups:
            st = os.fstat(fd)
            # It is what the driver recognises (its device number) ...
            assert os.major(st.st_rdev) == 195 and os.minor(st.st_rdev) == 255
            # ... and it does nothing: no client, no mapping.
            with pytest.raises(OSError) as e:
                _root_alloc(fd)
            assert e.value.errno == errno.ENOTTY
            import mmap as _mmap
            with pytest.raises(OSError):
                _mmap.mmap(fd, 4096)
    finally:
        for fd in dups:
            os.close(fd)


def _dup_the_proxy(sibling, delay, sl) -> list[int]:
    """REGISTER_FD with a sibling that dup()s every descriptor appearing
    meanwhile: the proxy of the control file, caught (the copies)."""
    gpu = sl.open("nvidia0")
    ctl = sl.open("nvidiactl")
    delay(A.NV_ESC_REGISTER_FD)
    assert sibling.sibling_start(MODE_DUP, None, 0) == 0
    try:
        p = A.nv_ioctl_register_fd_t(ctl_fd=ctl)
        buf = bytearray(bytes(p))
        fcntl.ioctl(gpu, A.nv_ioctl(A.NV_ESC_REGISTER_FD, len(buf)), buf, True)
    finally:
        res = Result()
        sibling.sibling_stop(ctypes.byref(res))
    dups = [res.dups[i] for i in range(res.ndups)]
    assert dups, "the sibling never saw a descriptor appear: the test proves nothing"
    return dups


def test_proxy_reaches_no_host_inode(sibling, delay, sl):
    """Issue 31, item 5: the proxy was a file opened on the host's
    /dev/nvidiactl, so a sibling that dup()ed it held the host node's inode:
    fchmod needs only ownership (root in a container without a user
    namespace owns it), so chmod 0666 opened the unmediated driver to every
    host user and chmod 000 made every tenant's open fail; fchown, futimens
    and ACLs likewise.  The proxy's inode is now vgpu.ko's own: every
    attribute change fails and the host node stays as it was; it does not
    reopen through /proc/self/fd (which would open the real driver by its
    device number) and does not name the host path there either."""
    host = "/dev/nvidiactl"
    st0 = os.stat(host)
    dups = _dup_the_proxy(sibling, delay, sl)
    # posix_acl_xattr: version 2, then {tag, perm, id}: u::rw- g::r-- o::rw-
    acl = bytes.fromhex("02000000" "01000600ffffffff" "04000400ffffffff"
                        "20000600ffffffff")
    attempts = {
        "fchmod 0666": lambda fd: os.fchmod(fd, 0o666),
        "fchmod 000": lambda fd: os.fchmod(fd, 0),
        "fchown": lambda fd: os.fchown(fd, 4321, 4321),
        "futimens": lambda fd: os.utime(fd, ns=(10**9, 10**9)),
        "futimens now": lambda fd: os.utime(fd),
        "fsetxattr": lambda fd: os.setxattr(fd, "user.vgpu", b"1"),
        "acl": lambda fd: os.setxattr(fd, "system.posix_acl_access", acl),
    }
    done, links, reopened = [], [], []
    try:
        for fd in dups:
            st = os.fstat(fd)
            assert os.major(st.st_rdev) == 195 and os.minor(st.st_rdev) == 255
            for what, op in attempts.items():
                try:
                    op(fd)
                    done.append(what)
                except OSError as e:
                    assert e.errno in (errno.EPERM, errno.EOPNOTSUPP), (what, e)
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
            try:
                os.close(os.open(f"/proc/self/fd/{fd}", os.O_RDWR))
                reopened.append(fd)
            except OSError as e:
                assert e.errno == errno.ENXIO, e
        st1 = os.stat(host)
        assert not done, f"changed through the proxy: {done}"
        assert not reopened, "reopened through /proc/self/fd (the real driver, by device number)"
        assert not any("nvidia" in link for link in links), links
        assert (st1.st_mode, st1.st_uid, st1.st_gid, st1.st_mtime_ns, st1.st_ctime_ns) == \
            (st0.st_mode, st0.st_uid, st0.st_gid, st0.st_mtime_ns, st0.st_ctime_ns)
        # Tenants still open the slice (vgpu_open opens the host node).
        os.close(os.open(sl.path("nvidiactl"), os.O_RDWR | os.O_CLOEXEC))
    finally:
        for fd in dups:
            os.close(fd)
        # Put the host node back, had anything got through.
        os.chmod(host, st0.st_mode & 0o7777)
        os.chown(host, st0.st_uid, st0.st_gid)
        os.utime(host, ns=(st0.st_atime_ns, st0.st_mtime_ns))
        for name in ("user.vgpu", "system.posix_acl_access"):
            try:
                os.removexattr(host, name)
            except OSError:
                pass


def _attack_from_process(parent: int, go_r: int, out_w: int, forged: bytes) -> None:
    """The child: until the parent says stop, write the forged parameters
    into the parent's call pages (or, where there are none, into the first
    small mapping that appears) through /proc/<parent>/mem, which is how
    process_vm_writev, ptrace and debuggers write: get_user_pages."""
    import select
    import struct

    def maps():
        out = []
        with open(f"/proc/{parent}/maps") as f:
            for line in f:
                rng = line.split()[0]
                a, b = (int(x, 16) for x in rng.split("-"))
                out.append((a, b - a, "[vgpu-call]" in line))
        return out

    base = {a for a, _, _ in maps()}
    attempts = landed = refused = 0
    first_done = False
    mem = os.open(f"/proc/{parent}/mem", os.O_RDWR)
    try:
        while not select.select([go_r], [], [], 0)[0]:
            for a, ln, named in maps():
                fresh = a not in base and ln <= 64 * 1024 and not first_done
                if not named and not fresh:
                    continue
                if fresh:
                    base.add(a)
                    first_done = True
                attempts += 1
                try:
                    os.pwrite(mem, forged, a)
                    landed += 1
                except OSError:
                    refused += 1
    finally:
        os.close(mem)
    os.write(out_w, struct.pack("3i", attempts, landed, refused))


def test_sibling_process_cannot_write_the_parameters(delay, sl):
    """Finding 2, from another process of the container (same uid, allowed
    to ptrace the caller): a write through /proc/<pid>/mem goes through
    get_user_pages, which the call page refuses (VM_IO | VM_PFNMAP).  Before,
    the parameters sat in an ordinary anonymous page, which it could write
    while the driver had not read it yet."""
    import struct
    c = sl.client()
    g = c.open_gpus()[0]
    fb0, used0 = nvsim_fb(0), sl.used(0)
    raw, mp = _forged_fb_alloc(c, g.hDevice)
    go_r, go_w = os.pipe()
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(go_w)
            os.close(out_r)
            _attack_from_process(os.getppid(), go_r, out_w, bytes(raw))
        finally:
            os._exit(0)
    os.close(go_r)
    os.close(out_w)
    try:
        time.sleep(0.3)                 # the child has its baseline
        delay(A.NV_ESC_RM_ALLOC)
        out = _root_alloc(c.fd)
    finally:
        os.write(go_w, b"x")
        attempts, landed, refused = struct.unpack("3i", os.read(out_r, 12))
        os.waitpid(pid, 0)
        os.close(go_w)
        os.close(out_r)
    assert attempts >= 1, "the sibling process never saw a mapping: the test proves nothing"
    assert landed == 0 and refused >= 1, (attempts, landed, refused)
    assert out.status == 0 and out.hObjectNew != 0xbeef0001
    assert nvsim_fb(0) == fb0 and sl.used(0) == used0
