"""vgpu/abi/nvclient.py without a driver: sizes, ioctl plumbing, errors, the CLI."""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from vgpu.abi import nvabi
from vgpu.abi import nvclient


@pytest.mark.parametrize("text,value", [
    ("4096", 4096), ("0x1000", 4096), ("64KiB", 64 << 10), ("64Ki", 64 << 10),
    ("256MiB", 256 << 20), ("256Mi", 256 << 20), ("256M", 256 * 10 ** 6), ("1GiB", 1 << 30),
    ("1.5GiB", 3 << 29), ("2 GiB", 2 << 30), ("1TiB", 1 << 40), ("1G", 10 ** 9),
    ("16gib", 16 << 30),
])
def test_parse_size(text, value):
    assert nvclient.parse_size(text) == value


@pytest.mark.parametrize("text", ["", "x", "1x", "-1", "0", "1 GiBs", "GiB", "1GB", "64k8",
                                  "0xZ", "0x0"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        nvclient.parse_size(text)


def test_fmt_size():
    assert nvclient.fmt_size(16 << 30) == "16 GiB"
    assert nvclient.fmt_size(1536 << 20) == "1.50 GiB"
    assert nvclient.fmt_size(10) == "10 B"


def test_rm_error_carries_status_and_name():
    e = nvclient.RmError(nvabi.NV_ERR_NO_MEMORY, "RM_ALLOC")
    assert e.status == 0x51 and e.name == "NV_ERR_NO_MEMORY"
    assert "NV_ERR_NO_MEMORY" in str(e) and "RM_ALLOC" in str(e)


def test_raw_ioctl_errno_is_oserror():
    fd = os.open("/dev/null", os.O_RDWR)
    try:
        with pytest.raises(OSError) as ei:
            nvclient.raw_ioctl(fd, nvabi.NV_ESC_RM_ALLOC, bytes(48))
        assert ei.value.errno == errno.ENOTTY
        with pytest.raises(OSError) as ei:
            nvclient.xfer_ioctl(fd, nvabi.NV_ESC_RM_ALLOC, bytes(48))
        assert ei.value.errno == errno.ENOTTY
    finally:
        os.close(fd)


def test_raw_ioctl_pads_to_size_and_accepts_structs():
    fd = os.open("/dev/null", os.O_RDWR)
    try:
        with pytest.raises(OSError):
            nvclient.raw_ioctl(fd, nvabi.NV_ESC_RM_FREE, nvabi.NVOS00_PARAMETERS(hRoot=1), size=64)
        with pytest.raises(OSError):
            nvclient.raw_ioctl(fd, nvabi.NV_ESC_RM_FREE, b"", size=0)
    finally:
        os.close(fd)


def test_no_device_error(tmp_path):
    with pytest.raises(nvclient.NoDeviceError) as ei:
        nvclient.RmClient(str(tmp_path))
    assert str(tmp_path / "nvidiactl") in ei.value.strerror
    assert ei.value.strerror.startswith("no NVIDIA device:")


def test_struct_helpers_roundtrip():
    p = nvabi.NVOS21_PARAMETERS(hRoot=1, hObjectParent=2, hObjectNew=3, hClass=0x40, status=0x51)
    q = nvabi.NVOS21_PARAMETERS.from_bytes(p.to_bytes())
    assert (q.hRoot, q.hObjectNew, q.status) == (1, 3, 0x51)
    assert nvabi.NVOS21_PARAMETERS.from_bytes(b"\x07").hRoot == 7   # short input zero-filled
    assert ctypes.addressof(p) == p.addr()


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "vgpu.abi.nvclient", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_cli_no_device(tmp_path):
    r = _cli("--dev-prefix", str(tmp_path), "info")
    assert r.returncode == 2
    assert r.stderr.strip() == f"vgpu-nvclient: no NVIDIA device: {tmp_path}/nvidiactl not found"


def test_cli_options_after_subcommand(tmp_path):
    r = _cli("probe", "--dev-prefix", str(tmp_path), "--json", "--chunk", "1GiB")
    assert r.returncode == 2 and "no NVIDIA device" in r.stderr


def test_cli_bad_chunk():
    r = _cli("probe", "--chunk", "12 parsecs")
    assert r.returncode == 2 and "\"12 parsecs\" is not a size" in r.stderr


def test_cli_help_lists_subcommands():
    r = _cli("--help")
    assert r.returncode == 0 and "info" in r.stdout and "probe" in r.stdout


def test_main_is_importable_entry_point():
    assert callable(nvclient.main)
    assert nvclient.build_parser().parse_args(["probe", "--gpu", "1", "--path", "vid-heap"]).gpu == 1


def test_import_is_standard_library_only():
    code = ("import sys, vgpu.abi.nvclient; "
            "bad = [m for m in ('trio', 'pyroute2', 'pyfuse3', 'pynvml') if m in sys.modules]; "
            "print(bad)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.stdout.strip() == "[]", r.stderr



def test_cli_work_arguments(tmp_path):
    a = nvclient.build_parser().parse_args(["work", "--item-us", "1000", "--depth", "8", "--seconds", "5",
                                     "--json", "--dev-prefix", "/x", "--gpu", "1"])
    assert (a.item_us, a.depth, a.seconds, a.items, a.json, a.dev_prefix, a.gpu) == \
        (1000, 8, 5.0, None, True, "/x", 1)
    a = nvclient.build_parser().parse_args(["work", "--item-us", "10", "--items", "3"])
    assert (a.items, a.seconds, a.depth) == (3, None, 8)
    r = _cli("work", "--item-us", "10")                  # neither --seconds nor --items
    assert r.returncode == 2
    r = _cli("work", "--item-us", "10", "--items", "1", "--seconds", "1")
    assert r.returncode == 2
    r = _cli("work", "--item-us", "10", "--items", "1", "--dev-prefix", str(tmp_path))
    assert r.returncode == 2 and "no NVIDIA device" in r.stderr


def test_channel_layout_constants():
    # USERD's GP_GET/GP_PUT (clc36f.h) and nvsim's records fit in the USERD page.
    assert (nvabi.NVC36F_GPGET_OFFSET, nvabi.NVC36F_GPPUT_OFFSET) == (0x88, 0x8C)
    assert nvabi.NVSIM_USERD_COMPLETIONS_OFFSET + 16 * nvabi.NVSIM_USERD_COMPLETIONS <= nvclient.PAGE_SIZE
    assert nvabi.NVSIM_GPFIFO_ENTRIES_MAX * 8 <= nvclient.PAGE_SIZE
