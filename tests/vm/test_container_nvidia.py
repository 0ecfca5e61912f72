"""NVIDIA's own libcuda and nvidia-smi (535.261.03) inside a containerd
container with a vgpu slice, started through vgpu-runtime and the OCI hook
as on a node (docs/containers.md, "NVIDIA's device numbers").

nvsim is reloaded as two 16 GiB GH100s presenting 535.261.03 (test_cuda.py),
vgpu.ko loaded over it, for this module; so it runs in the VM group that
starts without vgpu.ko:

    tools/vm/vm.py run --load-nvsim -- .venv/bin/python -m pytest -q tests/vm/test_container_nvidia.py

The container asks for 4 GiB of host GPU 1.  The hook binds the slice's
nodes from a vgpu.ko "vgpudev" mount (they open as vgpu.ko's minors and
stat as NVIDIA's 195:N) and makes /dev/char/195:<minor>; vgpufs's view
gives /proc/driver/nvidia.  No LD_PRELOAD shim, no /dev/char links of the
test's.  The image has no NVIDIA file (the VM's /usr, no ldcache entry of
NVIDIA's, an /etc of its own with the host's ld.so.conf): NVIDIA's
unpacked 535.261.03 user space ($VGPU_CACHE) arrives only through the
driver-file edits vgpu-runtime makes from vgpu.common.driverfiles (the
ones `vgpuctl cdi generate` writes into a CDI spec; docs/containers.md,
"Driver files"), found in the directories $VGPU_DRIVER_LIB_DIRS and
$VGPU_DRIVER_BIN_DIRS name: each file bound read-only at its path, the
SONAME links and the container's ld.so.cache made by the hook.  The
container loads libcuda.so.1 by name and runs nvidia-smi without
LD_LIBRARY_PATH.

One container run (slow under TCG) writes everything the tests check; the
first test starts it, the others read its output.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

import nvsim_reload
from vgpu.common import driverfiles as df
from cuda_lib import (PRELUDE, RELEASE, libcuda_missing, nvidia_lib, nvidia_userspace,
                      sequence_body)
from container_support import (HAVE_CONTAINERD, SHOW, containerd, daemon, own_etc_of,  # noqa: F401
                               podman_argv, remove_cgroups, runc, video_memory)

ROOT = Path(__file__).resolve().parents[2]
PY = str(ROOT / ".venv" / "bin" / "python")
MiB = 1 << 20
GiB = 1 << 30
QUOTA = 4 * GiB
HOST_GPU = 1                       # the container's GPU 0 is the host's GPU 1


def _reason() -> str | None:
    if nvsim_reload.skip_reason():
        return nvsim_reload.skip_reason()
    if libcuda_missing():
        return libcuda_missing()
    if nvidia_userspace() is None:
        return f"NVIDIA's {RELEASE} nvidia-smi is not unpacked under $VGPU_CACHE"
    if not HAVE_CONTAINERD:
        return "needs containerd and ctr"
    return None


pytestmark = pytest.mark.skipif(_reason() is not None, reason=_reason() or "")


@pytest.fixture(scope="module", autouse=True)
def two_gh100_with_vgpu():
    """nvsim as two 16 GiB GH100s of 535.261.03, vgpu.ko over it; both back after."""
    with nvsim_reload.reloaded({**nvsim_reload.GH100, "num_gpus": "2"}):
        ko = nvsim_reload.ko_path("VGPU_VGPU_KO", "kmod/vgpu/vgpu.ko")
        r = subprocess.run(["insmod", str(ko)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        yield
        subprocess.run(["rmmod", "vgpu"], check=True)


# The container's driver-API program: what a CUDA application asks first.
# cuCtxCreate and what follows it (cuMemGetInfo, cuMemAlloc until the
# quota's NO_MEMORY) are recorded for test_context_memory_is_the_slices.
CUDA = textwrap.dedent("""
    import ctypes, json, sys
    from ctypes import byref, c_int, c_size_t, c_uint64, c_void_p
    cu = ctypes.CDLL(sys.argv[1])
    out = {}
    def done():
        print('CUDA-JSON', json.dumps(out), flush=True)
        sys.exit(0)
    out['init'] = cu.cuInit(0)
    if out['init']:
        done()
    n = c_int()
    out['countResult'] = cu.cuDeviceGetCount(byref(n)); out['count'] = n.value
    dev = c_int()
    out['get'] = cu.cuDeviceGet(byref(dev), 0)
    name = ctypes.create_string_buffer(256)
    cu.cuDeviceGetName(name, 256, dev); out['name'] = name.value.decode()
    tm = c_size_t()
    out['totalResult'] = cu.cuDeviceTotalMem_v2(byref(tm), dev); out['total'] = tm.value
    ctx = c_void_p()
    out['ctx'] = cu.cuCtxCreate_v2(byref(ctx), 0, dev)
    if out['ctx'] == 0:
        free, total = c_size_t(), c_size_t()
        out['memInfo'] = cu.cuMemGetInfo_v2(byref(free), byref(total))
        out['free'], out['memTotal'] = free.value, total.value
        p, got, chunk = c_uint64(), 0, 256 << 20
        while got <= 2 * tm.value:
            r = cu.cuMemAlloc_v2(byref(p), chunk)
            if r:
                out['allocStop'] = r
                break
            got += chunk
        out['allocated'] = got
    done()
""")

PROBE = textwrap.dedent("""
    import errno, json, os, stat
    def rdev(p):
        st = os.stat(p)
        return [os.major(st.st_rdev), os.minor(st.st_rdev)] if stat.S_ISCHR(st.st_mode) else None
    out = {'nodes': {n: rdev('/dev/' + n) for n in sorted(os.listdir('/dev'))
                     if n.startswith('nvidia')},
           'char': {n: os.readlink('/dev/char/' + n) for n in sorted(os.listdir('/dev/char'))}
                   if os.path.isdir('/dev/char') else None,
           'preload': os.environ.get('LD_PRELOAD'),
           'ld_library_path': os.environ.get('LD_LIBRARY_PATH'),
           # the driver files' binds: read-only, nosuid, nodev
           'driver_mounts': [ln.split()[4:6] for ln in open('/proc/self/mountinfo')
                             if 'nvidia-userspace' in ln.split()[4]],
           'links': {n: os.readlink('%(lib)s/' + n) for n in sorted(os.listdir('%(lib)s'))
                     if os.path.islink('%(lib)s/' + n)}}
    # fstat of an open node says what stat says (NVML and libcuda look at both)
    fd = os.open('/dev/nvidiactl', os.O_RDWR)
    st = os.fstat(fd)
    out['fstat_ctl'] = [os.major(st.st_rdev), os.minor(st.st_rdev)]
    os.close(fd)
    # a node of NVIDIA's own numbers made inside (CAP_MKNOD): the device
    # cgroup allows vgpu.ko's minors only, never 195
    try:
        os.mknod('/dev/real195', stat.S_IFCHR | 0o666, os.makedev(195, %(gpu)d))
        out['mknod'] = 'ok'
    except OSError as e:
        out['mknod'] = errno.errorcode[e.errno]
    if out['mknod'] == 'ok':
        try:
            os.close(os.open('/dev/real195', os.O_RDWR))
            out['open195'] = 'ok'
        except OSError as e:
            out['open195'] = errno.errorcode[e.errno]
    print('PROBE-JSON', json.dumps(out), flush=True)
""") % {"gpu": HOST_GPU, "lib": nvidia_lib("libcuda.so.1").parent}


def _script() -> str:
    """The container's commands, their output also in /shared/out.log (what
    the test shows when the run takes too long), each step timed."""
    smi, _ = nvidia_userspace()
    return "(" + _steps(smi) + ") 2>&1 | tee /shared/out.log"


def _steps(smi: Path) -> str:
    return (f"echo T-start $(date +%T); {SHOW}"
            f"{PY} /shared/probe.py; echo T-probe $(date +%T); "
            "echo LDCACHE; /sbin/ldconfig -p | grep -E 'libcuda|libnvidia'; echo LDCACHE-rc $?; "
            f"{PY} /shared/cuda.py libcuda.so.1; echo T-cuda $(date +%T); "
            f"echo SEQ; {PY} /shared/seq.py libcuda.so.1; "
            "echo SEQ-rc $?; echo T-seq $(date +%T); "
            f"echo SMI-L; {smi} -L; echo SMI-L-rc $?; "
            f"echo SMI-Q; {smi} "
            "--query-gpu=name,memory.total,memory.used --format=csv,noheader,nounits; "
            "echo SMI-Q-rc $?")


def _no_nvidia_file_in_the_image() -> None:
    """Nothing of NVIDIA's where the container's /usr and ldcache come from:
    without the extra directories the discovery finds no driver file."""
    bare = df.discover(RELEASE)
    assert not bare.libraries and not bare.binaries, (bare.libraries, bare.binaries)
    # (the CUDA toolkit's libcudart & co. may be there: not the driver's)
    assert not any(n.startswith(("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjit"))
                   for n, _ in df.host_ldcache())


RUN: dict = {}


def _out() -> dict:
    if not RUN:
        pytest.skip("the container did not run (test_libcuda_and_nvidia_smi_in_a_container)")
    return RUN


def _json(text: str, tag: str) -> dict:
    line = next((ln for ln in text.splitlines() if ln.startswith(tag + " ")), None)
    assert line, text
    return json.loads(line[len(tag) + 1:])


def _after(text: str, tag: str) -> list[str]:
    lines = text.splitlines()
    i = lines.index(tag)
    return [ln for ln in lines[i + 1:] if not ln.startswith(tag + "-rc")][:8]


# The one container run: under TCG on a loaded host it takes longer than
# the suite's 600 s default (the driver files add the container's ldconfig).
@pytest.mark.timeout(1800)
def test_libcuda_and_nvidia_smi_in_a_container(containerd, runc, daemon):
    (runc.shared / "cuda.py").write_text(CUDA)
    (runc.shared / "seq.py").write_text(PRELUDE + textwrap.dedent(sequence_body(SEQ_CHUNK)))
    (runc.shared / "probe.py").write_text(PROBE)
    _no_nvidia_file_in_the_image()
    smi, lib = nvidia_userspace()
    containerd.runtime_env(**{df.ENV_LIB_DIRS: str(lib), df.ENV_BIN_DIRS: str(smi.parent)})
    try:
        r = containerd.run("nv-a", _script(), {"vgpu.io/memory": f"{QUOTA // MiB}MiB",
                                              "vgpu.io/gpus": str(HOST_GPU)},
                           detach=False, timeout=1500, own_etc=True)
    except subprocess.TimeoutExpired:
        log = runc.shared / "out.log"
        pytest.fail(f"the container ran past 1500 s; its output so far:\n"
                    f"{log.read_text() if log.exists() else '(none)'}\n{daemon.log()}")
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{out[-6000:]}\n{daemon.log()}"
    seq = [ln for ln in _after(out, "SEQ") if ln.startswith("{")]
    RUN.update(text=out, probe=_json(out, "PROBE-JSON"), cuda=_json(out, "CUDA-JSON"),
               seq=json.loads(seq[-1]) if seq else {})
    print(out)
    # the container's view: its one GPU of 4 GiB
    assert video_memory(out) == [f"{QUOTA // MiB} MB"], out
    cu = RUN["cuda"]
    assert cu["init"] == 0, out
    assert (cu["countResult"], cu["count"]) == (0, 1), cu
    assert cu["name"] == "NVIDIA nvsim H100", cu
    assert (cu["totalResult"], cu["total"]) == (0, QUOTA), cu
    assert "SMI-L-rc 0" in out and "SMI-Q-rc 0" in out, out
    assert [ln for ln in _after(out, "SMI-L") if ln.startswith("GPU ")] == \
        [ln for ln in _after(out, "SMI-L") if ln.startswith("GPU 0: NVIDIA nvsim H100")], out
    assert len([ln for ln in _after(out, "SMI-L") if ln.startswith("GPU ")]) == 1, out
    rows = [[f.strip() for f in ln.split(",")] for ln in _after(out, "SMI-Q") if "," in ln]
    assert [row[:2] for row in rows] == [["NVIDIA nvsim H100", str(QUOTA // MiB)]], out
    # the container exited: its slice went with it
    assert not daemon.slices()


PODMAN = shutil.which("podman")


@pytest.mark.timeout(1800)
def test_the_cdi_spec_through_podman(runc, daemon, tmp_path):
    """The second CDI consumer, not ours: podman 4.3 (Debian 12's, its own
    CDI library) injects the spec `vgpuctl cdi generate` wrote for a slice
    made beforehand (`vgpuctl create`, no cgroup): the slice's nodes, the
    hook that attaches the slice to podman's container and mounts its
    /proc/driver/nvidia (--mount-slice), and the driver files.  Inside,
    whose image has no NVIDIA file, nvidia-smi and libcuda see the slice's
    one GPU of 4 GiB.  podman ran the spec as written: no vgpu-runtime."""
    if PODMAN is None:
        pytest.skip("no podman (make deps installs it)")
    smi, lib = nvidia_userspace()
    name = "cdi-pm"
    hook = tmp_path / "vgpu-oci-hook"
    hook.write_text(f"#!/bin/sh\nexec {PY} -I -S -c 'import sys; sys.path.insert(0, "
                    f"\"{ROOT}\"); from vgpu.cli.hook import main; sys.exit(main())' \"$@\"\n")
    hook.chmod(0o755)
    (runc.shared / "cuda.py").write_text(CUDA)
    daemon.ctl("create", name, "--memory", f"{QUOTA // MiB}Mi", "--gpu", str(HOST_GPU))
    spec = Path("/var/run/cdi/vgpu-test.json")
    spec.parent.mkdir(parents=True, exist_ok=True)
    run_root = tempfile.mkdtemp(prefix="pm", dir="/tmp")   # podman: under 50 characters
    pm = podman_argv(PODMAN, tmp_path, run_root)
    try:
        daemon.ctl("cdi", "generate", "--output", str(spec), "--fuse-mount", daemon.fs,
                   "--hook", str(hook), "--driver-version", RELEASE,
                   "--driver-lib-dir", str(lib), "--driver-bin-dir", str(smi.parent))
        b = runc.bundle(name, "true")               # only for its rootfs directory
        own_etc_of(b / "rootfs")
        vols = []
        for src in ("/usr", "/root/.pyenv", str(ROOT)):
            if os.path.isdir(src):
                vols += ["-v", f"{src}:{src}:ro"]
        script = (f"{smi} -L; echo SMI-L-rc $?; {PY} /shared/cuda.py libcuda.so.1; "
                  "head -3 /proc/driver/nvidia/gpus/*/information")
        r = subprocess.run([*pm, "run", "--rm", "--network", "none", *vols,
                            "-v", f"{runc.shared}:/shared:rw", "--env", "PATH=/usr/bin:/bin",
                            "--env", "HOME=/tmp", "--env", f"PYTHONPATH={ROOT}",
                            "--workdir", str(ROOT), "--device", f"vgpu.io/slice={name}",
                            "--rootfs", str(b / "rootfs"), "/bin/sh", "-c", script],
                           capture_output=True, text=True, timeout=1500)
        out = r.stdout + r.stderr
        print(out)
        assert r.returncode == 0, f"{out[-6000:]}\n{daemon.log()}"
        assert "SMI-L-rc 0" in out, out
        gpus = [ln for ln in out.splitlines() if re.match(r"GPU \d+: ", ln)]
        assert len(gpus) == 1 and gpus[0].startswith("GPU 0: NVIDIA nvsim H100"), out
        cu = _json(out, "CUDA-JSON")
        assert (cu["init"], cu["totalResult"], cu["total"]) == (0, 0, QUOTA), cu
        assert cu["ctx"] == 0 and cu["allocated"] <= QUOTA, cu
    finally:
        spec.unlink(missing_ok=True)
        subprocess.run([*pm, "rm", "--all", "--force"], capture_output=True, timeout=300)
        daemon.ctl_raw("delete", name, "--force")
        shutil.rmtree(run_root, ignore_errors=True)


def test_a_dra_claims_spec_through_podman(runc, daemon, tmp_path):
    """A CDI runtime that is not ours consumes the DRA plugin's spec as
    written: a claim prepared by vgpu.k8s.draplugin (driven by the test
    kubelet of tools/testbed/dra_fakes.py, the claim on its test API
    server) leaves its spec in /var/run/cdi, and podman 4.3 runs a
    container of the claim's pod from it (its cgroup under pod<uid>, the
    CRI annotations containerd would set): the spec's hook attaches the
    slice to the pod's cgroup and mounts its /proc/driver/nvidia, and the
    driver files the plugin found bring nvidia-smi, which sees the claim's
    one GPU with the claim's memory."""
    if PODMAN is None:
        pytest.skip("no podman (make deps installs it)")
    from tools.testbed.dra_fakes import NODE, ApiServer, Kubelet
    from vgpu.k8s import dra, draplugin
    smi, lib = nvidia_userspace()
    hook = tmp_path / "vgpu-oci-hook"
    hook.write_text(f"#!/bin/sh\nexec {PY} -I -S -c 'import sys; sys.path.insert(0, "
                    f"\"{ROOT}\"); from vgpu.cli.hook import main; sys.exit(main())' \"$@\"\n")
    hook.chmod(0o755)
    uid, pod_uid, top = "3f2a9c1e-5b6d-4e7f-8a9b-0c1d2e3f4a5c", \
        "5d4c3b2a-1f0e-4d9c-8b7a-6f5e4d3c2b1b", "vgpu-dra-pm"
    api = ApiServer()
    api.claims[("team", "c")] = {
        "metadata": {"namespace": "team", "name": "c", "uid": uid},
        "status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": dra.DRIVER, "pool": NODE, "device": f"gpu-{HOST_GPU}",
             "consumedCapacity": {"memory": str(192 * MiB), "compute": "0"}}]}}}}
    prep = draplugin.Preparer(
        NODE, draplugin.ApiServerClaims(api.url), daemon.sock, "/var/run/cdi", daemon.fs,
        hook=str(hook),
        driver=df.discover(RELEASE, lib_dirs=[str(lib)], bin_dirs=[str(smi.parent)]))
    assert prep.driver.libraries and prep.driver.binaries
    services = draplugin.DraServices(prep)
    dra_srv, reg_srv = draplugin.serve(services, tmp_path / "plugins", tmp_path / "registry")
    kubelet = Kubelet(services, tmp_path / "plugins" / "dra.sock",
                      tmp_path / "registry" / f"{dra.DRIVER}-reg.sock")
    name = f"claim-{uid}-0"
    run_root = tempfile.mkdtemp(prefix="pm", dir="/tmp")       # podman: under 50 characters
    pm = podman_argv(PODMAN, tmp_path, run_root)
    try:
        r = kubelet.call("v1", "NodePrepareResources", ("team", "c", uid))
        assert r.claims[uid].error == "", r.claims[uid].error
        (dev,) = r.claims[uid].devices
        (cdi,) = dev.cdi_device_ids
        assert cdi == f"vgpu.io/slice={name}" and Path(f"/var/run/cdi/vgpu-{name}.json").exists()
        b = runc.bundle("dra-pm", "true")                   # only for its rootfs directory
        own_etc_of(b / "rootfs")
        vols = [x for src in ("/usr", "/root/.pyenv", str(ROOT)) if os.path.isdir(src)
                for x in ("-v", f"{src}:{src}:ro")]
        script = (f"{smi} --query-gpu=name,memory.total --format=csv,noheader; "
                  "echo SMI-rc $?; ls /proc/driver/nvidia/gpus | wc -l")
        rr = subprocess.run(
            [*pm, "run", "--rm", "--network", "none", *vols, "--env", "PATH=/usr/bin:/bin",
             "--env", "HOME=/tmp", "--cgroup-parent", f"/{top}/pod{pod_uid}",
             "--annotation", "io.kubernetes.cri.container-type=container",
             "--annotation", f"io.kubernetes.cri.sandbox-uid={pod_uid}",
             "--device", cdi, "--rootfs", str(b / "rootfs"), "/bin/sh", "-c", script],
            capture_output=True, text=True, timeout=1500)
        out = rr.stdout + rr.stderr
        print(out)
        assert rr.returncode == 0, f"{out[-6000:]}\n{daemon.log()}"
        assert "SMI-rc 0" in out, out
        assert re.search(r"NVIDIA nvsim H100, 192 MiB\n", out), out
        assert out.rstrip().endswith("\n1"), out              # one GPU in its proc view
        sl = daemon.ctl("show", name)["slice"]
        assert sl["attached"].rstrip("/").endswith(f"/{top}/pod{pod_uid}"), sl
    finally:
        subprocess.run([*pm, "rm", "--all", "--force"], capture_output=True, timeout=300)
        shutil.rmtree(run_root, ignore_errors=True)
        kubelet.call("v1", "NodeUnprepareResources", ("team", "c", uid))
        reg_srv.stop(0)
        dra_srv.stop(0)
        api.httpd.shutdown()
        remove_cgroups(Path("/sys/fs/cgroup") / top)
    assert not Path(f"/var/run/cdi/vgpu-{name}.json").exists()
    assert daemon.ctl_raw("show", name).returncode != 0

def test_driver_files_arrive_through_the_edits():
    """The driver's libraries and nvidia-smi came as read-only binds of the
    unpacked user space at its own path, the SONAME links and the
    container's ld.so.cache were made in the container by the hook, and
    nothing set LD_LIBRARY_PATH."""
    text, p = _out()["text"], _out()["probe"]
    _, lib = nvidia_userspace()
    assert p["ld_library_path"] is None, p
    mounts = dict((m[0], m[1]) for m in p["driver_mounts"])
    for name in (f"libcuda.so.{RELEASE}", f"libnvidia-ml.so.{RELEASE}",
                 f"libnvidia-ptxjitcompiler.so.{RELEASE}"):
        opts = mounts.get(f"{lib}/{name}")
        assert opts is not None, p["driver_mounts"]
        assert {"ro", "nosuid", "nodev"} <= set(opts.split(",")), (name, opts)
    smi, _ = nvidia_userspace()
    assert str(smi) in mounts, p["driver_mounts"]
    assert p["links"].get("libcuda.so.1") == f"libcuda.so.{RELEASE}", p["links"]
    assert p["links"].get("libnvidia-ml.so.1") == f"libnvidia-ml.so.{RELEASE}", p["links"]
    cache = _after(text, "LDCACHE")
    assert any(ln.strip().startswith("libcuda.so.1 ") and ln.endswith(f"{lib}/libcuda.so.1")
               for ln in cache), cache
    assert any(ln.strip().startswith("libnvidia-ml.so.1 ") for ln in cache), cache


def test_nodes_stat_as_nvidias_and_no_shim():
    """What NVIDIA's libraries check: (195, 255) and (195, i), stat and
    fstat alike; /dev/char links made by the hook; no LD_PRELOAD."""
    p = _out()["probe"]
    nodes = p["nodes"]
    assert sorted(nodes) == ["nvidia-uvm", "nvidia0", "nvidiactl"], p   # no other GPU
    assert nodes["nvidiactl"] == [195, 255] and nodes["nvidia0"] == [195, 0], p
    assert p["fstat_ctl"] == [195, 255], p
    assert p["char"] is not None and {"195:255", "195:0"} <= set(p["char"]), p
    assert p["char"]["195:255"] == "../nvidiactl" and p["char"]["195:0"] == "../nvidia0", p
    assert p["preload"] is None, p


def test_a_made_195_node_does_not_open():
    """CAP_MKNOD may make a (195, N) node inside; the device cgroup refuses
    to open it (containerd's rules allow no mknod: then it is not even made)."""
    p = _out()["probe"]
    assert p["mknod"] in ("ok", "EPERM"), p
    if p["mknod"] == "ok":
        assert p["open195"] == "EPERM", p


def test_context_memory_is_the_slices():
    """Once a context exists: cuMemGetInfo's total is the slice's 4 GiB and
    cuMemAlloc stops with CUDA_ERROR_OUT_OF_MEMORY (2) within it."""
    cu = _out()["cuda"]
    assert cu["ctx"] == 0, cu
    assert (cu["memInfo"], cu["memTotal"]) == (0, QUOTA), cu
    assert cu["free"] <= QUOTA, cu
    assert cu["allocStop"] == 2 and cu["allocated"] <= QUOTA, cu


SEQ_CHUNK = 64 << 20


def test_the_driver_api_sequence_in_a_container():
    """test_cuda.py's sequence inside the container's slice (4 GiB of a 16
    GiB GPU): memory to CUDA_ERROR_OUT_OF_MEMORY at the quota, copies both
    ways, pinned host memory, a stream and an event, a PTX module JIT'd
    and launched, the context destroyed, every call CUDA_SUCCESS."""
    text = _out()["text"]
    assert "SEQ-rc 0" in text, text[-4000:]
    out = _out()["seq"]
    assert out["total"] == QUOTA and 0 < out["free"] < QUOTA, out
    assert out["alloc_error"] == 2, out
    assert out["free"] - SEQ_CHUNK < out["allocated"] <= out["free"], out
    assert out["copied"], out
    assert all(c[1] == 0 for c in out["calls"]) and out["calls"][-1] == ["cuCtxDestroy_v2", 0]
