"""Admission of a create or a quota change (vgpu.daemon.slices, through the
API): a GPU's capacity and placement (spread), fixed percentages past 100%,
a quota on a GPU left overcommitted when oversubscription was turned off,
and a profile's limits (max_memory, max_compute, allow_priorities,
allow_image_env).  Against daemon_support's FakeKernel (``env``).
"""

from __future__ import annotations

from vgpu.daemon.config import parse_config

from daemon_support import CONFIG, call


async def test_admission_and_placement(env):
    mgr, k, _ = env
    assert (await call(mgr, "create", container="big", memory="17GiB"))["error"]["code"] == "admission"
    a = (await call(mgr, "create", container="a", memory="10GiB"))["result"]["slice"]
    b = (await call(mgr, "create", container="b", memory="10GiB"))["result"]["slice"]
    assert {a["gpus"][0]["gpu"], b["gpus"][0]["gpu"]} == {0, 1}            # spread
    r = await call(mgr, "create", container="c", memory="8GiB")
    assert r["error"]["code"] == "admission", r
    r = await call(mgr, "set-quota", container="a", memory="17GiB")
    assert r["error"]["code"] == "admission"
    assert (await call(mgr, "set-quota", container="a", memory="16GiB"))["ok"]
    assert (await call(mgr, "create", container="g", gpus=[5]))["error"]["code"] == "not-found"
    f1 = await call(mgr, "create", container="f1", gpus=[0], memory=0, profile="fixed50")
    assert f1["ok"], f1
    f2 = await call(mgr, "create", container="f2", gpus=[0], memory=0, profile="fixed50")
    assert f2["ok"], f2
    f3 = await call(mgr, "create", container="f3", gpus=[0], memory=0, profile="fixed50")
    assert f3["error"]["code"] == "admission" and "100" in f3["error"]["message"] or "50" in f3["error"]["message"]


async def test_set_quota_may_keep_or_shrink_on_an_overcommitted_gpu(env, tmp_path):
    """Slices admitted while oversubscription was on may still shrink (or
    keep their quota) after it is turned off; growing is refused."""
    mgr, k, _ = env
    strict = mgr.cfg
    mgr.cfg = parse_config(CONFIG.format(tmp=tmp_path) + "[node]\noversubscribe_memory = true\n",
                           "test.toml")
    assert (await call(mgr, "create", container="a", gpus=[0], memory="12GiB"))["ok"]
    assert (await call(mgr, "create", container="b", gpus=[0], memory="12GiB"))["ok"]
    mgr.cfg = strict
    r = await call(mgr, "set-quota", container="b", memory="12GiB")
    assert r["ok"], r
    r = await call(mgr, "set-quota", container="b", memory="10GiB")
    assert r["ok"], r
    r = await call(mgr, "set-quota", container="b", memory="11GiB")
    assert r["error"]["code"] == "admission", r


LIMITS = """
[profiles.small]
memory = "4GiB"
compute = "25%"
max_memory = "8GiB"
max_compute = "50%"
allow_priorities = ["low"]
allow_image_env = true
[profiles.fixed50]
memory = "2GiB"
compute = "50%"
policy = "fixed"
"""


async def test_create_is_held_to_its_profiles_limits(env, tmp_path):
    mgr, k, _ = env
    mgr.cfg = parse_config(CONFIG.format(tmp=tmp_path).split("[profiles.small]")[0] + LIMITS,
                           "test.toml")
    for args, words in ((dict(memory="12GiB"), 'memory 12 GiB exceeds profile "small"\'s '
                                               'max_memory 8 GiB'),
                        (dict(compute="80%"), 'compute 80% exceeds profile "small"\'s '
                                              'max_compute 50%'),
                        (dict(priority="high"), 'priority "high" is not allowed by profile '
                                                '"small" (allow_priorities: low)')):
        r = await call(mgr, "create", container="x", profile="small", **args)
        assert r["error"]["code"] == "admission" and words in r["error"]["message"], r
    assert "x" not in mgr.records and k.slices_ == {}
    r = await call(mgr, "create", container="ok", profile="small", memory="8GiB")
    assert r["ok"], r
    # a request from the image's environment needs a profile that allows it
    r = await call(mgr, "create", container="img", profile="fixed50", from_image=True)
    assert r["error"]["code"] == "admission" and "allow_image_env" in r["error"]["message"], r
    r = await call(mgr, "create", container="img", from_image=True)
    assert r["error"]["code"] == "admission" and "none was named" in r["error"]["message"], r
    r = await call(mgr, "create", container="img", profile="small", from_image=True)
    assert r["ok"], r
    st = await call(mgr, "status")
    assert st["result"]["image_env_profiles"] == ["small"]
    # without limits (and without a profile) a request is held to capacity only
    assert (await call(mgr, "create", container="free", memory="12GiB"))["ok"]


K8S = """
[profiles.batch]
priority = "low"
policy = "share"
[profiles.greedy]
compute = "90%"
[kubernetes]
device_plugin = true
[kubernetes.namespace_profiles]
team-a = ["batch", "greedy"]
"*" = ["small"]
"""
POD = {"io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "team-a",
       "io.kubernetes.container.name": "main"}
ALLOCATED = {**POD, "vgpu.io/allocated-by": "device-plugin"}


async def test_a_kubernetes_container_takes_quotas_only_from_its_allocation(env, tmp_path):
    """[kubernetes] pod_requests = "allocated" (the default where vgpud runs
    the device plugin): a Kubernetes container's slice comes from the
    kubelet's allocation; a pod's annotations only name a profile its
    namespace may use, which sets no memory or compute the allocation left
    unset (Config.admit_pod).  Each refusal leaves nothing behind."""
    mgr, k, _ = env
    mgr.cfg = parse_config(CONFIG.format(tmp=tmp_path) + K8S, "test.toml")
    refused = [
        # a pod's own vgpu.io/memory, no allocation: the kubelet counts nothing
        (dict(memory="4GiB", labels=POD),
         "pod team-a/web: on this node a Kubernetes container's GPU memory and compute come "
         "only from what the kubelet allocated"),
        # an image's VGPU_* in a pod, through a profile that allows it: the same
        (dict(memory="1GiB", profile="small", from_image=True, labels=POD),
         "come only from what the kubelet allocated"),
        # a profile the namespace may not name
        (dict(memory="2GiB", profile="fixed50", labels=ALLOCATED),
         'pod team-a/web: profile "fixed50" is not allowed in namespace "team-a" '
         '([kubernetes.namespace_profiles] allows it: batch, greedy, small)'),
        # an allowed profile that would add compute the kubelet did not count
        (dict(memory="2GiB", profile="greedy", labels=ALLOCATED),
         'profile "greedy" sets compute 90%, but the kubelet allocated this container no '
         'vgpu.io/compute-percent'),
        # ... or memory
        (dict(compute="20%", profile="small", labels=ALLOCATED),
         'profile "small" sets memory 4 GiB, but the kubelet allocated this container no '
         'vgpu.io/memory-gib'),
    ]
    for args, words in refused:
        r = await call(mgr, "create", container="x", **args)
        assert r["error"]["code"] == "admission" and words in r["error"]["message"], (args, r)
        assert "x" not in mgr.records and k.slices_ == {}
    # other namespaces: "*"'s profiles only
    r = await call(mgr, "create", container="x", memory="2GiB", profile="batch",
                   labels={**ALLOCATED, "io.kubernetes.pod.namespace": "team-b"})
    assert 'profile "batch" is not allowed in namespace "team-b"' in r["error"]["message"]

    # the allocation with an allowed profile: the allocation's quotas, the
    # profile's priority
    r = await call(mgr, "create", container="a", memory="2GiB", compute="20%",
                   profile="greedy", labels=ALLOCATED)
    assert r["ok"], r
    v = r["result"]["slice"]
    assert (v["gpus"][0]["memory_limit"], v["compute"]["percent"]) == (2 << 30, 20.0), v
    r = await call(mgr, "create", container="b", memory="1GiB", profile="batch", labels=ALLOCATED)
    assert r["ok"] and r["result"]["slice"]["compute"]["priority"] == "low", r
    # no profile, or the plugin's own ([kubernetes] profile), as allocated
    assert (await call(mgr, "create", container="c", memory="1GiB", labels=ALLOCATED))["ok"]
    # outside Kubernetes (no pod namespace label: vgpuctl create, ctr): not held to it
    assert (await call(mgr, "create", container="d", memory="1GiB", profile="fixed50"))["ok"]


async def test_pod_requests_any_keeps_pod_annotations(env, tmp_path):
    """pod_requests = "any" (the default without the device plugin): a pod's
    own request makes a slice, as before (the plugin, where one runs
    elsewhere, withdraws its capacity)."""
    mgr, k, _ = env
    mgr.cfg = parse_config(CONFIG.format(tmp=tmp_path), "test.toml")
    r = await call(mgr, "create", container="p", memory="4GiB", profile="fixed50", labels=POD)
    assert r["ok"], r
    mgr.cfg = parse_config(CONFIG.format(tmp=tmp_path) +
                           '[kubernetes]\ndevice_plugin = true\npod_requests = "any"\n',
                           "test.toml")
    assert (await call(mgr, "create", container="q", memory="1GiB", labels=POD))["ok"]
