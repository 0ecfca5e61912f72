"""A user-space client of the NVIDIA RM ABI, speaking it the way CUDA's
user-mode driver does.

It opens /dev/nvidiactl (the prefix is configurable, so the same code runs
against vgpu's virtual nodes), checks the driver version, lists the GPUs,
attaches them to the control fd, opens /dev/nvidiaN, allocates a root client
(hObjectNew = 0, the driver chooses) and then chooses its own handles for
every object below it (a counter from 0x5c000000, as CUDA does; the driver's
own generated handles start at 0xcaf00000, so the two never collide).

What it covers: the three paths that allocate framebuffer (RM_ALLOC of class
0x40 in both the NVOS21 and NVOS64 forms, RM_ALLOC_MEMORY, VID_HEAP_CONTROL),
the controls that report memory, RM_FREE / RM_DUP_OBJECT, RM_MAP_MEMORY plus
mmap, channel groups, channels and the usermode region, work submission
(``Channel``: GPFIFO entries, GP_PUT, the doorbell; see docs/compute.md
section 1), UVM, the dma-buf export (NV_ESC_EXPORT_TO_DMABUF_FD, in the
driver release's layout), and raw escapes (any nr, any size, any bytes;
XFER wrapping) for tests.

Errors: an RM status other than NV_OK raises RmError (with .status and .name);
a malformed call that the driver answers with an errno raises OSError.

Standard library only: used by CLIs and containers where start-up time
matters.  Command line: ``python -m vgpu.abi.nvclient {info,probe,work} ...``.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import json
import mmap
import os
import struct
import sys
import time
from collections.abc import Iterable

from vgpu import __version__
from vgpu.common.values import BadValue
from vgpu.common.values import parse_size as values_parse_size
from vgpu.abi import nvabi
from vgpu.abi import nvrel
from vgpu.abi.nvabi import (NV0080_ALLOC_PARAMETERS, NV2080_ALLOC_PARAMETERS,
                    NV_MEMORY_ALLOCATION_PARAMS, NVOS00_PARAMETERS,
                    NVOS21_PARAMETERS, NVOS32_PARAMETERS, NVOS34_PARAMETERS,
                    NVOS54_PARAMETERS, NVOS55_PARAMETERS, NVOS64_PARAMETERS)

__all__ = [
    "RmError", "NoDeviceError", "RmClient", "Gpu", "Mapping", "Channel", "UvmFile",
    "raw_ioctl", "raw_ioctl_ptr", "xfer_ioctl", "export_dma_buf", "parse_size", "main",
]

HANDLE_BASE = 0x5C000000   # like CUDA; the driver generates its own from 0xcaf00000
DEFAULT_PREFIX = "/dev"
#: NV2080_ENGINE_TYPE_GR0 (graphics/compute engine 0).
ENGINE_TYPE_GR0 = 1
#: The most card-info entries a query asks for (the driver's NV_MAX_DEVICES).
MAX_CARDS = 32


# ----------------------------------------------------------------- errors
class RmError(Exception):
    """An RM call answered with a status other than NV_OK."""

    def __init__(self, status: int, op: str = "", params=None):
        self.status = status
        self.name = nvabi.status_name(status)
        self.op = op
        self.params = params
        super().__init__(f"{op + ': ' if op else ''}{self.name} ({status:#x})")


class NoDeviceError(FileNotFoundError):
    """The NVIDIA control device node does not exist."""


def _check(status: int, op: str, params=None):
    if status != nvabi.NV_OK:
        raise RmError(status, op, params)


# ------------------------------------------------------------- raw ioctls
_libc = ctypes.CDLL(None, use_errno=True)
_libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
_libc.ioctl.restype = ctypes.c_int
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.mmap.restype = ctypes.c_void_p
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.munmap.restype = ctypes.c_int
MAP_FAILED = ctypes.c_void_p(-1).value
PROT_NONE = 0
MAP_FIXED = 0x10


def _ioctl_addr(fd: int, cmd: int, addr: int) -> int:
    """ioctl(fd, cmd, (void *)addr) through libc; OSError on failure."""
    r = _libc.ioctl(fd, cmd, addr)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"ioctl {cmd:#x}: {os.strerror(e)}")
    return r


def _ioctl_obj(fd: int, cmd: int, obj) -> None:
    """ioctl with a ctypes object (or bytearray) as the in/out argument."""
    if isinstance(obj, bytearray):
        if not obj:
            _ioctl_addr(fd, cmd, 0)
            return
        buf = (ctypes.c_char * len(obj)).from_buffer(obj)
        _ioctl_addr(fd, cmd, ctypes.addressof(buf))
        del buf
    else:
        _ioctl_addr(fd, cmd, ctypes.addressof(obj))


def raw_ioctl(fd: int, nr: int, buf: bytes | bytearray | ctypes.Structure = b"",
              size: int | None = None, *, type_: int = nvabi.NV_IOCTL_MAGIC) -> bytearray:
    """Issue NVIDIA escape nr on fd with arbitrary bytes.

    size is what goes into _IOC_SIZE (default: len(buf)); the buffer is padded
    with zeros to size so the driver never reads past it.  Returns the buffer
    after the call (the driver's copy-back).  Raises OSError on an errno; its
    .data holds the buffer too (the driver copies back also on -EINVAL)."""
    data = bytearray(bytes(buf))
    if size is None:
        size = len(data)
    if len(data) < size:
        data.extend(bytes(size - len(data)))
    try:
        _ioctl_obj(fd, nvabi.nv_ioctl(nr, size, type_), data)
    except OSError as e:
        e.data = data
        raise
    return data


def raw_ioctl_ptr(fd: int, nr: int, size: int, addr: int, *, type_: int = nvabi.NV_IOCTL_MAGIC) -> int:
    """Issue escape nr with an arbitrary user address as the argument."""
    return _ioctl_addr(fd, nvabi.nv_ioctl(nr, size, type_), addr)


def xfer_ioctl(fd: int, inner_nr: int, inner: bytes | bytearray | ctypes.Structure,
               size: int | None = None, *, outer_size: int | None = None,
               ptr: int | None = None) -> bytearray:
    """Wrap escape inner_nr in NV_ESC_IOCTL_XFER_CMD (nr 211).

    The inner params are copied to a stable buffer; the xfer header names its
    size (default len(inner)) and address (ptr overrides it, for bad-pointer
    tests); outer_size overrides the header's own _IOC_SIZE (normally 16).
    Returns the inner params after the call."""
    data = bytes(inner)
    if size is None:
        size = len(data)
    # room for what the header claims, capped: the driver must refuse more
    # than NV_ABSOLUTE_MAX_IOCTL_SIZE before reading it
    room = max(len(data), min(size, 4 * nvabi.NV_ABSOLUTE_MAX_IOCTL_SIZE), 1)
    cbuf = ctypes.create_string_buffer(data, room)
    x = nvabi.nv_ioctl_xfer_t(cmd=inner_nr, size=size,
                          ptr=ctypes.addressof(cbuf) if ptr is None else ptr)
    raw = bytearray(x.to_bytes())
    osz = ctypes.sizeof(x) if outer_size is None else outer_size
    if len(raw) < osz:
        raw.extend(bytes(osz - len(raw)))
    _ioctl_obj(fd, nvabi.nv_ioctl(nvabi.NV_ESC_IOCTL_XFER_CMD, osz), raw)
    return bytearray(cbuf.raw[:max(min(size, room), len(data))])


# NV_ESC_EXPORT_TO_DMABUF_FD before 570 (535.261.03's nv-ioctl.h): no
# mappingType or bAllowMmap, so what follows totalSize lies 4 or 8 bytes
# earlier; kmod/vgpu/policy/<release>.tsv gives 2600 bytes for 535 and 550,
# 2608 (nvabi.py's) from 570.211.01 on.
_DMABUF_HEAD_535 = struct.Struct("<iIIII4xQ")
_DMABUF_SIZE_535 = 2600


def _dmabuf_old_layout(version: str) -> bool:
    major = version.split(".", 1)[0]
    return major.isdigit() and int(major) < 570


def export_dma_buf(gpu_fd: int, version: str, hclient: int, handles: Iterable[int],
                   offsets: Iterable[int], sizes: Iterable[int], *,
                   total_objects: int | None = None, total_size: int | None = None,
                   index: int = 0, fd: int = -1, mapping_type: int = 0,
                   allow_mmap: bool = False, num_objects: int | None = None) -> tuple[int, int]:
    """NV_ESC_EXPORT_TO_DMABUF_FD on a GPU node, laid out for the driver
    release ``version``: (status, fd).  fd -1 makes a dma-buf (the new fd
    comes back), a dma-buf's fd adds the handles to it.  total_objects and
    total_size default to the handles' count and the sizes' sum, num_objects
    (what the params claim) to the handles' count; mapping_type and
    allow_mmap are members only from 570 on (dropped before).  An errno
    (wrong node, wrong size) raises OSError; an RM status does not raise."""
    handles, offsets, sizes = list(handles), list(offsets), list(sizes)
    n = len(handles)
    if not (len(offsets) == len(sizes) == n) or n > nvabi.NV_DMABUF_EXPORT_MAX_HANDLES:
        raise ValueError(f"handles, offsets and sizes: {n}, {len(offsets)}, {len(sizes)} "
                         f"(at most {nvabi.NV_DMABUF_EXPORT_MAX_HANDLES}, all alike)")
    pad = [0] * (nvabi.NV_DMABUF_EXPORT_MAX_HANDLES - n)
    total_objects = n if total_objects is None else total_objects
    total_size = sum(sizes) if total_size is None else total_size
    n = n if num_objects is None else num_objects
    if _dmabuf_old_layout(version):
        m = nvabi.NV_DMABUF_EXPORT_MAX_HANDLES
        buf = bytearray(_DMABUF_SIZE_535)
        _DMABUF_HEAD_535.pack_into(buf, 0, fd, hclient, total_objects, n, index, total_size)
        struct.pack_into(f"<{m}I{m}Q{m}Q", buf, _DMABUF_HEAD_535.size,
                         *(handles + pad), *(offsets + pad), *(sizes + pad))
        _ioctl_obj(gpu_fd, nvabi.nv_ioctl(nvabi.NV_ESC_EXPORT_TO_DMABUF_FD, len(buf)), buf)
        out_fd, = struct.unpack_from("<i", buf, 0)
        status, = struct.unpack_from("<I", buf, _DMABUF_HEAD_535.size + m * 20)
        return status, out_fd
    p = nvabi.nv_ioctl_export_to_dma_buf_fd_t(
        fd=fd, hClient=hclient, totalObjects=total_objects, numObjects=n, index=index,
        totalSize=total_size, mappingType=mapping_type, bAllowMmap=int(allow_mmap))
    p.handles[:] = handles + pad
    p.offsets[:] = offsets + pad
    p.sizes[:] = sizes + pad
    _escape(gpu_fd, nvabi.NV_ESC_EXPORT_TO_DMABUF_FD, p)
    return p.status, p.fd


def _escape(fd: int, nr: int, params: ctypes.Structure, *, xfer: bool = False) -> None:
    """Issue escape nr with a ctypes params struct, in place (optionally via XFER)."""
    if xfer:
        out = xfer_ioctl(fd, nr, params)
        ctypes.memmove(ctypes.addressof(params), bytes(out), ctypes.sizeof(params))
    else:
        _ioctl_obj(fd, nvabi.nv_ioctl(nr, ctypes.sizeof(params)), params)


# ------------------------------------------------------------------ sizes
def parse_size(text: str) -> int:
    """A size above 0 as vgpu reads sizes everywhere (vgpu.common.values.parse_size:
    Kubernetes quantities, "256Mi", "4G" = 4x10^9, "1.5GiB"), or a hex number
    of bytes ("0x1000"), which an ABI tool is given often.  ValueError
    (vgpu.common.values.BadValue) quoting the text."""
    s = str(text).strip()
    if s[:2].lower() == "0x":
        try:
            out = int(s, 16)
        except ValueError:
            raise BadValue(text, "is not a hex number of bytes") from None
    else:
        out = values_parse_size(text)
    if out <= 0:
        raise BadValue(text, "is not a size above 0")
    return out


def fmt_size(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            v = n / div
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.2f} {unit}"
    return f"{n} B"


# ------------------------------------------------------------------ files
def _open_node(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_CLOEXEC)


class CardInfo:
    """One valid nv_ioctl_card_info_t entry."""

    def __init__(self, index: int, raw: nvabi.nv_ioctl_card_info_t):
        p = raw.pci_info
        self.index = index
        self.gpu_id = raw.gpu_id
        self.minor = raw.minor_number
        self.domain, self.bus, self.slot, self.function = p.domain, p.bus, p.slot, p.function
        self.vendor_id, self.device_id = p.vendor_id, p.device_id
        self.fb_size = raw.fb_size
        self.fb_address = raw.fb_address
        self.reg_address = raw.reg_address
        self.reg_size = raw.reg_size
        self.interrupt_line = raw.interrupt_line
        self.dev_name = bytes(raw.dev_name).split(b"\0", 1)[0].decode(errors="replace")

    @property
    def pci(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:{self.slot:02x}.{self.function:x}"

    def as_dict(self) -> dict:
        return {"index": self.index, "gpu_id": self.gpu_id, "minor": self.minor,
                "pci": self.pci, "vendor_id": self.vendor_id, "device_id": self.device_id,
                "fb_size": self.fb_size}


# -------------------------------------------------------------- the client
class RmClient:
    """One RM client on one /dev/nvidiactl fd.

    ``RmClient(dev_prefix)`` opens the control device, queries the driver
    version and the GPU list, and allocates the root client.  Objects below the
    client get handles chosen here (``new_handle``) unless a caller passes
    ``handle=0`` (the driver chooses) or its own handle.
    """

    def __init__(self, dev_prefix: str = DEFAULT_PREFIX, *, alloc_client: bool = True,
                 query_version: bool = True, client_class: int = nvabi.NV01_ROOT_CLIENT,
                 xfer: bool = False):
        self.dev_prefix = dev_prefix.rstrip("/") or "/"
        self.ctl_path = os.path.join(self.dev_prefix, "nvidiactl")
        if not os.path.exists(self.ctl_path):
            raise NoDeviceError(errno.ENOENT, f"no NVIDIA device: {self.ctl_path} not found",
                                self.ctl_path)
        self.xfer = xfer           # route RM escapes through NV_ESC_IOCTL_XFER_CMD
        self.fd = _open_node(self.ctl_path)
        self._fds: list[int] = [self.fd]
        self._next_handle = HANDLE_BASE
        self.parents: dict[int, int] = {}
        self.hClient = 0
        self.version = ""
        self.gpus: dict[int, Gpu] = {}
        try:
            if query_version:
                self.version = self.query_version()
            self.cards = self.card_info()
            if alloc_client:
                self.hClient = self.alloc_client(client_class)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------- lifecycle
    def close(self, free: bool = False) -> None:
        """Close every fd this client opened (the driver frees the client on
        the last close of the control fd); free=True frees the client first."""
        if free and self.hClient and self.fd >= 0:
            try:
                self.free_client()
            except (RmError, OSError):
                pass
        for g in list(self.gpus.values()):
            g._closed()
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()
        self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def open_node(self, name: str) -> int:
        """Open <prefix>/<name> and track the fd for close()."""
        fd = _open_node(os.path.join(self.dev_prefix, name))
        self._fds.append(fd)
        return fd

    def close_fd(self, fd: int) -> None:
        if fd in self._fds:
            self._fds.remove(fd)
        os.close(fd)

    def new_handle(self) -> int:
        h = self._next_handle
        self._next_handle += 1
        return h

    # ------------------------------------------------------- escape plumbing
    def escape(self, nr: int, params: ctypes.Structure, fd: int | None = None) -> ctypes.Structure:
        """Issue escape nr on fd (default: the control fd), honouring self.xfer."""
        _escape(self.fd if fd is None else fd, nr, params, xfer=self.xfer)
        return params

    def raw(self, nr: int, buf=b"", size: int | None = None, fd: int | None = None, **kw) -> bytearray:
        return raw_ioctl(self.fd if fd is None else fd, nr, buf, size, **kw)

    # ------------------------------------------------------- driver facts
    def query_version(self) -> str:
        """The driver's version: CHECK_VERSION_STR with cmd '2' (query).
        Drivers before 530.30.02 do not know '2'; then a strict check with an
        empty string fails, and the driver writes its own version back."""
        p = nvabi.nv_ioctl_rm_api_version_t(cmd=nvabi.NV_RM_API_VERSION_CMD_QUERY)
        try:
            _escape(self.fd, nvabi.NV_ESC_CHECK_VERSION_STR, p)
        except OSError:
            pass
        version = p.versionString.decode(errors="replace")
        if not version:
            p = nvabi.nv_ioctl_rm_api_version_t(cmd=nvabi.NV_RM_API_VERSION_CMD_STRICT)
            try:
                _escape(self.fd, nvabi.NV_ESC_CHECK_VERSION_STR, p)
            except OSError:
                pass
            version = p.versionString.decode(errors="replace")
        return version

    def check_version(self, version: str, cmd: int = nvabi.NV_RM_API_VERSION_CMD_STRICT):
        """CHECK_VERSION_STR with cmd and versionString; returns the struct
        (reply, versionString).  OSError if the driver refuses the call."""
        p = nvabi.nv_ioctl_rm_api_version_t(cmd=cmd, versionString=version.encode())
        _escape(self.fd, nvabi.NV_ESC_CHECK_VERSION_STR, p)
        return p

    def card_info(self, count: int = MAX_CARDS) -> list[CardInfo]:
        arr = (nvabi.nv_ioctl_card_info_t * count)()
        _ioctl_obj(self.fd, nvabi.nv_ioctl(nvabi.NV_ESC_CARD_INFO, ctypes.sizeof(arr)), arr)
        return [CardInfo(i, e) for i, e in enumerate(arr) if e.valid]

    def attach_gpus(self, gpu_ids: Iterable[int]) -> None:
        ids = list(gpu_ids)
        arr = (ctypes.c_uint32 * len(ids))(*ids)
        _ioctl_obj(self.fd, nvabi.nv_ioctl(nvabi.NV_ESC_ATTACH_GPUS_TO_FD, ctypes.sizeof(arr)), arr)

    # ------------------------------------------------------------ objects
    def alloc_client(self, hclass: int = nvabi.NV01_ROOT_CLIENT, handle: int = 0) -> int:
        # The driver takes the handle asked for from hRoot (0: it picks one)
        # and writes the handle made to hObjectNew (_rmAlloc, serverAllocClient).
        p = NVOS64_PARAMETERS(hRoot=handle, hObjectParent=0, hObjectNew=0, hClass=hclass)
        self.escape(nvabi.NV_ESC_RM_ALLOC, p)
        _check(p.status, f"RM_ALLOC root client class {hclass:#x}", p)
        return p.hObjectNew

    def alloc(self, parent: int, hclass: int, params: ctypes.Structure | bytes | None = None,
              handle: int | None = None, *, form: str = "nvos64", flags: int = 0,
              params_size: int | None = None, rights: int = 0, client: int | None = None,
              params_ptr: int | None = None) -> int:
        """RM_ALLOC of hclass under parent; returns the new handle.

        handle None: a handle chosen here; 0: the driver chooses (read back).
        form "nvos64" (48 bytes, as CUDA) or "nvos21" (32 bytes).  params is a
        ctypes struct (updated in place with the driver's copy-back) or bytes.
        params_ptr overrides the params pointer (bad-pointer tests)."""
        if handle is None:
            handle = self.new_handle()
        keep = None
        ptr = 0
        size = 0
        if params is not None:
            if isinstance(params, (bytes, bytearray)):
                keep = ctypes.create_string_buffer(bytes(params), max(len(params), 1))
                size = len(params)
            else:
                keep = params
                size = ctypes.sizeof(params)
            ptr = ctypes.addressof(keep)
        if params_ptr is not None:
            ptr = params_ptr
        if params_size is not None:
            size = params_size
        hroot = self.hClient if client is None else client
        if form == "nvos64":
            p = NVOS64_PARAMETERS(hRoot=hroot, hObjectParent=parent, hObjectNew=handle,
                                  hClass=hclass, pAllocParms=ptr, pRightsRequested=rights,
                                  paramsSize=size, flags=flags)
        elif form == "nvos21":
            p = NVOS21_PARAMETERS(hRoot=hroot, hObjectParent=parent, hObjectNew=handle,
                                  hClass=hclass, pAllocParms=ptr, paramsSize=size)
        else:
            raise ValueError(f"unknown RM_ALLOC form {form!r}")
        self.escape(nvabi.NV_ESC_RM_ALLOC, p)
        _check(p.status, f"RM_ALLOC class {hclass:#x} parent {parent:#x}", p)
        self.parents[p.hObjectNew] = parent
        return p.hObjectNew

    def free(self, handle: int, parent: int | None = None, client: int | None = None) -> None:
        """RM_FREE of handle (and everything below it)."""
        if parent is None:
            parent = self.parents.get(handle, self.hClient)
        p = NVOS00_PARAMETERS(hRoot=self.hClient if client is None else client,
                              hObjectParent=parent, hObjectOld=handle)
        self.escape(nvabi.NV_ESC_RM_FREE, p)
        _check(p.status, f"RM_FREE {handle:#x}", p)
        self.parents.pop(handle, None)

    def free_client(self) -> None:
        p = NVOS00_PARAMETERS(hRoot=self.hClient, hObjectParent=0, hObjectOld=self.hClient)
        self.escape(nvabi.NV_ESC_RM_FREE, p)
        _check(p.status, f"RM_FREE client {self.hClient:#x}", p)
        self.parents.clear()
        self.hClient = 0

    def dup(self, parent: int, src_client: int, src_object: int, handle: int | None = None,
            flags: int = 0) -> int:
        """RM_DUP_OBJECT: a new reference to src_client's src_object under parent."""
        if handle is None:
            handle = self.new_handle()
        p = NVOS55_PARAMETERS(hClient=self.hClient, hParent=parent, hObject=handle,
                              hClientSrc=src_client, hObjectSrc=src_object, flags=flags)
        self.escape(nvabi.NV_ESC_RM_DUP_OBJECT, p)
        _check(p.status, f"RM_DUP_OBJECT {src_client:#x}/{src_object:#x}", p)
        self.parents[p.hObject] = parent
        return p.hObject

    def control(self, hobject: int, cmd: int, params: ctypes.Structure | bytes | bytearray | None = None,
                *, size: int | None = None, flags: int = 0, client: int | None = None,
                params_ptr: int | None = None):
        """RM_CONTROL cmd on hobject.  A ctypes params struct is updated in
        place and returned; bytes in, bytes out (the driver's copy-back)."""
        keep = None
        ptr = 0
        psize = 0
        if params is not None:
            if isinstance(params, (bytes, bytearray)):
                keep = ctypes.create_string_buffer(bytes(params), max(len(params), 1))
                psize = len(params)
            else:
                keep = params
                # The driver's release's size: a prefix of the struct where
                # it differs from nvabi.py's (vgpu/abi/nvrel.py).
                psize = nvrel.size(self.version, "control", cmd, ctypes.sizeof(params))
            ptr = ctypes.addressof(keep)
        if params_ptr is not None:
            ptr = params_ptr
        if size is not None:
            psize = size
        p = NVOS54_PARAMETERS(hClient=self.hClient if client is None else client, hObject=hobject,
                              cmd=cmd, flags=flags, params=ptr, paramsSize=psize)
        self.escape(nvabi.NV_ESC_RM_CONTROL, p)
        _check(p.status, f"RM_CONTROL {cmd:#x} on {hobject:#x}", p)
        if isinstance(params, (bytes, bytearray)):
            return bytes(keep.raw[:len(params)])
        return params

    # ------------------------------------------------------------ memory
    def alloc_vidmem(self, parent: int, size: int, handle: int | None = None, *,
                     hclass: int = nvabi.NV01_MEMORY_LOCAL_USER, form: str = "nvos64",
                     flags: int = 0, attr: int = 0, attr2: int = 0, mem_flags: int = 0,
                     owner: int = 0x5647, rm_flags: int = 0):
        """RM_ALLOC of a memory class with NV_MEMORY_ALLOCATION_PARAMS.
        Returns (handle, params) — params.size is the size the driver wrote back."""
        mp = NV_MEMORY_ALLOCATION_PARAMS(owner=owner, type=0, flags=mem_flags, attr=attr,
                                         attr2=attr2, size=size)
        h = self.alloc(parent, hclass, mp, handle, form=form, flags=rm_flags)
        return h, mp

    def alloc_memory(self, gpu_fd: int, parent: int, size: int, handle: int | None = None, *,
                     hclass: int = nvabi.NV01_MEMORY_LOCAL_USER, flags: int = 0,
                     fd: int | None = None, limit: int | None = None, pmemory: int = 0):
        """RM_ALLOC_MEMORY (NVOS02 + fd) issued on gpu_fd; size = limit + 1.

        fd names the file that receives the mmap context the driver makes
        for system memory (class 0x3E, unless flags say ALLOC_NONE/NO_MAP);
        it defaults to a new /dev/nvidiactl fd for 0x3E (as CUDA does) and to
        gpu_fd otherwise (unused then).  Returns (handle, params)."""
        if handle is None:
            handle = self.new_handle()
        if fd is None and hclass == nvabi.NV01_MEMORY_SYSTEM:
            fd = self.open_node("nvidiactl")
        p = nvabi.nv_ioctl_nvos02_parameters_with_fd()
        q = p.params
        q.hRoot, q.hObjectParent, q.hObjectNew, q.hClass, q.flags = (
            self.hClient, parent, handle, hclass, flags)
        q.pMemory = pmemory
        q.limit = (size - 1) if limit is None else limit
        p.fd = gpu_fd if fd is None else fd
        self.escape(nvabi.NV_ESC_RM_ALLOC_MEMORY, p, fd=gpu_fd)
        _check(q.status, f"RM_ALLOC_MEMORY class {hclass:#x}", p)
        self.parents[q.hObjectNew] = parent
        return q.hObjectNew, p

    def vid_heap(self, p: NVOS32_PARAMETERS) -> NVOS32_PARAMETERS:
        if not p.hRoot:
            p.hRoot = self.hClient
        self.escape(nvabi.NV_ESC_RM_VID_HEAP_CONTROL, p)
        _check(p.status, f"RM_VID_HEAP_CONTROL function {p.function}", p)
        return p

    def vid_heap_alloc(self, parent: int, size: int, handle: int | None = None, *,
                       function: int = nvabi.NVOS32_FUNCTION_ALLOC_SIZE, flags: int = 0,
                       attr: int = 0, owner: int = 0x5647, type_: int = 0):
        """VID_HEAP_CONTROL ALLOC_SIZE (2), ALLOC_TILED_PITCH_HEIGHT (6) or
        ALLOC_SIZE_RANGE (14).  Returns (hMemory, params)."""
        if handle is None:
            handle = self.new_handle()
        p = NVOS32_PARAMETERS(hRoot=self.hClient, hObjectParent=parent, function=function)
        if function == nvabi.NVOS32_FUNCTION_ALLOC_SIZE:
            d = p.data.AllocSize
        elif function == nvabi.NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT:
            d = p.data.AllocTiledPitchHeight
        elif function == nvabi.NVOS32_FUNCTION_ALLOC_SIZE_RANGE:
            d = p.data.AllocSizeRange
        else:
            raise ValueError(f"not an NVOS32 alloc function: {function}")
        d.owner, d.hMemory, d.type, d.flags, d.attr, d.size = owner, handle, type_, flags, attr, size
        if function == nvabi.NVOS32_FUNCTION_ALLOC_SIZE_RANGE:
            d.rangeEnd = (1 << 64) - 1
        self.vid_heap(p)
        self.parents[d.hMemory] = parent
        return d.hMemory, p

    def vid_heap_free(self, parent: int, handle: int, owner: int = 0x5647) -> None:
        p = NVOS32_PARAMETERS(hRoot=self.hClient, hObjectParent=parent,
                              function=nvabi.NVOS32_FUNCTION_FREE)
        p.data.Free.owner, p.data.Free.hMemory = owner, handle
        p.data.Free.flags = nvabi.NVOS32_FREE_FLAGS_MEMORY_HANDLE_PROVIDED
        self.vid_heap(p)
        self.parents.pop(handle, None)

    def vid_heap_info(self, parent: int) -> tuple[int, int]:
        """VID_HEAP_CONTROL INFO: (total, free) in bytes."""
        p = NVOS32_PARAMETERS(hRoot=self.hClient, hObjectParent=parent,
                              function=nvabi.NVOS32_FUNCTION_INFO)
        self.vid_heap(p)
        return p.total, p.free

    def surface_size(self, hmemory: int) -> int:
        """NV0041 GET_SURFACE_INFO PHYS_SIZE_LO/HI: the memory object's size in bytes."""
        lst = (nvabi.NV0041_CTRL_SURFACE_INFO * 2)()
        lst[0].index = nvabi.NV0041_CTRL_SURFACE_INFO_INDEX_PHYS_SIZE_LO
        lst[1].index = nvabi.NV0041_CTRL_SURFACE_INFO_INDEX_PHYS_SIZE_HI
        p = nvabi.NV0041_CTRL_GET_SURFACE_INFO_PARAMS(surfaceInfoListSize=2,
                                                  surfaceInfoList=ctypes.addressof(lst))
        self.control(hmemory, nvabi.NV0041_CTRL_CMD_GET_SURFACE_INFO, p)
        return lst[0].data | (lst[1].data << 32)

    def map_memory(self, hdevice: int, hmemory: int, length: int, map_fd: int, *,
                   offset: int = 0, flags: int = 0) -> int:
        """RM_MAP_MEMORY naming map_fd; returns pLinearAddress (a cookie)."""
        p = nvabi.nv_ioctl_nvos33_parameters_with_fd()
        q = p.params
        q.hClient, q.hDevice, q.hMemory, q.offset, q.length, q.flags = (
            self.hClient, hdevice, hmemory, offset, length, flags)
        p.fd = map_fd
        self.escape(nvabi.NV_ESC_RM_MAP_MEMORY, p)
        _check(q.status, f"RM_MAP_MEMORY {hmemory:#x}", p)
        return q.pLinearAddress

    def unmap_memory(self, hdevice: int, hmemory: int, linear: int, flags: int = 0) -> None:
        p = NVOS34_PARAMETERS(hClient=self.hClient, hDevice=hdevice, hMemory=hmemory,
                              pLinearAddress=linear, flags=flags)
        self.escape(nvabi.NV_ESC_RM_UNMAP_MEMORY, p)
        _check(p.status, f"RM_UNMAP_MEMORY {hmemory:#x}", p)

    def export_dma_buf(self, gpu: "Gpu", handles: Iterable[int], sizes: Iterable[int], *,
                       offsets: Iterable[int] | None = None, client: int | None = None,
                       fd: int = -1, **kw) -> int:
        """NV_ESC_EXPORT_TO_DMABUF_FD on gpu's node: the handles of client
        (default this one; the driver checks no ownership) as a dma-buf, or
        into dma-buf fd.  Returns the dma-buf's fd (the caller closes it);
        RmError on a status."""
        sizes = list(sizes)
        offsets = [0] * len(sizes) if offsets is None else offsets
        status, out = export_dma_buf(gpu.fd, self.version, self.hClient if client is None else client,
                                     handles, offsets, sizes, fd=fd, **kw)
        _check(status, "EXPORT_TO_DMABUF_FD")
        return out

    # ------------------------------------------------------------ devices
    def open_gpus(self, indexes: Iterable[int] | None = None, *, attach: bool = True,
                  register_fd: bool = True) -> list["Gpu"]:
        """Attach the GPUs (by index in card_info order) to the control fd in
        one ATTACH_GPUS_TO_FD, open their nodes and allocate device+subdevice."""
        cards = self.cards if indexes is None else [self.cards[i] for i in indexes]
        if attach:
            self.attach_gpus([c.gpu_id for c in cards])
        out = []
        for c in cards:
            g = Gpu(self, c, register_fd=register_fd)
            self.gpus[c.index] = g
            out.append(g)
        return out

    def gpu(self, index: int = 0) -> "Gpu":
        if index not in self.gpus:
            self.open_gpus([index])
        return self.gpus[index]

    # ------------------------------------------------ channel groups etc.
    def alloc_tsg(self, hdevice: int, handle: int | None = None, *,
                  engine_type: int = ENGINE_TYPE_GR0) -> int:
        p = nvabi.NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS(engineType=engine_type)
        return self.alloc(hdevice, nvabi.KEPLER_CHANNEL_GROUP_A, p, handle)

    def alloc_channel(self, parent: int, hclass: int = nvabi.VOLTA_CHANNEL_GPFIFO_A,
                      handle: int | None = None, *, engine_type: int = ENGINE_TYPE_GR0,
                      gpfifo_entries: int = nvabi.NVSIM_GPFIFO_ENTRIES_DEFAULT) -> int:
        p = nvabi.NV_CHANNEL_ALLOC_PARAMS(engineType=engine_type, gpFifoEntries=gpfifo_entries)
        return self.alloc(parent, hclass, p, handle)

    def alloc_usermode(self, hsubdevice: int, hclass: int = nvabi.VOLTA_USERMODE_A,
                       handle: int | None = None) -> int:
        return self.alloc(hsubdevice, hclass, None, handle)

    def tsg_schedule(self, htsg: int, enable: bool, *, skip_submit: bool = False,
                     skip_enable: bool = False) -> None:
        p = nvabi.NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS(bEnable=int(enable), bSkipSubmit=int(skip_submit),
                                                 bSkipEnable=int(skip_enable))
        self.control(htsg, nvabi.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, p)

    def channel_schedule(self, hchannel: int, enable: bool) -> None:
        p = nvabi.NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS(bEnable=int(enable))
        self.control(hchannel, nvabi.NVA06F_CTRL_CMD_GPFIFO_SCHEDULE, p)

    def tsg_set_timeslice(self, htsg: int, us: int) -> int:
        p = nvabi.NVA06C_CTRL_TIMESLICE_PARAMS(timesliceUs=us)
        self.control(htsg, nvabi.NVA06C_CTRL_CMD_SET_TIMESLICE, p)
        return p.timesliceUs

    def tsg_get_timeslice(self, htsg: int) -> int:
        p = nvabi.NVA06C_CTRL_TIMESLICE_PARAMS()
        self.control(htsg, nvabi.NVA06C_CTRL_CMD_GET_TIMESLICE, p)
        return p.timesliceUs

    def tsg_preempt(self, htsg: int, wait: bool = True, timeout_us: int = 0) -> None:
        p = nvabi.NVA06C_CTRL_PREEMPT_PARAMS(bWait=int(wait), bManualTimeout=int(bool(timeout_us)),
                                         timeoutUs=timeout_us)
        self.control(htsg, nvabi.NVA06C_CTRL_CMD_PREEMPT, p)

    def tsg_get_info(self, htsg: int) -> int:
        p = nvabi.NVA06C_CTRL_GET_INFO_PARAMS()
        self.control(htsg, nvabi.NVA06C_CTRL_CMD_GET_INFO, p)
        return p.tsgID

    def tsg_set_interleave(self, htsg: int, level: int) -> None:
        p = nvabi.NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS(tsgInterleaveLevel=level)
        self.control(htsg, nvabi.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL, p)

    def tsg_get_interleave(self, htsg: int) -> int:
        p = nvabi.NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS()
        self.control(htsg, nvabi.NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL, p)
        return p.tsgInterleaveLevel

    def work_submit_token(self, hchannel: int,
                          cmd: int = nvabi.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN) -> int:
        p = nvabi.NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS()
        self.control(hchannel, cmd, p)
        return p.workSubmitToken


class Gpu:
    """One GPU opened by a client: its /dev/nvidiaN fd, device and subdevice."""

    def __init__(self, client: RmClient, card: CardInfo, *, register_fd: bool = True,
                 device_id: int | None = None):
        self.client = client
        self.card = card
        self.index = card.index
        self.node = f"nvidia{card.minor}"
        self.fd = client.open_node(self.node)
        if register_fd:
            raw_ioctl(self.fd, nvabi.NV_ESC_REGISTER_FD,
                      nvabi.nv_ioctl_register_fd_t(ctl_fd=client.fd))
        self.hDevice = client.alloc(client.hClient, nvabi.NV01_DEVICE_0,
                                    NV0080_ALLOC_PARAMETERS(
                                        deviceId=card.index if device_id is None else device_id))
        self.hSubdevice = client.alloc(self.hDevice, nvabi.NV20_SUBDEVICE_0,
                                       NV2080_ALLOC_PARAMETERS(subDeviceId=0))
        self.mappings: list[Mapping] = []

    def _closed(self):
        self.fd = -1

    # ------------------------------------------------------------ memory
    def alloc(self, size: int, path: str = "rm-alloc", handle: int | None = None, **kw) -> int:
        """Allocate size bytes of FB by one of the three paths:
        rm-alloc (RM_ALLOC 0x40, NVOS64; form="nvos21" for the 32-byte form),
        alloc-memory (RM_ALLOC_MEMORY on the GPU fd), vid-heap (NVOS32 ALLOC_SIZE;
        function= for 6 / 14).  Returns the memory handle."""
        c = self.client
        if path == "rm-alloc":
            h, _ = c.alloc_vidmem(self.hDevice, size, handle, **kw)
        elif path == "alloc-memory":
            h, _ = c.alloc_memory(self.fd, self.hDevice, size, handle, **kw)
        elif path == "vid-heap":
            h, _ = c.vid_heap_alloc(self.hDevice, size, handle, **kw)
        else:
            raise ValueError(f"unknown allocation path {path!r}")
        return h

    def free(self, handle: int) -> None:
        self.client.free(handle)

    def vid_heap_info(self) -> tuple[int, int]:
        return self.client.vid_heap_info(self.hDevice)

    def fb_info(self, indexes: Iterable[int] | None = None) -> dict[int, int]:
        """FB_GET_INFO_V2 (inline list): index -> value (KiB for the sizes)."""
        idx = list(indexes) if indexes is not None else list(FB_INDEXES.values())
        p = nvabi.NV2080_CTRL_FB_GET_INFO_V2_PARAMS(fbInfoListSize=len(idx))
        for i, ix in enumerate(idx):
            p.fbInfoList[i].index = ix
        self.client.control(self.hSubdevice, nvabi.NV2080_CTRL_CMD_FB_GET_INFO_V2, p)
        return {p.fbInfoList[i].index: p.fbInfoList[i].data for i in range(len(idx))}

    def fb_info_v1(self, indexes: Iterable[int] | None = None) -> dict[int, int]:
        """FB_GET_INFO (V1, list behind an embedded pointer)."""
        idx = list(indexes) if indexes is not None else list(FB_INDEXES.values())
        lst = (nvabi.NV2080_CTRL_FB_INFO * max(len(idx), 1))()
        for i, ix in enumerate(idx):
            lst[i].index = ix
        p = nvabi.NV2080_CTRL_FB_GET_INFO_PARAMS(fbInfoListSize=len(idx),
                                             fbInfoList=ctypes.addressof(lst))
        self.client.control(self.hSubdevice, nvabi.NV2080_CTRL_CMD_FB_GET_INFO, p)
        return {lst[i].index: lst[i].data for i in range(len(idx))}

    def name(self) -> str:
        """NV2080_CTRL_CMD_GPU_GET_NAME_STRING (ASCII)."""
        p = nvabi.NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS(
            gpuNameStringFlags=nvabi.NV2080_CTRL_GPU_GET_NAME_STRING_FLAGS_TYPE_ASCII)
        self.client.control(self.hSubdevice, nvabi.NV2080_CTRL_CMD_GPU_GET_NAME_STRING, p)
        return bytes(p.gpuNameString.ascii).split(b"\0", 1)[0].decode(errors="replace")

    def memory_summary(self) -> dict:
        """FB totals from FB_GET_INFO_V2 (KiB) and VID_HEAP INFO (bytes)."""
        fb = self.fb_info()
        total, free = self.vid_heap_info()
        return {
            "fb_total_kib": fb[nvabi.NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE],
            "fb_heap_kib": fb[nvabi.NV2080_CTRL_FB_INFO_INDEX_HEAP_SIZE],
            "fb_free_kib": fb[nvabi.NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE],
            "fb_usable_kib": fb[nvabi.NV2080_CTRL_FB_INFO_INDEX_USABLE_RAM_SIZE],
            "vidheap_total": total,
            "vidheap_free": free,
        }

    def pids(self, id_type: int = nvabi.NV2080_CTRL_GPU_GET_PIDS_ID_TYPE_CLASS,
             id_: int = nvabi.NV20_SUBDEVICE_0) -> list[int]:
        p = nvabi.NV2080_CTRL_GPU_GET_PIDS_PARAMS(idType=id_type, id=id_)
        self.client.control(self.hSubdevice, nvabi.NV2080_CTRL_CMD_GPU_GET_PIDS, p)
        return [p.pidTbl[i] for i in range(min(p.pidTblCount, nvabi.NV2080_CTRL_GPU_GET_PIDS_MAX_COUNT))]

    def pid_vidmem(self, pids: Iterable[int]) -> dict[int, int]:
        """GET_PID_INFO index 0: pid -> video memory bytes (memPrivate)."""
        pl = list(pids)
        p = nvabi.NV2080_CTRL_GPU_GET_PID_INFO_PARAMS(pidInfoListCount=len(pl))
        for i, pid in enumerate(pl):
            p.pidInfoList[i].pid = pid
            p.pidInfoList[i].index = nvabi.NV2080_CTRL_GPU_PID_INFO_INDEX_VIDEO_MEMORY_USAGE
        self.client.control(self.hSubdevice, nvabi.NV2080_CTRL_CMD_GPU_GET_PID_INFO, p)
        return {p.pidInfoList[i].pid: p.pidInfoList[i].data.memPrivate for i in range(len(pl))}

    # ------------------------------------------------------------ mapping
    def map(self, hmemory: int, length: int, *, hdevice: int | None = None,
            prot: int = mmap.PROT_READ | mmap.PROT_WRITE, node: str | None = None) -> "Mapping":
        """Map hmemory the way CUDA does: a NEW fd on the GPU node,
        RM_MAP_MEMORY naming it, then mmap(offset 0, length)."""
        return Mapping(self, hmemory, length, hdevice=self.hDevice if hdevice is None else hdevice,
                       prot=prot, node=node or self.node)

    def usermode(self, hclass: int = nvabi.VOLTA_USERMODE_A) -> tuple[int, "Mapping"]:
        """Allocate the usermode (doorbell) region under the subdevice and map it."""
        h = self.client.alloc_usermode(self.hSubdevice, hclass)
        m = self.map(h, nvabi.NVC361_USERMODE_REGION_SIZE, hdevice=self.hSubdevice)
        return h, m


class Mapping:
    """A CPU mapping of an RM memory object (new fd + RM_MAP_MEMORY + mmap)."""

    def __init__(self, gpu: Gpu, hmemory: int, length: int, *, hdevice: int, prot: int, node: str):
        c = gpu.client
        self.client, self.hmemory, self.hdevice, self.length = c, hmemory, hdevice, length
        self.fd = c.open_node(node)
        self.mm = None
        self.cookie = None
        try:
            self.cookie = c.map_memory(hdevice, hmemory, length, self.fd)
            self.mm = mmap.mmap(self.fd, length, mmap.MAP_SHARED, prot, offset=0)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        if self.cookie is not None and self.client.fd >= 0:
            try:
                self.client.unmap_memory(self.hdevice, self.hmemory, self.cookie)
            except (RmError, OSError):
                pass
            self.cookie = None
        if self.fd >= 0:
            try:
                self.client.close_fd(self.fd)
            except OSError:
                pass
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ----------------------------------------------------------- work submission
PAGE_SIZE = mmap.PAGESIZE
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_RECORD = struct.Struct("<QQ")


class Channel:
    """A channel ready to take work, set up the way CUDA sets one up: a TSG
    (KEPLER_CHANNEL_GROUP_A) under the GPU's device, a channel under it,
    GPFIFO_SCHEDULE on for the TSG, the channel's USERD and GPFIFO ring
    mapped (RM_MAP_MEMORY of the channel on a new GPU fd, mmap of 2 pages),
    the usermode region mapped, and the channel's work-submit token.

    Work: ``submit(us)`` writes a GPFIFO entry (a simulated one is the work:
    its duration in us), bumps GP_PUT and rings the doorbell; ``wait(n)``
    waits for entry n (counted from 0 since the channel was made) to
    complete; ``record(n)`` reads its completion record {start_ns, end_ns}
    in the GPU timer's clock (``gpu_time_ns()``).

    Only the ABI is used, so it works the same through a dev prefix of
    mediated nodes.  The ring beside USERD and the completion records are
    the simulator's (kmod/nvsim/README.md); on a real GPU the ring lives in
    GPU memory and entries point at pushbuffers.
    """

    def __init__(self, gpu: Gpu, *, hclass: int = nvabi.VOLTA_CHANNEL_GPFIFO_A,
                 entries: int = nvabi.NVSIM_GPFIFO_ENTRIES_DEFAULT, schedule: bool = True,
                 timeslice_us: int | None = None):
        c = gpu.client
        self.client, self.gpu, self.entries = c, gpu, entries
        self.htsg = 0
        self.husermode = 0
        self.map: Mapping | None = None
        self.usermode: Mapping | None = None
        self.submitted = 0          # entries queued so far
        self.completed = 0          # entries seen completed so far
        self.submit_ns: dict[int, int] = {}
        try:
            self.htsg = c.alloc_tsg(gpu.hDevice)
            self.hchannel = c.alloc_channel(self.htsg, hclass, gpfifo_entries=entries)
            self.token = c.work_submit_token(self.hchannel)
            self.map = gpu.map(self.hchannel, nvabi.NVSIM_CHANNEL_MAP_PAGES * PAGE_SIZE)
            self.husermode, self.usermode = gpu.usermode()
            if timeslice_us is not None:
                c.tsg_set_timeslice(self.htsg, timeslice_us)
            if schedule:
                c.tsg_schedule(self.htsg, True)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------- lifecycle
    def close(self, free: bool = True) -> None:
        """Unmap everything; free=True also frees the TSG (with the channel)
        and the usermode object."""
        for m in (self.map, self.usermode):
            if m is not None:
                m.close()
        self.map = self.usermode = None
        if free and self.client.fd >= 0:
            for h in (self.htsg, self.husermode):
                if h:
                    try:
                        self.client.free(h)
                    except (RmError, OSError):
                        pass
        self.htsg = self.husermode = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------ registers
    def _mm(self) -> mmap.mmap:
        if self.map is None or self.map.mm is None:
            raise ValueError("channel is closed")
        return self.map.mm

    @property
    def gp_get(self) -> int:
        return _U32.unpack_from(self._mm(), nvabi.NVC36F_GPGET_OFFSET)[0]

    @property
    def gp_put(self) -> int:
        return _U32.unpack_from(self._mm(), nvabi.NVC36F_GPPUT_OFFSET)[0]

    def set_gp_put(self, value: int) -> None:
        _U32.pack_into(self._mm(), nvabi.NVC36F_GPPUT_OFFSET, value & 0xFFFFFFFF)

    def write_entry(self, index: int, value: int) -> None:
        """Write GPFIFO entry index (modulo the ring) without queueing it."""
        _U64.pack_into(self._mm(), PAGE_SIZE + (index % self.entries) * 8,
                       value & 0xFFFFFFFFFFFFFFFF)

    def ring(self, token: int | None = None) -> None:
        """Write the channel's work-submit token to the doorbell."""
        if self.usermode is None or self.usermode.mm is None:
            raise ValueError("channel is closed")
        _U32.pack_into(self.usermode.mm, nvabi.NVC361_NOTIFY_CHANNEL_PENDING,
                       self.token if token is None else token)

    def gpu_time_ns(self) -> int:
        """The GPU timer (TIME_1:TIME_0), read high-low-high as on hardware."""
        if self.usermode is None or self.usermode.mm is None:
            raise ValueError("channel is closed")
        mm = self.usermode.mm
        while True:
            hi = _U32.unpack_from(mm, nvabi.NVC361_TIME_1)[0]
            lo = _U32.unpack_from(mm, nvabi.NVC361_TIME_0)[0]
            if _U32.unpack_from(mm, nvabi.NVC361_TIME_1)[0] == hi:
                return (hi << 32) | lo

    def record(self, n: int) -> tuple[int, int]:
        """The completion record {start_ns, end_ns} of entry n (valid until
        NVSIM_USERD_COMPLETIONS later entries have started)."""
        slot = (n % self.entries) % nvabi.NVSIM_USERD_COMPLETIONS
        return _RECORD.unpack_from(self._mm(), nvabi.NVSIM_USERD_COMPLETIONS_OFFSET + slot * 16)

    # ----------------------------------------------------------------- work
    def poll(self) -> int:
        """Entries completed so far (from GP_GET, which counts modulo the ring)."""
        in_flight = self.submitted - self.completed
        done = (self.gp_get - self.completed) % self.entries
        self.completed += min(done, in_flight)
        return self.completed

    def submit(self, us: int, *, ring: bool = True) -> int:
        """Queue a work item of us microseconds; returns its entry number."""
        if not 0 <= us <= 0xFFFFFFFF:
            raise ValueError(f"work item of {us} us: must fit 32 bits")
        if self.submitted - self.poll() >= self.entries - 1:
            raise RuntimeError(f"GPFIFO ring full ({self.entries - 1} entries queued)")
        n = self.submitted
        self.write_entry(n, us)
        self.submit_ns[n] = self.gpu_time_ns()
        self.submitted += 1
        self.set_gp_put(self.submitted % self.entries)
        if ring:
            self.ring()
        return n

    def wait(self, n: int, timeout: float = 30.0, *, poll_s: float = 0.0002) -> None:
        """Wait until entry n has completed, polling every poll_s seconds.
        The doorbell is rung again about every millisecond (or poll): nvsim
        polls it once per engine tick, so a ring can be lost to another in
        the same tick (a simulator artefact, kmod/nvsim/README.md).
        TimeoutError after timeout seconds."""
        if n >= self.submitted:
            raise ValueError(f"entry {n} was never submitted ({self.submitted} so far)")
        end = time.monotonic() + timeout
        next_ring = time.monotonic() + 0.001
        while self.poll() <= n:
            now = time.monotonic()
            if now >= end:
                raise TimeoutError(f"entry {n} not complete after {timeout} s "
                                   f"(GP_GET {self.gp_get}, GP_PUT {self.gp_put})")
            if now >= next_ring:
                self.ring()
                next_ring = now + max(0.001, poll_s)
            time.sleep(poll_s)

    def run_work(self, item_us: int, depth: int, seconds: float | None = None,
                 items: int | None = None, *, timeout: float = 60.0) -> dict:
        """Keep up to depth items of item_us queued until seconds have passed
        or items were submitted, then drain.  Returns items done, GPU time
        used (sum of end - start of the completion records) and the
        start-latency figures (record start minus the GPU timer at submit).

        The queue is refilled to depth once a quarter of it has completed, and
        the wait sleeps about half that quarter's running time between polls:
        three quarters stay queued while the process is late, and a deep
        queue costs the process a few wake-ups per refill, not one per item
        (under emulation, sixteen clients polling per item took the vCPUs
        from each other and from the scheduler being measured).  Depth 1
        waits for each item, polling every 0.2 ms."""
        if (seconds is None) == (items is None):
            raise ValueError("give exactly one of seconds and items")
        limit = min(self.entries - 1, nvabi.NVSIM_USERD_COMPLETIONS)
        if not 1 <= depth <= limit:
            raise ValueError(f"depth must be 1..{limit}")
        refill = max(1, depth // 4)
        poll_s = max(0.0002, item_us * 1e-6 * refill / 2)
        first = self.submitted
        start = time.monotonic()
        stop = None if seconds is None else start + seconds
        gpu_ns = 0
        lat: list[int] = []
        done = self.poll()
        while True:
            while (self.submitted - done < depth
                   and (items is None or self.submitted - first < items)
                   and (stop is None or time.monotonic() < stop)):
                self.submit(item_us)
            if self.submitted == done:
                break
            # until at most depth - refill are left (all of them when draining)
            self.wait(min(self.submitted - 1, max(done, self.submitted - depth + refill - 1)),
                      timeout, poll_s=poll_s)
            now_done = self.poll()
            for n in range(done, now_done):
                s, e = self.record(n)
                gpu_ns += max(e - s, 0)
                lat.append(s - self.submit_ns.pop(n, s))
            done = now_done
        wall = time.monotonic() - start
        lat.sort()

        def pct(q: float) -> float:
            if not lat:
                return 0.0
            return lat[min(len(lat) - 1, int(q * len(lat)))] / 1000.0

        return {"items": self.submitted - first, "item_us": item_us, "depth": depth,
                "wall_s": round(wall, 6), "gpu_time_us": gpu_ns / 1000.0,
                "gpu_share": round(gpu_ns / 1e9 / wall, 6) if wall > 0 else 0.0,
                "start_latency_us": {"mean": sum(lat) / len(lat) / 1000.0 if lat else 0.0,
                                     "median": pct(0.5), "p99": pct(0.99),
                                     "max": lat[-1] / 1000.0 if lat else 0.0}}


FB_INDEXES = {
    "RAM_SIZE": nvabi.NV2080_CTRL_FB_INFO_INDEX_RAM_SIZE,
    "TOTAL_RAM_SIZE": nvabi.NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE,
    "HEAP_SIZE": nvabi.NV2080_CTRL_FB_INFO_INDEX_HEAP_SIZE,
    "MAPPABLE_HEAP_SIZE": nvabi.NV2080_CTRL_FB_INFO_INDEX_MAPPABLE_HEAP_SIZE,
    "HEAP_FREE": nvabi.NV2080_CTRL_FB_INFO_INDEX_HEAP_FREE,
    "USABLE_RAM_SIZE": nvabi.NV2080_CTRL_FB_INFO_INDEX_USABLE_RAM_SIZE,
    "LARGEST_FREE_REGION_SIZE_KB": nvabi.NV2080_CTRL_FB_INFO_INDEX_LARGEST_FREE_REGION_SIZE_KB,
    "BAR1_SIZE": nvabi.NV2080_CTRL_FB_INFO_INDEX_BAR1_SIZE,
}


# ------------------------------------------------------------------- UVM
class UvmFile:
    """/dev/nvidia-uvm: plain-integer ioctl commands, size implied by the command."""

    PROT_RW = mmap.PROT_READ | mmap.PROT_WRITE

    def __init__(self, dev_prefix: str = DEFAULT_PREFIX, *, release: str | None = None):
        self.path = os.path.join(dev_prefix, "nvidia-uvm")
        self.dev_prefix = dev_prefix
        self.fd = _open_node(self.path)
        self.ranges: list[tuple[int, int]] = []
        self.ext_ranges: list[tuple[int, int]] = []     # external ranges made here
        self._release = release

    @property
    def release(self) -> str:
        """The driver's release (the layouts of MAP_EXTERNAL_ALLOCATION and
        FREE differ between releases): asked of nvidiactl beside the UVM
        node once, unless given."""
        if self._release is None:
            try:
                c = RmClient(self.dev_prefix, alloc_client=False)
            except OSError:
                self._release = nvrel.BASE
            else:
                self._release = c.version or nvrel.BASE
                c.close()
        return self._release

    def _ioctl_tail(self, cmd: int, p: ctypes.Structure, head: int, tail: int) -> None:
        """cmd with p laid out for the release: where its struct is another
        size, the first head bytes stay at the start and the last tail bytes
        at the end (what lies between grew with UVM_MAX_GPUS, or was a
        member the release has not: tests/host/test_kmod_abi.py measures
        both ends, for releases other than 595.45.04 with NVGEN_NVIDIA_GIT)."""
        size = nvrel.size(self.release, "uvm", cmd, ctypes.sizeof(p))
        full = ctypes.sizeof(p)
        if size == full:
            self.ioctl(cmd, p)
            return
        raw = bytes(p)
        # What lies between starts at head in both layouts (MAP_EXTERNAL's
        # perGpuAttributes): as much of it as both have goes along.
        mid = head + max(0, min(size, full) - head - tail)
        buf = ctypes.create_string_buffer(max(size, 8))
        buf[:mid] = raw[:mid]
        buf[size - tail:size] = raw[full - tail:]
        _ioctl_addr(self.fd, cmd, ctypes.addressof(buf))
        out = bytearray(raw)
        out[:mid] = buf.raw[:mid]
        out[full - tail:] = buf.raw[size - tail:size]
        ctypes.memmove(ctypes.addressof(p), bytes(out), full)

    def close(self) -> None:
        for addr, length in self.ranges:
            _libc.munmap(addr, length)
        self.ranges.clear()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def ioctl(self, cmd: int, params: ctypes.Structure) -> ctypes.Structure:
        _ioctl_obj(self.fd, cmd, params)
        return params

    def initialize(self, flags: int = 0) -> None:
        p = nvabi.UVM_INITIALIZE_PARAMS(flags=flags)
        self.ioctl(nvabi.UVM_INITIALIZE, p)
        _check(p.rmStatus, "UVM_INITIALIZE", p)

    def register_gpu(self, uuid: bytes, rm_ctrl_fd: int, hclient: int, hsmc: int = 0) -> None:
        p = nvabi.UVM_REGISTER_GPU_PARAMS(rmCtrlFd=rm_ctrl_fd, hClient=hclient, hSmcPartRef=hsmc)
        ctypes.memmove(p.gpu_uuid, bytes(uuid)[:16].ljust(16, b"\0"), 16)
        self.ioctl(nvabi.UVM_REGISTER_GPU, p)
        _check(p.rmStatus, "UVM_REGISTER_GPU", p)

    def register_gpu_vaspace(self, uuid: bytes, rm_ctrl_fd: int, hclient: int,
                             hvaspace: int) -> None:
        p = nvabi.UVM_REGISTER_GPU_VASPACE_PARAMS(rmCtrlFd=rm_ctrl_fd, hClient=hclient,
                                              hVaSpace=hvaspace)
        ctypes.memmove(p.gpuUuid, bytes(uuid)[:16].ljust(16, b"\0"), 16)
        self.ioctl(nvabi.UVM_REGISTER_GPU_VASPACE, p)
        _check(p.rmStatus, "UVM_REGISTER_GPU_VASPACE", p)

    def create_external_range(self, base: int, length: int, check: bool = True) -> int:
        """UVM_CREATE_EXTERNAL_RANGE: the VA range external mappings go in
        (the driver maps nothing outside one).  Returns rmStatus."""
        p = nvabi.UVM_CREATE_EXTERNAL_RANGE_PARAMS(base=base, length=length)
        self.ioctl(nvabi.UVM_CREATE_EXTERNAL_RANGE, p)
        if check:
            _check(p.rmStatus, "UVM_CREATE_EXTERNAL_RANGE", p)
            self.ext_ranges.append((base, length))
        return p.rmStatus

    def map_external(self, base: int, length: int, rm_ctrl_fd: int, hclient: int,
                     hmemory: int, offset: int = 0, gpus: Iterable[bytes] = (),
                     create_range: bool = True, check: bool = True) -> int:
        """UVM_MAP_EXTERNAL_ALLOCATION: map an RM memory object into an
        external range (the driver dups the handle; FB stays in use until
        unmapped or the range is freed).  gpus: the UUIDs of perGpuAttributes.
        create_range: first make an external range of exactly this mapping
        when none made here holds it (as CUDA does).  Returns rmStatus."""
        if create_range and not any(b <= base and base + length <= b + n
                                    for b, n in self.ext_ranges):
            self.create_external_range(base, length)
        p = nvabi.UVM_MAP_EXTERNAL_ALLOCATION_PARAMS(base=base, length=length, offset=offset,
                                                 rmCtrlFd=rm_ctrl_fd, hClient=hclient,
                                                 hMemory=hmemory)
        gl = list(gpus)
        for i, uuid in enumerate(gl):
            ctypes.memmove(ctypes.addressof(p.perGpuAttributes) + 36 * i,
                           bytes(uuid)[:16].ljust(16, b"\0"), 16)
        p.gpuAttributesCount = len(gl)
        # base, length, offset ... gpuAttributesCount, rmCtrlFd, hClient, hMemory, rmStatus
        self._ioctl_tail(nvabi.UVM_MAP_EXTERNAL_ALLOCATION, p, 24, 24)
        if check:
            _check(p.rmStatus, "UVM_MAP_EXTERNAL_ALLOCATION", p)
        return p.rmStatus

    def unmap_external(self, base: int, length: int, uuid: bytes, check: bool = True) -> int:
        """UVM_UNMAP_EXTERNAL of [base, base + length) on one GPU."""
        p = nvabi.UVM_UNMAP_EXTERNAL_PARAMS(base=base, length=length)
        ctypes.memmove(p.gpuUuid, bytes(uuid)[:16].ljust(16, b"\0"), 16)
        self.ioctl(nvabi.UVM_UNMAP_EXTERNAL, p)
        if check:
            _check(p.rmStatus, "UVM_UNMAP_EXTERNAL", p)
        return p.rmStatus

    def free(self, base: int, check: bool = True) -> int:
        """UVM_FREE: the range that starts at base, with its mappings."""
        p = nvabi.UVM_FREE_PARAMS(base=base)
        # base ... rmStatus and its padding (up to 580 a length between them)
        self._ioctl_tail(nvabi.UVM_FREE, p, 8, 8)
        if check:
            _check(p.rmStatus, "UVM_FREE", p)
            self.ext_ranges = [(b, n) for b, n in self.ext_ranges if b != base]
        return p.rmStatus

    def managed_mmap(self, length: int, *, offset: int | None = None) -> int:
        """A managed range: reserve address space, then map the UVM fd over it
        with file offset == virtual address (offset overrides that, for tests).
        Returns the address; OSError if the kernel refuses."""
        addr = _libc.mmap(None, length, PROT_NONE,
                          mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        if addr in (None, MAP_FAILED):
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        off = addr if offset is None else offset
        got = _libc.mmap(addr, length, self.PROT_RW, mmap.MAP_SHARED | MAP_FIXED, self.fd, off)
        if got in (None, MAP_FAILED):
            e = ctypes.get_errno()
            _libc.munmap(addr, length)
            raise OSError(e, f"mmap of {self.path} at {addr:#x} offset {off:#x}: {os.strerror(e)}")
        self.ranges.append((got, length))
        return got

    def munmap(self, addr: int) -> None:
        for i, (a, n) in enumerate(self.ranges):
            if a == addr:
                _libc.munmap(a, n)
                del self.ranges[i]
                return
        raise KeyError(addr)


# ------------------------------------------------------------------- CLI
_KNOWN_DEVICES = {
    0x20B0: "NVIDIA A100-SXM4-40GB", 0x20B2: "NVIDIA A100-SXM4-80GB",
    0x20B5: "NVIDIA A100 80GB PCIe", 0x2330: "NVIDIA H100 80GB HBM3",
    0x2331: "NVIDIA H100 PCIe", 0x2335: "NVIDIA H200", 0x26B5: "NVIDIA L40",
    0x27B8: "NVIDIA L4", 0x1EB8: "Tesla T4", 0x1DB4: "Tesla V100-PCIE-16GB",
}


def gpu_name(card: CardInfo, gpu: "Gpu | None" = None) -> str | None:
    """The GPU's model name if known: the driver's GET_NAME_STRING control,
    /proc/driver/nvidia/gpus/<pci>/information, else a small device-id table."""
    if gpu is not None:
        try:
            name = gpu.name()
            if name:
                return name
        except (RmError, OSError):
            pass
    for pci in (card.pci, f"{card.domain:04x}:{card.bus:02x}:{card.slot:02x}.{card.function}"):
        try:
            with open(f"/proc/driver/nvidia/gpus/{pci}/information") as f:
                for line in f:
                    if line.startswith("Model:"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
    if card.vendor_id == 0x10DE:
        return _KNOWN_DEVICES.get(card.device_id)
    return None


def _print_table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


def cmd_info(args) -> int:
    with RmClient(args.dev_prefix) as c:
        out = {"driver_version": c.version, "dev_prefix": c.dev_prefix, "gpus": []}
        gpus = c.open_gpus() if c.cards else []
        for g in gpus:
            d = g.card.as_dict()
            d["name"] = gpu_name(g.card, g)
            try:
                d.update(g.memory_summary())
            except (RmError, OSError) as e:
                d["error"] = str(e)
            out["gpus"].append(d)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"driver version: {out['driver_version'] or '(unknown)'}")
    if not out["gpus"]:
        print("no GPUs")
        return 0
    rows = []
    for d in out["gpus"]:
        if "error" in d:
            rows.append([d["index"], d["pci"], d["name"] or "?", "-", "-", "-", "-", d["error"]])
            continue
        rows.append([d["index"], d["pci"], d["name"] or f"{d['vendor_id']:04x}:{d['device_id']:04x}",
                     fmt_size(d["fb_total_kib"] << 10), fmt_size(d["fb_free_kib"] << 10),
                     fmt_size(d["vidheap_total"]), fmt_size(d["vidheap_free"]), ""])
    _print_table(rows, ["GPU", "PCI", "NAME", "FB TOTAL", "FB FREE", "HEAP TOTAL", "HEAP FREE", ""])
    return 0


def probe(dev_prefix: str, gpu: int, chunk: int, path: str, limit: int | None = None) -> dict:
    """Allocate chunk-sized FB blocks on a GPU until NV_ERR_NO_MEMORY (or limit)."""
    with RmClient(dev_prefix) as c:
        if gpu >= len(c.cards):
            raise SystemExit(f"no GPU {gpu}: the driver reports {len(c.cards)} GPU(s)")
        g = c.open_gpus([gpu])[0]
        before = g.memory_summary()
        allocated = 0
        handles = []
        stop = "limit"
        while limit is None or allocated + chunk <= limit:
            try:
                handles.append(g.alloc(chunk, path))
            except RmError as e:
                stop = e.name
                break
            allocated += chunk
        after = g.memory_summary()
        for h in reversed(handles):
            c.free(h)
        released = g.memory_summary()
    return {"gpu": gpu, "path": path, "chunk": chunk, "chunks": len(handles),
            "allocated_bytes": allocated, "stopped_by": stop, "limit": limit,
            "before": before, "after": after, "after_free": released}


def cmd_probe(args) -> int:
    r = probe(args.dev_prefix, args.gpu, args.chunk, args.path, args.limit)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    print(f"GPU {r['gpu']}: {r['chunks']} x {fmt_size(r['chunk'])} by {r['path']} = "
          f"{fmt_size(r['allocated_bytes'])} ({r['allocated_bytes']} bytes), stopped by {r['stopped_by']}")
    rows = []
    for label in ("before", "after", "after_free"):
        s = r[label]
        rows.append([label.replace("_", " "), fmt_size(s["fb_total_kib"] << 10),
                     fmt_size(s["fb_free_kib"] << 10), fmt_size(s["vidheap_total"]),
                     fmt_size(s["vidheap_free"])])
    _print_table(rows, ["", "FB TOTAL", "FB FREE", "HEAP TOTAL", "HEAP FREE"])
    return 0


def cmd_work(args) -> int:
    with RmClient(args.dev_prefix) as c:
        if args.gpu >= len(c.cards):
            raise SystemExit(f"no GPU {args.gpu}: the driver reports {len(c.cards)} GPU(s)")
        g = c.open_gpus([args.gpu])[0]
        with Channel(g) as ch:
            r = ch.run_work(args.item_us, args.depth, seconds=args.seconds, items=args.items)
    r["gpu"] = args.gpu
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    lat = r["start_latency_us"]
    print(f"GPU {r['gpu']}: {r['items']} items of {r['item_us']} us (depth {r['depth']}) "
          f"in {r['wall_s']:.3f} s")
    print(f"GPU time used: {r['gpu_time_us'] / 1000:.3f} ms ({100 * r['gpu_share']:.1f}% of wall time)")
    print(f"start latency: median {lat['median']:.1f} us, p99 {lat['p99']:.1f} us, "
          f"max {lat['max']:.1f} us")
    return 0


def _size_arg(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="vgpu-nvclient",
                                 description="Talk to the NVIDIA driver's RM ABI directly.")
    ap.add_argument("--dev-prefix", default=DEFAULT_PREFIX,
                    help="directory holding nvidiactl and nvidiaN (default /dev)")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="driver version, GPUs and their memory")
    p = sub.add_parser("probe", help="allocate FB in chunks until NV_ERR_NO_MEMORY")
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--chunk", type=_size_arg, default=parse_size("256MiB"),
                   help="chunk size, e.g. 256MiB (default), 1GiB, 4096")
    p.add_argument("--path", choices=["rm-alloc", "alloc-memory", "vid-heap"], default="rm-alloc")
    p.add_argument("--limit", type=_size_arg, default=None, help="stop after this many bytes")
    p = sub.add_parser("work", help="submit work items through a channel and report GPU time")
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--item-us", type=int, required=True, help="duration of each work item (us)")
    p.add_argument("--depth", type=int, default=8, help="items kept queued (default 8)")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--seconds", type=float, help="keep submitting for this long")
    how.add_argument("--items", type=int, help="submit this many items")
    for sp in sub.choices.values():  # accept the global options after the subcommand too
        sp.add_argument("--dev-prefix", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        sp.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    ap.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"info": cmd_info, "probe": cmd_probe, "work": cmd_work}[args.cmd](args)
    except NoDeviceError as e:
        print(f"vgpu-nvclient: {e.strerror}", file=sys.stderr)
        return 2
    except RmError as e:
        print(f"vgpu-nvclient: {e}", file=sys.stderr)
        return 1
    except (OSError, ValueError, RuntimeError) as e:
        print(f"vgpu-nvclient: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
