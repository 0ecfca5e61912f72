"""vgpu.daemon.records: the typed slice record, the state file's schema
(version 2) and the migration from version 1."""
import json
import logging

import pytest

from vgpu.daemon.config import SliceSpec
from vgpu.daemon.records import Effective, GpuSlot, RecordError, SliceRecord, State, from_doc
from vgpu.daemon.state import STATE_VERSION, StateStore

GiB = 1 << 30

#: a record as vgpud before the typed records wrote it (version 1)
V1 = {"version": 1, "next_id": 9, "slices": {
    "web": {"container": "web", "slice_id": 7, "explicit": {"memory": 4 * GiB, "policy": "fixed"},
            "profile": "small", "labels": {"tier": "gold"}, "cgroup": "/k8s/pod1", "pid": None,
            "created": 1700000000.5, "owner": {"bundle": "/b", "id": "x"},
            "gpus": [{"gpu": 0, "uuid": "GPU-0", "real_minor": 0, "gpu_id": 256, "memory": GiB}],
            "applied": {"memory": 4 * GiB, "compute": None, "priority": "low",
                        "policy": "fixed", "profile": "small"}},
    "op": {"container": "op", "slice_id": 8, "explicit": {}, "profile": None, "labels": {},
           "cgroup": None, "pid": 4242, "pid_start": 99, "created": 1.0, "gpus": [],
           "attached": "/k8s/pod2", "audit": True, "adopted": True}}}


def test_version_1_is_migrated_field_for_field():
    st = from_doc(json.loads(json.dumps(V1)))
    assert st.next_id == 9 and set(st.records) == {"web", "op"}
    web = st.records["web"]
    assert web == SliceRecord(
        container="web", slice_id=7, explicit=SliceSpec(policy="fixed"),
        profile="small", labels={"tier": "gold"}, cgroup="/k8s/pod1", created=1700000000.5,
        owner={"bundle": "/b", "id": "x"},
        gpus=[GpuSlot(gpu=0, uuid="GPU-0", real_minor=0, gpu_id=256)], memory={0: GiB},
        applied=Effective(SliceSpec(4 * GiB, None, "low", "fixed"), "small"))
    op = st.records["op"]
    assert (op.pid, op.pid_start, op.attached, op.audit, op.adopted) == \
        (4242, 99, "/k8s/pod2", True, True)


def test_saved_as_version_2_and_read_back_the_same(tmp_path):
    st = from_doc(json.loads(json.dumps(V1)))
    store = StateStore(tmp_path)
    store.save(st.to_doc())
    doc = json.loads((tmp_path / "state.json").read_text())
    assert doc["version"] == STATE_VERSION == 2
    assert "container" not in doc["slices"]["web"]          # the key is the container
    assert from_doc(store.load()) == st


@pytest.mark.parametrize("bad, why", [
    ({"slice_id": "7"}, "slice_id"),
    ({"slice_id": True}, "slice_id"),
    ({"slice_id": 7, "gpus": [{"uuid": "x"}]}, "gpus.gpu"),
    ({"slice_id": 7, "gpus": {}}, "gpus"),
    ({"slice_id": 7, "explicit": {"memory": "4GiB"}}, "explicit.memory"),
    ({"slice_id": 7, "explicit": {"compute": "10"}}, "explicit.compute"),
    ({"slice_id": 7, "labels": {"a": 1}}, "labels"),
    ({"slice_id": 7, "owner": "me"}, "owner"),
    ({"slice_id": 7, "audit": "yes"}, "audit"),
    ({"slice_id": 7, "applied": {"memory": 1, "profile": 3}}, "applied.profile"),
    ({"slice_id": 7, "surprise": 1}, "unknown key"),
])
def test_a_record_without_the_schema_is_refused_naming_the_field(bad, why):
    with pytest.raises(RecordError, match=why):
        SliceRecord.from_json("c", bad)


def test_a_bad_record_is_left_out_with_an_error_the_rest_kept(caplog):
    doc = {"version": 2, "next_id": 3, "slices": {"good": {"slice_id": 1},
                                                  "bad": {"slice_id": "one"}}}
    with caplog.at_level(logging.ERROR):
        st = from_doc(doc)
    assert set(st.records) == {"good"}
    assert any("'bad'" in r.message and "adopted" in r.message for r in caplog.records)


@pytest.mark.parametrize("nid", [0, -1, "5", True, None])
def test_a_bad_next_id_starts_from_one(nid):
    assert from_doc({"version": 2, "next_id": nid, "slices": {}}).next_id == 1


def test_limits_take_a_gpus_own_quota_over_the_effective_one():
    rec = SliceRecord("c", 1, gpus=[GpuSlot(0), GpuSlot(1)], memory={1: GiB})
    assert rec.limits(Effective(SliceSpec(memory=2 * GiB))) == {0: 2 * GiB, 1: GiB}


def test_changed_is_a_copy():
    rec = SliceRecord("c", 1, explicit=SliceSpec(compute=10.0))
    new = rec.changed(profile="p")
    assert rec.profile is None and new.profile == "p" and new.explicit == rec.explicit


def test_empty_document_is_an_empty_state():
    assert from_doc({}) == State()


@pytest.mark.parametrize("explicit, why", [
    ({"policy": "greedy"}, "explicit.policy"),
    ({"priority": "urgent"}, "explicit.priority"),
    ({"compute": 250}, "explicit.compute"),
    ({"memory": -1}, "explicit.memory"),
])
def test_quotas_in_the_file_go_through_the_apis_parsers(explicit, why):
    with pytest.raises(RecordError, match=why):
        SliceRecord.from_json("c", {"slice_id": 1, "explicit": explicit})
