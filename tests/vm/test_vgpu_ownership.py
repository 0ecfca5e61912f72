"""Existence is not ownership.

A root client is recorded for a control file only when the driver
says it belongs to that file's real file, never because the handle exists:
between vgpu.ko's probe (absent) and the driver's read another caller may
take the same handle, and the call then fails with
NV_ERR_INSERT_DUPLICATE_NAME while the handle exists -- another tenant's
client, or a host process's.  Before the fix vgpu.ko recorded it on the
strength of the probe: a host process's client was adopted by the slice's
file (which could then free it at kernel privilege), and another slice's,
already recorded, collided and was freed outright.

vgpu.ko's own root handles (its picks, 0xc1d80000 | n) are refused
to callers, and the question of a GPU's device instance at slice creation
uses a client whose handle the driver picks (read back from kernel memory):
a tenant holding root clients at the handles vgpu.ko used for it
(0xc1d7f000 | n) no longer makes a later slice fall back to the /dev minor.
Where the question cannot be asked at all, SLICE_NEW fails with an extack
message instead of guessing.

The race is made deterministic with nvsim's delay hook (debugfs delay_nr,
delay_ms, delay_count = 1: only the first caller's RM_ALLOC sleeps before
the driver reads it; delay_waiting says when it is asleep), so the second
caller overtakes it every time.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmClient
from vgpu.vgpuko.netlink import VgpuError
from vgpu_fixtures import MiB, _ids, nvsim_fb, status, wait_until
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, vgpu_leak_check  # noqa: F401

NVSIM = Path("/sys/kernel/debug/nvsim")
DELAY_MS = 3000
ROTATE = NVSIM / "instance_rotate"


def _w(name: str, value) -> None:
    (NVSIM / name).write_text(f"{value}\n")


def _r(name: str) -> int:
    return int((NVSIM / name).read_text().strip())


@pytest.fixture
def delay_once():
    """delay_once(nr): the next call of escape nr sleeps DELAY_MS before
    nvsim reads its parameters; the calls after it do not."""
    def _set(nr: int) -> None:
        _w("delay_count", 1)
        _w("delay_nr", nr)
        _w("delay_ms", DELAY_MS)
    yield _set
    _w("delay_ms", 0)
    _w("delay_nr", 0)
    _w("delay_count", 0)


def _nvsim_clients() -> int:
    for line in (NVSIM / "state").read_text().splitlines():
        f = line.split()
        if f[0] == "clients":
            return int(f[1])
    raise KeyError("clients")


def _overtaken(attacker: RmClient, handle: int, victim_alloc) -> int:
    """attacker asks for handle and sleeps in the driver after vgpu.ko's
    checks; victim_alloc() takes the handle meanwhile.  The attacker's
    status."""
    out: dict = {}

    def run() -> None:
        out["st"] = status(lambda: attacker.alloc_client(handle=handle))

    t = threading.Thread(target=run)
    t.start()
    try:
        assert wait_until(lambda: _r("delay_waiting") == 1, 20), \
            "the attacker's call never reached the driver"
        victim_alloc()
        # the attacker is still asleep: the victim's client came first
        assert _r("delay_waiting") == 1, "the delay ran out before the victim's call"
    finally:
        t.join(DELAY_MS / 1000 + 30)
    assert not t.is_alive()
    return out["st"]


def _alive(c: RmClient, h: int) -> bool:
    return status(lambda: c.control(h, A.NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS,
                                    bytes(128), client=h)) == 0


# ---------------------------------------- a root client is the caller's only if the driver says so
def test_collision_with_another_slices_client_never_frees_it(delay_once, make_slice):
    """Two tenants ask for the same root handle; the second overtakes the
    first in the driver.  The first gets the driver's
    NV_ERR_INSERT_DUPLICATE_NAME, and the second's client lives on (it was
    freed at kernel privilege when the first's record collided)."""
    a, b = make_slice(), make_slice()
    att = a.client(alloc_client=False)
    vic = b.client(alloc_client=False)
    h = 0x5e000000 | next(_ids)
    delay_once(A.NV_ESC_RM_ALLOC)
    st = _overtaken(att, h, lambda: vic.alloc_client(handle=h))
    assert st == A.NV_ERR_INSERT_DUPLICATE_NAME, hex(st)
    assert _alive(vic, h), "the victim's client was freed by the attacker's collision"
    # the attacker has nothing there: its free is refused, the client stays
    assert status(lambda: att.free(h, parent=0, client=h)) == A.NV_ERR_INVALID_CLIENT
    att.close()
    assert _alive(vic, h)


def test_host_process_client_is_never_adopted(delay_once, make_slice):
    """The same race against a host process (nvidia-smi, DCGM: straight on
    the driver's node): the slice's file never records the host's client,
    so it can neither use nor free it, and closing the file leaves it."""
    a = make_slice()
    att = a.client(alloc_client=False)
    h = 0x5f000000 | next(_ids)
    with RmClient("/dev", alloc_client=False) as host:
        delay_once(A.NV_ESC_RM_ALLOC)
        st = _overtaken(att, h, lambda: host.alloc_client(handle=h))
        assert st == A.NV_ERR_INSERT_DUPLICATE_NAME, \
            f"{st:#x}: the slice's file took the host's client"
        assert status(lambda: att.free(h, parent=0, client=h)) == A.NV_ERR_INVALID_CLIENT
        assert _alive(host, h)
        att.close()
        assert _alive(host, h), "closing the slice's file freed the host's client"


def test_same_handle_asked_for_concurrently(make_slice):
    """Two slices' threads ask for the same handle at the same time, many
    times: exactly one gets it, the other gets the duplicate status, and the
    winner's client survives the loser's file."""
    a, b = make_slice(), make_slice()
    n0 = _nvsim_clients()
    for i in range(60):
        ca, cb = a.client(alloc_client=False), b.client(alloc_client=False)
        h = 0x5d000000 | (next(_ids) << 4)
        res: dict = {}
        go = threading.Barrier(2)

        def ask(name: str, c: RmClient) -> None:
            go.wait()
            res[name] = status(lambda: c.alloc_client(handle=h))

        ts = [threading.Thread(target=ask, args=x) for x in (("a", ca), ("b", cb))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert sorted(res.values()) == [0, A.NV_ERR_INSERT_DUPLICATE_NAME], (i, res)
        win, lose = (ca, cb) if res["a"] == 0 else (cb, ca)
        assert _nvsim_clients() == n0 + 1, i
        lose.close()
        assert _alive(win, h), i
        win.close()
        assert wait_until(lambda: _nvsim_clients() == n0, 5), i


# ------------------------------------------------------- vgpu.ko's own handles are nobody else's
def test_vgpu_picks_are_refused_to_callers(make_slice):
    """Handles vgpu.ko picks for root clients (0xc1d80000 | n) are never
    a caller's: asking for one is answered as for a taken handle, and the
    driver never sees it."""
    sl = make_slice()
    c = sl.client(alloc_client=False)
    n0 = _nvsim_clients()
    for low in (0, 1, 2, 0x1234, 0x7ffff):
        assert status(lambda: c.alloc_client(handle=0xc1d80000 | low)) == \
            A.NV_ERR_INSERT_DUPLICATE_NAME, hex(low)
    assert _nvsim_clients() == n0
    # a client vgpu.ko picks for the caller still works
    h = c.alloc_client()
    assert _alive(c, h)


@pytest.fixture
def rotated():
    """nvsim's device instances rotated by one (set while nvsim holds no
    object): minor 0 is instance 1."""
    def _write(v: str) -> bool:
        try:
            ROTATE.write_text(v)
            return True
        except OSError:
            return False
    assert wait_until(lambda: _write("1"), 5.0), "nvsim still holds objects"
    yield
    assert wait_until(lambda: _write("0"), 5.0), "nvsim still holds objects"


def test_squatted_handles_do_not_starve_the_device_instance(rotated, make_slice):
    """A tenant holds root clients at every handle vgpu.ko used for its own
    device-instance client (0xc1d7f000 | n, n < 4096).  A slice made after
    that still gets the driver's device instance of its GPU: its memory
    lands on real GPU 0 (instance 1 under the rotation), not on the GPU
    the minor names."""
    squat = make_slice(gpus=[(1, 64 * MiB)])
    t = squat.client(alloc_client=False)
    held = 0
    for n in range(0x1000):
        if status(lambda: t.alloc_client(handle=0xc1d7f000 | n)) == 0:
            held += 1
    assert held == 0x1000
    sl = make_slice(gpus=[(0, 256 * MiB)])
    fb0, fb1 = nvsim_fb(0), nvsim_fb(1)
    c = sl.client()
    g = c.open_gpus()[0]
    g.alloc(8 * MiB)
    assert (nvsim_fb(0) - fb0, nvsim_fb(1) - fb1) == (8 * MiB, 0)
    c.close()
    t.close()


def _exists(kern, sid: int) -> bool:
    try:
        kern.slice_get(sid)
        return True
    except VgpuError as e:
        if e.errno != errno.ENOENT:
            raise
        return False


def _arm_kernel_fault(kind: str, st: int) -> None:
    _w("fail_kind", kind)
    _w("fail_times", 0)
    _w("fail_status", st)
    _w("fail_caller", 2)          # the kernel entry point only
    _w("fail_pid", os.getpid())
    _w("fail_nth", 1)


@pytest.mark.skipif(not (NVSIM / "fail_nth").exists(), reason="nvsim without fault switch")
@pytest.mark.parametrize("kind", ["RM_ALLOC:0x0", "RM_CONTROL:0x205"])
def test_slice_creation_fails_when_the_instance_cannot_be_asked(kern, kind):
    """Where vgpu.ko cannot get the driver's answer (its client refused,
    the question failed), SLICE_NEW fails with an extack message instead of
    guessing the minor, and leaves no slice."""
    sid = next(_ids)
    _arm_kernel_fault(kind, A.NV_ERR_NO_MEMORY)
    try:
        with pytest.raises(VgpuError) as ei:
            kern.slice_new(sid, gpus=[(0, 64 * MiB)])
    finally:
        _w("fail_nth", 0)
    assert "device instance" in (ei.value.extack or ""), ei.value
    assert not _exists(kern, sid)


@pytest.mark.skipif(not (NVSIM / "fail_nth").exists(), reason="nvsim without fault switch")
def test_gpu_without_an_instance_falls_back_to_its_minor(kern):
    """The driver's own answer that a GPU has no device instance
    (gpumgrGetGpuIdInfoV2: NV_ERR_INVALID_ARGUMENT for a GPU gpumgr has not
    attached, as on a node where nothing opened it yet) is not a failure
    to ask: the slice is made, on the minor (as tests/realdrv's slices,
    whose driver has no GPU)."""
    sid = next(_ids)
    _arm_kernel_fault("RM_CONTROL:0x205", A.NV_ERR_INVALID_ARGUMENT)
    try:
        kern.slice_new(sid, gpus=[(0, 64 * MiB)])
    finally:
        _w("fail_nth", 0)
    try:
        assert _exists(kern, sid)
    finally:
        kern.slice_del(sid, force=True)
