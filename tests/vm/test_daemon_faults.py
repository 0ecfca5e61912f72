"""vgpud's faults in the VM, against vgpu.ko and nvsim (no fakes).

    python3 tools/vm/vm.py run --load-nvsim --load-vgpu -- \\
        /work/main/.venv/bin/python -m pytest -q tests/vm/test_daemon_faults.py

- vgpufs's FUSE connection aborted (and unmounted from outside) under a
  running vgpud while a process holds a slice's nodes open: the process
  keeps its fds and its allocations, vgpud logs it and mounts afresh;
- the state directory full (a small tmpfs) and read-only (remount,ro):
  the operations succeed, ``status`` says the state is unsaved, the file
  is written once it can be; a vgpud SIGKILLed meanwhile and restarted on
  the stale, read-only file adopts the slices the file lacks;
- SIGKILL at random points of create / set-quota / delete from several
  clients, while processes hold slices' nodes open and allocate: after each
  restart vgpud and vgpu.ko agree, answered operations stand, and the
  holders are not disturbed.

vgpu.ko unloaded under a running vgpud: tests/vm/test_daemon_reload.py.
About 4 min of VM time (the SIGKILL rounds 2.5 of it); VGPU_FAULT_SEED,
VGPU_FAULT_ROUNDS and VGPU_FAULT_SECONDS vary the SIGKILL rounds (pass them
inside the VM: ``vm.py run ... -- env VGPU_FAULT_SEED=7 .venv/bin/python -m
pytest ...``).  Kill points pinned down one by one, on the host:
tests/host/test_crash_points.py.
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from daemon_fixtures import START_TIMEOUT, e2e_config, fill, start
from tools.testbed.vgpud_launcher import Api, Vgpud
from vgpu.abi.nvclient import RmClient
from vgpu_fixtures import MiB, RmError, SliceEnv, wait_until
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from daemon_fixtures import daemons  # noqa: F401
from vgpu_fixtures import kern, vgpu_leak_check  # noqa: F401

pytestmark = pytest.mark.skipif(
    os.environ.get("VGPU_IN_VM") != "1" or not os.path.exists("/sys/module/vgpu"),
    reason="vgpud fault tests run in the VM with nvsim and vgpu.ko loaded")

FUSECTL = Path("/sys/fs/fuse/connections")


def start_fs(tmp: Path) -> Vgpud:
    """A vgpud on e2e_config (vgpufs under tmp), serving with vgpu.ko loaded
    and vgpufs mounted (fuse loaded first)."""
    return Vgpud(tmp, e2e_config(tmp), wait_kernel=True, wait_fuse=True,
                 start_timeout=START_TIMEOUT).start()


def _sh(*cmd: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(cmd)}: {r.stderr}"


def _abort_fuse(mountpoint: str) -> None:
    """Abort the FUSE connection behind mountpoint, as the kernel does when
    the server dies (fusectl's abort file, named by the mount's minor)."""
    conn = os.minor(os.stat(mountpoint).st_dev)
    if not (FUSECTL / str(conn)).exists():
        subprocess.run(["mount", "-t", "fusectl", "fusectl", str(FUSECTL)], capture_output=True)
    (FUSECTL / str(conn) / "abort").write_text("1")


# ------------------------------------------------------------------ vgpufs
def test_vgpufs_aborted_under_a_running_vgpud(tmp_path, kern, daemons):
    d = start_fs(tmp_path)
    daemons.append(d)
    a = d.api()
    sid = a.ok("create", container="t-f1", gpus=[0], memory="64MiB")["slice"]["slice_id"]
    dev = f"{d.fs}/t-f1/dev"
    assert wait_until(lambda: os.path.exists(f"{dev}/nvidiactl"), 30), d.log(3000)
    c = RmClient(dev)                      # a process's fds, opened through vgpufs's nodes
    try:
        g = c.open_gpus()[0]
        hs = fill(g, 16 * MiB)
        assert len(hs) == 4
        view = f"{d.fs}/t-f1/proc/driver/nvidia/gpus"
        held = os.open(f"{d.fs}/t-f1/proc/driver/nvidia/version", os.O_RDONLY)
        try:
            _abort_fuse(d.fs)
            assert wait_until(lambda: "vgpufs mounted again" in d.log(), 60), d.log(4000)
            log = d.log()
            assert "stopped serving: its FUSE connection ended" in log, log[-3000:]
            # the old connection is gone for its FUSE files ...
            with pytest.raises(OSError) as e:
                os.read(held, 100)
            assert e.value.errno in (errno.ENOTCONN, errno.ENODEV, errno.EIO)
        finally:
            os.close(held)
        # ... not for the device fds: allocations stay charged, the quota holds
        assert kern.slice_get(sid).gpu(0).mem_used == 64 * MiB
        with pytest.raises(RmError):
            g.alloc(16 * MiB)
        g.free(hs.pop())
        hs.append(g.alloc(16 * MiB))
        # the new mount serves: new opens, a quota change visible in the view
        a.ok("set-quota", container="t-f1", memory="80MiB")
        c2 = RmClient(dev)
        try:
            g2 = c2.open_gpus()[0]
            g2.free(g2.alloc(16 * MiB))
        finally:
            c2.close(free=True)
        info = os.listdir(view)[0]
        assert "80 MB" in Path(f"{view}/{info}/information").read_text()

        # unmounted from outside: noticed, mounted again
        n = d.log().count("vgpufs mounted again")
        _sh("umount", "-l", d.fs)
        assert wait_until(lambda: d.log().count("vgpufs mounted again") > n, 60), d.log(4000)
        assert os.path.exists(f"{dev}/nvidiactl")
        assert kern.slice_get(sid).gpu(0).mem_used == 64 * MiB
        g.free(hs.pop())
        hs.append(g.alloc(16 * MiB))
        assert d.proc.poll() is None
        st = a.ok("status")
        assert st["kernel"]["loaded"] and st["slices"] == 1
    finally:
        c.close(free=True)
    a.ok("delete", container="t-f1")
    a.close()
    assert d.stop() == 0, d.log(4000)
    assert "Traceback" not in d.log(), d.log()


# ------------------------------------------------------------------ state dir
def _fill(path: Path) -> None:
    """Fill the file system of path (a small tmpfs) to ENOSPC."""
    try:
        with open(path, "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError as e:
        assert e.errno == errno.ENOSPC, e


def _state(d) -> dict:
    return json.loads((d.state_dir / "state.json").read_text())["slices"]


def test_state_dir_full_then_read_only(tmp_path, kern, daemons):
    sfs = tmp_path / "statefs"
    sfs.mkdir()
    _sh("mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(sfs))
    cfg = e2e_config(tmp_path)
    cfg["paths"]["state_dir"] = str(sfs / "state")
    # the usage history keeps its database open for writing, by default in
    # the state directory: that alone makes `mount -o remount,ro` EBUSY
    # (a filesystem the kernel turns read-only on an error goes anyway)
    cfg["history"] = {"path": str(tmp_path / "history.db")}
    try:
        d = start(tmp_path, cfg)
        daemons.append(d)
        a = d.api()
        sid1 = a.ok("create", container="t-s1", gpus=[0], memory="32MiB")["slice"]["slice_id"]
        assert a.ok("status")["state"]["saved"] is True

        # full: the operations succeed, the state is marked unsaved
        _fill(sfs / "filler")
        r = a.call("create", container="t-s2", gpus=[0], memory="32MiB")
        assert r["ok"], r
        sid2 = r["result"]["slice"]["slice_id"]
        assert kern.slice_get(sid2).name == "t-s2"
        st = a.ok("status")["state"]
        assert st["saved"] is False and st["error"]["errno"] == "ENOSPC", st
        assert a.call("set-quota", container="t-s1", memory="48MiB")["ok"]
        assert kern.slice_get(sid1).gpu(0).mem_limit == 48 * MiB
        assert "cannot save" in d.log() and "ENOSPC" in d.log()
        assert set(_state(d)) == {"t-s1"}
        # room again: saved by the retry, and logged
        (sfs / "filler").unlink(missing_ok=True)
        assert wait_until(lambda: a.ok("status")["state"]["saved"], 60), d.log(3000)
        assert "again after" in d.log()
        assert set(_state(d)) == {"t-s1", "t-s2"}

        # read-only: likewise; SIGKILLed before it could save, restarted on
        # the stale file while still read-only: the kernel's slice adopted
        _sh("mount", "-o", "remount,ro", str(sfs))
        sid3 = a.ok("create", container="t-s3", gpus=[0], memory="16MiB")["slice"]["slice_id"]
        st = a.ok("status")["state"]
        assert st["error"]["errno"] == "EROFS", st
        assert a.call("delete", container="t-s2")["ok"]
        a.close()
        d.stop(signal.SIGKILL)
        d.start()
        a = d.api()
        assert "adopted slice %d (t-s3)" % sid3 in d.log(), d.log(3000)
        names = {s["container"]: s for s in a.ok("list")["slices"]}
        assert names["t-s3"]["gpus"][0]["memory_limit"] == 16 * MiB
        assert names["t-s1"]["gpus"][0]["memory_limit"] == 48 * MiB
        # t-s2's delete was not saved: the restarted vgpud wants it again
        assert "t-s2" in names
        assert {s.name for s in kern.slices() if s.name.startswith("t-s")} == set(names)
        assert a.ok("status")["state"]["saved"] is False
        _sh("mount", "-o", "remount,rw", str(sfs))
        assert wait_until(lambda: a.ok("status")["state"]["saved"], 60), d.log(3000)
        assert set(_state(d)) == {"t-s1", "t-s2", "t-s3"}
        for c in names:
            a.ok("delete", container=c)
        a.close()
        assert d.stop() == 0, d.log(3000)
        assert "Traceback" not in d.log(), d.log()
    finally:
        for dd in daemons:
            if dd.alive():
                dd.stop(signal.SIGKILL)
        subprocess.run(["umount", "-l", str(sfs)], capture_output=True)


# ------------------------------------------------------------------ SIGKILL
SEED = int(os.environ.get("VGPU_FAULT_SEED", "16"))
ROUNDS = int(os.environ.get("VGPU_FAULT_ROUNDS", "24"))
# a round is ~20 s under TCG (vgpud's start dominates): the rounds stop
# after this many seconds, 6 to 8 of them by default, once the clients had
# MIN_ANSWERED operations answered (a loaded machine answers fewer in a
# round's window before the kill: it runs more rounds, up to ROUNDS)
SECONDS = float(os.environ.get("VGPU_FAULT_SECONDS", "120"))
MIN_ANSWERED = 11
CLIENTS = 3
NAMES = 3               # containers per client
HOLDERS = 2


class Model:
    """What each container should be after the operations that were
    answered: ("present", memory) / ("absent", None); None when an
    operation was cut by the kill (either outcome is right; the next check
    learns which)."""

    def __init__(self):
        self.want: dict[str, tuple | None] = {}
        #: the operations cut by the kill: container -> (op, args)
        self.cut: dict[str, tuple[str, dict]] = {}
        self.retried: dict[str, int] = {}
        self.lock = threading.Lock()


# as the OCI hook's: a create retried by the same owner gets its slice
OWNER = {"runtime": "runc", "namespace": "faults"}


def client_loop(sock: str, cid: int, rng: random.Random, model: Model, stop: threading.Event,
                errors: list, done: list) -> None:
    names = [f"t-k{cid}-{j}" for j in range(NAMES)]
    try:
        api = Api(sock, timeout=60)
    except OSError:
        return
    try:
        while not stop.is_set():
            c = rng.choice(names)
            with model.lock:
                have = model.want.get(c, ("absent", None))
            if have is None:                      # unknown until the next check
                continue
            mem = rng.choice((16, 32, 48)) * MiB
            if have[0] == "absent":
                op, args = "create", {"container": c, "gpus": [0], "memory": mem, "owner": OWNER}
            elif rng.random() < 0.5:
                op, args = "set-quota", {"container": c, "memory": mem}
            else:
                op, args = "delete", {"container": c, "owner": OWNER}
            with model.lock:
                model.want[c] = None              # in flight
                model.cut[c] = (op, args)
            try:
                r = api.call(op, **args)
            except (OSError, AssertionError, ValueError):
                return                            # vgpud killed: c stays unknown
            with model.lock:
                model.cut.pop(c, None)
            with model.lock:
                if r.get("ok"):
                    model.want[c] = ("absent", None) if op == "delete" else ("present", mem)
                    done.append(op)
                else:
                    errors.append(f"{op} {args}: {r.get('error')}")
                    model.want[c] = have
    finally:
        try:
            api.close()
        except OSError:
            pass


def test_sigkill_under_load(tmp_path, kern, daemons):
    rng = random.Random(SEED)
    d = start_fs(tmp_path)
    daemons.append(d)
    a = d.api()
    holders = []
    try:
        # processes holding nodes open with memory allocated
        for i in range(HOLDERS):
            sl = a.ok("create", container=f"t-hold{i}", gpus=[0], memory="64MiB")["slice"]
            env = SliceEnv(kern, kern.slice_get(sl["slice_id"]))
            g = env.client().open_gpus()[0]
            hs = [g.alloc(16 * MiB), g.alloc(16 * MiB)]
            holders.append({"name": f"t-hold{i}", "id": sl["slice_id"], "env": env, "g": g,
                            "hs": hs, "limit": 64 * MiB})
        a.close()
        model = Model()
        t0 = time.monotonic()
        answered = []
        for rnd in range(ROUNDS):
            stop = threading.Event()
            errors: list[str] = []
            threads = [threading.Thread(target=client_loop,
                                        args=(d.sock, i, random.Random(rng.random()), model,
                                              stop, errors, answered))
                       for i in range(CLIENTS)]
            # one more client changes the holders' quotas (never below what they hold)
            hrng = random.Random(rng.random())

            def holder_quota():
                try:
                    api = Api(d.sock, timeout=60)
                except OSError:
                    return
                try:
                    while not stop.is_set():
                        h = hrng.choice(holders)
                        mem = hrng.choice((48, 64, 80)) * MiB
                        h["pending"] = mem
                        try:
                            r = api.call("set-quota", container=h["name"], memory=mem)
                        except (OSError, AssertionError, ValueError):
                            return
                        if r.get("ok"):
                            h["limit"] = mem
                        h.pop("pending", None)
                finally:
                    try:
                        api.close()
                    except OSError:
                        pass
            threads.append(threading.Thread(target=holder_quota))
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.05, 1.5))
            d.stop(signal.SIGKILL)
            stop.set()
            for t in threads:
                t.join(60)
            assert not errors, errors
            d.start()
            check(d, kern, model, holders, rnd)
            if time.monotonic() - t0 > SECONDS and len(answered) >= MIN_ANSWERED:
                break
        assert len(answered) >= MIN_ANSWERED, answered
        print(f"sigkill: {rnd + 1} rounds, {len(answered)} operations answered, "
              f"retried after a kill: {model.retried}")
        assert "Traceback" not in d.log(), d.log()
    finally:
        for h in holders:
            h["env"].close_all()
        if d.alive():
            d.stop(signal.SIGKILL)


def check(d, kern, model: Model, holders: list, rnd: int) -> None:
    """After a restart: vgpud's slices are the kernel's (ids, names,
    limits), answered operations stand, the holders are undisturbed."""
    ctx = f"round {rnd}; log:\n{d.log(4000)}"
    with d.api() as a:
        listed = {s["container"]: s for s in a.ok("list")["slices"]}
    ks = {s.name: s for s in kern.slices() if s.name.startswith("t-")}
    mine = {c: s for c, s in listed.items() if c.startswith("t-")}
    assert set(mine) == set(ks), (sorted(mine), sorted(ks), ctx)
    for c, s in mine.items():
        k = ks[c]
        assert s["slice_id"] == k.id, (c, s["slice_id"], k.id, ctx)
        assert s["in_kernel"], (c, ctx)
        assert s["gpus"][0]["memory_limit"] == k.gpu(0).mem_limit, (c, s, ctx)
    for c, want in list(model.want.items()):
        if want is None:                          # cut by the kill: learn what it is now ...
            model.want[c] = ("present", ks[c].gpu(0).mem_limit) if c in ks else ("absent", None)
            op, args = model.cut.pop(c)
            model.retried[op] = model.retried.get(op, 0) + 1
            # ... and retry it, as the hook (or an operator) does after an
            # error: it must succeed, whichever way the cut one went
            with d.api() as a:
                r = a.call(op, **args)
            if op == "delete" and not r["ok"]:
                assert r["error"]["code"] == "not-found" and c not in ks, (c, r, ctx)
            else:
                assert r["ok"], (c, op, args, r, ctx)
            if op == "delete":
                model.want[c] = ("absent", None)
            elif op == "set-quota" or not r["result"].get("reused"):
                model.want[c] = ("present", args["memory"])
            else:                                 # the slice the cut create made
                model.want[c] = ("present", r["result"]["slice"]["gpus"][0]["memory_limit"])
            continue
        if want[0] == "absent":
            assert c not in ks, (c, "deleted but present", ctx)
        else:
            assert c in ks, (c, "created but missing", ctx)
            assert ks[c].gpu(0).mem_limit == want[1], (c, want, ks[c].gpu(0).mem_limit, ctx)
    for h in holders:
        k = ks[h["name"]]
        assert k.id == h["id"], (h["name"], "re-created under its holder", ctx)
        assert k.gpu(0).mem_used == 32 * MiB, (h["name"], k.gpu(0).mem_used, ctx)
        if "pending" in h:                        # a set-quota cut by the kill
            h["limit"] = k.gpu(0).mem_limit
            h.pop("pending")
        assert k.gpu(0).mem_limit == h["limit"], (h["name"], k.gpu(0).mem_limit, h, ctx)
        assert k.open_files > 0
        # the holder's fds work: free and allocate again, the quota holds
        g = h["g"]
        g.free(h["hs"].pop())
        h["hs"].append(g.alloc(16 * MiB))
        assert kern.slice_get(h["id"]).gpu(0).mem_used == 32 * MiB
