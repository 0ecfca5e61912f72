"""Exact framebuffer capacity: the whole FB can be allocated by every path
(in RM's pages), one byte more is NV_ERR_NO_MEMORY, freeing makes room
again, and the GPUs are independent."""

from __future__ import annotations

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmError

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


def _no_memory(fn, *a, **kw):
    with pytest.raises(RmError) as ei:
        fn(*a, **kw)
    assert ei.value.status == A.NV_ERR_NO_MEMORY, str(ei.value)


PATHS = [
    ("rm-alloc", {}),
    ("rm-alloc", {"form": "nvos21"}),
    ("alloc-memory", {}),
    ("vid-heap", {}),
    ("vid-heap", {"function": A.NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT}),
    ("vid-heap", {"function": A.NVOS32_FUNCTION_ALLOC_SIZE_RANGE}),
]
PATH_IDS = ["nvos64", "nvos21", "alloc-memory", "vidheap-2", "vidheap-6", "vidheap-14"]


@pytest.mark.parametrize("path,kw", PATHS, ids=PATH_IDS)
def test_whole_fb_in_one_allocation(gpu0, state, fb_size, path, kw):
    h = gpu0.alloc(fb_size, path, **kw)
    assert state().fb_used(0) == fb_size
    assert gpu0.client.surface_size(h) == fb_size
    for p, k in PATHS:
        _no_memory(gpu0.alloc, 1, p, **k)
    assert state().fb_used(0) == fb_size
    gpu0.free(h)
    assert state().fb_used(0) == 0
    h = gpu0.alloc(fb_size, path, **kw)            # room again
    assert state().fb_used(0) == fb_size


def test_fb_plus_one_byte_fails_without_side_effects(gpu0, state, fb_size):
    for p, k in PATHS:
        _no_memory(gpu0.alloc, fb_size + 1, p, **k)
    s = state()
    assert s.fb_used(0) == 0 and s.objects == 1 + 2 * len(gpu0.client.gpus)


def test_exact_fill_mixing_paths(gpu0, state, fb_size):
    """Fill the FB exactly with blocks from every path; then nothing more
    fits, through any path."""
    quarter = fb_size // 4
    gpu0.alloc(quarter, "rm-alloc")
    gpu0.alloc(quarter, "rm-alloc", form="nvos21")
    gpu0.alloc(quarter, "alloc-memory")
    gpu0.alloc(quarter // 2, "vid-heap")
    gpu0.alloc(quarter // 4, "vid-heap", function=A.NVOS32_FUNCTION_ALLOC_SIZE_RANGE)
    rest = fb_size - state().fb_used(0)
    assert rest == fb_size - 3 * quarter - quarter // 2 - quarter // 4
    h = gpu0.alloc(rest, "vid-heap", function=A.NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT)
    assert state().fb_used(0) == fb_size
    for p, k in PATHS:
        _no_memory(gpu0.alloc, 1, p, **k)
    gpu0.free(h)
    gpu0.alloc(rest, "alloc-memory")
    assert state().fb_used(0) == fb_size


def test_sizes_add_up_as_rm_rounds_them(gpu0, state, fb_size):
    """Every path's sizes are RM's page multiples (2 MiB from 2 MiB up, 64 KiB
    below: a byte takes 64 KiB; NVOS02's 0x40 is RM_ALLOC with a DEFAULT
    page size, _rmAllocMemoryLocalUser), so the last 2 MiB hold 32 of the
    small ones, then nothing."""
    gpu0.alloc(fb_size - 4 * MiB + 1, "alloc-memory")
    assert state().fb_used(0) == fb_size - 2 * MiB
    gpu0.alloc(1, "alloc-memory")
    gpu0.alloc(64 * KiB - 1, "rm-alloc")
    gpu0.alloc(1, "vid-heap")
    assert state().fb_used(0) == fb_size - 2 * MiB + 3 * 64 * KiB
    for i in range(29):
        path, kw = PATHS[i % len(PATHS)]
        gpu0.alloc(1 + i, path, **kw)
    assert state().fb_used(0) == fb_size
    _no_memory(gpu0.alloc, 1, "alloc-memory")


def test_gpus_are_independent(gpu0, gpu1, state, fb_size):
    gpu0.alloc(fb_size, "rm-alloc")
    _no_memory(gpu0.alloc, 1, "rm-alloc")
    h = gpu1.alloc(fb_size, "alloc-memory")       # GPU 1 still has all of its FB
    s = state()
    assert s.fb_used(0) == fb_size and s.fb_used(1) == fb_size
    _no_memory(gpu1.alloc, 1, "vid-heap")
    gpu1.free(h)
    assert state().fb_used(0) == fb_size and state().fb_used(1) == 0


def test_clients_share_the_fb(res, state, fb_size):
    a = res.client()
    b = res.client()
    ga, = a.open_gpus([0])
    gb, = b.open_gpus([0])
    ga.alloc(fb_size - 3 * GiB, "rm-alloc")
    gb.alloc(3 * GiB, "vid-heap")
    _no_memory(ga.alloc, 1, "rm-alloc")
    _no_memory(gb.alloc, 1, "alloc-memory")
    a.close()
    assert state().fb_used(0) == 3 * GiB
    gb.alloc(fb_size - 3 * GiB, "alloc-memory")
    assert state().fb_used(0) == fb_size


def test_sysmem_and_virtual_do_not_use_fb(gpu0, state, fb_size):
    gpu0.alloc(fb_size, "rm-alloc")
    # none of these take framebuffer, so all succeed on a full GPU
    gpu0.client.alloc_memory(gpu0.fd, gpu0.hDevice, 1 * MiB, hclass=A.NV01_MEMORY_SYSTEM)
    gpu0.alloc(MiB, "vid-heap", flags=A.NVOS32_ALLOC_FLAGS_VIRTUAL)
    gpu0.alloc(MiB, "vid-heap", attr=A.NVOS32_ATTR_LOCATION_PCI << A.NVOS32_ATTR_LOCATION_SHIFT)
    assert state().fb_used(0) == fb_size
