"""vgpu.common.topology: PCI chains, nvidia-smi topo's distances and the
GPU-to-HCA pairing, on fake sysfs trees of DGX-class layouts
(topology_fixtures.py)."""
from __future__ import annotations

import pytest

from daemon_support import call
from topology_fixtures import DGX_A100, DGX_H100, IB_MAJOR, make_sysfs
from vgpu.common import topology as t


def nvml_id(bdf: str) -> str:
    """How NVML spells a PCI address (vgpud's inventory keeps the 4-digit
    domain; either is taken)."""
    return "0000" + bdf.upper()


@pytest.fixture
def h100(tmp_path):
    return str(tmp_path), make_sysfs(tmp_path, DGX_H100)


@pytest.fixture
def a100(tmp_path):
    return str(tmp_path), make_sysfs(tmp_path, DGX_A100)


def matrix(sysfs: str, gpus: dict) -> dict[tuple[str, str], str]:
    """The GPU rows of `nvidia-smi topo -m` against every adapter."""
    out = {}
    for g, bdf in gpus.items():
        c, n = t.pci_chain(bdf, sysfs), t.numa_node(bdf, sysfs)
        for h in t.hcas(sysfs):
            out[(g, h.name)] = t.link(c, h.chain, n, h.numa)
    return out


def test_the_chain_is_the_bridges_above_the_device(h100):
    sysfs, gpus = h100
    assert t.pci_chain(nvml_id(gpus["GPU0"]), sysfs) == (
        "pci0000:10", "0000:10:01.0", "0000:11:00.0", "0000:12:00.0", "0000:13:00.0")
    assert t.pcie_root(gpus["GPU5"], sysfs) == "pci0000:60"
    assert t.numa_node(gpus["GPU5"], sysfs) == 1
    for bad in ("0000:ff:00.0", "GPU-0", "", "0000:13:00.0/../x"):
        assert t.pci_chain(bad, sysfs) is None, bad


def test_dgx_h100_distances_are_nvidia_smi_topos(h100):
    """Each GPU PIX with its own ConnectX-7, NODE with the rest of its
    socket's (storage NICs included), SYS across the sockets."""
    sysfs, gpus = h100
    m = matrix(sysfs, gpus)
    for i in range(8):
        sock = range(0, 4) if i < 4 else range(4, 8)
        for j in range(8):
            want = "PIX" if i == j else "NODE" if j in sock else "SYS"
            assert m[(f"GPU{i}", f"mlx5_{j}")] == want, (i, j)
        assert m[(f"GPU{i}", "mlx5_8")] == ("NODE" if i < 4 else "SYS")
        assert m[(f"GPU{i}", "mlx5_9")] == ("SYS" if i < 4 else "NODE")


def test_dgx_a100_distances_are_nvidia_smi_topos(a100):
    """GPU0 and GPU1 to mlx5_0 and mlx5_1 PXB (one two-level switch tree),
    SYS to every other pair's (each pair its own NUMA node)."""
    sysfs, gpus = a100
    m = matrix(sysfs, gpus)
    for i in range(8):
        for j in range(8):
            assert m[(f"GPU{i}", f"mlx5_{j}")] == ("PXB" if i // 2 == j // 2 else "SYS"), (i, j)


def test_the_links_between_every_kind_of_neighbour():
    root, rp = "pci0000:00", "0000:00:01.0"
    usp, d1, d2 = "0000:01:00.0", "0000:02:00.0", "0000:02:01.0"
    a = (root, rp, usp, d1, "0000:03:00.0")
    assert t.link(a, (root, rp, usp, d2, "0000:04:00.0"), 0, 0) == "PIX"     # one switch
    assert t.link(a, (root, "0000:00:02.0", "0000:05:00.0"), 0, 0) == "PHB"  # one root
    assert t.link(a, ("pci0000:80", "0000:80:01.0", "0000:81:00.0"), 0, 0) == "NODE"
    assert t.link(a, ("pci0000:80", "0000:80:01.0", "0000:81:00.0"), 0, 1) == "SYS"
    assert t.link(a, ("pci0000:80", "0000:80:01.0", "0000:81:00.0"), None, None) == "SYS"
    assert t.link(a, None, 0, 0) == "SYS"                                     # rxe, nvsim
    deep = (root, rp, usp, d2, "0000:06:00.0", "0000:07:00.0", "0000:08:00.0")
    assert t.link(a, deep, 0, 0) == "PXB"                                     # switch tree


@pytest.mark.parametrize("layout", [DGX_H100, DGX_A100], ids=["dgx-h100", "dgx-a100"])
def test_each_gpu_gets_the_closest_hca_one_each(tmp_path, layout):
    """Eight GPUs over eight compute HCAs: GPU<i> gets mlx5_<i> (H100:
    PIX; A100: PXB, the pair's two NICs shared one each), never a storage
    NIC or one further away."""
    gpus = make_sysfs(tmp_path, layout)
    got = t.pair([(int(g[3:]), nvml_id(b)) for g, b in gpus.items()],
                 t.hcas(str(tmp_path)), str(tmp_path))
    want = "PIX" if layout is DGX_H100 else "PXB"
    assert got == {i: (f"mlx5_{i}", want) for i in range(8)}


def test_fewer_hcas_than_gpus_share_the_closest(tmp_path):
    """DGX H100 with only mlx5_0 and mlx5_4 cabled (the others absent):
    each socket's GPUs share that socket's NIC (GPU0 PIX, the rest NODE)."""
    layout = [d for d in DGX_H100 if d[0] == "gpu" or d[1] in ("mlx5_0", "mlx5_4")]
    gpus = make_sysfs(tmp_path, layout)
    got = t.pair([(int(g[3:]), b) for g, b in gpus.items()], t.hcas(str(tmp_path)),
                 str(tmp_path))
    assert got == {0: ("mlx5_0", "PIX"), 1: ("mlx5_0", "NODE"), 2: ("mlx5_0", "NODE"),
                   3: ("mlx5_0", "NODE"), 4: ("mlx5_4", "PIX"), 5: ("mlx5_4", "NODE"),
                   6: ("mlx5_4", "NODE"), 7: ("mlx5_4", "NODE")}


def test_soft_roce_and_gpus_without_pci_devices(tmp_path):
    """The VM: nvsim's GPUs have PCI addresses sysfs does not know, rxe0 has
    no PCI device: SYS, and rxe0 is still each GPU's adapter (there is no
    other); a PCI adapter wins over a software one at the same distance."""
    make_sysfs(tmp_path, [], soft=("rxe0",))
    (h,) = t.hcas(str(tmp_path))
    assert (h.name, h.pci, h.chain, h.numa) == ("rxe0", None, None, None)
    assert h.uverbs == (("uverbs0", IB_MAJOR, 192),)
    gpus = [(0, "00000000:01:00.0"), (1, "00000000:02:00.0")]
    assert t.pair(gpus, [h], str(tmp_path)) == {0: ("rxe0", "SYS"), 1: ("rxe0", "SYS")}
    assert t.pair(gpus, [], str(tmp_path)) == {}


def test_what_sysfs_says_is_checked(tmp_path):
    """Names and device numbers from sysfs are read as data: an adapter of
    an odd name is skipped, a uverbs entry with no numbers is left out."""
    make_sysfs(tmp_path, [], soft=("rxe0",))
    (tmp_path / "class" / "infiniband" / "bad name").mkdir()
    v = tmp_path / "class" / "infiniband_verbs" / "uverbs7"
    v.mkdir()
    (v / "ibdev").write_text("rxe0\n")
    (v / "dev").write_text("garbage\n")
    assert [(h.name, h.uverbs) for h in t.hcas(str(tmp_path))] == [
        ("rxe0", (("uverbs0", IB_MAJOR, 192),))]
    assert t.hcas(str(tmp_path / "none")) == []


async def test_vgpud_says_each_gpus_adapter(env):
    """vgpud's `gpus` answer names each GPU's closest adapter and how close
    (the inventory's two GPUs at 0000:01:00.0 and 0000:02:00.0, each under
    a switch with one NIC on a root complex of its own, one NUMA node);
    with no adapter, none."""
    mgr, _, tmp = env
    gpus = (await call(mgr, "gpus"))["result"]["gpus"]
    assert [g["hca"] for g in gpus] == [None, None]
    layout = []
    for i, bus in enumerate((0x01, 0x02)):
        root, rp = f"pci0000:{0x40 * (i + 1):02x}", f"0000:{0x40 * (i + 1):02x}:01.0"
        usp, d0, d1 = (f"0000:{0x40 * (i + 1) + 1:02x}:00.0", f"0000:{0x40 * (i + 1) + 2:02x}:00.0",
                       f"0000:{0x40 * (i + 1) + 2:02x}:01.0")
        gpu, nic = f"0000:{bus:02x}:00.0", f"0000:{0x40 * (i + 1) + 3:02x}:00.0"
        layout += [("gpu", f"GPU{i}", gpu, 0, (root, rp, usp, d0, gpu)),
                   ("hca", f"mlx5_{1 - i}", nic, 0, (root, rp, usp, d1, nic))]
    make_sysfs(tmp / "sys", layout)
    gpus = (await call(mgr, "gpus"))["result"]["gpus"]
    assert [g["hca"] for g in gpus] == [{"name": "mlx5_1", "link": "PIX"},
                                        {"name": "mlx5_0", "link": "PIX"}]
