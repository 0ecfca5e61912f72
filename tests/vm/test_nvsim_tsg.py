"""Channel groups, channels and the usermode region (nv-abi.md "Classes",
"Scheduling controls", "Compute")."""

from __future__ import annotations

import struct

import pytest

from vgpu.abi import nvabi as A
from vgpu.abi.nvclient import RmError
from polling import wait_until


@pytest.fixture
def tsg(client, gpu0):
    return client.alloc_tsg(gpu0.hDevice)


def test_tsg_appears_in_state_with_defaults(client, tsg, state):
    t = state().tsg(client.hClient, tsg)
    assert t is not None, state().text
    assert t["gpu"] == 0
    assert t["timeslice_us"] == 1024          # the driver's default


def test_tsg_timeslice_set_get(client, tsg, state):
    client.tsg_set_timeslice(tsg, 5000)
    assert client.tsg_get_timeslice(tsg) == 5000
    assert state().tsg(client.hClient, tsg)["timeslice_us"] == 5000
    client.tsg_set_timeslice(tsg, 1)
    assert client.tsg_get_timeslice(tsg) == 1


def test_tsg_timeslice_zero_becomes_one(client, tsg):
    client.tsg_set_timeslice(tsg, 0)
    assert client.tsg_get_timeslice(tsg) == 1


def test_tsg_schedule_enable_disable(client, gpu0, tsg, state):
    client.alloc_channel(tsg)
    client.tsg_schedule(tsg, True)
    assert state().tsg(client.hClient, tsg)["enabled"] == 1
    client.tsg_schedule(tsg, False)
    assert state().tsg(client.hClient, tsg)["enabled"] == 0
    client.tsg_preempt(tsg)
    client.tsg_schedule(tsg, True)
    assert state().tsg(client.hClient, tsg)["enabled"] == 1


@pytest.mark.parametrize("level", [A.NVA06C_CTRL_INTERLEAVE_LEVEL_LOW,
                                   A.NVA06C_CTRL_INTERLEAVE_LEVEL_MEDIUM,
                                   A.NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH])
def test_tsg_interleave_set_get(client, tsg, state, level):
    client.tsg_set_interleave(tsg, level)
    assert client.tsg_get_interleave(tsg) == level
    assert state().tsg(client.hClient, tsg)["interleave"] == level


@pytest.mark.parametrize("level", [3, 0xFFFFFFFF])
def test_tsg_interleave_out_of_range(client, tsg, level):
    before = client.tsg_get_interleave(tsg)
    with pytest.raises(RmError) as ei:
        client.tsg_set_interleave(tsg, level)
    assert ei.value.status == A.NV_ERR_INVALID_ARGUMENT
    assert client.tsg_get_interleave(tsg) == before


def test_tsg_get_info_matches_state(client, tsg, state):
    tid = client.tsg_get_info(tsg)
    assert state().tsg(client.hClient, tsg)["id"] == tid


def test_tsg_ids_unique_per_gpu(client, gpu0, gpu1):
    ids0 = {client.tsg_get_info(client.alloc_tsg(gpu0.hDevice)) for _ in range(4)}
    assert len(ids0) == 4
    t1 = client.alloc_tsg(gpu1.hDevice)
    assert client.tsg_get_info(t1) >= 0


def test_tsg_controls_on_wrong_object(client, gpu0):
    with pytest.raises(RmError):
        client.tsg_set_timeslice(gpu0.hSubdevice, 100)
    with pytest.raises(RmError):
        client.tsg_get_info(gpu0.hDevice)


def test_tsg_controls_wrong_params_size(client, tsg):
    with pytest.raises(RmError) as ei:
        client.control(tsg, A.NVA06C_CTRL_CMD_SET_TIMESLICE, bytes(4))
    assert ei.value.status == A.NV_ERR_INVALID_PARAM_STRUCT


def test_tsg_controls_from_another_client_are_refused(res, client, tsg):
    """The controls must come from the owning client on its own file."""
    other = res.client()
    p = A.NVA06C_CTRL_TIMESLICE_PARAMS(timesliceUs=7)
    with pytest.raises(RmError) as ei:
        other.control(tsg, A.NVA06C_CTRL_CMD_SET_TIMESLICE, p, client=client.hClient)
    assert ei.value.status == A.NV_ERR_INVALID_CLIENT
    assert client.tsg_get_timeslice(tsg) == 1024


@pytest.mark.parametrize("hclass", [A.VOLTA_CHANNEL_GPFIFO_A, A.AMPERE_CHANNEL_GPFIFO_A,
                                    A.HOPPER_CHANNEL_GPFIFO_A])
def test_channel_under_tsg(client, tsg, hclass, state):
    ch = client.alloc_channel(tsg, hclass)
    assert ch
    tok = client.work_submit_token(ch)
    assert client.work_submit_token(ch) == tok       # stable per channel
    assert len(state().tsgs) == 1


def test_channel_under_device_makes_hidden_tsg(client, gpu0, state):
    ch = client.alloc_channel(gpu0.hDevice)
    s = state()
    hidden = [t for t in s.tsgs if t["client"] == client.hClient and t["handle"] == 0]
    assert len(hidden) == 1
    client.free(ch)
    assert not [t for t in state().tsgs if t["client"] == client.hClient]


def test_work_submit_token_format(client, tsg):
    chans = [client.alloc_channel(tsg) for _ in range(3)]
    toks = [client.work_submit_token(c) for c in chans]
    assert len(set(toks)) == 3
    assert len({t >> 16 for t in toks}) == 1           # one runlist
    assert len({t & 0xFFFF for t in toks}) == 3        # distinct channel ids


def test_work_submit_token_on_tsg_is_refused(client, tsg):
    with pytest.raises(RmError):
        client.work_submit_token(tsg)


def test_free_tsg_frees_its_channels(client, tsg, state):
    for _ in range(2):
        client.alloc_channel(tsg)
    objs = state().objects
    client.free(tsg)
    s = state()
    assert s.objects == objs - 3 and not s.tsgs


def test_channel_schedule_of_a_channel_with_hidden_tsg(client, gpu0, state):
    """A channel allocated under the device schedules its own (hidden) TSG."""
    ch = client.alloc_channel(gpu0.hDevice)

    def hidden():
        return [t for t in state().tsgs if t["client"] == client.hClient and t["handle"] == 0][0]
    assert hidden()["enabled"] == 0
    client.channel_schedule(ch, True)
    assert hidden()["enabled"] == 1
    client.channel_schedule(ch, False)
    assert hidden()["enabled"] == 0


def test_unknown_channel_class(client, tsg):
    with pytest.raises(RmError) as ei:
        client.alloc(tsg, 0xC06E, A.NV_CHANNEL_ALLOC_PARAMS())
    assert ei.value.status == A.NV_ERR_INVALID_CLASS


def test_usermode_map_and_doorbell(client, gpu0, tsg, state):
    ch = client.alloc_channel(tsg)
    token = client.work_submit_token(ch)
    h, m = gpu0.usermode()
    try:
        assert state().mappings == 2               # context + mmap
        t0 = struct.unpack_from("<II", m.mm, A.NVC361_TIME_0)
        assert t0 != (0, 0)                        # the timer holds a time
        assert token != 0                          # 0 is the doorbell's "no ring"
        # the engine polls the doorbell and clears it (engine.c)
        struct.pack_into("<I", m.mm, A.NVC361_NOTIFY_CHANNEL_PENDING, token)
        assert wait_until(lambda: struct.unpack_from(
            "<I", m.mm, A.NVC361_NOTIFY_CHANNEL_PENDING)[0] == 0, 5.0, 0.01)
        # one region per GPU: a second mapping sees the first one's writes
        struct.pack_into("<I", m.mm, 0x1000, 0x5a5a1234)
        with gpu0.map(h, A.NVC361_USERMODE_REGION_SIZE, hdevice=gpu0.hSubdevice) as m2:
            assert struct.unpack_from("<I", m2.mm, 0x1000)[0] == 0x5a5a1234
            struct.pack_into("<I", m2.mm, 0x1000, 0)
    finally:
        m.close()
    client.free(h)
    assert state().mappings == 0


def test_usermode_wrong_length(client, gpu0):
    import mmap
    h = client.alloc_usermode(gpu0.hSubdevice)
    fd = client.open_node(gpu0.node)
    client.map_memory(gpu0.hSubdevice, h, A.NVC361_USERMODE_REGION_SIZE, fd)
    with pytest.raises(OSError):
        mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)


def test_usermode_needs_subdevice_parent(client, gpu0):
    with pytest.raises(RmError):
        client.alloc_usermode(client.hClient)


@pytest.mark.parametrize("hclass", [A.VOLTA_USERMODE_A, A.AMPERE_USERMODE_A, A.HOPPER_USERMODE_A])
def test_usermode_classes(client, gpu0, hclass):
    h = client.alloc_usermode(gpu0.hSubdevice, hclass)
    client.free(h)
