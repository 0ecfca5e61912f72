"""Fake sysfs trees of real GPU servers' PCI layouts, for
vgpu.common.topology's tests: /sys/devices/pci<root>/<bridges>/<device>
directories with numa_node, /sys/bus/pci/devices/<bdf> links to them,
/sys/class/infiniband/<hca>/device links and
/sys/class/infiniband_verbs/uverbsN/{ibdev,dev}.

The layouts are shaped from public `nvidia-smi topo -m` outputs of
NVIDIA's DGX systems (NVIDIA's DGX user guides print them):

- DGX_H100: two sockets (NUMA 0 and 1), each GPU behind a PCIe switch
  shared with one ConnectX-7 (GPU<i> - mlx5_<i>: PIX; the other compute
  NICs of its socket NODE, of the other socket SYS), and two storage NICs
  (mlx5_8, mlx5_9) on root complexes of their own.
- DGX_A100: four NUMA-node pairs of GPUs (3,3,1,1,7,7,5,5); each pair and
  a pair of ConnectX-6 under one two-level switch tree (GPU0 and GPU1 to
  mlx5_0 and mlx5_1: PXB).

A device is (kind, name, bdf, numa, path): path is the bridges from the
root complex down, the device last (its own bdf)."""
from __future__ import annotations

import os
from pathlib import Path

IB_MAJOR = 231


def _h100() -> list[tuple]:
    out = []
    # root complexes per socket; bus numbers as on a Sapphire Rapids DGX
    for i in range(8):
        numa = 0 if i < 4 else 1
        root = f"pci0000:{0x10 * (i + 1):02x}"
        bus = 0x10 * (i + 1)
        rp = f"0000:{bus:02x}:01.0"
        usp = f"0000:{bus + 1:02x}:00.0"
        gpu_dsp, nic_dsp = f"0000:{bus + 2:02x}:00.0", f"0000:{bus + 2:02x}:01.0"
        gpu, nic = f"0000:{bus + 3:02x}:00.0", f"0000:{bus + 4:02x}:00.0"
        out.append(("gpu", f"GPU{i}", gpu, numa, (root, rp, usp, gpu_dsp, gpu)))
        out.append(("hca", f"mlx5_{i}", nic, numa, (root, rp, usp, nic_dsp, nic)))
    for j, (numa, bus) in enumerate(((0, 0x90), (1, 0xa0))):
        root = f"pci0000:{bus:02x}"
        rp, nic = f"0000:{bus:02x}:01.0", f"0000:{bus + 1:02x}:00.0"
        out.append(("hca", f"mlx5_{8 + j}", nic, numa, (root, rp, nic)))
    return out


def _a100() -> list[tuple]:
    out = []
    numas = (3, 1, 7, 5)
    for p in range(4):
        bus = 0x20 * (p + 1)
        root = f"pci0000:{bus:02x}"
        rp, usa = f"0000:{bus:02x}:01.0", f"0000:{bus + 1:02x}:00.0"
        for side, kind in enumerate(("gpu", "hca")):
            dsa = f"0000:{bus + 2:02x}:{side:02x}.0"
            usb = f"0000:{bus + 3 + side * 4:02x}:00.0"
            for k in range(2):
                dsb = f"0000:{bus + 4 + side * 4:02x}:{k:02x}.0"
                dev = f"0000:{bus + 5 + side * 4 + k:02x}:00.0"
                name = f"GPU{2 * p + k}" if kind == "gpu" else f"mlx5_{2 * p + k}"
                out.append((kind, name, dev, numas[p], (root, rp, usa, dsa, usb, dsb, dev)))
    return out


DGX_H100 = _h100()
DGX_A100 = _a100()


def make_sysfs(root: Path, layout: list[tuple], soft: tuple[str, ...] = ()) -> dict:
    """Build ``layout`` under ``root``; ``soft``: software RDMA devices
    (rxe) with no PCI device.  Returns {name: bdf} of the GPUs."""
    root = Path(root)
    (root / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
    ib = root / "class" / "infiniband"
    verbs = root / "class" / "infiniband_verbs"
    ib.mkdir(parents=True, exist_ok=True)
    verbs.mkdir(parents=True, exist_ok=True)
    gpus = {}
    n = 0
    for kind, name, bdf, numa, path in layout:
        d = root / "devices" / Path(*path)
        d.mkdir(parents=True, exist_ok=True)
        (d / "numa_node").write_text(f"{numa}\n")
        os.symlink(os.path.relpath(d, root / "bus" / "pci" / "devices"),
                   root / "bus" / "pci" / "devices" / bdf)
        if kind == "gpu":
            gpus[name] = bdf
            continue
        (ib / name).mkdir()
        os.symlink(os.path.relpath(d, ib / name), ib / name / "device")
        n = _verbs(verbs, name, n)
    for name in soft:
        (ib / name).mkdir()
        n = _verbs(verbs, name, n)
    return gpus


def _verbs(verbs: Path, name: str, n: int) -> int:
    v = verbs / f"uverbs{n}"
    v.mkdir()
    (v / "ibdev").write_text(name + "\n")
    (v / "dev").write_text(f"{IB_MAJOR}:{192 + n}\n")
    return n + 1


#: rdma_cm's major in the fake trees: the misc devices' (10 on Linux)
MISC_MAJOR = 10


def two_gpu_node(sysfs, cm: bool = True) -> None:
    """The env's two GPUs (0000:01:00.0, 0000:02:00.0), each under a switch
    with an adapter (mlx5_0 beside GPU 0, mlx5_1 beside GPU 1), and
    rdma_cm as a misc device."""
    layout = []
    for i in range(2):
        b = 0x40 * (i + 1)
        root, rp, usp = f"pci0000:{b:02x}", f"0000:{b:02x}:01.0", f"0000:{b + 1:02x}:00.0"
        gpu, nic = f"0000:0{i + 1}:00.0", f"0000:{b + 3:02x}:00.0"
        layout += [("gpu", f"GPU{i}", gpu, 0, (root, rp, usp, f"0000:{b + 2:02x}:00.0", gpu)),
                   ("hca", f"mlx5_{i}", nic, 0, (root, rp, usp, f"0000:{b + 2:02x}:01.0", nic))]
    make_sysfs(sysfs, layout)
    if cm:
        d = sysfs / "class" / "misc" / "rdma_cm"
        d.mkdir(parents=True)
        (d / "dev").write_text(f"{MISC_MAJOR}:58\n")
