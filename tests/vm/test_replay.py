"""vgpu-replay against bare nvsim (docs/trace.md, "Replay").

The trace is made here, call by call, the way vgpu.ko would record it: each
call is made on nvsim through vgpu.abi.nvclient's raw escapes, and its
parameters before and after, the pointed-to parameters and the file a
descriptor in them names go into the record.  The calls cover each
translation the replay makes: a root client whose handle the driver chose,
objects with driver-chosen handles (RM_ALLOC, DUP, VID_HEAP), descriptors in
parameters (REGISTER_FD, RM_MAP_MEMORY, RM_ALLOC_MEMORY), a control through
XFER, an mmap at a fixed address, RM_UNMAP_MEMORY naming the cookie, an OS
descriptor over memory the replay must map first, UVM, and controls whose
parameters point to lists (GET_CLASSLIST, first with a NULL list for the
count, then with one; GR_GET_INFO), recorded in "lists" with the lists in
memory at an address the replay has nothing at.  Everything is freed and
closed before the replay runs, in a process of its own, and must then
report no difference; with one recorded status changed, that call; without
the lists, the calls that had one.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi import replay as R
from vgpu.abi import trace as T
from vgpu.abi.nvclient import raw_ioctl, xfer_ioctl

ROOT = Path(__file__).resolve().parents[2]
DEV = os.environ.get("VGPU_DEV_PREFIX", "/dev")
MiB = 1 << 20
# Far from where Python, its libraries and the heap lie in either process.
MAP_ADDR = 0x7E5A00000000
OS_DESC_ADDR = 0x7E5B00000000
LIST_ADDR = 0x7E5C00000000             # the recorded lists; nothing of the replay's there

pytestmark = pytest.mark.skipif(
    os.environ.get("VGPU_IN_VM") != "1" or not os.path.exists(os.path.join(DEV, "nvidiactl")),
    reason="runs inside the VM test bed against nvsim (tools/vm/vm.py run --load-nvsim)")


class Recorder:
    """Makes calls on nvsim and records them as vgpu.ko's trace would."""

    def __init__(self):
        self.records: list[dict] = []
        self.fds: dict[int, int] = {}         # file number -> fd
        self.nodes: dict[int, str] = {}
        self.next_file = 100
        self.ex = R.Executor()
        self.maps: list[tuple[int, int]] = []

    def _add(self, file: int, op: str, ret: int = 0, **kw) -> dict:
        d = {"seq": len(self.records) + 1, "t_ns": 0, "dur_ns": 0, "pid": os.getpid(),
             "tid": os.getpid(), "file": file, "node": self.nodes[file], "op": op, "ret": ret}
        d.update(kw)
        self.records.append(d)
        return d

    def open(self, node: str) -> int:
        path = R.node_path(DEV, node)
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        self.next_file += 1
        self.fds[self.next_file], self.nodes[self.next_file] = fd, node
        self._add(self.next_file, "open", open_flags=os.O_RDWR)
        return self.next_file

    def close(self, file: int) -> None:
        os.close(self.fds.pop(file))
        self._add(file, "close")

    def esc(self, file: int, nr: int, params, *, pointed=None, fd_at=None, xfer=False,
            item=None, lists=()) -> bytes:
        """Escape nr with params (ctypes) on file; pointed is the ctypes
        object a pointer in them names (copied before and after); fd_at is
        (offset, file) of a descriptor in them; lists are (offset in
        pointed, the ctypes object its pointer names, or None for NULL), copied
        before and after.  Returns the bytes after."""
        before = bytes(params)
        pin = bytes(pointed) if pointed is not None else None
        lists_in = [None if o is None else bytes(o) for _, o in lists]
        fd = self.fds[file]
        ret = 0
        try:
            out = bytes(xfer_ioctl(fd, nr, before) if xfer else raw_ioctl(fd, nr, before))
        except OSError as e:
            ret, out = -e.errno, bytes(getattr(e, "data", before))
        kw = {"nr": nr, "name": "", "size": len(before), "in": before.hex(), "out": out.hex()}
        st = T.status_of(nr, False, len(before), out)
        if st is not None:
            kw.update(status=st, status_name=A.status_name(st))
        if pointed is not None:
            kw.update(params_ptr=ctypes.addressof(pointed), params_in=pin.hex(),
                      params_out=bytes(pointed).hex())
        if lists:
            kw["lists"] = []
            for (off, o), lin in zip(lists, lists_in):
                e = {"offset": off, "ptr": 0 if o is None else ctypes.addressof(o)}
                if o is not None:
                    e.update({"in": lin.hex(), "out": bytes(o).hex()})
                kw["lists"].append(e)
        if fd_at is not None:
            kw["fd"] = {"offset": fd_at[0], "file": fd_at[1]}
        if xfer:
            kw["xfer"] = True
        if item is not None:
            kw["item"] = {"kind": item[0], "number": item[1], "name": ""}
        self._add(file, "ioctl", ret, **kw)
        assert ret == 0 and st in (None, A.NV_OK), (nr, ret, st)
        return out

    def uvm(self, file: int, cmd: int, params) -> None:
        before = bytes(params)
        buf = ctypes.create_string_buffer(before, len(before))
        r = self.ex._ioctl(self.fds[file], cmd, ctypes.addressof(buf))
        ret = -ctypes.get_errno() if r < 0 else 0
        out = buf.raw
        st = T.status_of(cmd, True, len(before), out)
        self._add(file, "ioctl", ret, nr=cmd, size=len(before), **{"in": before.hex()},
                  out=out.hex(), status=st, status_name=A.status_name(st))
        assert ret == 0 and st == A.NV_OK, (cmd, ret, st)

    def anon(self, addr: int, length: int) -> None:
        """Memory of the process's own at addr (not a traced call)."""
        self._map(R.Mmap(addr, length, mmap.PROT_READ | mmap.PROT_WRITE,
                         mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | R.MAP_FIXED_NOREPLACE, -1, 0))

    def mmap(self, file: int, addr: int, length: int) -> None:
        self._map(R.Mmap(addr, length, mmap.PROT_READ | mmap.PROT_WRITE,
                         mmap.MAP_SHARED | R.MAP_FIXED_NOREPLACE, self.fds[file], 0))
        self._add(file, "mmap", addr=addr, length=length, offset=0, prot="rws")

    def _map(self, m: R.Mmap) -> None:
        ret, got = self.ex.mmap(m)
        assert ret == 0 and got == m.addr, (hex(m.addr), ret)
        self.maps.append((got, m.length))

    def close_all(self) -> None:
        for addr, length in self.maps:
            self.ex.munmap(addr, length)
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def write(self, path: Path) -> str:
        head = T.header_json("replay-test", 0, [{"index": 0, "memory_limit": 0}],
                             release="595.45.04")
        path.write_text("\n".join(json.dumps(d) for d in [head, *self.records]) + "\n")
        return str(path)


def make_trace(rc: Recorder) -> dict[str, int]:
    """The calls; returns the seq of a few of them by name."""
    seqs = {}
    ctl = rc.open("ctl")
    rc.esc(ctl, A.NV_ESC_CHECK_VERSION_STR,
           A.nv_ioctl_rm_api_version_t(cmd=A.NV_RM_API_VERSION_CMD_QUERY))
    cards = (A.nv_ioctl_card_info_t * 8)()
    out = rc.esc(ctl, A.NV_ESC_CARD_INFO, cards)
    gpu_id = A.nv_ioctl_card_info_t.from_bytes(out).gpu_id
    rc.esc(ctl, A.NV_ESC_ATTACH_GPUS_TO_FD, (ctypes.c_uint32 * 1)(gpu_id))

    out = rc.esc(ctl, A.NV_ESC_RM_ALLOC, A.NVOS64_PARAMETERS(hClass=A.NV01_ROOT_CLIENT),
                 item=("class", A.NV01_ROOT_CLIENT))
    hclient = A.NVOS64_PARAMETERS.from_bytes(out).hObjectNew
    assert hclient

    gpu = rc.open("gpu0")
    rc.esc(gpu, A.NV_ESC_REGISTER_FD, A.nv_ioctl_register_fd_t(ctl_fd=rc.fds[ctl]),
           fd_at=(0, ctl))

    def alloc(parent, hclass, cp=None):
        p = A.NVOS64_PARAMETERS(hRoot=hclient, hObjectParent=parent, hObjectNew=0, hClass=hclass,
                                pAllocParms=ctypes.addressof(cp) if cp is not None else 0,
                                paramsSize=ctypes.sizeof(cp) if cp is not None else 0)
        out = rc.esc(ctl, A.NV_ESC_RM_ALLOC, p, pointed=cp, item=("class", hclass))
        h = A.NVOS64_PARAMETERS.from_bytes(out).hObjectNew
        assert h
        return h

    hdev = alloc(hclient, A.NV01_DEVICE_0, A.NV0080_ALLOC_PARAMETERS(deviceId=0))
    hsub = alloc(hdev, A.NV20_SUBDEVICE_0, A.NV2080_ALLOC_PARAMETERS(subDeviceId=0))

    def fb_info(xfer=False):
        fp = A.NV2080_CTRL_FB_GET_INFO_V2_PARAMS(fbInfoListSize=2)
        fp.fbInfoList[0].index = A.NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE
        fp.fbInfoList[1].index = A.NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE
        p = A.NVOS54_PARAMETERS(hClient=hclient, hObject=hsub,
                                cmd=A.NV2080_CTRL_CMD_FB_GET_INFO_V2,
                                params=ctypes.addressof(fp), paramsSize=ctypes.sizeof(fp))
        rc.esc(ctl, A.NV_ESC_RM_CONTROL, p, pointed=fp, xfer=xfer,
               item=("control", A.NV2080_CTRL_CMD_FB_GET_INFO_V2))
        return len(rc.records)

    seqs["fb_info"] = fb_info()
    seqs["fb_info_xfer"] = fb_info(xfer=True)

    # controls with embedded lists, the lists at LIST_ADDR
    rc.anon(LIST_ADDR, 64 * 1024)
    CL = A.NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS

    def control(hobj, cmd, cp, lists):
        p = A.NVOS54_PARAMETERS(hClient=hclient, hObject=hobj, cmd=cmd,
                                params=ctypes.addressof(cp), paramsSize=ctypes.sizeof(cp))
        rc.esc(ctl, A.NV_ESC_RM_CONTROL, p, pointed=cp, lists=lists, item=("control", cmd))
        return len(rc.records)

    cp = CL(numClasses=0, classList=0)
    seqs["classlist_count"] = control(hdev, A.NV0080_CTRL_CMD_GPU_GET_CLASSLIST, cp,
                                      [(CL.classList.offset, None)])
    n = cp.numClasses
    assert n
    classes = (ctypes.c_uint32 * n).from_address(LIST_ADDR)
    cp = CL(numClasses=n, classList=LIST_ADDR)
    seqs["classlist"] = control(hdev, A.NV0080_CTRL_CMD_GPU_GET_CLASSLIST, cp,
                                [(CL.classList.offset, classes)])
    assert A.NV01_DEVICE_0 in list(classes) and cp.numClasses == n
    GI = A.NV2080_CTRL_GR_GET_INFO_PARAMS
    info = (A.NV2080_CTRL_GR_INFO * 2).from_address(LIST_ADDR + 4096)
    info[0].index = A.NV2080_CTRL_GR_INFO_INDEX_SM_VERSION
    info[1].index = A.NV2080_CTRL_GR_INFO_INDEX_MAX_WARPS_PER_SM
    gp = GI(grInfoListSize=2, grInfoList=LIST_ADDR + 4096)
    seqs["gr_info"] = control(hsub, A.NV2080_CTRL_CMD_GR_GET_INFO, gp,
                              [(GI.grInfoList.offset, info)])
    assert info[0].data and info[1].data

    hmem = alloc(hdev, A.NV01_MEMORY_LOCAL_USER,
                 A.NV_MEMORY_ALLOCATION_PARAMS(owner=0x5647, size=2 * MiB))
    out = rc.esc(ctl, A.NV_ESC_RM_DUP_OBJECT,
                 A.NVOS55_PARAMETERS(hClient=hclient, hParent=hdev, hObject=0,
                                     hClientSrc=hclient, hObjectSrc=hmem))
    hdup = A.NVOS55_PARAMETERS.from_bytes(out).hObject
    vh = A.NVOS32_PARAMETERS(hRoot=hclient, hObjectParent=hdev,
                             function=A.NVOS32_FUNCTION_ALLOC_SIZE)
    vh.data.AllocSize.owner, vh.data.AllocSize.size = 0x5647, MiB
    out = rc.esc(ctl, A.NV_ESC_RM_VID_HEAP_CONTROL, vh)
    hheap = A.NVOS32_PARAMETERS.from_bytes(out).data.AllocSize.hMemory
    assert hdup and hheap

    # CUDA's mapping: a new GPU file, RM_MAP_MEMORY naming it, mmap at offset 0
    mapf = rc.open("gpu0")
    mp = A.nv_ioctl_nvos33_parameters_with_fd(fd=rc.fds[mapf])
    mp.params.hClient, mp.params.hDevice, mp.params.hMemory = hclient, hdev, hmem
    mp.params.length = 2 * MiB
    out = rc.esc(ctl, A.NV_ESC_RM_MAP_MEMORY, mp,
                 fd_at=(A.nv_ioctl_nvos33_parameters_with_fd.fd.offset, mapf))
    cookie = A.nv_ioctl_nvos33_parameters_with_fd.from_bytes(out).params.pLinearAddress
    rc.mmap(mapf, MAP_ADDR, 2 * MiB)
    rc.esc(ctl, A.NV_ESC_RM_UNMAP_MEMORY,
           A.NVOS34_PARAMETERS(hClient=hclient, hDevice=hdev, hMemory=hmem,
                               pLinearAddress=cookie))

    # cuMemHostRegister's path: the replay must map memory at the address first
    rc.anon(OS_DESC_ADDR, 64 * 1024)
    od = A.nv_ioctl_nvos02_parameters_with_fd(fd=rc.fds[gpu])
    q = od.params
    q.hRoot, q.hObjectParent, q.hObjectNew = hclient, hdev, 0x5C000001
    q.hClass = A.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR
    q.flags = ((A.NVOS02_FLAGS_PHYSICALITY_NONCONTIGUOUS << A.NVOS02_FLAGS_PHYSICALITY_SHIFT)
               | (A.NVOS02_FLAGS_COHERENCY_CACHED << A.NVOS02_FLAGS_COHERENCY_SHIFT)
               | (A.NVOS02_FLAGS_MAPPING_NO_MAP << A.NVOS02_FLAGS_MAPPING_SHIFT))
    q.pMemory, q.limit = OS_DESC_ADDR, 64 * 1024 - 1
    rc.esc(gpu, A.NV_ESC_RM_ALLOC_MEMORY, od,
           fd_at=(A.nv_ioctl_nvos02_parameters_with_fd.fd.offset, gpu))

    uvm = rc.open("uvm")
    rc.uvm(uvm, A.UVM_INITIALIZE, A.UVM_INITIALIZE_PARAMS())

    for h in (0x5C000001, hheap, hdup, hmem, hdev):
        rc.esc(ctl, A.NV_ESC_RM_FREE, A.NVOS00_PARAMETERS(hRoot=hclient, hObjectParent=0,
                                                          hObjectOld=h))
    rc.esc(ctl, A.NV_ESC_RM_FREE, A.NVOS00_PARAMETERS(hRoot=hclient, hObjectOld=hclient))
    for f in (uvm, mapf, gpu, ctl):
        rc.close(f)
    return seqs


def replay(path: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vgpu.abi.replay", "--nodes", DEV, *args, path],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture
def recorded(tmp_path):
    rc = Recorder()
    try:
        seqs = make_trace(rc)
    finally:
        rc.close_all()
    return rc, seqs, tmp_path


def test_replay_of_a_trace_made_on_nvsim_matches(recorded):
    rc, _, tmp = recorded
    r = replay(rc.write(tmp / "good.jsonl"))
    n = len(rc.records)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [f"{n} calls replayed, 0 differ, 0 not replayed"]


def test_replay_reports_a_changed_status(recorded):
    rc, seqs, tmp = recorded
    seq = seqs["fb_info"]
    d = rc.records[seq - 1]
    d["status"], d["status_name"] = A.NV_ERR_GENERIC, "NV_ERR_GENERIC"
    r = replay(rc.write(tmp / "bad.jsonl"), "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert (doc["replayed"], doc["differ"], doc["not_replayed"]) == (len(rc.records), 1, 0)
    (c,) = doc["calls"]
    assert (c["seq"], c["result"], c["name"]) == (
        seq, "differ", "NV_ESC_RM_CONTROL control NV2080_CTRL_CMD_FB_GET_INFO_V2")
    assert c["recorded"] == {"ret": 0, "status": A.NV_ERR_GENERIC, "status_name": "NV_ERR_GENERIC"}
    assert c["replayed"] == {"ret": 0, "status": A.NV_OK, "status_name": "NV_OK"}


def test_replay_follows_the_recorded_lists(recorded):
    """Without "lists" the recorded pointers name nothing in the replay:
    the two calls that had a list differ, the NULL one does not."""
    rc, seqs, tmp = recorded
    with_list = {seqs["classlist"], seqs["gr_info"]}
    for d in rc.records:
        if d.get("lists"):
            assert d["lists"][0]["ptr"] == 0 or d["seq"] in with_list, d
            del d["lists"]
    r = replay(rc.write(tmp / "nolists.jsonl"), "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert {c["seq"] for c in doc["calls"]} == with_list, doc["calls"]
    for c in doc["calls"]:
        assert c["result"] == "differ" and c["recorded"]["status"] == A.NV_OK
        assert c["replayed"]["status"] == A.NV_ERR_INVALID_ADDRESS, c


def test_replay_of_a_call_whose_file_was_not_recorded(recorded):
    """A trace started after the process opened its files: what names one
    is not replayed, and says which file."""
    rc, seqs, tmp = recorded
    rc.records = [d for d in rc.records if not (d["op"] == "open" and d["node"] == "ctl")]
    r = replay(rc.write(tmp / "late.jsonl"), "--stop-at-first")
    assert r.returncode == 1, r.stdout + r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("seq 2 (line 2) ctl NV_ESC_CHECK_VERSION_STR: not replayed: file 101 "
                            "was never opened in the trace"), first
