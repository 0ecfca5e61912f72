"""Usage history (docs/history.md): every slice's memory, achieved GPU time
and refusals over time, in an embedded SQLite file.

Owned here:
- ``Sample``: one slice's usage on one GPU at one wall-clock time, as vgpud
  reads it from vgpu.ko (``from_kernel`` builds them from a kernel.Slice and
  its record);
- ``HistoryStore``: the database (schema version ``SCHEMA_VERSION``,
  docs/history.md): series identities, raw samples, fixed-step aggregates;
  the deltas of the kernel's cumulative counters (GPU time, refusals) and
  their resets; downsampling and expiry (``compact``); the size cap
  (``enforce_cap``); queries (``series``, ``demand``).  One connection, used
  from one thread at a time;
- ``HistoryWriter``: the store behind a worker thread and a bounded queue.
  ``submit`` never blocks (a full queue drops the samples, counted, with a
  rate-limited warning); writes are batched into one transaction; a full,
  read-only or broken disk is a rate-limited warning and a retry later, a
  corrupt file is moved aside and a new one started; nothing here raises
  into its caller;
- ``run_sampler``: a trio task that calls a collector at an interval and
  submits what it returns.

Not here (yet): vgpud's config keys and the wiring into its main loop and
API (the Manager supplies the samples: see ``from_kernel``).

What it may call: the standard library (sqlite3, threading, queue) and trio
(``run_sampler`` only).  No other module of vgpu.daemon.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
import queue
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import trio

__all__ = [
    "Sample", "Row", "HistoryStore", "HistoryWriter", "HistoryError", "HistorySchemaError",
    "HistoryCorrupt", "SCHEMA_VERSION", "APPLICATION_ID", "from_kernel", "run_sampler",
    "quarantine",
]

log = logging.getLogger("vgpud.history")

#: the schema this module writes (meta.schema_version); see docs/history.md
SCHEMA_VERSION = 1
#: PRAGMA application_id of a vgpud history file: "vGPH"
APPLICATION_ID = 0x76475048

DAY = 86400.0
#: a compute policy of VGPU_COMPUTE_NONE (vgpu.abi.uapi): no compute target
_COMPUTE_NONE = 0


class HistoryError(Exception):
    """The history database cannot be used."""


class HistorySchemaError(HistoryError):
    """The file is a history database of a schema this vgpud does not know
    (a newer vgpud's): it is left untouched."""


class HistoryCorrupt(HistoryError):
    """The file is not a (sound) history database."""


# ---------------------------------------------------------------- samples
@dataclass(frozen=True)
class Sample:
    """One slice's usage of one GPU at wall time ``t`` (seconds since the
    epoch).  ``gpu_time_ns`` and ``refusals`` are the kernel's cumulative
    counters as read (the store keeps their deltas); ``compute_bp`` is the
    slice's compute target in basis points (None: no compute setting).
    ``epoch``: optional identity of the counters' origin (for instance the
    module's load and the slice's creation): a change means they restarted
    even if they did not go backwards."""
    t: float
    slice_id: int
    container: str
    gpu: int                       # the host's GPU index (inventory)
    gpu_uuid: str = ""
    mem_used: int = 0              # bytes
    mem_peak: int = 0              # bytes, the kernel's high-water mark
    mem_limit: int = 0             # bytes
    gpu_time_ns: int = 0           # cumulative
    compute_bp: int | None = None
    refusals: int = 0              # cumulative
    labels: dict[str, str] = field(default_factory=dict)
    epoch: str | None = None


def from_kernel(ks: Any, rec: Any, t: float, epoch: str | None = None) -> list[Sample]:
    """The samples of one kernel.Slice ``ks`` (one per GPU) with its
    record ``rec`` (records.SliceRecord: container, labels, gpus[i].gpu and
    .uuid, where i is the kernel's container GPU index), or None for a slice
    without a record (named after the kernel's name, host index unknown:
    -1)."""
    out = []
    for g in ks.gpus:
        slot = rec.gpus[g.index] if rec is not None and 0 <= g.index < len(rec.gpus) else None
        bp = g.compute_bp if g.compute_policy != _COMPUTE_NONE and g.compute_bp else None
        out.append(Sample(
            t=t, slice_id=ks.id, container=rec.container if rec is not None else ks.name,
            gpu=slot.gpu if slot is not None else -1,
            gpu_uuid=(slot.uuid or "") if slot is not None else "",
            mem_used=g.mem_used, mem_peak=g.mem_peak, mem_limit=g.mem_limit,
            gpu_time_ns=g.gpu_time_ns, compute_bp=bp, refusals=g.refusals,
            labels=dict(rec.labels) if rec is not None else {}, epoch=epoch))
    return out


# ---------------------------------------------------------------- rows
@dataclass
class Row:
    """One point of a series as ``HistoryStore.series`` returns it: a raw
    sample (``source`` "raw", ``n`` 1, ``t`` the sample's time, ``step`` 0)
    or a bucket [t, t + step) of aggregated samples.

    Memory: bytes (``mem_used`` the mean, ``mem_used_p95`` exact over raw
    samples within one stored aggregate, an upper bound (the max of the
    parts') when buckets are merged; ``mem_peak`` and ``mem_limit`` the max).
    GPU time: ``gpu_time_ns`` granted over ``covered_s`` seconds (None when
    no sample of the bucket had a known delta), ``share`` = gpu_time /
    covered (0..~1 of one GPU), ``share_max`` the largest one sample's.
    ``refusals``: refused allocations in the bucket (None: unknown).
    ``resets``: counter restarts seen in it."""
    container: str
    slice_id: int
    labels: dict[str, str]
    gpu: int
    gpu_uuid: str
    t: float
    step: float
    n: int
    mem_used: float
    mem_used_min: int
    mem_used_max: int
    mem_used_p95: int
    mem_peak: int
    mem_limit: int
    gpu_time_ns: int | None
    covered_s: float
    share: float | None
    share_max: float | None
    compute_bp: int | None
    refusals: int | None
    resets: int
    source: str

    @property
    def key(self) -> tuple:
        return (self.container, self.slice_id, _labels_json(self.labels), self.gpu,
                self.gpu_uuid)

    def to_json(self) -> dict:
        return asdict(self)


def _labels_json(labels: dict) -> str:
    return json.dumps({str(k): str(v) for k, v in (labels or {}).items()}, sort_keys=True,
                      separators=(",", ":"))


def _p95(values: list[int]) -> int:
    """Nearest-rank 95th percentile."""
    s = sorted(values)
    return s[max(0, math.ceil(0.95 * len(s)) - 1)]


class _Acc:
    """Accumulates samples or aggregates (in time order) into one bucket."""
    __slots__ = ("t0", "step", "n", "mn", "sum", "mx", "p95", "peak", "limit", "gt", "cov",
                 "smax", "bp", "ref", "resets", "used")

    def __init__(self, t0: float, step: float):
        self.t0, self.step = t0, step
        self.n = 0
        self.mn = self.mx = self.p95 = self.peak = self.limit = 0
        self.sum = 0.0
        self.gt: int | None = None
        self.cov = 0.0
        self.smax: float | None = None
        self.bp: int | None = None
        self.ref: int | None = None
        self.resets = 0
        self.used: list[int] | None = []        # raw values while only raw came in

    def _common(self, n, mn, mean, mx, peak, limit, gt, cov, smax, bp, ref, resets):
        self.mn = mn if self.n == 0 else min(self.mn, mn)
        self.mx = mx if self.n == 0 else max(self.mx, mx)
        self.sum += mean * n
        self.n += n
        self.peak = max(self.peak, peak)
        self.limit = max(self.limit, limit)
        if gt is not None:
            self.gt = (self.gt or 0) + gt
            self.cov += cov or 0.0
        if smax is not None:
            self.smax = smax if self.smax is None else max(self.smax, smax)
        if bp is not None:
            self.bp = bp
        if ref is not None:
            self.ref = (self.ref or 0) + ref
        self.resets += resets

    def add_raw(self, mem_used, mem_peak, mem_limit, dt, gt, share, bp, ref, reset) -> None:
        self._common(1, mem_used, mem_used, mem_used, mem_peak, mem_limit, gt, dt, share, bp,
                     ref, reset)
        if self.used is not None:
            self.used.append(mem_used)
        else:
            self.p95 = max(self.p95, mem_used)

    def add_agg(self, n, mn, mean, mx, p95, peak, limit, gt, cov, smax, bp, ref, resets) -> None:
        if self.used:
            self.p95 = _p95(self.used)
        self.used = None
        self.p95 = max(self.p95, p95)
        self._common(n, mn, mean, mx, peak, limit, gt, cov, smax, bp, ref, resets)

    def values(self) -> tuple:
        p95 = _p95(self.used) if self.used else self.p95
        return (self.n, self.mn, self.sum / self.n if self.n else 0.0, self.mx, p95, self.peak,
                self.limit, self.gt, self.cov, self.smax, self.bp, self.ref, self.resets)


# ---------------------------------------------------------------- schema
_SCHEMA = [
    """CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL)""",
    """CREATE TABLE series (
        id INTEGER PRIMARY KEY,
        slice_id INTEGER NOT NULL,
        container TEXT NOT NULL,
        labels TEXT NOT NULL,
        gpu INTEGER NOT NULL,
        gpu_uuid TEXT NOT NULL,
        first_t REAL NOT NULL,
        last_t REAL NOT NULL,
        last_gpu_time_ns INTEGER NOT NULL,
        last_refusals INTEGER NOT NULL,
        epoch TEXT,
        UNIQUE (container, slice_id, labels, gpu, gpu_uuid))""",
    """CREATE TABLE raw (
        series INTEGER NOT NULL REFERENCES series(id),
        t REAL NOT NULL,
        dt REAL,
        mem_used INTEGER NOT NULL,
        mem_peak INTEGER NOT NULL,
        mem_limit INTEGER NOT NULL,
        gpu_time_ns INTEGER NOT NULL,
        gpu_time_delta_ns INTEGER,
        share REAL,
        compute_bp INTEGER,
        refusals INTEGER,
        reset INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (series, t)) WITHOUT ROWID""",
    "CREATE INDEX raw_t ON raw(t)",
    """CREATE TABLE agg (
        series INTEGER NOT NULL REFERENCES series(id),
        step REAL NOT NULL,
        t0 REAL NOT NULL,
        n INTEGER NOT NULL,
        mem_used_min INTEGER NOT NULL,
        mem_used_mean REAL NOT NULL,
        mem_used_max INTEGER NOT NULL,
        mem_used_p95 INTEGER NOT NULL,
        mem_peak_max INTEGER NOT NULL,
        mem_limit_max INTEGER NOT NULL,
        gpu_time_ns INTEGER,
        covered_s REAL NOT NULL,
        share_max REAL,
        compute_bp INTEGER,
        refusals INTEGER,
        resets INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (series, step, t0)) WITHOUT ROWID""",
    "CREATE INDEX agg_t ON agg(t0)",
]

#: {old version: function(conn) that brings it to old version + 1}
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {}

_CORRUPT_NAMES = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}


def is_corruption(e: BaseException) -> bool:
    """Whether an sqlite3 error says the file is not a sound database."""
    if isinstance(e, HistoryCorrupt):
        return True
    if not isinstance(e, sqlite3.DatabaseError):
        return False
    name = getattr(e, "sqlite_errorname", "") or ""
    if any(name == n or name.startswith(n + "_") for n in _CORRUPT_NAMES):
        return True
    msg = str(e).lower()
    return "malformed" in msg or "not a database" in msg


def quarantine(path: str | os.PathLike) -> Path | None:
    """Move a database file (and its -wal; its -shm is removed) aside to
    <name>.corrupt-<UTC time>; returns the new name (None: no file)."""
    p = Path(path)
    if not p.exists():
        return None
    ts = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest = p.with_name(f"{p.name}.corrupt-{ts}")
    n = 1
    while dest.exists():
        dest = p.with_name(f"{p.name}.corrupt-{ts}.{n}")
        n += 1
    os.rename(p, dest)
    for suffix in ("-wal", "-journal"):
        side = p.with_name(p.name + suffix)
        if side.exists():
            os.rename(side, dest.with_name(dest.name + suffix))
    shm = p.with_name(p.name + "-shm")
    try:
        shm.unlink()
    except FileNotFoundError:
        pass
    return dest


# ---------------------------------------------------------------- the store
class HistoryStore:
    """The history database at ``path``.  Opening creates it (and its
    directory, mode 0700) when missing, checks the application id, the
    schema version and (``check``) the file's integrity: raises
    HistorySchemaError for a newer schema (the file is left untouched),
    HistoryCorrupt for a file that is not a sound history database,
    sqlite3.Error or OSError when it cannot be opened.  ``readonly`` opens
    it for queries only (another connection than the writer's; WAL lets
    both run).  ``check`` (default: when not readonly) runs SQLite's
    quick_check, which reads the whole file.

    Times are wall-clock seconds (time.time()); every method that depends
    on the present takes ``now``."""

    def __init__(self, path: str | os.PathLike, *, raw_retention_s: float = DAY,
                 agg_step_s: float = 300.0, agg_retention_s: float = 35 * DAY,
                 max_bytes: int = 256 << 20, max_gap_s: float = 900.0,
                 readonly: bool = False, check: bool | None = None):
        if agg_step_s <= 0 or raw_retention_s < 0 or agg_retention_s < 0 or max_bytes <= 0:
            raise ValueError("history: retention, step and size must be positive")
        self.path = Path(path)
        self.raw_retention_s = float(raw_retention_s)
        self.agg_step_s = float(agg_step_s)
        self.agg_retention_s = float(agg_retention_s)
        self.max_bytes = int(max_bytes)
        self.max_gap_s = float(max_gap_s)
        self.readonly = readonly
        #: rows add() left out (not numbers where numbers belong)
        self.skipped = 0
        #: (container, slice_id, labels json, gpu, uuid) -> [id, last_t, gt, ref, epoch]
        self._series: dict[tuple, list] = {}
        self.conn = self._open(not readonly if check is None else check)

    # ------------------------------------------------------------ opening
    def _open(self, check: bool) -> sqlite3.Connection:
        if self.readonly:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=5.0,
                                   isolation_level=None, check_same_thread=False)
        else:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=5.0, isolation_level=None,
                                   check_same_thread=False)
        try:
            self._setup(conn, check)
        except sqlite3.DatabaseError as e:
            conn.close()
            if is_corruption(e):
                raise HistoryCorrupt(f"{self.path}: {e}") from e
            raise
        except BaseException:
            conn.close()
            raise
        return conn

    def _setup(self, conn: sqlite3.Connection, check: bool) -> None:
        tables = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        app = conn.execute("PRAGMA application_id").fetchone()[0]
        if app not in (0, APPLICATION_ID) or (tables and "meta" not in tables):
            raise HistoryCorrupt(f"{self.path}: not a vgpud history database")
        if not tables:
            if self.readonly:
                raise HistoryError(f"{self.path}: empty, not a history database yet")
            # before any table: pages freed by deletes can be given back
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("BEGIN IMMEDIATE")
            for stmt in _SCHEMA:
                conn.execute(stmt)
            conn.execute("INSERT INTO meta VALUES ('schema_version', ?), ('created', ?)",
                         (str(SCHEMA_VERSION), repr(time.time())))
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute("COMMIT")
        else:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            try:
                version = int(row[0]) if row is not None else None
            except ValueError:
                version = None
            if version is None:
                raise HistoryCorrupt(f"{self.path}: no schema version")
            if version > SCHEMA_VERSION:
                raise HistorySchemaError(
                    f"{self.path}: history schema version {version} is newer than this "
                    f"vgpud's ({SCHEMA_VERSION}); the file is left as it is: move it away "
                    f"or run the newer vgpud")
            if version < SCHEMA_VERSION:
                if self.readonly:
                    raise HistorySchemaError(f"{self.path}: schema version {version} needs "
                                             f"a migration (open it for writing)")
                self._migrate(conn, version)
            if check:
                res = [r[0] for r in conn.execute("PRAGMA quick_check(1)")]
                if res != ["ok"]:
                    raise HistoryCorrupt(f"{self.path}: {'; '.join(map(str, res))}")
            if not self.readonly:
                conn.execute("PRAGMA journal_mode = WAL")
        if not self.readonly:
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA journal_size_limit = 4194304")
        conn.execute("PRAGMA foreign_keys = OFF")

    def _migrate(self, conn: sqlite3.Connection, version: int) -> None:
        while version < SCHEMA_VERSION:
            step = MIGRATIONS.get(version)
            if step is None:
                raise HistorySchemaError(f"{self.path}: no migration from schema version "
                                         f"{version}")
            conn.execute("BEGIN IMMEDIATE")
            try:
                step(conn)
                version += 1
                conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                             (str(version),))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            log.info("history: %s migrated to schema version %d", self.path, version)

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        try:
            if not self.readonly:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            pass
        finally:
            conn.close()

    def __enter__(self) -> "HistoryStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def schema_version(self) -> int:
        return int(self.conn.execute(
            "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])

    # ------------------------------------------------------------ writing
    def _series_id(self, s: Sample, lj: str) -> list:
        key = (s.container, int(s.slice_id), lj, int(s.gpu), s.gpu_uuid or "")
        st = self._series.get(key)
        if st is not None:
            return st
        row = self.conn.execute(
            "SELECT id, last_t, last_gpu_time_ns, last_refusals, epoch FROM series WHERE "
            "container = ? AND slice_id = ? AND labels = ? AND gpu = ? AND gpu_uuid = ?",
            key).fetchone()
        if row is None:
            cur = self.conn.execute(
                "INSERT INTO series (slice_id, container, labels, gpu, gpu_uuid, first_t, "
                "last_t, last_gpu_time_ns, last_refusals, epoch) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (key[1], key[0], lj, key[3], key[4], s.t, s.t, 0, 0, None))
            st = [cur.lastrowid, None, 0, 0, None]
        else:
            st = list(row)
        self._series[key] = st
        return st

    def add(self, samples: Iterable[Sample]) -> int:
        """Store samples (in one transaction); returns how many.  Per series,
        the counters' deltas since its previous sample: a counter that went
        backwards, or a changed ``epoch``, is a restart (the delta is the
        new value, counted since the restart, and ``reset`` is set); a
        previous sample more than ``max_gap_s`` ago, or none, or a later
        one (the clock went back) gives no delta (NULL)."""
        n = 0
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            touched = {}
            for s in samples:
                try:
                    gt, ref, t = int(s.gpu_time_ns), int(s.refusals), float(s.t)
                    mem = (int(s.mem_used), int(s.mem_peak), int(s.mem_limit))
                    bp = None if s.compute_bp is None else int(s.compute_bp)
                    int(s.slice_id), int(s.gpu), str(s.container)
                    lj = _labels_json(s.labels)
                    if not all(-(1 << 63) <= v < (1 << 63) for v in (gt, ref, *mem)) or \
                            not math.isfinite(t):
                        raise ValueError("out of range")
                except (TypeError, ValueError, AttributeError) as e:
                    self.skipped += 1
                    log.warning("history: a sample left out (%s): %r", e, s)
                    continue
                st = self._series_id(s, lj)
                sid, last_t, last_gt, last_ref, epoch = st
                dt = dgt = dref = share = None
                reset = 0
                if last_t is not None and last_t < t <= last_t + self.max_gap_s:
                    dt = t - last_t
                    if gt < last_gt or ref < last_ref or (
                            s.epoch is not None and epoch is not None and s.epoch != epoch):
                        reset = 1
                        dgt, dref = gt, ref
                    else:
                        dgt, dref = gt - last_gt, ref - last_ref
                    share = dgt / 1e9 / dt
                elif last_t is not None and (gt < last_gt or ref < last_ref):
                    reset = 1
                self.conn.execute(
                    "INSERT OR REPLACE INTO raw VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (sid, t, dt, *mem, gt, dgt, share, bp, dref, reset))
                st[1:] = [t, gt, ref, s.epoch]
                touched[sid] = st
                n += 1
            for sid, st in touched.items():
                self.conn.execute(
                    "UPDATE series SET last_t = ?, last_gpu_time_ns = ?, last_refusals = ?, "
                    "epoch = ? WHERE id = ?", (st[1], st[2], st[3], st[4], sid))
            self.conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        return n

    def _rollback(self) -> None:
        self._series.clear()            # the cache may hold what was rolled back
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    # ------------------------------------------------------------ compaction
    def compact(self, now: float) -> dict:
        """Downsample raw samples older than the raw retention into
        ``agg_step_s`` aggregates (whole buckets only: the cut is the start
        of the bucket that holds now - raw_retention_s), drop aggregates
        whose bucket ended before now - agg_retention_s and series left
        without data, then enforce the size cap.  Returns counts."""
        step = self.agg_step_s
        cut = math.floor((now - self.raw_retention_s) / step) * step
        expire = now - self.agg_retention_s
        out = {"compacted": 0, "aggregates": 0, "expired": 0, "series_dropped": 0}
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            accs: dict[tuple[int, float], _Acc] = {}
            for (sid, t, dt, used, peak, limit, dgt, share, bp, ref, reset) in self.conn.execute(
                    "SELECT series, t, dt, mem_used, mem_peak, mem_limit, gpu_time_delta_ns, "
                    "share, compute_bp, refusals, reset FROM raw WHERE t < ? "
                    "ORDER BY series, t", (cut,)):
                t0 = math.floor(t / step) * step
                acc = accs.get((sid, t0))
                if acc is None:
                    acc = accs[(sid, t0)] = _Acc(t0, step)
                acc.add_raw(used, peak, limit, dt, dgt, share, bp, ref, reset)
                out["compacted"] += 1
            for (sid, t0), acc in accs.items():
                old = self.conn.execute(
                    "SELECT n, mem_used_min, mem_used_mean, mem_used_max, mem_used_p95, "
                    "mem_peak_max, mem_limit_max, gpu_time_ns, covered_s, share_max, "
                    "compute_bp, refusals, resets FROM agg WHERE series = ? AND step = ? AND "
                    "t0 = ?", (sid, step, t0)).fetchone()
                if old is not None:          # late samples of a bucket already stored
                    merged = _Acc(t0, step)
                    merged.add_agg(*old)
                    merged.add_agg(*acc.values())
                    acc = merged
                if t0 + step <= expire:
                    continue
                self.conn.execute("INSERT OR REPLACE INTO agg VALUES "
                                  "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                                  (sid, step, t0, *acc.values()))
                out["aggregates"] += 1
            self.conn.execute("DELETE FROM raw WHERE t < ?", (cut,))
            out["expired"] = self.conn.execute(
                "DELETE FROM agg WHERE t0 < ? AND t0 + step <= ?", (expire, expire)).rowcount
            gone = [r[0] for r in self.conn.execute(
                "SELECT id FROM series s WHERE last_t < ? AND NOT EXISTS "
                "(SELECT 1 FROM raw WHERE series = s.id) AND NOT EXISTS "
                "(SELECT 1 FROM agg WHERE series = s.id)", (now - self.raw_retention_s,))]
            for sid in gone:
                self.conn.execute("DELETE FROM series WHERE id = ?", (sid,))
            out["series_dropped"] = len(gone)
            self.conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        if gone:
            self._series.clear()
        out["dropped_for_size"] = self.enforce_cap()
        return out

    # ------------------------------------------------------------ size cap
    def _pragma(self, name: str) -> int:
        return int(self.conn.execute(f"PRAGMA {name}").fetchone()[0])

    def used_bytes(self) -> int:
        """Bytes of the database's pages in use (free pages not counted)."""
        return (self._pragma("page_count") - self._pragma("freelist_count")) * \
            self._pragma("page_size")

    def size_bytes(self) -> int:
        """Bytes on disk: the file and its write-ahead log."""
        total = 0
        for p in (self.path, self.path.with_name(self.path.name + "-wal")):
            try:
                total += p.stat().st_size
            except FileNotFoundError:
                pass
        return total

    def enforce_cap(self) -> int:
        """While the pages in use pass ``max_bytes``, delete the oldest rows
        (aggregates first: they hold the oldest times; then raw samples)
        down to 80% of it; then give the free pages back to the file system
        (incremental vacuum, WAL checkpoint).  Returns the rows deleted."""
        used = self.used_bytes()
        if used <= self.max_bytes:
            if self.size_bytes() > self.max_bytes:
                self._shrink()
            return 0
        target = int(self.max_bytes * 0.8)
        deleted = 0
        for _ in range(64):
            used = self.used_bytes()
            if used <= target:
                break
            nagg = self._count("agg")
            nraw = self._count("raw")
            if nagg + nraw == 0:
                break
            per_row = used / (nagg + nraw)
            want = max(1, math.ceil((used - target) / per_row))
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                if nagg:
                    row = self.conn.execute("SELECT t0 FROM agg ORDER BY t0 LIMIT 1 OFFSET ?",
                                            (min(want, nagg) - 1,)).fetchone()
                    deleted += self.conn.execute("DELETE FROM agg WHERE t0 <= ?",
                                                 (row[0],)).rowcount
                else:
                    row = self.conn.execute("SELECT t FROM raw ORDER BY t LIMIT 1 OFFSET ?",
                                            (min(want, nraw) - 1,)).fetchone()
                    deleted += self.conn.execute("DELETE FROM raw WHERE t <= ?",
                                                 (row[0],)).rowcount
                self.conn.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        self._shrink()
        if deleted:
            log.warning("history: %s passed its size cap (%d bytes): the oldest %d row(s) "
                        "dropped", self.path, self.max_bytes, deleted)
        return deleted

    def _shrink(self) -> None:
        """Give the free pages back to the file system."""
        # stepped to its end (a plain execute() frees one page)
        self.conn.executescript("PRAGMA incremental_vacuum;")
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _count(self, table: str) -> int:
        return int(self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def stats(self) -> dict:
        """Counts and extent, for a status display."""
        oldest = self.conn.execute(
            "SELECT min(t) FROM (SELECT min(t0) AS t FROM agg UNION ALL "
            "SELECT min(t) FROM raw)").fetchone()[0]
        return {"path": str(self.path), "schema_version": self.schema_version(),
                "series": self._count("series"), "raw": self._count("raw"),
                "aggregates": self._count("agg"), "oldest": oldest,
                "bytes": self.size_bytes(), "used_bytes": self.used_bytes(),
                "max_bytes": self.max_bytes}

    # ------------------------------------------------------------ queries
    def _select_series(self, container, label, gpu, slice_id) -> dict[int, tuple]:
        want = _label_filter(label)
        out = {}
        for sid, slc, cont, lj, g, uuid in self.conn.execute(
                "SELECT id, slice_id, container, labels, gpu, gpu_uuid FROM series"):
            if container is not None and cont != container:
                continue
            if slice_id is not None and slc != slice_id:
                continue
            if gpu is not None:
                if isinstance(gpu, str) and not gpu.lstrip("-").isdigit():
                    if gpu.lower() != uuid.lower():
                        continue
                elif int(gpu) != g:
                    continue
            labels = json.loads(lj)
            if any(k not in labels or (v is not None and labels[k] != v) for k, v in want):
                continue
            out[sid] = (cont, slc, labels, g, uuid)
        return out

    def series(self, container: str | None = None, label: Any = None,
               gpu: int | str | None = None, since: float | None = None,
               until: float | None = None, step: float | None = None,
               slice_id: int | None = None) -> list[Row]:
        """The points of the series that match, sorted by series then time:
        ``container`` (its name), ``label`` ("key=value", "key" (has it), a
        list of those, or a dict; all must match), ``gpu`` (host index or
        UUID), ``slice_id``; times in [since, until) (a bucket counts by its
        start).  ``step`` None: the stored resolution (raw samples for the
        recent past, aggregates before); a step in seconds: every point
        (raw and aggregate) merged into buckets [k*step, (k+1)*step)."""
        sel = self._select_series(container, label, gpu, slice_id)
        if not sel:
            return []
        lo = -math.inf if since is None else float(since)
        hi = math.inf if until is None else float(until)
        ids = ",".join(str(i) for i in sel)
        pts: list[tuple] = []   # (series, t, kind, values)
        for r in self.conn.execute(
                f"SELECT series, step, t0, n, mem_used_min, mem_used_mean, mem_used_max, "
                f"mem_used_p95, mem_peak_max, mem_limit_max, gpu_time_ns, covered_s, "
                f"share_max, compute_bp, refusals, resets FROM agg WHERE series IN ({ids}) "
                f"AND t0 >= ? AND t0 < ?", (lo, hi)):
            pts.append((r[0], r[2], "agg", r))
        for r in self.conn.execute(
                f"SELECT series, t, dt, mem_used, mem_peak, mem_limit, gpu_time_delta_ns, "
                f"share, compute_bp, refusals, reset FROM raw WHERE series IN ({ids}) "
                f"AND t >= ? AND t < ?", (lo, hi)):
            pts.append((r[0], r[1], "raw", r))
        pts.sort(key=lambda p: (p[0], p[1]))
        rows: list[Row] = []
        if step is None:
            for sid, t, kind, r in pts:
                key = sel[sid]
                if kind == "raw":
                    _, t, dt, used, peak, limit, dgt, share, bp, ref, reset = r
                    rows.append(Row(*key, t=t, step=0.0, n=1, mem_used=float(used),
                                    mem_used_min=used, mem_used_max=used, mem_used_p95=used,
                                    mem_peak=peak, mem_limit=limit, gpu_time_ns=dgt,
                                    covered_s=dt if dgt is not None else 0.0, share=share,
                                    share_max=share, compute_bp=bp, refusals=ref,
                                    resets=reset, source="raw"))
                else:
                    rows.append(_row(key, r[2], r[1], r[3:], "agg"))
            rows.sort(key=lambda x: (_order(x), x.t))
            return rows
        if step <= 0:
            raise ValueError("history: step must be positive")
        accs: dict[tuple[int, float], _Acc] = {}
        for sid, t, kind, r in pts:
            t0 = math.floor(t / step) * step
            acc = accs.get((sid, t0))
            if acc is None:
                acc = accs[(sid, t0)] = _Acc(t0, step)
            if kind == "raw":
                acc.add_raw(*r[3:6], r[2], *r[6:])
            else:
                acc.add_agg(*r[3:])
        rows = [_row(sel[sid], t0, step, acc.values(), "merged")
                for (sid, t0), acc in accs.items()]
        rows.sort(key=lambda x: (_order(x), x.t))
        return rows

    def demand(self, label: Any = None, container: str | None = None,
               gpu: int | str | None = None, since: float | None = None,
               until: float | None = None, step: float | None = None) -> list[dict]:
        """The summed demand of the matching series per bucket of ``step``
        seconds (default the aggregate step), in time order: {"t", "step",
        "series" (how many contributed), "mem_used" (sum of the means),
        "mem_used_max" (sum of the maxima: an upper bound), "mem_limit",
        "gpu_time_ns", "gpu_s_per_s" (GPU seconds per second: 1.0 is one
        whole GPU busy), "refusals"}.  What a forecaster reads per label."""
        step = step or self.agg_step_s
        out: dict[float, dict] = {}
        for r in self.series(container=container, label=label, gpu=gpu, since=since,
                             until=until, step=step):
            d = out.get(r.t)
            if d is None:
                d = out[r.t] = {"t": r.t, "step": step, "series": 0, "mem_used": 0.0,
                                "mem_used_max": 0, "mem_limit": 0, "gpu_time_ns": 0,
                                "refusals": 0}
            d["series"] += 1
            d["mem_used"] += r.mem_used
            d["mem_used_max"] += r.mem_used_max
            d["mem_limit"] += r.mem_limit
            d["gpu_time_ns"] += r.gpu_time_ns or 0
            d["refusals"] += r.refusals or 0
            if r.share is not None:
                d.setdefault("_share", 0.0)
                d["_share"] += r.share
        res = []
        for t in sorted(out):
            d = out[t]
            d["gpu_s_per_s"] = d.pop("_share", None)
            res.append(d)
        return res


def _order(r: Row) -> tuple:
    return (r.container, r.slice_id, _labels_json(r.labels), r.gpu, r.gpu_uuid)


def _row(key: tuple, t0: float, step: float, v: Sequence, source: str) -> Row:
    n, mn, mean, mx, p95, peak, limit, gt, cov, smax, bp, ref, resets = v
    share = gt / 1e9 / cov if gt is not None and cov else None
    return Row(*key, t=t0, step=step, n=n, mem_used=mean, mem_used_min=mn, mem_used_max=mx,
               mem_used_p95=p95, mem_peak=peak, mem_limit=limit, gpu_time_ns=gt, covered_s=cov,
               share=share, share_max=smax, compute_bp=bp, refusals=ref, resets=resets,
               source=source)


def _label_filter(label: Any) -> list[tuple[str, str | None]]:
    if label is None:
        return []
    if isinstance(label, dict):
        return [(str(k), None if v is None else str(v)) for k, v in label.items()]
    if isinstance(label, str):
        label = [label]
    out = []
    for item in label:
        k, sep, v = str(item).partition("=")
        if not k:
            raise ValueError(f"history: bad label filter {item!r} (key=value or key)")
        out.append((k, v if sep else None))
    return out


# ---------------------------------------------------------------- the writer
class _RateLimited:
    """A warning per kind at most every ``every`` seconds, with how many
    were held back in between."""

    def __init__(self, every: float, clock=time.monotonic):
        self.every = every
        self.clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warn(self, kind: str, msg: str, *args, level=logging.WARNING) -> None:
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.every:
            self._held[kind] = self._held.get(kind, 0) + 1
            return
        held = self._held.pop(kind, 0)
        self._last[kind] = now
        if held:
            msg += " (%d more like it since the last warning)"
            args = (*args, held)
        log.log(level, msg, *args)


_STOP = object()


class HistoryWriter:
    """A HistoryStore behind a worker thread.  ``submit`` hands it a batch of
    samples without ever blocking; the thread writes what is queued in one
    transaction (up to ``batch_max`` samples), compacts every
    ``compact_every_s`` seconds (wall clock, ``clock``), and survives every
    error of the file:

    - sqlite3.Error or OSError (disk full, read-only, gone): a warning at
      most every ``warn_every_s`` seconds, the store is closed and reopened
      after a back-off (``reopen_delays``: first, max; doubling); samples
      wait in a buffer of ``pending_max`` (the oldest dropped, counted);
    - a corrupt file (HistoryCorrupt, SQLITE_CORRUPT/NOTADB): moved aside
      (``quarantine``), logged as an error, a new file started;
    - a newer schema (HistorySchemaError): logged as an error once, the file
      left alone, history off (samples dropped, counted) until restart.

    ``store_kw`` goes to HistoryStore.  ``stats()`` says how it goes."""

    def __init__(self, path: str | os.PathLike, *, queue_size: int = 64,
                 batch_max: int = 5000, pending_max: int = 50000,
                 compact_every_s: float | None = None,
                 reopen_delays: tuple[float, float] = (5.0, 300.0),
                 warn_every_s: float = 300.0, clock: Callable[[], float] = time.time,
                 store_factory: Callable[..., HistoryStore] = HistoryStore, **store_kw):
        self.path = Path(path)
        self.store_kw = store_kw
        self.store_factory = store_factory
        self.batch_max = batch_max
        self.pending_max = pending_max
        self.compact_every_s = compact_every_s if compact_every_s is not None else \
            float(store_kw.get("agg_step_s", 300.0))
        self.reopen_delays = reopen_delays
        self.clock = clock
        self.q: queue.Queue = queue.Queue(maxsize=queue_size)
        self.warnings = _RateLimited(warn_every_s)
        self.store: HistoryStore | None = None
        self.state = "starting"          # ok | failing | disabled | closed
        self.submitted = self.written = self.dropped = self.lost = self.errors = 0
        self.quarantined: list[str] = []
        self.last_error: str | None = None
        self._pending: list[Sample] = []
        self._retry_at = 0.0
        self._delay = reopen_delays[0]
        self._next_compact = 0.0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._busy = 0
        self._thread = threading.Thread(target=self._run, name="vgpud-history", daemon=True)
        self._started = False

    # ------------------------------------------------------------ the caller's side
    def start(self) -> "HistoryWriter":
        if not self._started:
            self._started = True
            self._thread.start()
        return self

    def submit(self, samples: Sequence[Sample]) -> bool:
        """Queue samples for writing; never blocks.  False when they were
        dropped (the queue is full, or the writer is closed)."""
        samples = list(samples)
        if not samples:
            return True
        if self.state == "closed":
            return False
        with self._lock:
            self._busy += 1
        try:
            self.q.put_nowait(samples)
        except queue.Full:
            with self._idle:
                self._busy -= 1
                self.dropped += len(samples)
                self._idle.notify_all()
            self.warnings.warn("queue-full", "history: the writer is behind (%d batches "
                               "queued): %d sample(s) dropped, %d in all",
                               self.q.qsize(), len(samples), self.dropped)
            return False
        with self._lock:
            self.submitted += len(samples)
        return True

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until what was submitted has been handled (written, or kept
        for a retry); False on timeout."""
        end = time.monotonic() + timeout
        with self._idle:
            while self._busy:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def close(self, timeout: float = 5.0) -> bool:
        """Write what is queued (one last attempt for what waits for a
        retry), close the file, stop the thread; True if it finished within
        timeout seconds (else the daemon thread is left behind)."""
        if not self._started or self.state == "closed":
            self.state = "closed"
            return True
        end = time.monotonic() + timeout
        while True:
            try:
                self.q.put(_STOP, timeout=max(0.01, end - time.monotonic()))
                break
            except queue.Full:
                if time.monotonic() >= end:
                    return False
        self._thread.join(max(0.0, end - time.monotonic()))
        return not self._thread.is_alive()

    def stats(self) -> dict:
        with self._lock:
            return {"path": str(self.path), "state": self.state, "queued": self.q.qsize(),
                    "pending": len(self._pending), "submitted": self.submitted,
                    "written": self.written, "dropped": self.dropped, "lost": self.lost,
                    "errors": self.errors, "last_error": self.last_error,
                    "quarantined": list(self.quarantined)}

    async def run(self, collect: Callable[[float], Any], interval: float, *,
                  close_timeout: float = 5.0, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """A trio service: start the thread, sample with ``run_sampler``
        until cancelled, then close (in a worker thread, shielded: at most
        close_timeout seconds)."""
        self.start()
        try:
            await run_sampler(collect, self, interval, clock=self.clock,
                              task_status=task_status)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.close, close_timeout)

    # ------------------------------------------------------------ the thread
    def _run(self) -> None:
        stop = False
        while not stop:
            timeout = self._wait()
            try:
                item = self.q.get(timeout=timeout)
            except queue.Empty:
                item = None
            batch: list[Sample] = []
            taken = 0
            while item is not None:
                if item is _STOP:
                    stop = True
                else:
                    batch.extend(item)
                    taken += 1
                if stop or len(batch) >= self.batch_max:
                    break
                try:
                    item = self.q.get_nowait()
                except queue.Empty:
                    item = None
            try:
                self._handle(batch, final=stop)
            except Exception:                     # a bug of ours: never kill the thread
                log.exception("history: unexpected error in the writer; the samples "
                              "waiting are dropped")
                with self._lock:
                    self.lost += len(self._pending)
                    self._pending = []
            finally:
                with self._idle:
                    self._busy -= taken
                    self._idle.notify_all()
        with self._lock:
            lost = len(self._pending)
            self.lost += lost
            self._pending = []
        if lost:
            log.warning("history: %d sample(s) not written at close", lost)
        self._close_store()
        self.state = "closed"

    def _wait(self) -> float:
        """Seconds until the thread has something to do unasked: compact,
        or retry what waits."""
        if self.state == "disabled":
            return 1.0
        t = min(1.0, self._next_compact - self.clock())
        if self.store is None and self._pending:
            t = min(t, self._retry_at - time.monotonic())
        return max(0.01, t)

    def _handle(self, batch: list[Sample], final: bool) -> None:
        if self.state == "disabled":
            with self._lock:
                self.dropped += len(batch)
            return
        with self._lock:
            self._pending.extend(batch)
            over = len(self._pending) - self.pending_max
            if over > 0:
                del self._pending[:over]
                self.lost += over
        for _ in range(3):                      # a corrupt file: moved aside, then again
            if self.store is None:
                if not final and time.monotonic() < self._retry_at:
                    return
                if not self._open():
                    if self._retry_at == 0.0 and self.state != "disabled":
                        continue
                    return
            try:
                if self._pending:
                    n = self.store.add(self._pending[:self.batch_max * 4])
                    with self._lock:
                        del self._pending[:n]
                        self.written += n
                if self.clock() >= self._next_compact:
                    self.store.compact(self.clock())
                    self._next_compact = self.clock() + self.compact_every_s
            except (sqlite3.Error, OSError, HistoryError) as e:
                self._failed(e, "write")
                if self._retry_at == 0.0:
                    continue
                return
            if self.state != "ok":
                if self.state == "failing":
                    log.warning("history: %s written again", self.path)
                self.state = "ok"
                self._delay = self.reopen_delays[0]
            return

    def _open(self) -> bool:
        try:
            self.store = self.store_factory(self.path, **self.store_kw)
        except HistorySchemaError as e:
            log.error("history: %s; history is off until vgpud restarts", e)
            self.last_error = str(e)
            self.state = "disabled"
            with self._lock:
                self.dropped += len(self._pending)
                self._pending = []
            return False
        except (sqlite3.Error, OSError, HistoryError) as e:
            self._failed(e, "open")
            return False
        return True

    def _failed(self, e: BaseException, what: str) -> None:
        with self._lock:
            self.errors += 1
            self.last_error = f"{what}: {e}"
        self._close_store()
        if is_corruption(e):
            try:
                dest = quarantine(self.path)
            except OSError as e2:
                self.warnings.warn("quarantine", "history: %s is corrupt (%s) and cannot be "
                                   "moved aside: %s", self.path, e, e2)
            else:
                log.error("history: %s is corrupt (%s): moved to %s, a new one started",
                          self.path, e, dest)
                if dest is not None:
                    self.quarantined.append(str(dest))
                # reopen at once: a new file
                self._retry_at = 0.0
                self.state = "failing"
                return
        self.state = "failing"
        self._retry_at = time.monotonic() + self._delay
        self.warnings.warn("io", "history: cannot %s %s: %s; %d sample(s) waiting, retrying "
                           "in %g s (vgpud goes on without it)", what, self.path, e,
                           len(self._pending), self._delay)
        self._delay = min(self._delay * 2, self.reopen_delays[1])

    def _close_store(self) -> None:
        st, self.store = self.store, None
        if st is not None:
            try:
                st.close()
            except Exception:
                pass


# ---------------------------------------------------------------- trio
async def run_sampler(collect: Callable[[float], Any], writer: HistoryWriter, interval: float,
                      *, clock: Callable[[], float] = time.time,
                      task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Every ``interval`` seconds, ``collect(now)`` (wall time; a plain or
    an async function) returns the samples to ``writer.submit``.  An
    exception of collect is a rate-limited warning, not the end of the
    task.  Runs until cancelled; a late tick is skipped, not caught up."""
    if interval <= 0:
        raise ValueError("history: interval must be positive")
    warnings = _RateLimited(300.0)
    task_status.started()
    nxt = trio.current_time()
    while True:
        try:
            got = collect(clock())
            if inspect.isawaitable(got):
                got = await got
            if got:
                writer.submit(got)
        except Exception as e:
            warnings.warn("collect", "history: sampling failed: %r", e)
        nxt += interval
        now = trio.current_time()
        if nxt <= now:
            nxt = now + interval
        await trio.sleep_until(nxt)
