"""Memory quotas through the virtual nodes: exactness on every allocation
path, non-FB memory not charged, concurrency, every kind of free, killed
processes, shrinking limits, and reported memory.  nvsim's own fb_used is
the independent truth; the slice's netlink figures must agree with it."""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import random
import signal
import threading
import time

import pytest

from vgpu.abi import nvabi as A
from vgpu_fixtures import GiB, KiB, MiB, RmError, nvsim_fb, wait_until
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, sl, vgpu_leak_check  # noqa: F401

PATHS = [
    ("rm-alloc", {"form": "nvos21"}),
    ("rm-alloc", {"form": "nvos64"}),
    ("alloc-memory", {}),
    ("vid-heap", {"function": A.NVOS32_FUNCTION_ALLOC_SIZE}),
    ("vid-heap", {"function": A.NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT}),
    ("vid-heap", {"function": A.NVOS32_FUNCTION_ALLOC_SIZE_RANGE}),
]
PATH_IDS = ["RM_ALLOC-NVOS21", "RM_ALLOC-NVOS64", "ALLOC_MEMORY-0x40",
            "VID_HEAP-2", "VID_HEAP-6", "VID_HEAP-14"]
def rm_size(size: int, path: str) -> int:
    """What the driver allocates for size bytes on every path: RM's default
    page (nvsim_rm_round, after memmgrDeterminePageSize_IMPL: 2 MiB from
    2 MiB up, else 64 KiB; NVOS02's 0x40 is the same allocation,
    _rmAllocMemoryLocalUser)."""
    page = 2 * MiB if size >= 2 * MiB else 64 * KiB
    return -(-size // page) * page


def _no_memory(fn, *a, **kw):
    with pytest.raises(RmError) as ei:
        fn(*a, **kw)
    assert ei.value.status == A.NV_ERR_NO_MEMORY, ei.value


@pytest.mark.parametrize("path,kw", PATHS, ids=PATH_IDS)
def test_quota_exact(make_slice, path, kw):
    """To the byte the driver allocates, in RM's pages (a quota of 48 MiB
    and three 64 KiB pages there: one byte more than the last 192 KiB is a
    fourth page, refused; a byte on a full slice is a 64 KiB page, refused
    before the driver makes it)."""
    limit = 48 * MiB + 192 * KiB
    sl = make_slice(gpus=[(0, limit)])
    c = sl.client()
    g = c.open_gpus()[0]
    base = nvsim_fb(0)
    hs = [g.alloc(16 * MiB, path, **kw) for _ in range(3)]
    rest = limit - 48 * MiB
    assert rm_size(rest, path) == rest and rm_size(rest + 1, path) > rest
    _no_memory(g.alloc, rest + 1, path, **kw)          # one byte over
    hs.append(g.alloc(rest, path, **kw))               # exactly to the quota
    assert nvsim_fb(0) - base == limit
    info = sl.get().gpu(0)
    assert (info.mem_used, info.allocs) == (limit, 4)
    _no_memory(g.alloc, 1, path, **kw)                 # full: not one byte more
    assert nvsim_fb(0) - base == limit
    assert sl.get().gpu(0).refusals == 2
    for h in hs:
        c.free(h)
    info = sl.get().gpu(0)
    assert (info.mem_used, info.allocs, info.mem_peak) == (0, 0, limit)
    assert nvsim_fb(0) == base


def test_local_privileged(make_slice):
    """NV01_MEMORY_LOCAL_PRIVILEGED (0x3F) by RM_ALLOC_MEMORY is FB: either
    refused outright, or counted like 0x40."""
    sl = make_slice(gpus=[(0, 8 * MiB)])
    c = sl.client()
    g = c.open_gpus()[0]
    try:
        h = g.alloc(8 * MiB, "alloc-memory", hclass=A.NV01_MEMORY_LOCAL_PRIVILEGED)
    except RmError as e:
        assert e.status != A.NV_OK and nvsim_fb(0) == 0
        return
    assert sl.used() == 8 * MiB == nvsim_fb(0)
    _no_memory(g.alloc, 1, "alloc-memory", hclass=A.NV01_MEMORY_LOCAL_PRIVILEGED)
    c.free(h)
    assert sl.used() == 0


def test_rm_alloc_under_subdevice_counted(make_slice):
    sl = make_slice(gpus=[(0, 8 * MiB)])
    c = sl.client()
    g = c.open_gpus()[0]
    h, _ = c.alloc_vidmem(g.hSubdevice, 8 * MiB)
    assert sl.used() == 8 * MiB == nvsim_fb(0)
    _no_memory(c.alloc_vidmem, g.hSubdevice, 1)
    c.free(h)
    assert sl.used() == 0


def test_non_fb_not_charged(make_slice):
    """System memory and VA reservations never count against the quota, even
    far larger than it."""
    sl = make_slice(gpus=[(0, 1 * MiB)])
    c = sl.client()
    g = c.open_gpus()[0]
    big = 64 * MiB
    hs = []
    h, _ = c.alloc_vidmem(g.hDevice, big, hclass=A.NV01_MEMORY_SYSTEM)
    hs.append(h)
    h, _ = c.alloc_memory(g.fd, g.hDevice, big, hclass=A.NV01_MEMORY_SYSTEM)
    hs.append(h)
    h, _ = c.vid_heap_alloc(g.hDevice, big, flags=A.NVOS32_ALLOC_FLAGS_VIRTUAL)
    hs.append(h)
    h, _ = c.vid_heap_alloc(g.hDevice, big,
                            attr=A.NVOS32_ATTR_LOCATION_PCI << A.NVOS32_ATTR_LOCATION_SHIFT)
    hs.append(h)
    vp = A.NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS(offset=0, limit=big - 1)
    hs.append(c.alloc(g.hDevice, A.NV01_MEMORY_VIRTUAL, vp))
    # 0x50A0 takes the 128-byte NV_MEMORY_ALLOCATION_PARAMS (resource_list.h)
    mp = A.NV_MEMORY_ALLOCATION_PARAMS(owner=0, size=big)
    hs.append(c.alloc(g.hDevice, A.NV50_MEMORY_VIRTUAL, mp))
    info = sl.get().gpu(0)
    assert (info.mem_used, info.allocs) == (0, 0)
    assert nvsim_fb(0) == 0
    # and the FB quota is still whole
    h = g.alloc(1 * MiB)
    assert sl.used() == 1 * MiB
    for x in [h] + hs:
        c.free(x)
    assert sl.used() == 0


def test_xfer_wrapped_allocations_counted(make_slice):
    sl = make_slice(gpus=[(0, 32 * MiB)])
    c = sl.client(xfer=True)
    g = c.open_gpus()[0]
    hs = [g.alloc(16 * MiB), g.alloc(8 * MiB, "vid-heap")]
    h, _ = c.alloc_vidmem(g.hDevice, 8 * MiB, form="nvos21")
    hs.append(h)
    assert sl.used() == 32 * MiB == nvsim_fb(0)
    _no_memory(g.alloc, 1)
    _no_memory(g.alloc, 1, "vid-heap")
    for h in hs:
        c.free(h)
    assert sl.used() == 0 == nvsim_fb(0)


def test_second_gpu_has_its_own_quota(make_slice):
    sl = make_slice(gpus=[(0, 8 * MiB), (1, 16 * MiB)])
    c = sl.client()
    g0, g1 = c.open_gpus()
    h1 = g1.alloc(16 * MiB)
    assert (nvsim_fb(0), nvsim_fb(1)) == (0, 16 * MiB)
    _no_memory(g1.alloc, 1)
    h0 = g0.alloc(8 * MiB)
    s = sl.get()
    assert (s.gpu(0).mem_used, s.gpu(1).mem_used) == (8 * MiB, 16 * MiB)
    c.free(h0)
    c.free(h1)


def test_slices_are_independent(make_slice):
    a = make_slice(gpus=[(0, 8 * MiB)])
    b = make_slice(gpus=[(0, 8 * MiB)])
    ca, cb = a.client(), b.client()
    ga, gb = ca.open_gpus()[0], cb.open_gpus()[0]
    ha, hb = ga.alloc(8 * MiB), gb.alloc(8 * MiB)
    assert nvsim_fb(0) == 16 * MiB
    assert a.used() == 8 * MiB and b.used() == 8 * MiB
    _no_memory(ga.alloc, 1)
    ca.free(ha)
    cb.free(hb)


# ---------------------------------------------------------------- frees
@pytest.mark.parametrize("how", ["object", "vid-heap-free", "parent-device", "client", "fd-close"])
def test_frees_return_use_to_zero(make_slice, how):
    sl = make_slice(gpus=[(0, 64 * MiB)])
    c = sl.client()
    g = c.open_gpus()[0]
    hs = [g.alloc(8 * MiB, "rm-alloc"), g.alloc(8 * MiB, "alloc-memory"),
          g.alloc(8 * MiB, "vid-heap"), c.alloc_vidmem(g.hSubdevice, 8 * MiB)[0]]
    assert sl.used() == 32 * MiB == nvsim_fb(0)
    if how == "object":
        for h in hs:
            c.free(h)
    elif how == "vid-heap-free":
        for h in hs[:2] + hs[3:]:
            c.free(h)
        c.vid_heap_free(g.hDevice, hs[2])
    elif how == "parent-device":
        c.free(g.hDevice)
    elif how == "client":
        c.free_client()
    elif how == "fd-close":
        sl.close_all()
    assert wait_until(lambda: sl.used() == 0 and nvsim_fb(0) == 0), (sl.get(), nvsim_fb(0))
    assert sl.get().gpu(0).allocs == 0
    assert sl.get().gpu(0).mem_peak == 32 * MiB


def test_dup_shares_one_charge(make_slice):
    """A duplicate references the same FB: no second charge; the charge goes
    when the last reference is freed (the driver keeps the FB until then)."""
    sl = make_slice(gpus=[(0, 16 * MiB)])
    c = sl.client()
    g = c.open_gpus()[0]
    h = g.alloc(16 * MiB)
    d = c.dup(g.hDevice, c.hClient, h)
    assert sl.used() == 16 * MiB == nvsim_fb(0)
    c.free(h)
    assert nvsim_fb(0) == 16 * MiB and sl.used() == 16 * MiB
    _no_memory(g.alloc, 1)
    c.free(d)
    assert sl.used() == 0 == nvsim_fb(0)


# ----------------------------------------------------------- concurrency
def _hammer(prefix, sizes_seed, start, release, q):
    """Child: allocate random sizes until refused a few times; report total."""
    from vgpu.abi.nvclient import RmClient, RmError
    try:
        c = RmClient(prefix)
        g = c.open_gpus()[0]
        rng = random.Random(sizes_seed)
        got = 0
        refused = 0
        start.wait()
        while refused < 6:
            size = rng.randrange(256 * KiB, 6 * MiB)
            path = rng.choice(["rm-alloc", "alloc-memory", "vid-heap"])
            try:
                g.alloc(size, path)
                got += rm_size(size, path)
            except RmError as e:
                if e.status != A.NV_ERR_NO_MEMORY:
                    raise
                refused += 1
        q.put(("ok", os.getpid(), got))
        release.wait()
        c.close()
    except BaseException as e:  # noqa: BLE001
        q.put(("error", os.getpid(), repr(e)))


def test_16_processes_never_exceed_quota(make_slice):
    limit = 128 * MiB + 777
    sl = make_slice(gpus=[(0, limit)])
    ctx = mp.get_context("fork")
    start, release, q = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(sl.prefix, i, start, release, q)) for i in range(16)]
    for p in procs:
        p.start()
    over = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            fb = nvsim_fb(0)
            s = sl.kern.slice_get(sl.id).gpu(0)
            if fb > limit or s.mem_used > limit:
                over.append((fb, s.mem_used))
            time.sleep(0.005)

    t = threading.Thread(target=sample)
    t.start()
    try:
        start.set()
        results = [q.get(timeout=240) for _ in procs]
    finally:
        stop.set()
        t.join()
        release.set()
        for p in procs:
            p.join(60)
    errs = [r for r in results if r[0] != "ok"]
    assert not errs, errs
    assert not over, f"quota overshot (nvsim fb_used, vgpu used): {over[:5]}"
    total = sum(r[2] for r in results)
    # all children held their memory when they reported; they exited since
    assert total <= limit
    s = sl.get().gpu(0)
    assert s.mem_peak <= limit
    assert s.mem_peak >= limit - 6 * MiB      # they did fill it
    assert s.refusals >= 16 * 6
    assert wait_until(lambda: sl.used() == 0 and nvsim_fb(0) == 0, 10)


def test_concurrent_fill_matches_nvsim_while_held(make_slice):
    """While 16 processes hold what they got, vgpu's used == nvsim's fb_used ==
    the sum the processes report, and is <= the limit."""
    limit = 64 * MiB + 4095
    sl = make_slice(gpus=[(0, limit)])
    ctx = mp.get_context("fork")
    start, release, q = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(sl.prefix, 100 + i, start, release, q))
             for i in range(16)]
    for p in procs:
        p.start()
    try:
        start.set()
        results = [q.get(timeout=240) for _ in procs]
        assert all(r[0] == "ok" for r in results), results
        total = sum(r[2] for r in results)
        assert total <= limit
        assert sl.used() == total == nvsim_fb(0)
        # they did fill it (the reservation before each call is RM's
        # rounding, so how many allocations fit is the sizes' and the
        # race's to decide, not a fixed count)
        assert sl.get().gpu(0).mem_peak >= limit - 6 * MiB
    finally:
        release.set()
        for p in procs:
            p.join(60)
    assert wait_until(lambda: sl.used() == 0 and nvsim_fb(0) == 0, 10)


def _alloc_loop(prefix, ready):
    from vgpu.abi.nvclient import RmClient, RmError
    c = RmClient(prefix)
    g = c.open_gpus()[0]
    held = [g.alloc(4 * MiB) for _ in range(4)]
    ready.set()
    i = 0
    while True:
        try:
            h = g.alloc(1 * MiB + i % 4096, ["rm-alloc", "alloc-memory", "vid-heap"][i % 3])
            c.free(h)
        except RmError:
            pass
        i += 1
    del held


def test_sigkill_mid_allocation_leaves_nothing(make_slice):
    sl = make_slice(gpus=[(0, 64 * MiB)])
    ctx = mp.get_context("fork")
    for delay in (0.3, 0.7, 1.3):
        ready = ctx.Event()
        p = ctx.Process(target=_alloc_loop, args=(sl.prefix, ready))
        p.start()
        assert ready.wait(60)
        time.sleep(delay)
        os.kill(p.pid, signal.SIGKILL)
        p.join(30)
        assert p.exitcode == -signal.SIGKILL
        assert wait_until(lambda: sl.used() == 0 and nvsim_fb(0) == 0, 10), (sl.get(), nvsim_fb(0))
        assert wait_until(lambda: sl.get().open_files == 0, 5)
        assert sl.get().gpu(0).allocs == 0


# ------------------------------------------------------------ limit change
def test_shrink_below_use_refuses_until_below(make_slice):
    sl = make_slice(gpus=[(0, 64 * MiB)])
    c = sl.client()
    g = c.open_gpus()[0]
    a, b = g.alloc(32 * MiB), g.alloc(16 * MiB)
    sl.set_limit(0, 40 * MiB)                  # below the 48 MiB in use: accepted
    s = sl.get().gpu(0)
    assert (s.mem_limit, s.mem_used) == (40 * MiB, 48 * MiB)
    _no_memory(g.alloc, 1)
    _no_memory(g.alloc, 1, "vid-heap")
    c.free(b)                                  # 32 MiB used, 8 MiB room
    _no_memory(g.alloc, 8 * MiB + 1)
    h = g.alloc(8 * MiB)
    assert sl.used() == 40 * MiB == nvsim_fb(0)
    sl.set_limit(0, 64 * MiB)                  # growing gives room at once
    h2 = g.alloc(24 * MiB)
    for x in (a, h, h2):
        c.free(x)


# --------------------------------------------------------- reported memory
def test_reported_memory_shows_quota(make_slice):
    limit = 96 * MiB
    sl = make_slice(gpus=[(0, limit)])
    c = sl.client()
    g = c.open_gpus()[0]
    F = A
    for used in (0, 40 * MiB):
        h = g.alloc(used) if used else None
        for info in (g.fb_info(), g.fb_info_v1()):
            for idx in (F.NV2080_CTRL_FB_INFO_INDEX_RAM_SIZE, F.NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE,
                        F.NV2080_CTRL_FB_INFO_INDEX_HEAP_SIZE):
                assert info[idx] == limit >> 10, (hex(idx), info)
            assert info[F.NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE] == (limit - used) >> 10, info
            assert info[F.NV2080_CTRL_FB_INFO_INDEX_USABLE_RAM_SIZE] <= limit >> 10
            assert info[F.NV2080_CTRL_FB_INFO_INDEX_LARGEST_FREE_REGION_SIZE_KB] <= (limit - used) >> 10
        total, free = g.vid_heap_info()
        assert (total, free) == (limit, limit - used)
        if h:
            c.free(h)


def test_reported_free_after_shrink_is_zero_not_negative(make_slice):
    sl = make_slice(gpus=[(0, 64 * MiB)])
    c = sl.client()
    g = c.open_gpus()[0]
    h = g.alloc(48 * MiB)
    sl.set_limit(0, 32 * MiB)
    total, free = g.vid_heap_info()
    assert (total, free) == (32 * MiB, 0)
    assert g.fb_info()[A.NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE] == 0
    c.free(h)


def test_get_pids_shows_only_the_slice(make_slice, res):
    sl = make_slice(gpus=[(0, 64 * MiB)])
    # another process uses nvsim directly, with FB
    ctx = mp.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()

    def outsider():
        from vgpu.abi.nvclient import RmClient
        c = RmClient("/dev")
        g = c.open_gpus()[0]
        g.alloc(2 * MiB)
        ready.set()
        done.wait(60)
        c.close()

    p = ctx.Process(target=outsider)
    p.start()
    try:
        assert ready.wait(60)
        c = sl.client()
        g = c.open_gpus()[0]
        h = g.alloc(4 * MiB)
        direct = res.client()
        dg = direct.open_gpus()[0]
        assert p.pid in dg.pids() and os.getpid() in dg.pids()
        pids = g.pids()
        assert os.getpid() in pids
        assert p.pid not in pids, f"GET_PIDS through the slice shows an outsider: {pids}"
        assert g.pid_vidmem([os.getpid()])[os.getpid()] == 4 * MiB
        assert sl.get().pids == [os.getpid()]
        c.free(h)
    finally:
        done.set()
        p.join(60)


# ------------------------------------------------------------ double fetch
def _race(alloc_once, flip, n=300):
    """Run alloc_once() n times while another thread flips the size."""
    stop = threading.Event()

    def flipper():
        while not stop.is_set():
            flip()

    t = threading.Thread(target=flipper, daemon=True)
    old = __import__("sys").getswitchinterval()
    __import__("sys").setswitchinterval(1e-5)
    t.start()
    try:
        for _ in range(n):
            alloc_once()
    finally:
        stop.set()
        t.join()
        __import__("sys").setswitchinterval(old)


@pytest.mark.parametrize("path", ["rm-alloc", "vid-heap", "alloc-memory"])
def test_double_fetch_race_quota_holds(make_slice, path):
    """A thread rewrites the size (NV_MEMORY_ALLOCATION_PARAMS.size, NVOS32
    size, NVOS02 limit) between small and huge while another allocates with
    the same buffer through the virtual node; nvsim's fb_used must never pass
    the quota and must equal the slice's use."""
    import ctypes
    from vgpu.abi.nvclient import _ioctl_obj
    limit = 16 * MiB
    small, huge = 64 * KiB, 4 * GiB
    sl = make_slice(gpus=[(0, limit)])
    c = sl.client()
    g = c.open_gpus()[0]
    made = []
    peak = [0]

    if path == "rm-alloc":
        mp_ = A.NV_MEMORY_ALLOCATION_PARAMS(owner=0x5647, size=small)
        p = A.NVOS64_PARAMETERS(hRoot=c.hClient, hObjectParent=g.hDevice,
                                hClass=A.NV01_MEMORY_LOCAL_USER, pAllocParms=ctypes.addressof(mp_),
                                paramsSize=ctypes.sizeof(mp_))
        cmd = A.nv_ioctl(A.NV_ESC_RM_ALLOC, ctypes.sizeof(p))

        def flip():
            mp_.size = huge
            mp_.size = small

        def once():
            mp_.size = small
            p.hObjectNew = c.new_handle()
            p.status = 0
            _ioctl_obj(c.fd, cmd, p)
            if p.status == A.NV_OK:
                made.append(p.hObjectNew)
            peak[0] = max(peak[0], nvsim_fb(0))
    elif path == "vid-heap":
        p = A.NVOS32_PARAMETERS(hRoot=c.hClient, hObjectParent=g.hDevice,
                                function=A.NVOS32_FUNCTION_ALLOC_SIZE)
        d = p.data.AllocSize
        cmd = A.nv_ioctl(A.NV_ESC_RM_VID_HEAP_CONTROL, ctypes.sizeof(p))

        def flip():
            d.size = huge
            d.size = small

        def once():
            d.size = small
            d.hMemory = c.new_handle()
            d.owner = 0x5647
            p.status = 0
            _ioctl_obj(c.fd, cmd, p)
            if p.status == A.NV_OK:
                made.append(d.hMemory)
            peak[0] = max(peak[0], nvsim_fb(0))
    else:
        p = A.nv_ioctl_nvos02_parameters_with_fd()
        q = p.params
        q.hRoot, q.hObjectParent, q.hClass = c.hClient, g.hDevice, A.NV01_MEMORY_LOCAL_USER
        p.fd = g.fd
        cmd = A.nv_ioctl(A.NV_ESC_RM_ALLOC_MEMORY, ctypes.sizeof(p))

        def flip():
            q.limit = huge - 1
            q.limit = small - 1

        def once():
            q.limit = small - 1
            q.hObjectNew = c.new_handle()
            q.status = 0
            _ioctl_obj(g.fd, cmd, p)
            if q.status == A.NV_OK:
                made.append(q.hObjectNew)
            peak[0] = max(peak[0], nvsim_fb(0))

    for _round in range(3):
        _race(once, flip, n=150)
        fb = nvsim_fb(0)
        assert fb <= limit and peak[0] <= limit, (fb, peak[0])
        assert sl.used() == fb
        for h in made:
            c.free(h, parent=g.hDevice)
        made.clear()
        assert sl.used() == 0 == nvsim_fb(0)


# ------------------------------------------- driver-allocated FB is bounded
def test_channel_cap_bounds_what_the_quota_cannot_see(make_slice, kern):
    """The driver allocates FB for every channel (instance block, RAMFC,
    USERD, its TSG's context buffers) that no memory quota counts; the
    slice's channel cap (VGPU_A_SLICE_MAX_CHANNELS, per GPU) bounds it.
    Over the cap: NV_ERR_INSUFFICIENT_RESOURCES, as when the driver runs out
    of channel IDs.  A freed channel makes room; 0 is no cap; lowering the
    cap leaves live channels alone."""
    sl = make_slice(gpus=[(0, 256 * MiB), (1, 256 * MiB)])
    assert sl.get().max_channels == 0
    kern.slice_set(sl.id, max_channels=2)
    assert sl.get().max_channels == 2
    c = sl.client()
    g0, g1 = c.open_gpus()
    tsg = c.alloc_tsg(g0.hDevice)
    first = c.alloc_channel(tsg)
    c.alloc_channel(tsg)
    with pytest.raises(RmError) as e:
        c.alloc_channel(tsg)
    assert e.value.status == A.NV_ERR_INSUFFICIENT_RESOURCES
    with pytest.raises(RmError) as e:
        c.alloc_channel(g0.hDevice)                 # a bare channel counts too
    assert e.value.status == A.NV_ERR_INSUFFICIENT_RESOURCES
    # Per GPU: the other GPU has its own two.
    t1 = c.alloc_tsg(g1.hDevice)
    c.alloc_channel(t1)
    c.alloc_channel(t1)
    # A freed channel makes room for one more.
    c.free(first)
    c.alloc_channel(tsg)
    with pytest.raises(RmError):
        c.alloc_channel(tsg)
    # Lowered below use: nothing goes, nothing new comes.
    kern.slice_set(sl.id, max_channels=1)
    assert sl.get().gpu(0).channels == 2
    with pytest.raises(RmError):
        c.alloc_channel(tsg)
    kern.slice_set(sl.id, max_channels=0)
    c.alloc_channel(tsg)
    assert sl.get().gpu(0).channels == 3


def test_os_descriptor_registers_the_callers_pages_without_fb(sl):
    """cuMemHostRegister's path: NV01_MEMORY_SYSTEM_OS_DESCRIPTOR through
    RM_ALLOC_MEMORY pins the caller's own pages; no FB is charged, the
    object is the client's like any other (freed with it), and an address
    that is no mapping gets the driver's refusal."""
    import ctypes
    import mmap

    flags = ((A.NVOS02_FLAGS_PHYSICALITY_NONCONTIGUOUS << A.NVOS02_FLAGS_PHYSICALITY_SHIFT)
             | (A.NVOS02_FLAGS_COHERENCY_CACHED << A.NVOS02_FLAGS_COHERENCY_SHIFT)
             | (A.NVOS02_FLAGS_MAPPING_NO_MAP << A.NVOS02_FLAGS_MAPPING_SHIFT))
    size = 64 * 1024
    buf = mmap.mmap(-1, size)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    c = sl.client()
    g = c.gpu(0)
    before = sl.used(0)
    h, _ = c.alloc_memory(g.fd, g.hDevice, size, hclass=A.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR,
                          flags=flags, pmemory=addr)
    assert sl.used(0) == before
    c.free(h)
    with pytest.raises(RmError):
        c.alloc_memory(g.fd, g.hDevice, size, hclass=A.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR,
                       flags=flags, pmemory=0x1000)
    # Left registered: the client's close frees it (the leak check follows).
    c.alloc_memory(g.fd, g.hDevice, size, hclass=A.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR,
                   flags=flags, pmemory=addr)
    c.close()


def _call_pages() -> list[int]:
    """The start of every vgpu.ko call page mapped in this process."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            if line.rstrip().endswith("[vgpu-call]"):
                out.append(int(line.split("-", 1)[0], 16))
    return out


PAGE = 4096


def test_os_descriptor_cannot_take_a_call_page(sl):
    """Where the pages cannot be pinned, the driver takes a VM_IO/VM_PFNMAP
    mapping at the address as I/O memory (RmCreateOsDescriptor,
    os_lookup_user_io_memory; nvsim models it): a register mapping of the
    driver's own is taken.  vgpu.ko's call pages, idle or carrying this very
    call's parameters, are neither pinnable nor VM_IO/VM_PFNMAP, so the GPU
    is never handed them (docs/mediator.md, "The call page")."""
    flags = ((A.NVOS02_FLAGS_PHYSICALITY_NONCONTIGUOUS << A.NVOS02_FLAGS_PHYSICALITY_SHIFT)
             | (A.NVOS02_FLAGS_COHERENCY_CACHED << A.NVOS02_FLAGS_COHERENCY_SHIFT)
             | (A.NVOS02_FLAGS_MAPPING_NO_MAP << A.NVOS02_FLAGS_MAPPING_SHIFT))
    c = sl.client()
    g = c.gpu(0)
    _, regs = g.usermode()
    try:
        regs.mm[:4]                 # mapped (the driver follows the first PTE)
        regs_addr = ctypes.addressof(ctypes.c_char.from_buffer(regs.mm))
        h, _ = c.alloc_memory(g.fd, g.hDevice, PAGE, hclass=A.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR,
                              flags=flags, pmemory=regs_addr)
        c.free(h)
        pages = _call_pages()
        assert pages, "no call page is mapped after calls through vgpu.ko"
        for addr in pages:
            with pytest.raises(RmError) as ei:
                c.alloc_memory(g.fd, g.hDevice, PAGE, hclass=A.NV01_MEMORY_SYSTEM_OS_DESCRIPTOR,
                               flags=flags, pmemory=addr)
            assert ei.value.status == A.NV_ERR_INVALID_ADDRESS, hex(ei.value.status)
    finally:
        regs.close()
        c.close()
