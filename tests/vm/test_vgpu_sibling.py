"""A hostile sibling thread (and process): nothing it can write decides anything.

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
anonymous mapping and installed the real file in the caller's descriptor
table.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from vgpu.abi import uapi as U
from vgpu_fixtures import MiB, RmError, nvsim_fb, read_vstate
from polling import wait_until
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, sl, vgpu_leak_check, vstate  # noqa: F401

from vgpu.abi import nvabi as A

NVSIM = Path("/sys/kernel/debug/nvsim")
MODE_WRITE, MODE_REPLACE, MODE_DUP, MODE_CHAIN, MODE_SWAP = 1, 2, 3, 4, 5
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
    lib.sibling_chain_addr.restype = ctypes.c_ulong
    lib.sibling_start_chain.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                        ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
    lib.sibling_probe_writable.argtypes = [ctypes.c_ulong, ctypes.c_ulong, ctypes.c_void_p]
    return lib


@pytest.fixture
def delay():
    """delay(nr): nvsim sleeps DELAY_MS before reading escape nr's parameters;
    out=True: after writing its results instead (uvm=True: UVM command nr)."""
    def _set(nr: int, ms: int = DELAY_MS, out: bool = False, uvm: bool = False) -> None:
        (NVSIM / ("delay_uvm" if uvm else "delay_nr")).write_text(str(nr))
        (NVSIM / "delay_out").write_text("1" if out else "0")
        (NVSIM / "delay_ms").write_text(str(ms))
    yield _set
    (NVSIM / "delay_ms").write_text("0")
    (NVSIM / "delay_out").write_text("0")
    (NVSIM / "delay_nr").write_text("0")
    (NVSIM / "delay_uvm").write_text("0")


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


def _call_rings() -> list[tuple[int, int]]:
    """(start, length) of every vgpu.ko call page mapped in this process."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            if line.rstrip().endswith("[vgpu-call]"):
                a, b = (int(x, 16) for x in line.split()[0].split("-"))
                out.append((a, b - a))
    return out


def test_call_page_slots_are_writable_only_once_used(sibling, sl):
    """The pooled call page is a ring of one-page slots (call.c): a slot the
    driver wrote into is writable to the whole mm until the ring is
    write-protected, so no slot may be used twice between write-protects,
    and one not used since the last must take no write from anyone.  Probed
    from this very thread between calls: the writable slots are always the
    ones used since the last write-protect, in order from the first; and the
    ring does come round (a write-protect makes them read-only again)."""
    c = sl.client()
    g = c.open_gpus()[0]
    p = A.NV2080_CTRL_FB_GET_INFO_V2_PARAMS(fbInfoListSize=1)
    p.fbInfoList[0].index = A.NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE
    c.control(g.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_INFO_V2, p)
    rings = _call_rings()
    assert len(rings) == 1, rings
    base, length = rings[0]
    nslots = length // 4096
    assert nslots > 1, "one-page call pages: no ring"
    out = (ctypes.c_ubyte * nslots)()
    seen, wrapped = [], False
    for _ in range(3 * nslots):
        assert sibling.sibling_probe_writable(base, length, out) == nslots
        w = list(out)
        k = sum(w)
        assert w == [1] * k + [0] * (nslots - k), f"writable slots not a prefix: {w}"
        if seen and k < seen[-1]:
            wrapped = True
            assert k == 1, f"after the write-protect only the new call's slot: {w}"
        seen.append(k)
        c.control(g.hSubdevice, A.NV2080_CTRL_CMD_FB_GET_INFO_V2, p)
        assert _call_rings() == rings, "the ring was remapped"
    assert wrapped, f"the ring never came round: {seen}"
    assert max(seen) == nslots, f"never every slot used before the write-protect: {seen}"


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
    """No real driver file reaches a container: the proxy was a file opened on the host's
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


def _nvsim_counts() -> tuple[int, int]:
    """nvsim's own count of the objects under clients user files own (the
    clients themselves not included), and of clients: what the driver
    holds, not what vgpu.ko tracks."""
    user = clients = 0
    for line in (NVSIM / "state").read_text().splitlines():
        f = line.split()
        if f and f[0] == "user_client_objects":
            user = int(f[2]) + int(f[4]) + int(f[6])
        elif f and f[0] == "clients":
            clients = int(f[1])
    return user, clients


def _nvos21(h_root: int, parent: int, new: int, h_class: int, alloc=None) -> bytes:
    p = A.NVOS21_PARAMETERS(hRoot=h_root, hObjectParent=parent, hObjectNew=new,
                            hClass=h_class,
                            pAllocParms=ctypes.addressof(alloc) if alloc is not None else 0,
                            paramsSize=ctypes.sizeof(alloc) if alloc is not None else 0)
    return bytes(p)


def _dup_a_proxy_of(sibling, delay, ctl: int, gpu: int) -> list[int]:
    """REGISTER_FD of gpu to ctl, while the sibling dup()s every new descriptor:
    its copies of the proxy vgpu.ko installed for ctl's real file."""
    delay(A.NV_ESC_REGISTER_FD)
    assert sibling.sibling_start(MODE_DUP, None, 0) == 0
    try:
        p = A.nv_ioctl_register_fd_t(ctl_fd=ctl)
        buf = bytearray(bytes(p))
        fcntl.ioctl(gpu, A.nv_ioctl(A.NV_ESC_REGISTER_FD, len(buf)), buf, True)
    finally:
        res = Result()
        sibling.sibling_stop(ctypes.byref(res))
        delay(0, 0)
    dups = [res.dups[i] for i in range(res.ndups)]
    keep = []
    for fd in dups:
        st = os.fstat(fd)
        if os.major(st.st_rdev) == 195 and os.minor(st.st_rdev) == 255:
            keep.append(fd)
        else:
            os.close(fd)
    return keep


def test_broken_calls_cannot_chain_memory_under_a_client_of_their_own(
        sibling, delay, sl, kern, num_gpus):
    """Memory is charged to the slice whose call made it, or not made:
    three threads, each with its call page replaced while the
    driver has not read it yet: a root client Z with a handle of the
    sibling's choice, then a device under Z on a GPU outside the slice,
    then 64 MiB of FB under that device.  vgpu.ko tracks none of them, so
    its undo cannot free them; they belong to the real control file, which a
    proxy the sibling dup()ed keeps alive after the vgpu file's close and the
    slice's deletion: FB charged to nobody.  Calls on one real file are
    serialised while they can break, so only the first reaches the driver:
    what it made (at most the empty Z) holds no memory, and goes when the
    last reference to the real file goes.  Counted in nvsim, not vgpu.ko."""
    if num_gpus < 2:
        pytest.skip("needs a second GPU (num_gpus=2)")
    u0, c0 = _nvsim_counts()
    fb1 = nvsim_fb(1)
    ctl = sl.open("nvidiactl")
    gpu = sl.open("nvidia0")
    proxies = _dup_a_proxy_of(sibling, delay, ctl, gpu)
    try:
        assert proxies, "the sibling never dup()ed the proxy: the test proves nothing"
        # No idle call page left (a vgpu file's close unmaps them): each
        # page the sibling replaces is the next call's.
        os.close(os.open(sl.path("nvidiactl"), os.O_RDWR))

        Z, D, M = 0xbad0c001, 0xbad0c002, 0xbad0c003
        dev = A.NV0080_ALLOC_PARAMETERS(deviceId=1)       # GPU 1: not the slice's
        mem = A.NV_MEMORY_ALLOCATION_PARAMS(owner=0x5647, type=0, size=64 * MiB)
        blocks = [_nvos21(Z, Z, Z, A.NV01_ROOT_CLIENT),
                  _nvos21(Z, Z, D, A.NV01_DEVICE_0, dev),
                  _nvos21(Z, D, M, A.NV01_MEMORY_LOCAL_USER, mem)]
        bufs = [ctypes.create_string_buffer(b, len(b)) for b in blocks]
        ptrs = (ctypes.c_void_p * 3)(*[ctypes.addressof(b) for b in bufs])
        lens = (ctypes.c_size_t * 3)(*[len(b) for b in blocks])

        libc = ctypes.CDLL(None, use_errno=True)
        libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
        size = ctypes.sizeof(A.NVOS21_PARAMETERS)
        req = A.nv_ioctl(A.NV_ESC_RM_ALLOC, size)
        outs: list = [None] * 3

        def call(i: int) -> None:
            # A root client, as the caller asks for it; the ioctl runs
            # without the GIL (ctypes), so the calls overlap in the driver.
            p = A.NVOS21_PARAMETERS(hClass=A.NV01_ROOT_CLIENT)
            r = libc.ioctl(ctl, req, ctypes.addressof(p))
            outs[i] = (ctypes.get_errno() if r < 0 else 0, p.status)

        # Long enough for all three pages to be mapped before the first
        # call returns (that quarantines the slice: later calls are refused).
        delay(A.NV_ESC_RM_ALLOC, 4000)
        assert sibling.sibling_start_chain(ptrs, lens, 3) == 0
        threads = []
        try:
            for i in range(3):
                t = threading.Thread(target=call, args=(i,))
                t.start()
                threads.append(t)
                # The next call only once this one's page was replaced, so
                # the driver reads Z, then D, then M, in that order.
                wait_until(lambda: sibling.sibling_replaced() > i or
                           not threads[0].is_alive(), 20.0)
                # ... and this one is in the driver's delay (it only had
                # to fill the page and enter the driver).
                time.sleep(0.5)
            for t in threads:
                t.join(30)
        finally:
            res = Result()
            sibling.sibling_stop(ctypes.byref(res))
            delay(0, 0)
        # What the driver wrote back into the sibling's pages (vgpu.ko
        # unmaps only its own): which of the forged calls it ran.
        ran = []
        for i in range(res.replaced):
            o = A.NVOS21_PARAMETERS.from_buffer_copy(
                ctypes.string_at(sibling.sibling_chain_addr(i), size))
            ran.append((hex(o.hObjectNew), hex(o.status)))
        assert res.replaced >= 1, "no call page was replaced: the test proves nothing"
        for i, (err, st) in enumerate(outs):
            assert err == errno.EIO or (err == 0 and st != 0), (i, outs)
        assert sl.get().quarantined

        # The vgpu files close; the dup()ed proxy still holds the real file.
        sl.close_fd(gpu)
        sl.close_fd(ctl)
        state = (NVSIM / "state").read_text()
        user, clients = _nvsim_counts()
        why = f"forged calls the driver ran: {ran}; calls: {outs}\n{state}"
        assert nvsim_fb(1) == fb1, f"FB left on GPU 1, charged to nobody: {why}"
        # At most the first forged call's client, with nothing under it.
        assert user == u0 and clients <= c0 + 1, f"objects the driver holds: {why}"
        # Nor does the slice's deletion change that.
        kern.slice_del(sl.id, force=True)
        assert nvsim_fb(1) == fb1 and _nvsim_counts()[0] == u0, \
            (NVSIM / "state").read_text()
    finally:
        for fd in proxies:
            os.close(fd)
    # The last reference to the real file goes: so does what it owns.
    assert wait_until(lambda: _nvsim_counts() == (u0, c0) and nvsim_fb(1) == fb1, 5.0), \
        (NVSIM / "state").read_text()


# NVOS32 attr PAGE_SIZE (24:23) HUGE, attr2 PAGE_SIZE_HUGE (21:20) 2MB (nvos.h)
ATTR_PAGE_SIZE_HUGE = 3 << 23
ATTR2_PAGE_SIZE_HUGE_2MB = 1 << 20


def swap(sibling, old: bytes, new: bytes):
    """Start the sibling in MODE_SWAP: old -> new wherever the driver wrote it."""
    assert len(old) == len(new)
    buf = ctypes.create_string_buffer(old + new, 2 * len(old))
    assert sibling.sibling_start(MODE_SWAP, ctypes.addressof(buf), 2 * len(old)) == 0
    return buf


@pytest.mark.parametrize("path,kw", [
    ("rm-alloc", dict(attr=ATTR_PAGE_SIZE_HUGE, attr2=ATTR2_PAGE_SIZE_HUGE_2MB)),
    ("vid-heap", dict(attr=ATTR_PAGE_SIZE_HUGE)),
])
def test_size_forged_after_the_copy_out_is_not_charged(sibling, delay, make_slice, path, kw):
    """A size read back after the copy-out decides no charge: RM rounds an
    allocation up to the page size it
    chose (memmgrAllocDetermineAlignment_GM107) and writes the rounded size
    back (vidmemConstruct): 4 KiB with a 2 MiB page attribute is 2 MiB.  The
    copy-out made the call page writable, so a sibling rewrites that size
    to 4 KiB before vgpu.ko reads it (nvsim holds the call open after its
    copy-out: delay_out).  The charge is the driver's size, asked through
    the kernel entry, not what the page says."""
    import struct
    sl = make_slice(gpus=[(0, 8 * MiB)])
    c = sl.client()
    g = c.open_gpus()[0]
    fb0 = nvsim_fb(0)
    delay(A.NV_ESC_RM_VID_HEAP_CONTROL if path == "vid-heap" else A.NV_ESC_RM_ALLOC,
          out=True)
    keep = swap(sibling, struct.pack("<Q", 2 * MiB), struct.pack("<Q", 4096))
    try:
        h = g.alloc(4096, path, **kw)
    finally:
        res = Result()
        sibling.sibling_stop(ctypes.byref(res))
    del keep
    assert res.writes >= 1, f"the sibling never rewrote the size: the test proves nothing ({res.faults} faults)"
    assert nvsim_fb(0) - fb0 == 2 * MiB
    assert sl.used(0) == 2 * MiB, "charged the size the sibling wrote"
    # The quota holds: three more such requests do not fit in 8 MiB.
    hs = [g.alloc(4096, path, **kw) for _ in range(3)]
    with pytest.raises(RmError) as e:
        g.alloc(4096, path, **kw)
    assert e.value.status == A.NV_ERR_NO_MEMORY
    for x in hs + [h]:
        g.free(x)
    assert sl.used(0) == 0 and nvsim_fb(0) == fb0


def test_forged_uvm_free_status_does_not_return_a_mapping(sibling, delay, make_slice):
    """A status read back after the copy-out decides nothing: UVM_FREE's
    rmStatus came back on the call page and
    decided whether a charge reference was dropped.  uvm_free fails for an
    address that is not a range's start (uvm_va_range.c), so: map inside an
    external range, UVM_FREE at the mapping's base (the driver answers
    NV_ERR_INVALID_ADDRESS and keeps the mapping, with its dup of the FB),
    the sibling rewrites that to NV_OK after the copy-out, the memory is
    freed, repeat: FB the slice is not charged for.  vgpu.ko drops charges
    by its own model of the driver's ranges, never on the status."""
    import struct
    BASE = 0x7E0000000000
    sl = make_slice(gpus=[(0, 16 * MiB)])
    c = sl.client()
    g = c.open_gpus()[0]
    u = sl.uvm()
    u.initialize()
    p = A.NV2080_CTRL_GPU_GET_GID_INFO_PARAMS(
        flags=A.NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY)
    c.control(g.hSubdevice, A.NV2080_CTRL_CMD_GPU_GET_GID_INFO, p)
    uuid = bytes(p.data[:16])
    u.create_external_range(BASE, 64 * MiB)
    # Between base and rmStatus, releases before 580 have a length (0 here).
    from vgpu.abi import nvrel
    full = ctypes.sizeof(A.UVM_FREE_PARAMS)
    gap = bytes(nvrel.size(u.release, "uvm", A.UVM_FREE, full) - full)
    for i in range(1, 3):
        at = BASE + i * 8 * MiB
        h = g.alloc(8 * MiB)
        u.map_external(at, 8 * MiB, c.fd, c.hClient, h, gpus=[uuid])
        delay(A.UVM_FREE, out=True, uvm=True)
        keep = swap(sibling, struct.pack("<Q", at) + gap + struct.pack("<I", A.NV_ERR_INVALID_ADDRESS),
                    struct.pack("<Q", at) + gap + struct.pack("<I", A.NV_OK))
        try:
            st = u.free(at, check=False)
        finally:
            res = Result()
            sibling.sibling_stop(ctypes.byref(res))
        del keep
        assert res.writes >= 1, "the sibling never rewrote the status: the test proves nothing"
        assert st == A.NV_OK                # the caller believes the forgery
        c.free(h)
        assert nvsim_fb(0) == i * 8 * MiB   # the driver still maps it
        assert sl.used(0) == i * 8 * MiB, "a mapping the driver holds went uncharged"
    with pytest.raises(RmError) as e:
        g.alloc(8 * MiB)
    assert e.value.status == A.NV_ERR_NO_MEMORY
    u.free(BASE)
    assert sl.used(0) == 0 == nvsim_fb(0)


def test_forged_dup_status_tracks_nothing(sibling, delay, make_slice):
    """A status read back after the copy-out decides nothing: RM_DUP_OBJECT's
    NV_OK is read back from the call
    page as well.  A dup the driver refused (nvsim's fault injection: the
    driver's own answer when it fails at the call's entry), its status
    rewritten to NV_OK after the copy-out, was tracked as an object sharing
    the source's charge, which then outlived the memory in the driver.
    vgpu.ko asks the driver (kernel entry) whether the object exists."""
    import struct
    nvdbg = NVSIM
    sl = make_slice(gpus=[(0, 16 * MiB)])
    c = sl.client()
    g = c.open_gpus()[0]
    src = g.alloc(8 * MiB)
    hnew = 0x5a5a0001
    for k, v in (("fail_kind", "RM_DUP_OBJECT"), ("fail_times", "1"), ("fail_status", "0"),
                 ("fail_caller", "1"), ("fail_pid", str(os.getpid())), ("fail_nth", "1")):
        (nvdbg / k).write_text(v)
    delay(A.NV_ESC_RM_DUP_OBJECT, out=True)
    keep = swap(sibling,
                struct.pack("<7I", c.hClient, g.hDevice, hnew, c.hClient, src, 0,
                            A.NV_ERR_NO_MEMORY),
                struct.pack("<7I", c.hClient, g.hDevice, hnew, c.hClient, src, 0, A.NV_OK))
    try:
        try:
            c.dup(g.hDevice, c.hClient, src, handle=hnew)
            err = None
        except RmError as e:
            err = e.status
    finally:
        res = Result()
        sibling.sibling_stop(ctypes.byref(res))
        (nvdbg / "fail_nth").write_text("0")
    del keep
    assert res.writes >= 1, "the sibling never rewrote the status: the test proves nothing"
    assert err is not None, "a dup the driver refused was taken as made"
    g.free(src)
    assert nvsim_fb(0) == 0
    assert sl.used(0) == 0, "a dup that does not exist holds the charge"


def test_forged_dup_status_takes_no_existing_object(sibling, delay, make_slice):
    """RM_DUP_OBJECT at a handle the client already has: the driver refuses
    it (clientValidateNewResourceHandle_IMPL, rs_client.c:
    NV_ERR_INSERT_DUPLICATE_NAME), on the call page.  A sibling rewrote that
    to NV_OK after the copy-out; the existing object passed the existence
    probe, was taken for the dup, could not be recorded twice and was
    freed in the driver -- while vgpu.ko kept tracking it (a channel's
    USERD map torn down under the scheduler, a VA space's channels gone).
    Existence is not ownership: vgpu.ko refuses the handle itself, before
    the driver (so on the fixed module the sibling finds nothing to
    rewrite; before, it rewrote the driver's refusal every time)."""
    import struct
    sl = make_slice(gpus=[(0, 16 * MiB)])
    c = sl.client()
    g = c.open_gpus()[0]
    src = g.alloc(4 * MiB)
    victim = g.alloc(2 * MiB)
    fb0 = nvsim_fb(0)
    delay(A.NV_ESC_RM_DUP_OBJECT, out=True)
    keep = swap(sibling,
                struct.pack("<7I", c.hClient, g.hDevice, victim, c.hClient, src, 0,
                            A.NV_ERR_INSERT_DUPLICATE_NAME),
                struct.pack("<7I", c.hClient, g.hDevice, victim, c.hClient, src, 0, A.NV_OK))
    try:
        try:
            c.dup(g.hDevice, c.hClient, src, handle=victim)
            err = None
        except RmError as e:
            err = e.status
    finally:
        res = Result()
        sibling.sibling_stop(ctypes.byref(res))
    del keep
    (NVSIM / "delay_ms").write_text("0")
    assert err == A.NV_ERR_INSERT_DUPLICATE_NAME, \
        f"status {err}: the existing object was taken for the dup ({res.writes} rewrites)"
    assert nvsim_fb(0) == fb0, "the existing object was freed in the driver"
    assert c.surface_size(victim) == 2 * MiB
    assert sl.used(0) == 6 * MiB
    # The client's own handle: the driver's NV_ERR_INVALID_OBJECT_HANDLE
    # (clientValidateNewResourceHandle_IMPL), answered before it too.
    with pytest.raises(RmError) as e:
        c.dup(g.hDevice, c.hClient, src, handle=c.hClient)
    assert e.value.status == A.NV_ERR_INVALID_OBJECT_HANDLE
    g.free(victim)
    g.free(src)
    assert sl.used(0) == 0 and nvsim_fb(0) == 0
