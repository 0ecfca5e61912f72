"""nvsim's compute engine (docs/compute.md section 1): channels, USERD and
the GPFIFO ring, the doorbell, IDLE/AWAKE, round-robin TSG scheduling,
GPFIFO_SCHEDULE, PREEMPT and the busy accounting in debugfs `busy`.

The VM runs under TCG: timers are coarse and late, so every figure has a
generous tolerance and shares are measured over windows of a second or more.
Busy time can only exceed an item's duration (a late tick makes the item run
longer, never shorter).
"""

from __future__ import annotations

import errno
import mmap
import os
import time

import pytest

from vgpu.abi import nvabi as A
import polling
from nvsim_busy import BUSY, busy
from vgpu.abi.nvclient import PAGE_SIZE, Channel, RmError

MS = 1_000_000          # ns
RW = mmap.PROT_READ | mmap.PROT_WRITE

pytestmark = pytest.mark.timeout(60)


# ------------------------------------------------------------------ helpers
def wait_until(pred, timeout: float = 10.0):
    """polling.wait_until in 10 ms steps: the engine ticks every 100 us."""
    return polling.wait_until(pred, timeout, 0.01)


@pytest.fixture
def channels(gpu0):
    made: list[Channel] = []

    def make(**kw) -> Channel:
        ch = Channel(gpu0, **kw)
        made.append(ch)
        return ch
    yield make
    for ch in made:
        ch.close()


def _tsg_state(state, ch: Channel) -> dict:
    return state().tsg(ch.client.hClient, ch.htsg)


def _errors(state, ch: Channel) -> int:
    line = [ln for ln in state().text.splitlines()
            if ln.startswith("tsg ") and f"client {ch.client.hClient:#x} handle {ch.htsg:#x} " in ln]
    assert len(line) == 1, state().text
    f = line[0].split()
    assert f[13] == "channels" and f[15] == "errors", line[0]
    return int(f[16])


# ------------------------------------------------------------- accounting
def test_busy_file_format(client, channels):
    ch = channels()
    b = busy()
    assert set(b.gpus) == set(client.gpus)
    t = b.tsg(ch)
    assert t["tgid"] == os.getpid() and t["busy_ns"] == 0 and t["items"] == 0
    assert t["enabled"] == 1                    # Channel enables its TSG, as CUDA does
    assert b.pids[(os.getpid(), 0)] == 0


def test_item_accounts_its_time(client, gpu0, channels, state):
    ch = channels()
    before = busy()
    n = ch.submit(50_000)                       # 50 ms
    ch.wait(n, timeout=20)
    after = busy()
    t = after.tsg_ns(ch)
    assert 50 * MS <= t <= 50 * MS * 1.6 + 30 * MS, after.text
    assert after.tsg(ch)["items"] == 1
    pid = (os.getpid(), 0)
    assert after.pids[pid] - before.pids.get(pid, 0) == t
    assert after.gpus[0]["busy_ns"] - before.gpus[0]["busy_ns"] == t
    assert after.gpus[1]["busy_ns"] == before.gpus[1]["busy_ns"]
    start, end = ch.record(n)
    assert end - start >= 50 * MS and end - start <= t + 1
    # The process's total survives the TSG; the line goes with its last client.
    ch.close()
    assert busy().pids[pid] == after.pids[pid]
    client.close()
    assert wait_until(lambda: pid not in busy().pids, 5)


def test_gp_get_and_completion_records(channels):
    ch = channels()
    t0 = ch.gpu_time_ns()
    a = ch.submit(1000)
    b = ch.submit(0)                            # a no-op completes at once
    c = ch.submit(2000)
    ch.wait(c, timeout=20)
    assert ch.gp_get == 3 and ch.gp_put == 3
    ra, rb, rc = ch.record(a), ch.record(b), ch.record(c)
    assert t0 <= ra[0] < ra[1] <= rb[0] == rb[1] <= rc[0] < rc[1]
    assert ra[1] - ra[0] >= 1 * MS and rc[1] - rc[0] >= 2 * MS
    assert rc[1] <= ch.gpu_time_ns() + 1        # the same clock as TIME_0/TIME_1


def test_gpu_timer_ticks(channels):
    ch = channels()
    t0 = ch.gpu_time_ns()
    assert wait_until(lambda: ch.gpu_time_ns() > t0, 5)


# ----------------------------------------------------------- IDLE / AWAKE
def test_idle_channel_ignores_gp_put_without_doorbell(channels):
    ch = channels()
    ch.submit(1000, ring=False)
    time.sleep(0.3)
    assert ch.gp_get == 0 and busy().tsg_ns(ch) == 0
    ch.ring()
    assert wait_until(lambda: ch.gp_get == 1)


def test_awake_channel_picks_up_gp_put_without_doorbell(channels):
    ch = channels()
    ch.submit(300_000)                          # 300 ms, rung: AWAKE
    assert wait_until(lambda: busy().tsg_ns(ch) > 0)
    ch.submit(1000, ring=False)                 # queued behind it, never rung
    assert ch.gp_get == 0
    assert wait_until(lambda: ch.gp_get == 2, 20), (ch.gp_get, busy().text)
    assert busy().tsg(ch)["items"] == 2


def test_bad_doorbell_tokens_are_harmless(channels):
    ch = channels()
    ch.submit(1000, ring=False)
    for tok in (0xFFFF, 1 << 16 | (ch.token & 0xFFFF), 0xFFFFFFFF):
        ch.ring(tok)
        time.sleep(0.05)
    assert ch.gp_get == 0
    ch.ring()
    assert wait_until(lambda: ch.gp_get == 1)


# --------------------------------------------------------- schedule, preempt
def test_schedule_off_keeps_work_queued(client, channels):
    ch = channels(schedule=False)
    ch.submit(5000)
    time.sleep(0.3)
    assert ch.gp_get == 0 and busy().tsg_ns(ch) == 0
    client.tsg_schedule(ch.htsg, True)          # no new ring needed: it is AWAKE
    assert wait_until(lambda: ch.gp_get == 1)


def test_channel_schedule_off_keeps_work_queued(client, channels):
    ch = channels()
    client.channel_schedule(ch.hchannel, False)
    ch.submit(5000)
    time.sleep(0.3)
    assert ch.gp_get == 0 and busy().tsg_ns(ch) == 0
    client.channel_schedule(ch.hchannel, True)
    assert wait_until(lambda: ch.gp_get == 1)


def test_preempt_wait_stops_accrual_and_keeps_progress(client, channels):
    ch = channels()
    ch.submit(400_000)                          # 400 ms
    assert wait_until(lambda: busy().tsg_ns(ch) > 20 * MS)
    client.tsg_schedule(ch.htsg, False)         # off the runlist, still on the engine
    client.tsg_preempt(ch.htsg, wait=True)      # off the engine
    b1 = busy().tsg_ns(ch)
    time.sleep(0.3)
    assert busy().tsg_ns(ch) == b1
    assert ch.gp_get == 0
    client.tsg_schedule(ch.htsg, True)
    assert wait_until(lambda: ch.gp_get == 1, 20)
    total = busy().tsg_ns(ch)
    # The partly run item resumed where it stopped: its time was not lost
    # nor run twice.
    assert 400 * MS <= total <= 400 * MS * 1.5 + 50 * MS, busy().text


def test_disable_alone_stops_at_the_timeslice_end(client, channels):
    """Disabling does not evict, but a disabled TSG gets no new timeslice."""
    ch = channels()
    ch.submit(400_000)
    assert wait_until(lambda: busy().tsg_ns(ch) > 20 * MS)
    client.tsg_schedule(ch.htsg, False)
    time.sleep(0.1)                             # > 2 x 1024 us: the slice is over
    b1 = busy().tsg_ns(ch)
    time.sleep(0.3)
    assert busy().tsg_ns(ch) == b1 and ch.gp_get == 0
    client.tsg_schedule(ch.htsg, True)
    assert wait_until(lambda: ch.gp_get == 1, 20)


def test_preempt_of_a_tsg_not_on_the_engine(client, channels):
    ch = channels(schedule=False)
    t = time.monotonic()
    client.tsg_preempt(ch.htsg, wait=True)
    client.tsg_preempt(ch.htsg, wait=True, timeout_us=1000)
    assert time.monotonic() - t < 5


# ------------------------------------------------------------------ shares
def _saturate(ch: Channel, item_us: int, n: int) -> None:
    for _ in range(n):
        ch.submit(item_us)


def _all_started(chans: list[Channel]) -> bool:
    # Rings of two channels inside one engine tick collapse into one (the
    # doorbell is polled): re-ring until each has run, as a client does.
    for c in chans:
        c.ring()
    return all(busy().tsg_ns(c) > 0 for c in chans)


def _split(chans: list[Channel], window: float) -> list[float]:
    assert wait_until(lambda: _all_started(chans), 10)
    b0 = busy()
    time.sleep(window)
    b1 = busy()
    d = [b1.tsg_ns(c) - b0.tsg_ns(c) for c in chans]
    total = sum(d)
    assert total > window * 1e9 * 0.5, (d, b1.text)     # the GPU was kept busy
    return [x / total for x in d]


def test_two_tsgs_split_evenly(channels):
    a, b = channels(), channels()
    for ch in (a, b):
        _saturate(ch, 100_000, 30)              # 3 s of work each
    share = _split([a, b], 1.5)
    print(f"equal timeslices measured {share[0]:.3f}:{share[1]:.3f}")
    assert abs(share[0] - 0.5) < 0.1, share


def test_timeslice_1_to_3(client, channels):
    a = channels(timeslice_us=5000)
    b = channels(timeslice_us=15000)
    for ch in (a, b):
        _saturate(ch, 100_000, 40)
    share = _split([a, b], 2.0)
    print(f"timeslice 1:3 measured {share[0]:.3f}:{share[1]:.3f}")
    assert abs(share[0] - 0.25) < 0.08, share


def test_interleave_low_vs_high(client, channels):
    a, b = channels(timeslice_us=4000), channels(timeslice_us=4000)
    client.tsg_set_interleave(a.htsg, A.NVA06C_CTRL_INTERLEAVE_LEVEL_LOW)   # 1 slice
    client.tsg_set_interleave(b.htsg, A.NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH)  # 4 slices
    for ch in (a, b):
        _saturate(ch, 100_000, 40)
    share = _split([a, b], 2.0)
    print(f"interleave LOW:HIGH measured {share[0]:.3f}:{share[1]:.3f}")
    assert abs(share[0] - 0.2) < 0.08, share


# ------------------------------------------------------------- bad input
def test_gp_put_outside_the_ring_stops_the_channel(channels, state):
    ch = channels(entries=8)
    ch.set_gp_put(8)                            # == ring size: out of range
    ch.ring()
    assert wait_until(lambda: _errors(state, ch) == 1)
    assert ch.gp_get == 0 and busy().tsg_ns(ch) == 0
    ch.write_entry(0, 1000)
    ch.set_gp_put(1)
    ch.ring()
    time.sleep(0.2)
    assert ch.gp_get == 0                       # stopped for good
    other = channels()                          # the engine itself is unharmed
    other.wait(other.submit(1000), timeout=20)


def test_entry_with_high_bits_completes_as_an_error(channels, state):
    ch = channels()
    ch.write_entry(0, 1 << 32 | 1000)
    ch.write_entry(1, 1000)
    ch.submitted = 2
    ch.set_gp_put(2)
    ch.ring()
    assert wait_until(lambda: ch.gp_get == 2)
    assert _errors(state, ch) == 1
    assert busy().tsg(ch)["items"] == 1


@pytest.mark.parametrize("entries", [1, 3, 1024, 0x80000000])
def test_bad_gpfifo_entries_refused(client, gpu0, entries, state):
    tsg = client.alloc_tsg(gpu0.hDevice)
    objs = state().objects
    with pytest.raises(RmError) as ei:
        client.alloc_channel(tsg, gpfifo_entries=entries)
    assert ei.value.status == A.NV_ERR_INVALID_ARGUMENT
    assert state().objects == objs


@pytest.mark.parametrize("entries", [0, 2, 512])
def test_good_gpfifo_entries(client, gpu0, entries):
    tsg = client.alloc_tsg(gpu0.hDevice)
    client.alloc_channel(tsg, gpfifo_entries=entries)


# ------------------------------------------------------------ mapping rules
def _chan(client, gpu):
    tsg = client.alloc_tsg(gpu.hDevice)
    return client.alloc_channel(tsg)


@pytest.mark.parametrize("offset,length", [(0, 0), (0, 3 * PAGE_SIZE), (PAGE_SIZE, 2 * PAGE_SIZE),
                                           (2 * PAGE_SIZE, 1)])
def test_channel_map_bounds(client, gpu0, offset, length):
    ch = _chan(client, gpu0)
    fd = client.open_node(gpu0.node)
    with pytest.raises(RmError) as ei:
        client.map_memory(gpu0.hDevice, ch, length, fd, offset=offset)
    assert ei.value.status == A.NV_ERR_INVALID_ARGUMENT


def test_channel_map_other_gpu_device_refused(client, gpu0, gpu1):
    ch = _chan(client, gpu0)
    fd = client.open_node(gpu1.node)
    with pytest.raises(RmError) as ei:
        client.map_memory(gpu1.hDevice, ch, 2 * PAGE_SIZE, fd)
    assert ei.value.status == A.NV_ERR_INVALID_ARGUMENT


def test_channel_mmap_length_and_sharing(client, gpu0):
    ch = _chan(client, gpu0)
    fd = client.open_node(gpu0.node)
    client.map_memory(gpu0.hDevice, ch, 2 * PAGE_SIZE, fd)
    for length in (PAGE_SIZE, 3 * PAGE_SIZE):
        with pytest.raises(OSError) as ei:
            mmap.mmap(fd, length, mmap.MAP_SHARED, RW)
        assert ei.value.errno == errno.EINVAL
    with pytest.raises(OSError) as ei:
        mmap.mmap(fd, 2 * PAGE_SIZE, mmap.MAP_PRIVATE, RW)
    assert ei.value.errno == errno.EINVAL
    m1 = mmap.mmap(fd, 2 * PAGE_SIZE, mmap.MAP_SHARED, RW)
    m2 = mmap.mmap(fd, 2 * PAGE_SIZE, mmap.MAP_SHARED, RW)
    m1[PAGE_SIZE:PAGE_SIZE + 8] = b"ringring"
    assert m2[PAGE_SIZE:PAGE_SIZE + 8] == b"ringring"   # one ring, not copies
    m1.close()
    m2.close()


def test_channel_map_ring_page_alone(client, gpu0):
    ch = _chan(client, gpu0)
    with gpu0.map(ch, 2 * PAGE_SIZE) as both:
        fd = client.open_node(gpu0.node)
        client.map_memory(gpu0.hDevice, ch, PAGE_SIZE, fd, offset=PAGE_SIZE)
        ring = mmap.mmap(fd, PAGE_SIZE, mmap.MAP_SHARED, RW)
        ring[0:4] = b"abcd"
        assert both.mm[PAGE_SIZE:PAGE_SIZE + 4] == b"abcd"
        ring.close()


# ---------------------------------------------------------- frees mid-work
def test_free_tsg_mid_work_while_mapped(client, gpu0, state):
    ch = Channel(gpu0)
    try:
        ch.submit(500_000)
        assert wait_until(lambda: busy().tsg_ns(ch) > 0)
        h = ch.htsg
        client.free(h)                          # channel and TSG go mid-item
        ch.htsg = 0
        assert (client.hClient, h) not in busy().tsgs
        # The mapping still holds the pages: reading and writing is harmless.
        ch.write_entry(1, 1000)
        ch.set_gp_put(2)
        ch.ring()
        assert ch.gp_get == 0
    finally:
        ch.close()


def test_free_channel_mid_work_keeps_tsg(client, gpu0):
    ch = Channel(gpu0)
    try:
        ch.submit(500_000)
        assert wait_until(lambda: busy().tsg_ns(ch) > 0)
        client.free(ch.hchannel)
        b1 = busy().tsg_ns(ch)
        time.sleep(0.2)
        assert busy().tsg_ns(ch) - b1 < 20 * MS  # at most the tick in flight
    finally:
        ch.close()


def test_close_client_mid_work(res):
    c = res.client()
    c.open_gpus([0])
    ch = Channel(c.gpus[0])
    ch.submit(500_000)
    ch.submit(500_000)
    assert wait_until(lambda: busy().tsg_ns(ch) > 0)
    c.close()                                   # fds and client go mid-work
    ch.close()                                  # then the mmaps
    assert wait_until(lambda: os.getpid() not in {p for p, _ in busy().pids}, 5)


def test_run_work(channels):
    ch = channels()
    r = ch.run_work(2000, 4, items=20)
    assert r["items"] == 20
    assert r["gpu_time_us"] >= 20 * 2000
    lat = r["start_latency_us"]
    assert 0 <= lat["median"] <= lat["p99"] <= lat["max"]
    assert busy().tsg(ch)["items"] == 20
