"""Events through a slice: NV01_EVENT_OS_EVENT with its ALLOC_OS_EVENT key,
and the notifier client (hParentClient) held to the caller's own clients.

The driver looks a notifier client up among every client of the system
(event_api.c, eventapiInit), so without vgpu.ko's check a container could
hang an event on another slice's object; nvsim models that lookup
unchecked, so the refusal here is vgpu.ko's.
"""

from __future__ import annotations

import pytest

from vgpu.abi import nvabi as A
from vgpu_fixtures import status
# fixtures (vgpu_leak_check is autouse: vgpu.ko's leak check after every test)
from vgpu_fixtures import kern, make_slice, sl, vgpu_leak_check  # noqa: F401


def os_event(c, fd_key: int, nr: int = A.NV_ESC_ALLOC_OS_EVENT) -> int:
    p = A.nv_ioctl_alloc_os_event_t(hClient=c.hClient, hDevice=0, fd=fd_key)
    c.escape(nr, p)
    return p.Status


def event(c, parent: int, src: int, data: int, hclass=A.NV01_EVENT_OS_EVENT, parent_client=0) -> int:
    p = A.NV0005_ALLOC_PARAMETERS(hParentClient=parent_client, hSrcResource=src,
                                  hClass=hclass, notifyIndex=0, data=data)
    return c.alloc(parent, hclass, p)


def test_os_event_on_own_objects(sl):
    c = sl.client()
    g = c.gpu(0)
    key = 77
    assert os_event(c, key) == 0
    h = event(c, g.hSubdevice, g.hSubdevice, key)
    c.free(h)
    h = event(c, c.hClient, c.hClient, key)          # on the client itself
    c.free(h)
    # A key this client never registered: the driver's answer.
    assert status(lambda: event(c, g.hSubdevice, g.hSubdevice, key + 1)) == A.NV_ERR_OBJECT_NOT_FOUND
    # The generic class is refused by the driver itself (eventapiInit).
    assert status(lambda: event(c, g.hSubdevice, g.hSubdevice, 0, hclass=A.NV01_EVENT)) \
        == A.NV_ERR_INVALID_CLASS
    assert os_event(c, key, A.NV_ESC_FREE_OS_EVENT) == 0


def test_notifier_must_be_a_client_of_the_callers_file(make_slice):
    a = make_slice()
    b = make_slice()
    ca, ca2, cb = a.client(), a.client(), b.client()
    assert os_event(ca, 5) == 0
    ga = ca.gpu(0)
    gb = cb.gpu(0)
    # Another slice's client and object: refused before the driver.
    assert status(lambda: event(ca, ga.hSubdevice, gb.hSubdevice, 5, parent_client=cb.hClient)) \
        == A.NV_ERR_INVALID_CLIENT
    # A second client of the same slice but another file: also refused.
    g2 = ca2.gpu(0)
    assert status(lambda: event(ca, ga.hSubdevice, g2.hSubdevice, 5, parent_client=ca2.hClient)) \
        == A.NV_ERR_INVALID_CLIENT
    # The caller's own client named explicitly is the default.
    h = event(ca, ga.hSubdevice, ga.hSubdevice, 5, parent_client=ca.hClient)
    ca.free(h)


def test_event_params_are_required(sl):
    c = sl.client()
    g = c.gpu(0)
    assert status(lambda: c.alloc(g.hSubdevice, A.NV01_EVENT_OS_EVENT, None)) != 0
