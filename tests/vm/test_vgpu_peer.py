"""What a multi-GPU training job needs between its own GPUs is answered
through a slice; nothing that reaches another slice's GPU or memory is
(kmod/vgpu/memory.c vgpu_p2p_check, uvm.c vgpu_uvm_peer_access, rmapi.c's
CUDA IPC; nvsim's models in kmod/nvsim/peer.c; docs/mediator.md).

- NV50_P2P between two subdevices of the caller's client works for a slice
  of two GPUs; the driver finds both subdevices in the allocating client
  alone, and vgpu.ko lets a slice's client have devices on its own GPUs
  only, so toward a GPU outside the slice there is nothing to name: another
  slice's subdevice is answered as the driver answers a handle it does not
  find.  The peer ids and the BAR1 mailbox, GPU-wide, are RM's to pick.
- UVM peer access between two of the slice's GPUs works; a UUID outside the
  slice is answered NV_ERR_INVALID_DEVICE (the driver's own answer for a GPU
  the VA space has not registered).
- A sibling thread that rewrites the caller's parameters after vgpu.ko's
  check (tests/vm/sibling.c MODE_USER, in nvsim's delay) changes nothing:
  the driver reads vgpu.ko's copy.

Each test failed on 293c1a5 (NV50_P2P, UVM peer access and the IPC
controls were refused outright).
"""

from __future__ import annotations

import ctypes
import struct
import subprocess
from pathlib import Path

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi import nvrel
from vgpu_fixtures import MiB, RmError, gpu_uuid
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, vgpu_leak_check, vstate  # noqa: F401
from conftest import read_state

NV50_P2P = 0x503B
NV503B_SIZE_595 = 88
UVM_ENABLE_PEER_ACCESS, UVM_DISABLE_PEER_ACCESS = 29, 30
NV_ERR_INVALID_DEVICE = 0x26
NVSIM = Path("/sys/kernel/debug/nvsim")
MODE_USER = 6
DELAY_MS = 400


def _two_gpu_slices_needed():
    if not Path("/sys/module/nvsim/parameters/num_gpus").exists() or \
            int(Path("/sys/module/nvsim/parameters/num_gpus").read_text()) < 2:
        pytest.skip("needs a second GPU (num_gpus=2)")


def _nvsim(key: str) -> int:
    line = read_state().extra.get(key)
    return int(line.split()[1]) if line else 0


def _policy_size(release: str, kind: str, value: int, default: int) -> int:
    """An item's params size in the release's policy table (nvrel.py has
    none for classes); 0 for none."""
    tsv = Path(__file__).resolve().parents[2] / "kmod/vgpu/policy" / f"{release}.tsv"
    if tsv.exists():
        for line in tsv.read_text().splitlines():
            f = line.split("\t")
            if f[0] == kind and f[1] not in ("?", "value") and int(f[1], 16) == value:
                return int(f[3]) if f[3].isdigit() else 0
    return default


def _class_size(release: str, value: int, default: int) -> int:
    return _policy_size(release, "class", value, default)


def p2p_params(release: str, hsub: int, hpeer: int, mask: int = 0, peer_mask: int = 0):
    """NV503B_ALLOC_PARAMETERS of the release's size (the first 40 bytes are
    the same in 535.261.03 and 595.45.04)."""
    size = _class_size(release, NV50_P2P, NV503B_SIZE_595)
    head = struct.pack("<IIIIQIIII", hsub, hpeer, mask, peer_mask, 0, 0, 0, 0, 0)
    return ctypes.create_string_buffer(head + b"\0" * (size - len(head)), size)


def alloc_p2p(c, hsub: int, hpeer: int, **kw) -> int:
    buf = p2p_params(c.version or nvrel.BASE, hsub, hpeer, **kw)
    return c.alloc(c.hClient, NV50_P2P, bytes(buf.raw))


class PeerParams(ctypes.Structure):
    _fields_ = [("gpuUuidA", ctypes.c_uint8 * 16), ("gpuUuidB", ctypes.c_uint8 * 16),
                ("rmStatus", ctypes.c_uint32)]


def peer_access(u, cmd: int, a: bytes, b: bytes) -> int:
    """UVM_{ENABLE,DISABLE}_PEER_ACCESS; the driver's rmStatus."""
    p = PeerParams()
    ctypes.memmove(p.gpuUuidA, a, 16)
    ctypes.memmove(p.gpuUuidB, b, 16)
    u.ioctl(cmd, p)
    return p.rmStatus


@pytest.fixture
def two(make_slice):
    _two_gpu_slices_needed()
    sl = make_slice(gpus=((0, 64 * MiB), (1, 64 * MiB)))
    c = sl.client()
    g0, g1 = c.open_gpus()
    return sl, c, g0, g1


# ------------------------------------------------------------------ NV50_P2P
def test_p2p_between_the_slices_own_gpus(two):
    sl, c, g0, g1 = two
    assert _nvsim("p2p") == 0
    h = alloc_p2p(c, g0.hSubdevice, g1.hSubdevice)
    assert _nvsim("p2p") == 1
    loop = alloc_p2p(c, g1.hSubdevice, g1.hSubdevice)   # loopback: CUDA makes one per GPU
    assert _nvsim("p2p") == 2
    # The peer ids and the mailbox are GPU-wide: RM picks them.
    with pytest.raises(RmError) as e:
        alloc_p2p(c, g0.hSubdevice, g1.hSubdevice, mask=2, peer_mask=2)
    assert e.value.status == A.NV_ERR_INSUFFICIENT_PERMISSIONS
    assert _nvsim("p2p") == 2 and _nvsim("p2p_chosen_ids") == 0
    c.free(h)
    assert _nvsim("p2p") == 1
    # A dependant of its subdevices (p2papiConstruct_IMPL): the driver takes
    # it with GPU 1's subdevice; vgpu.ko's record is lost, freed by handle.
    c.free(g1.hSubdevice)
    assert _nvsim("p2p") == 0
    c.free(loop)


def test_p2p_toward_a_gpu_outside_the_slice_is_refused(make_slice):
    _two_gpu_slices_needed()
    s0 = make_slice(gpus=((0, 64 * MiB),))
    s1 = make_slice(gpus=((1, 64 * MiB),))
    c0, c1 = s0.client(), s1.client()
    g0 = c0.open_gpus()[0]
    for _ in range(16):                 # other handles than c0's, so none is c0's own
        c1.new_handle()
    g1 = c1.open_gpus()[0]
    assert {g1.hSubdevice, g1.hDevice}.isdisjoint({g0.hSubdevice, g0.hDevice})
    # A loopback on the slice's own GPU works ...
    own = alloc_p2p(c0, g0.hSubdevice, g0.hSubdevice)
    assert _nvsim("p2p") == 1
    # ... another slice's subdevice is no subdevice of this client: the
    # driver's answer for a handle it does not find there.
    for peer in (g1.hSubdevice, g1.hDevice, c1.hClient, 0xcafe0001):
        with pytest.raises(RmError) as e:
            alloc_p2p(c0, g0.hSubdevice, peer)
        assert e.value.status == A.NV_ERR_INVALID_ARGUMENT, hex(peer)
    # A device of the other GPU cannot be made in the first place.
    with pytest.raises(RmError):
        c0.alloc(c0.hClient, A.NV01_DEVICE_0, A.NV0080_ALLOC_PARAMETERS(deviceId=1))
    assert _nvsim("p2p") == 1
    c0.free(own)


# ---------------------------------------------------------------- UVM peers
def test_uvm_peer_access_between_the_slices_own_gpus(two):
    sl, c, g0, g1 = two
    u0, u1 = gpu_uuid(c, g0), gpu_uuid(c, g1)
    u = sl.uvm()
    u.initialize()
    u.register_gpu(u0, -1, c.hClient)
    u.register_gpu(u1, -1, c.hClient)
    assert peer_access(u, UVM_ENABLE_PEER_ACCESS, u0, u1) == 0
    assert _nvsim("uvm_peers") == 1
    # The driver's own rules: a pair enabled twice, a GPU with itself.
    assert peer_access(u, UVM_ENABLE_PEER_ACCESS, u1, u0) == NV_ERR_INVALID_DEVICE
    assert peer_access(u, UVM_ENABLE_PEER_ACCESS, u0, u0) == NV_ERR_INVALID_DEVICE
    assert peer_access(u, UVM_DISABLE_PEER_ACCESS, u1, u0) == 0
    assert _nvsim("uvm_peers") == 0
    assert peer_access(u, UVM_ENABLE_PEER_ACCESS, u0, u1) == 0
    u.close()                           # the VA space goes with its pairs
    assert _nvsim("uvm_peers") == 0


def test_uvm_peer_access_toward_a_gpu_outside_the_slice_is_refused(make_slice):
    _two_gpu_slices_needed()
    s0 = make_slice(gpus=((0, 64 * MiB),))
    s1 = make_slice(gpus=((1, 64 * MiB),))
    c0, c1 = s0.client(), s1.client()
    u0 = gpu_uuid(c0, c0.open_gpus()[0])
    u1 = gpu_uuid(c1, c1.open_gpus()[0])
    u = s0.uvm()
    u.initialize()
    u.register_gpu(u0, -1, c0.hClient)
    for a, b in ((u0, u1), (u1, u0), (u0, bytes(range(16)))):
        assert peer_access(u, UVM_ENABLE_PEER_ACCESS, a, b) == NV_ERR_INVALID_DEVICE
        assert peer_access(u, UVM_DISABLE_PEER_ACCESS, a, b) == NV_ERR_INVALID_DEVICE
    assert _nvsim("uvm_peers") == 0


# ------------------------------------------------------------ the sibling
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
    lib.sibling_set_target.argtypes = [ctypes.c_void_p]
    return lib


@pytest.fixture
def delay():
    """delay(nr): nvsim sleeps DELAY_MS before reading escape nr's parameters."""
    def _set(nr: int, ms: int = DELAY_MS, uvm: bool = False) -> None:
        (NVSIM / ("delay_uvm" if uvm else "delay_nr")).write_text(str(nr))
        (NVSIM / "delay_out").write_text("0")
        (NVSIM / "delay_ms").write_text(str(ms))
    yield _set
    (NVSIM / "delay_ms").write_text("0")
    (NVSIM / "delay_nr").write_text("0")
    (NVSIM / "delay_uvm").write_text("0")


def _in_flight(sibling, target, forged: bytes, call):
    """call() while the sibling writes forged over target (the caller's own
    parameters) once nvsim's delay holds the driver call asleep."""
    fb = ctypes.create_string_buffer(forged, len(forged))
    sibling.sibling_set_target(ctypes.addressof(target))
    assert sibling.sibling_start(MODE_USER, ctypes.addressof(fb), len(forged)) == 0
    try:
        return call()
    finally:
        res = Result()
        sibling.sibling_stop(ctypes.byref(res))
        assert res.writes == 1, "the sibling never wrote: the test proves nothing"


def test_sibling_cannot_give_p2p_peer_ids_in_flight(sibling, delay, two):
    """The check is on vgpu.ko's copy, and that copy is what the driver
    reads: the caller's parameters rewritten after the check (peer ids, the
    GPU-wide state the check keeps for RM) do not reach the driver."""
    sl, c, g0, g1 = two
    rel = c.version or nvrel.BASE
    params = p2p_params(rel, g0.hSubdevice, g1.hSubdevice)
    forged = bytes(p2p_params(rel, g0.hSubdevice, g1.hSubdevice, mask=8, peer_mask=8).raw)
    h = c.new_handle()
    p = A.NVOS64_PARAMETERS(hRoot=c.hClient, hObjectParent=c.hClient, hObjectNew=h,
                            hClass=NV50_P2P, pAllocParms=ctypes.addressof(params),
                            paramsSize=len(params.raw))
    delay(A.NV_ESC_RM_ALLOC)
    _in_flight(sibling, params, forged, lambda: c.escape(A.NV_ESC_RM_ALLOC, p))
    assert p.status == 0, hex(p.status)
    assert _nvsim("p2p") == 1
    assert _nvsim("p2p_chosen_ids") == 0, "the driver read the rewritten parameters"
    c.free(p.hObjectNew, parent=c.hClient)


# ------------------------------------------------------------------ CUDA IPC
OS_UNIX_EXPORT_OBJECT_TO_FD = 0x3D05
OS_UNIX_IMPORT_OBJECT_FROM_FD = 0x3D06
OS_UNIX_GET_EXPORT_OBJECT_INFO = 0x3D08
EXPORT_OBJECT_TYPE_RM = 1
NV_ERR_INVALID_PARAMETER = 0x3B


class UnixObject(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("hDevice", ctypes.c_uint32),
                ("hParent", ctypes.c_uint32), ("hObject", ctypes.c_uint32)]


class ExportToFd(ctypes.Structure):
    _fields_ = [("object", UnixObject), ("fd", ctypes.c_int32), ("flags", ctypes.c_uint32)]


class ImportFromFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int32), ("object", UnixObject)]


class ExportInfo(ctypes.Structure):         # 595.45.04's; fd, deviceInstance alike in all
    _fields_ = [("fd", ctypes.c_int32), ("deviceInstance", ctypes.c_uint32),
                ("gpuInstanceId", ctypes.c_uint32), ("maxObjects", ctypes.c_uint16),
                ("metadata", ctypes.c_uint8 * 64)]


def export_to_fd(c, g, hmem: int, fd: int) -> None:
    p = ExportToFd(object=UnixObject(type=EXPORT_OBJECT_TYPE_RM, hDevice=g.hDevice,
                                     hParent=g.hDevice, hObject=hmem), fd=fd)
    c.control(c.hClient, OS_UNIX_EXPORT_OBJECT_TO_FD, p)


def import_params(g, fd: int) -> ImportFromFd:
    return ImportFromFd(fd=fd, object=UnixObject(type=EXPORT_OBJECT_TYPE_RM, hDevice=g.hDevice,
                                                 hParent=g.hDevice, hObject=0))


def import_from_fd(c, g, fd: int) -> int:
    p = import_params(g, fd)
    c.control(c.hClient, OS_UNIX_IMPORT_OBJECT_FROM_FD, p)
    assert p.object.hObject and p.fd == fd
    c.parents[p.object.hObject] = g.hDevice
    return p.object.hObject


def _fb(gpu: int = 0) -> int:
    return read_state().fb_used(gpu)


def _vexports() -> int:
    from vgpu_fixtures import read_vstate
    return read_vstate().get("exports", 0)


def _wait(pred, what: str, timeout: float = 5.0) -> None:
    from polling import wait_until
    assert wait_until(pred, timeout=timeout), what


def test_ipc_within_the_slice_holds_the_charge_until_the_last_importer(make_slice):
    """CUDA IPC between the slice's own clients (each a control file of its
    own, as two processes): the exported memory stays charged to the
    slice while the exporter's object, the export file or any import
    holds it, and goes back with the last of them -- vgpu.ko's charge and
    nvsim's FB together."""
    sl = make_slice(gpus=((0, 64 * MiB),))
    a, b, d = sl.client(), sl.client(), sl.client()
    ga, gb, gd = a.open_gpus()[0], b.open_gpus()[0], d.open_gpus()[0]
    fb0 = _fb()
    h = ga.alloc(8 * MiB)
    assert sl.used() == 8 * MiB and _fb() == fb0 + 8 * MiB
    efd = sl.open("nvidiactl")             # CUDA's export file: a control file
    export_to_fd(a, ga, h, efd)
    assert _nvsim("exports") == 1 and _vexports() == 1
    info = ExportInfo(fd=efd)
    a.control(a.hClient, OS_UNIX_GET_EXPORT_OBJECT_INFO, info)
    assert info.deviceInstance == 0 and info.fd == efd   # the slice's number
    hb = import_from_fd(b, gb, efd)
    hd = import_from_fd(d, gd, efd)
    assert b.surface_size(hb) == 8 * MiB
    # Nothing more is charged: one FB, one charge, shared.
    assert sl.used() == 8 * MiB and _fb() == fb0 + 8 * MiB
    a.free(h)                               # the exporter lets go first
    assert sl.used() == 8 * MiB and _fb() == fb0 + 8 * MiB
    sl.close_fd(efd)                        # the export file goes (its dup with it)
    _wait(lambda: _nvsim("exports") == 0 and _vexports() == 0, "the export stayed")
    assert sl.used() == 8 * MiB and _fb() == fb0 + 8 * MiB
    b.free(hb)
    assert sl.used() == 8 * MiB and _fb() == fb0 + 8 * MiB
    d.free(hd)                              # the last importer
    assert sl.used() == 0 and _fb() == fb0


def test_ipc_export_file_alone_holds_the_charge(make_slice):
    """Export, free the object, import nothing: the export file's dup holds
    the FB in the driver until the file's release, and the charge with it
    (an export-free-allocate loop cannot hold FB no charge covers)."""
    sl = make_slice(gpus=((0, 16 * MiB),))
    a = sl.client()
    ga = a.open_gpus()[0]
    fb0 = _fb()
    files = []
    for _ in range(2):
        h = ga.alloc(8 * MiB)
        efd = sl.open("nvidiactl")
        export_to_fd(a, ga, h, efd)
        a.free(h)
        files.append(efd)
    assert sl.used() == 16 * MiB and _fb() == fb0 + 16 * MiB
    with pytest.raises(RmError) as e:      # the quota holds
        ga.alloc(8 * MiB)
    assert e.value.status == A.NV_ERR_NO_MEMORY
    for efd in files:
        sl.close_fd(efd)
    _wait(lambda: sl.used() == 0, "the charge outlived the export file")
    assert _fb() == fb0 and _nvsim("exports") == 0


def test_ipc_from_another_slice_is_refused(make_slice):
    """The export file and the import file must be control files of the
    caller's slice: another slice's is answered as the driver answers a
    descriptor that is not its control file, before the driver sees it;
    only tracked memory of the caller's own client is exported."""
    s0 = make_slice(gpus=((0, 64 * MiB),))
    s1 = make_slice(gpus=((0, 64 * MiB),))
    a, x = s0.client(), s1.client()
    ga, gx = a.open_gpus()[0], x.open_gpus()[0]
    for _ in range(32):                 # a handle x's client does not have
        a.new_handle()
    h = ga.alloc(4 * MiB)
    efd = s0.open("nvidiactl")
    export_to_fd(a, ga, h, efd)
    objects = read_state().objects
    # Another slice imports from this slice's export file: refused.
    with pytest.raises(RmError) as e:
        import_from_fd(x, gx, efd)
    assert e.value.status == NV_ERR_INVALID_PARAMETER
    # ... or exports into it, or into a file that is no control file.
    hx = gx.alloc(MiB)
    for fd in (efd, s1.open("nvidia0"), -5):
        with pytest.raises(RmError) as e:
            export_to_fd(x, gx, hx, fd)
        assert e.value.status == NV_ERR_INVALID_PARAMETER, fd
    # Only memory vgpu.ko tracks in the caller's own client.
    xfd = s1.open("nvidiactl")
    with pytest.raises(RmError) as e:
        export_to_fd(x, gx, gx.hDevice, xfd)
    assert e.value.status == A.NV_ERR_INSUFFICIENT_PERMISSIONS
    with pytest.raises(RmError) as e:
        export_to_fd(x, gx, h, xfd)          # this slice's memory, another client's
    assert e.value.status == A.NV_ERR_OBJECT_NOT_FOUND
    assert read_state().objects == objects + 1     # hx only
    assert s1.used() == MiB and s0.used() == 4 * MiB
    # Within the slice it works.
    b = s0.client()
    hb = import_from_fd(b, b.open_gpus()[0], efd)
    assert b.surface_size(hb) == 4 * MiB


def test_sibling_cannot_redirect_an_import(sibling, delay, make_slice):
    """The import names its export file by descriptor; a sibling that
    rewrites the caller's parameters after vgpu.ko's check to name another
    slice's export file changes nothing: the driver reads vgpu.ko's copy,
    with the proxy of the file vgpu.ko checked."""
    s0 = make_slice(gpus=((0, 64 * MiB),))
    s1 = make_slice(gpus=((0, 64 * MiB),))
    a, x = s0.client(), s1.client()
    ga, gx = a.open_gpus()[0], x.open_gpus()[0]
    ours = s0.open("nvidiactl")
    export_to_fd(a, ga, ga.alloc(4 * MiB), ours)
    theirs = s1.open("nvidiactl")
    export_to_fd(x, gx, gx.alloc(16 * MiB), theirs)
    b = s0.client()
    gb = b.open_gpus()[0]
    p = import_params(gb, ours)
    forged = bytes(import_params(gb, theirs))
    delay(A.NV_ESC_RM_CONTROL)
    _in_flight(sibling, p, forged, lambda: b.control(b.hClient, OS_UNIX_IMPORT_OBJECT_FROM_FD, p))
    h = p.object.hObject
    b.parents[h] = gb.hDevice
    (NVSIM / "delay_ms").write_text("0")
    assert b.surface_size(h) == 4 * MiB, "the driver imported the other slice's export"
    assert s0.used() == 4 * MiB and s1.used() == 16 * MiB



MODE_SWAP = 5


@pytest.mark.parametrize("many", [False, True], ids=["one", "several"])
def test_sibling_rewriting_the_imported_handle_after_the_copy_out(sibling, make_slice, many):
    """The import's results come back on the call page, which the driver's
    copy-out made writable: a sibling (tests/vm/sibling.c MODE_SWAP, in
    nvsim's delay after the copy-out) rewrites the imported handle to one
    of an object the client has.  vgpu.ko tracks the handle it chose and
    checked, never the one read back: the import is tracked where the
    driver made it, and the other object is neither taken nor freed.
    Failed with 0f9044b's ipc.c change reverted: the existing object was
    freed in the driver (still tracked) and the import left untracked
    holding the export's memory."""
    sl = make_slice(gpus=((0, 64 * MiB),))
    a, b = sl.client(), sl.client()
    ga, gb = a.open_gpus()[0], b.open_gpus()[0]
    efd = sl.open("nvidiactl")
    hmem = ga.alloc(4 * MiB)
    if many:
        export_objects(a, ga, efd, [hmem], max_objects=1)
    else:
        export_to_fd(a, ga, hmem, efd)
    victim = gb.alloc(2 * MiB)
    fb0 = _fb()
    hnew = b.new_handle()
    if many:
        p = ImportObjects(fd=efd, hParent=gb.hDevice, numObjects=1, index=0)
        p.objects[0] = hnew
        cmd = OS_UNIX_IMPORT_OBJECTS_FROM_FD
        old, new = (struct.pack("<2I", gb.hDevice, hnew), struct.pack("<2I", gb.hDevice, victim))
    else:
        p = ImportFromFd(fd=efd, object=UnixObject(type=EXPORT_OBJECT_TYPE_RM, hDevice=gb.hDevice,
                                                   hParent=gb.hDevice, hObject=hnew))
        cmd = OS_UNIX_IMPORT_OBJECT_FROM_FD
        old = struct.pack("<4I", EXPORT_OBJECT_TYPE_RM, gb.hDevice, gb.hDevice, hnew)
        new = struct.pack("<4I", EXPORT_OBJECT_TYPE_RM, gb.hDevice, gb.hDevice, victim)
    buf = ctypes.create_string_buffer(old + new, len(old) + len(new))
    (NVSIM / "delay_nr").write_text(str(A.NV_ESC_RM_CONTROL))
    (NVSIM / "delay_out").write_text("1")
    (NVSIM / "delay_ms").write_text(str(DELAY_MS))
    assert sibling.sibling_start(MODE_SWAP, ctypes.addressof(buf), len(buf)) == 0
    try:
        try:
            b.control(b.hClient, cmd, p)
            err = None
        except RmError as e:
            err = e.status
    finally:
        res = Result()
        sibling.sibling_stop(ctypes.byref(res))
        (NVSIM / "delay_ms").write_text("0")
        (NVSIM / "delay_out").write_text("0")
        (NVSIM / "delay_nr").write_text("0")
    assert res.writes >= 1, "the sibling never rewrote the handle: the test proves nothing"
    assert err is None, f"the import failed ({err:#x}): the rewritten handle was taken"
    assert (p.objects[0] if many else p.object.hObject) == hnew
    b.parents[hnew] = gb.hDevice
    assert _fb() == fb0, "the existing object was freed in the driver"
    assert b.surface_size(victim) == 2 * MiB
    assert b.surface_size(hnew) == 4 * MiB
    a.free(hmem)
    sl.close_fd(efd)
    _wait(lambda: _nvsim("exports") == 0 and _vexports() == 0, "the export stayed")
    assert sl.used() == 6 * MiB, "the import does not hold the export's charge"
    b.free(hnew)
    gb.free(victim)
    assert sl.used() == 0 and _fb() == fb0 - 6 * MiB


OS_UNIX_EXPORT_OBJECTS_TO_FD = 0x3D0B
OS_UNIX_IMPORT_OBJECTS_FROM_FD = 0x3D0C


class ExportObjects(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int32), ("hDevice", ctypes.c_uint32),
                ("maxObjects", ctypes.c_uint16), ("metadata", ctypes.c_uint8 * 64),
                ("objects", ctypes.c_uint32 * 512), ("numObjects", ctypes.c_uint16),
                ("index", ctypes.c_uint16)]


class ImportObjects(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int32), ("hParent", ctypes.c_uint32),
                ("objects", ctypes.c_uint32 * 128), ("objectTypes", ctypes.c_uint8 * 128),
                ("numObjects", ctypes.c_uint16), ("index", ctypes.c_uint16)]


def export_objects(c, g, fd: int, handles, index: int = 0, max_objects: int = 4) -> None:
    p = ExportObjects(fd=fd, hDevice=g.hDevice, maxObjects=max_objects,
                      numObjects=len(handles), index=index)
    for i, h in enumerate(handles):
        p.objects[i] = h
    c.control(c.hClient, OS_UNIX_EXPORT_OBJECTS_TO_FD, p)


def import_objects(c, g, fd: int, n: int, index: int = 0) -> list[int]:
    p = ImportObjects(fd=fd, hParent=g.hDevice, numObjects=n, index=index)
    c.control(c.hClient, OS_UNIX_IMPORT_OBJECTS_FROM_FD, p)
    out = []
    for i in range(n):
        if p.objectTypes[i]:
            c.parents[p.objects[i]] = g.hDevice
            out.append(p.objects[i])
    return out


def test_ipc_of_several_objects_per_file(make_slice):
    """EXPORT_OBJECTS_TO_FD / IMPORT_OBJECTS_FROM_FD (what cuMem's POSIX fd
    handles use): per-index slots, each holding its object's charge until the
    export file's release; an import of the slots shares them; a slot is
    never exported over (CUDA uses a new file); another slice is refused."""
    sl = make_slice(gpus=((0, 64 * MiB),))
    other = make_slice(gpus=((0, 64 * MiB),))
    a, b, x = sl.client(), sl.client(), other.client()
    ga, gb, gx = a.open_gpus()[0], b.open_gpus()[0], x.open_gpus()[0]
    fb0 = _fb()
    h1, h2 = ga.alloc(2 * MiB), ga.alloc(4 * MiB)
    efd = sl.open("nvidiactl")
    export_objects(a, ga, efd, [h1, h2])            # slots 0 and 1 of 4
    assert _nvsim("exports") == 2 and _vexports() == 2
    with pytest.raises(RmError) as e:               # slot 1 is taken
        export_objects(a, ga, efd, [h1], index=1)
    assert e.value.status == A.NV_ERR_STATE_IN_USE
    with pytest.raises(RmError) as e:               # past the file's 4 slots
        export_objects(a, ga, efd, [h1, h2], index=3)
    assert e.value.status == A.NV_ERR_OUT_OF_RANGE
    a.free(h1)
    a.free(h2)
    assert sl.used() == 6 * MiB and _fb() == fb0 + 6 * MiB
    got = import_objects(b, gb, efd, 4)             # slots 2, 3 empty: skipped
    assert sorted(b.surface_size(h) for h in got) == [2 * MiB, 4 * MiB]
    with pytest.raises(RmError) as e:
        import_objects(x, gx, efd, 2)
    assert e.value.status == NV_ERR_INVALID_PARAMETER
    sl.close_fd(efd)
    _wait(lambda: _nvsim("exports") == 0 and _vexports() == 0, "the exports stayed")
    assert sl.used() == 6 * MiB and _fb() == fb0 + 6 * MiB
    for h in got:
        b.free(h)
    assert sl.used() == 0 and _fb() == fb0 and other.used() == 0

# ------------------------------------------- the rest of nvproxy's default list
def _nvsim_stat(key: str) -> int:
    for line in (NVSIM / "stats").read_text().splitlines():
        if line.startswith(key + " "):
            return int(line.split()[1], 16)
    raise AssertionError(f"nvsim stats lack {key}")


DEBUGGER_OWN = (0x83DE0307, 0x83DE0308, 0x83DE0309, 0x83DE030C, 0x83DE0310, 0x83DE031F, 0x83DE0320)
DEBUGGER_REFUSED = (0x83DE0315, 0x83DE0317, 0x83DE0318)
CUDA_LIMIT_SET_CONTROL = 0x00801909
NV20_SUBDEVICE_DIAG = 0x208F


def test_debugger_session_controls_diag_and_cuda_limit(make_slice):
    """The session's own debug state reaches the driver (on any object the
    caller owns, the driver answers for the object's class); SUSPEND and
    RESUME (channel enables behind the scheduler) and READ_MEMORY (a buffer
    pointer vgpu.ko does not carry) do not.  The CUDA performance limit is
    answered NV_OK without reaching the driver, and the diagnostic
    subdevice object is forwarded."""
    sl = make_slice()
    c = sl.client()
    g = c.open_gpus()[0]
    rel = c.version or nvrel.BASE
    for cmd in DEBUGGER_OWN + DEBUGGER_REFUSED:
        size = _policy_size(rel, "control", cmd, 8)
        try:
            c.control(g.hSubdevice, cmd, bytes(size))
            status = 0
        except RmError as e:
            status = e.status
        if cmd in DEBUGGER_OWN:
            assert _nvsim_stat("last_control") == cmd, f"{cmd:#x} refused before the driver"
            assert status != A.NV_ERR_INSUFFICIENT_PERMISSIONS, hex(cmd)
        else:
            assert status == A.NV_ERR_INSUFFICIENT_PERMISSIONS, hex(cmd)
            assert _nvsim_stat("last_control") != cmd, f"{cmd:#x} reached the driver"
    before = _nvsim_stat("last_control")
    size = _policy_size(rel, "control", CUDA_LIMIT_SET_CONTROL, -1)
    try:
        c.control(g.hDevice, CUDA_LIMIT_SET_CONTROL, bytes(size if size >= 0 else 4))
    except RmError as e:
        # a release whose RM has no such control (535.261.03's tables lack
        # it): vgpu.ko gives the driver's own answer, NOT_SUPPORTED
        assert size < 0 and e.status == A.NV_ERR_NOT_SUPPORTED, (rel, e)
    assert _nvsim_stat("last_control") == before, "the GPU-wide switch reached the driver"
    try:
        c.free(c.alloc(g.hSubdevice, NV20_SUBDEVICE_DIAG))
    except RmError as e:                # nvsim has no such class: the driver's answer
        assert e.status != A.NV_ERR_INSUFFICIENT_PERMISSIONS
    assert _nvsim_stat("last_class") == NV20_SUBDEVICE_DIAG, "refused before the driver"
