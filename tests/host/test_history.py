"""vgpu.daemon.history: the usage-history store (docs/history.md).

Retention and downsampling with explicit times (a fake clock), restarts,
the kernel counters' deltas and resets, the size cap, label queries, and the
writer thread: never blocking its caller, surviving a full disk, a file
that cannot be opened and a corrupt one."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

import pytest
import trio

from vgpu.daemon import history
from vgpu.daemon.history import HistoryStore, HistoryWriter, Sample
from vgpu.vgpuko.messages import GpuUsage, Slice
from vgpu.daemon.records import GpuSlot, SliceRecord

T0 = 1_800_000_000.0            # a multiple of 300 (5-minute buckets start here)
GIB = 1 << 30


def smp(t, *, sid=1, container="web", gpu=0, uuid="GPU-0", used=GIB, peak=None, limit=4 * GIB,
        gt=0, ref=0, bp=None, labels=None, epoch=None) -> Sample:
    return Sample(t=t, slice_id=sid, container=container, gpu=gpu, gpu_uuid=uuid, mem_used=used,
                  mem_peak=peak if peak is not None else used, mem_limit=limit, gpu_time_ns=gt,
                  compute_bp=bp, refusals=ref, labels=labels or {}, epoch=epoch)


@pytest.fixture
def db(tmp_path):
    return tmp_path / "hist" / "history.db"


def fields(rows, *names):
    return [tuple(getattr(r, n) for n in names) for r in rows]


# ---------------------------------------------------------------- schema, restart
def test_new_file_schema_and_restart(db):
    with HistoryStore(db) as st:
        assert st.schema_version() == history.SCHEMA_VERSION
        st.add([smp(T0, gt=0), smp(T0 + 10, gt=2 * 10**9, used=2 * GIB)])
    assert oct(db.parent.stat().st_mode & 0o777) == "0o700"
    # reopened: the data, and the counters' base, are still there
    with HistoryStore(db) as st:
        assert st.conn.execute("PRAGMA application_id").fetchone()[0] == history.APPLICATION_ID
        assert st.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        st.add([smp(T0 + 20, gt=3 * 10**9)])
        rows = st.series()
    assert fields(rows, "t", "mem_used", "gpu_time_ns", "covered_s", "source") == [
        (T0, GIB, None, 0.0, "raw"),
        (T0 + 10, 2 * GIB, 2 * 10**9, 10.0, "raw"),
        (T0 + 20, GIB, 10**9, 10.0, "raw")]
    assert rows[1].share == pytest.approx(0.2) and rows[2].share == pytest.approx(0.1)
    # a reader beside the writer
    with HistoryStore(db) as w, HistoryStore(db, readonly=True) as r:
        w.add([smp(T0 + 30, gt=4 * 10**9)])
        assert len(r.series()) == 4


def test_a_newer_schema_is_refused_and_left_alone(db):
    with HistoryStore(db) as st:
        st.add([smp(T0)])
        st.conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    before = db.read_bytes()
    with pytest.raises(history.HistorySchemaError, match=r"version 99 is newer than this vgpud's \(1\)"):
        HistoryStore(db)
    assert db.read_bytes() == before
    # the writer turns itself off, the file untouched, the caller unharmed
    w = HistoryWriter(db, reopen_delays=(0.01, 0.01)).start()
    assert w.submit([smp(T0 + 10)])
    assert w.flush(5) and w.close(5)
    s = w.stats()
    assert s["state"] == "closed" and s["written"] == 0 and s["dropped"] == 1
    assert "newer" in s["last_error"]
    assert db.read_bytes() == before


def test_an_older_schema_is_migrated(db, monkeypatch):
    with HistoryStore(db) as st:
        st.add([smp(T0)])
    seen = []

    def to_2(conn):
        seen.append(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'")
                    .fetchone()[0])
        conn.execute("ALTER TABLE raw ADD COLUMN extra INTEGER")
    monkeypatch.setattr(history, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(history, "MIGRATIONS", {1: to_2})
    with HistoryStore(db) as st:
        assert st.schema_version() == 2 and seen == ["1"]
    with HistoryStore(db) as st:                      # once
        assert seen == ["1"]
    monkeypatch.setattr(history, "SCHEMA_VERSION", 3)
    with pytest.raises(history.HistorySchemaError, match="no migration from schema version 2"):
        HistoryStore(db)


def test_a_foreign_database_is_not_taken(db):
    db.parent.mkdir()
    c = sqlite3.connect(db)
    c.execute("CREATE TABLE t (x)")
    c.commit()
    c.close()
    with pytest.raises(history.HistoryCorrupt, match="not a vgpud history database"):
        HistoryStore(db)


# ---------------------------------------------------------------- counters
def test_counter_deltas_resets_and_gaps(db):
    with HistoryStore(db, max_gap_s=100) as st:
        st.add([smp(T0, gt=5 * 10**9, ref=3)])                      # first: no delta
        st.add([smp(T0 + 10, gt=6 * 10**9, ref=5)])                 # +1 s, +2
        st.add([smp(T0 + 20, gt=2 * 10**9, ref=1, epoch="a")])      # went back: a restart
        st.add([smp(T0 + 30, gt=3 * 10**9, ref=1, epoch="b")])      # new origin
        st.add([smp(T0 + 40, gt=4 * 10**9, ref=2, epoch="b")])
        st.add([smp(T0 + 500, gt=9 * 10**9, ref=9, epoch="b")])     # past max_gap: unknown
        st.add([smp(T0 + 510, gt=9 * 10**9, ref=9, epoch="b")])     # idle
        rows = st.series()
    assert fields(rows, "gpu_time_ns", "refusals", "resets") == [
        (None, None, 0), (10**9, 2, 0), (2 * 10**9, 1, 1), (3 * 10**9, 1, 1),
        (10**9, 1, 0), (None, None, 0), (0, 0, 0)]
    assert [r.share for r in rows] == [None, pytest.approx(0.1), pytest.approx(0.2),
                                       pytest.approx(0.3), pytest.approx(0.1), None, 0.0]


def test_bad_samples_are_left_out(db):
    with HistoryStore(db) as st:
        assert st.add([smp(T0), smp(T0 + 1, used=None), smp(T0 + 2, gt=1 << 64),
                       smp(float("nan")), smp(T0 + 3)]) == 2
        assert st.skipped == 3 and len(st.series()) == 2


def test_a_new_slice_is_a_new_series(db):
    # the container's slice re-created under another id: its own counters
    with HistoryStore(db) as st:
        st.add([smp(T0, sid=1, gt=50 * 10**9), smp(T0 + 10, sid=1, gt=51 * 10**9)])
        st.add([smp(T0 + 20, sid=2, gt=10**9), smp(T0 + 30, sid=2, gt=2 * 10**9)])
        rows = st.series(container="web")
    assert fields(rows, "slice_id", "gpu_time_ns") == [(1, None), (1, 10**9), (2, None),
                                                       (2, 10**9)]


def test_from_kernel():
    ks = Slice(id=7, name="web", gpus=[
        GpuUsage(index=0, mem_limit=4 * GIB, mem_used=GIB, mem_peak=2 * GIB, refusals=3,
                 gpu_time_ns=123, compute_policy=1, compute_bp=2500),
        GpuUsage(index=1, mem_limit=GIB, gpu_time_ns=5)])
    rec = SliceRecord(container="web", slice_id=7, labels={"team": "ml"},
                      gpus=[GpuSlot(gpu=2, uuid="GPU-2"), GpuSlot(gpu=3, uuid="GPU-3")])
    a, b = history.from_kernel(ks, rec, T0, epoch="e")
    assert a == Sample(t=T0, slice_id=7, container="web", gpu=2, gpu_uuid="GPU-2",
                       mem_used=GIB, mem_peak=2 * GIB, mem_limit=4 * GIB, gpu_time_ns=123,
                       compute_bp=2500, refusals=3, labels={"team": "ml"}, epoch="e")
    assert (b.gpu, b.gpu_uuid, b.compute_bp, b.gpu_time_ns) == (3, "GPU-3", None, 5)
    (c, _) = history.from_kernel(ks, None, T0)
    assert (c.container, c.gpu, c.labels) == ("web", -1, {})


# ---------------------------------------------------------------- downsampling
def two_days(st, interval=60):
    """A sample a minute for two days: memory a saw-tooth, 3 s of GPU time
    and one refusal per minute, one counter reset."""
    gt = ref = 0
    batch = []
    n = int(2 * 86400 / interval)
    for i in range(n):
        gt += 3 * 10**9
        ref += 1
        if i == 1000:                       # the module reloaded
            gt, ref = 3 * 10**9, 1
        batch.append(smp(T0 + i * interval, used=(i % 7) * GIB, peak=6 * GIB, gt=gt, ref=ref,
                         bp=5000))
    st.add(batch)
    return n


def test_raw_older_than_the_retention_becomes_aggregates(db):
    with HistoryStore(db) as st:
        n = two_days(st)
        now = T0 + 2 * 86400
        before = st.series(step=300)
        out = st.compact(now)
        cut = T0 + 86400                    # a multiple of 300 already
        assert out["compacted"] == 1440 and out["aggregates"] == 288
        rows = st.series()
        raw = [r for r in rows if r.source == "raw"]
        agg = [r for r in rows if r.source == "agg"]
        assert len(raw) == n - 1440 and min(r.t for r in raw) == cut
        assert len(agg) == 288 and max(r.t for r in agg) == cut - 300
        b = agg[1]
        assert (b.t, b.step, b.n) == (T0 + 300, 300.0, 5)
        assert b.gpu_time_ns == 15 * 10**9 and b.covered_s == 300.0
        assert b.share == pytest.approx(0.05) and b.refusals == 5
        # minutes 5..9 of the saw-tooth: 5, 6, 0, 1, 2 GiB
        assert (b.mem_used_min, b.mem_used_max, b.mem_used_p95, b.mem_peak) == \
            (0, 6 * GIB, 6 * GIB, 6 * GIB)
        assert b.mem_used == pytest.approx(14 / 5 * GIB)
        assert b.compute_bp == 5000 and b.mem_limit == 4 * GIB
        assert agg[0].gpu_time_ns == 12 * 10**9        # the very first sample has no delta
        assert sum(r.resets for r in agg) == 1
        # a query at 5 minutes reads the same before and after the compaction
        after = st.series(step=300)
        strip = lambda rows: [{k: v for k, v in r.to_json().items() if k != "source"}
                              for r in rows]
        assert strip(after) == strip(before)
        # a coarser step merges aggregates and raw samples alike
        day = st.series(step=86400)             # UTC days: T0 is 08:00
        assert [r.t % 86400 for r in day] == [0, 0, 0] and [r.n for r in day] == [960, 1440, 480]
        assert sum(r.gpu_time_ns for r in day) == (2880 - 1) * 3 * 10**9
        assert sum(r.refusals for r in day) == 2879
        assert day[1].mem_used_max == 6 * GIB and day[1].mem_used_min == 0
        # compacting again changes nothing
        assert st.compact(now)["compacted"] == 0
        assert strip(st.series(step=300)) == strip(before)


def test_aggregates_expire_and_empty_series_go(db):
    with HistoryStore(db, agg_retention_s=10 * 86400) as st:
        two_days(st)
        st.compact(T0 + 2 * 86400)
        # 10 days after the first day's end, its first half-day has expired
        out = st.compact(T0 + 10.5 * 86400)
        rows = st.series()
        assert all(r.source == "agg" for r in rows)     # the second day compacted too
        assert min(r.t for r in rows) == T0 + 0.5 * 86400
        assert out["expired"] == 144
        st.compact(T0 + 13 * 86400)
        assert st.series() == [] and st.stats()["series"] == 0


def test_late_samples_merge_into_their_bucket(db):
    with HistoryStore(db) as st:
        st.add([smp(T0, used=GIB, gt=0), smp(T0 + 60, used=2 * GIB, gt=6 * 10**9)])
        st.compact(T0 + 86400 + 600)
        st.add([smp(T0 + 120, used=5 * GIB, gt=9 * 10**9, ref=2)])     # arrives late
        st.compact(T0 + 86400 + 600)
        (b,) = st.series()
    assert (b.source, b.n, b.mem_used_max, b.mem_used_min) == ("agg", 3, 5 * GIB, GIB)
    assert b.gpu_time_ns == 9 * 10**9 and b.covered_s == 120.0
    assert b.mem_used == pytest.approx(8 / 3 * GIB)


# ---------------------------------------------------------------- size cap
def test_size_cap_drops_the_oldest(db, caplog):
    cap = 192 << 10
    # aggregates of 10 s: as many as the samples
    with HistoryStore(db, max_bytes=cap, raw_retention_s=3600, agg_step_s=10) as st:
        batch = [smp(T0 + i * 10, sid=s, used=i, gt=i * 10**8) for i in range(3000)
                 for s in (1, 2)]
        st.add(batch)
        assert st.used_bytes() > cap
        with caplog.at_level(logging.WARNING, logger="vgpud.history"):
            out = st.compact(T0 + 30000)
        assert out["dropped_for_size"] > 0 and "size cap" in caplog.text
        assert st.used_bytes() <= cap and st.size_bytes() <= cap
        rows = st.series()
        # the newest kept, the oldest gone
        assert max(r.t for r in rows) == T0 + 2999 * 10
        assert min(r.t for r in rows) > T0
    # over the cap with raw samples only: the oldest raw go
    with HistoryStore(db.with_name("b.db"), max_bytes=cap) as st:
        st.add(batch)
        st.compact(T0 + 30000)
        rows = st.series()
        assert st.used_bytes() <= cap and all(r.source == "raw" for r in rows)
        assert max(r.t for r in rows) == T0 + 2999 * 10 and min(r.t for r in rows) > T0


# ---------------------------------------------------------------- queries
def test_label_container_and_gpu_queries(db):
    with HistoryStore(db) as st:
        st.add([smp(T0, sid=1, container="a", labels={"team": "ml", "tier": "gold"}, gpu=0,
                    uuid="GPU-aa", used=GIB, gt=0),
                smp(T0, sid=2, container="b", labels={"team": "ml"}, gpu=1, uuid="GPU-bb",
                    used=2 * GIB, gt=0),
                smp(T0, sid=3, container="c", labels={"team": "web"}, gpu=0, uuid="GPU-aa",
                    used=4 * GIB, gt=0)])
        st.add([smp(T0 + 60, sid=1, container="a", labels={"team": "ml", "tier": "gold"},
                    gpu=0, uuid="GPU-aa", used=GIB, gt=30 * 10**9),
                smp(T0 + 60, sid=2, container="b", labels={"team": "ml"}, gpu=1,
                    uuid="GPU-bb", used=2 * GIB, gt=15 * 10**9)])
        who = lambda **kw: sorted({r.container for r in st.series(**kw)})
        assert who(label="team=ml") == ["a", "b"]
        assert who(label="team") == ["a", "b", "c"]
        assert who(label=["team=ml", "tier=gold"]) == ["a"]
        assert who(label={"tier": None}) == ["a"]
        assert who(label="team=none") == []
        assert who(gpu=0) == ["a", "c"] and who(gpu="gpu-bb") == ["b"] and who(gpu="1") == ["b"]
        assert who(container="c") == ["c"] and who(slice_id=2) == ["b"]
        assert len(st.series(since=T0 + 1)) == 2 and len(st.series(until=T0 + 1)) == 3
        with pytest.raises(ValueError):
            st.series(label="=x")
        # a label's demand: summed per bucket
        (d,) = st.demand(label="team=ml", step=300)
        assert d["series"] == 2 and d["mem_used"] == pytest.approx(3 * GIB)
        assert d["gpu_time_ns"] == 45 * 10**9
        assert d["gpu_s_per_s"] == pytest.approx(0.75)


# ---------------------------------------------------------------- the writer
class Gate:
    """A store factory whose stores wait on an event before each write."""

    def __init__(self):
        self.open = threading.Event()

    def __call__(self, path, **kw):
        st = HistoryStore(path, **kw)
        add = st.add

        def slow_add(samples):
            self.open.wait(10)
            return add(samples)
        st.add = slow_add
        return st


def test_the_writer_writes_batches_and_survives_a_restart(db):
    w = HistoryWriter(db, clock=lambda: T0).start()
    for i in range(10):
        assert w.submit([smp(T0 + i * 10, sid=s, gt=i * 10**9) for s in (1, 2)])
    assert w.flush(5)
    assert w.stats()["written"] == 20 and w.stats()["state"] == "ok"
    assert w.close(5) and not w.submit([smp(T0 + 500)])
    w = HistoryWriter(db, clock=lambda: T0).start()
    w.submit([smp(T0 + 100, gt=10 * 10**9)])
    assert w.close(5)
    with HistoryStore(db, readonly=True) as st:
        rows = st.series(slice_id=1)
    assert len(rows) == 11 and rows[-1].gpu_time_ns == 10**9


def test_submit_never_blocks_and_counts_what_it_drops(db, caplog):
    gate = Gate()
    w = HistoryWriter(db, queue_size=2, store_factory=gate, warn_every_s=60).start()
    with caplog.at_level(logging.WARNING, logger="vgpud.history"):
        t = time.monotonic()
        results = [w.submit([smp(T0 + i)]) for i in range(50)]
        took = time.monotonic() - t
    assert took < 0.5
    assert results[:2] == [True, True] and results.count(False) >= 45
    s = w.stats()
    assert s["dropped"] == results.count(False)
    # one warning for all the drops (rate-limited)
    assert caplog.text.count("the writer is behind") == 1
    gate.open.set()
    assert w.flush(5) and w.close(5)
    assert w.stats()["written"] == results.count(True)


def test_a_full_disk_is_a_warning_and_the_writer_goes_on(db, caplog):
    full = {"on": True}

    def factory(path, **kw):
        st = HistoryStore(path, **kw)
        if full["on"]:
            pages = st.conn.execute("PRAGMA page_count").fetchone()[0]
            st.conn.execute(f"PRAGMA max_page_count = {pages}")
        return st

    w = HistoryWriter(db, store_factory=factory, reopen_delays=(0.02, 0.05),
                      warn_every_s=60).start()
    big = [smp(T0 + i, sid=s, gt=i) for i in range(200) for s in range(5)]
    with caplog.at_level(logging.WARNING, logger="vgpud.history"):
        assert w.submit(big)
        assert w.flush(5)
        deadline = time.monotonic() + 5
        while w.stats()["errors"] < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        s = w.stats()
        assert s["state"] == "failing" and s["errors"] >= 3 and s["pending"] == 1000
        assert "full" in s["last_error"]
        assert caplog.text.count("cannot write") == 1            # rate-limited
        assert w.submit([smp(T0 + 1000)])                         # still taking samples
        full["on"] = False                                        # space again
        deadline = time.monotonic() + 5
        while w.stats()["written"] < 1001 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert w.stats()["written"] == 1001 and w.stats()["state"] == "ok"
    assert "written again" in caplog.text
    assert w.close(5)


def test_a_file_that_cannot_be_opened(db, monkeypatch, caplog):
    real = sqlite3.connect

    def refuse(*a, **kw):
        raise sqlite3.OperationalError("unable to open database file")
    monkeypatch.setattr(history.sqlite3, "connect", refuse)
    w = HistoryWriter(db, reopen_delays=(0.02, 0.05)).start()
    with caplog.at_level(logging.WARNING, logger="vgpud.history"):
        assert w.submit([smp(T0)])
        assert w.flush(5)
        assert w.stats()["state"] == "failing" and "unable to open" in caplog.text
        monkeypatch.setattr(history.sqlite3, "connect", real)
        deadline = time.monotonic() + 5
        while w.stats()["written"] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert w.stats()["written"] == 1
    assert w.close(5)


def test_a_corrupt_file_is_moved_aside(db, caplog):
    db.parent.mkdir()
    db.write_bytes(b"this is not a database, " * 200)
    w = HistoryWriter(db).start()
    with caplog.at_level(logging.ERROR, logger="vgpud.history"):
        assert w.submit([smp(T0)])
        assert w.flush(5) and w.close(5)
    (moved,) = w.stats()["quarantined"]
    assert moved.startswith(str(db) + ".corrupt-") and "moved to" in caplog.text
    assert (db.parent / moved).read_bytes().startswith(b"this is not a database")
    with HistoryStore(db) as st:
        assert len(st.series()) == 1


def test_a_damaged_page_is_found_at_open(db):
    with HistoryStore(db) as st:
        st.add([smp(T0 + i, sid=s) for i in range(300) for s in range(4)])
    data = bytearray(db.read_bytes())
    assert len(data) > 8 * 4096
    for off in range(3 * 4096, len(data), 4096):
        data[off:off + 64] = b"\xa5" * 64
    db.write_bytes(bytes(data))
    with pytest.raises(history.HistoryCorrupt):
        HistoryStore(db)
    assert history.quarantine(db).name.startswith("history.db.corrupt-") and not db.exists()


# ---------------------------------------------------------------- trio
class Recorder:
    def __init__(self):
        self.got = []

    def submit(self, samples):
        self.got.append(list(samples))
        return True


async def test_run_sampler_samples_at_its_interval(autojump_clock):
    rec = Recorder()
    calls = []

    def collect(now):
        calls.append(trio.current_time())
        if len(calls) == 2:
            raise RuntimeError("kernel gone")
        return [smp(now)]

    async with trio.open_nursery() as nursery:
        await nursery.start(history.run_sampler, collect, rec, 10.0)
        await trio.sleep(35)
        nursery.cancel_scope.cancel()
    assert len(calls) == 4 and len(rec.got) == 3
    assert [c - calls[0] for c in calls] == [0, 10, 20, 30]


async def test_the_writer_as_a_trio_service(db, autojump_clock):
    w = HistoryWriter(db)                   # wall time: the samples' and the compaction's
    async with trio.open_nursery() as nursery:
        await nursery.start(w.run, lambda now: [smp(now)], 10.0)
        await trio.sleep(35)
        nursery.cancel_scope.cancel()
    assert w.stats()["state"] == "closed" and w.stats()["written"] == 4
    with HistoryStore(db, readonly=True) as st:
        assert len(st.series()) == 4


async def test_run_sampler_takes_an_async_collector(autojump_clock):
    rec = Recorder()

    async def collect(now):
        await trio.sleep(1)
        return []

    async with trio.open_nursery() as nursery:
        await nursery.start(history.run_sampler, collect, rec, 5.0)
        await trio.sleep(12)
        nursery.cancel_scope.cancel()
    assert rec.got == []
