"""The DRA kubelet plugin's wire (vgpu/k8s/dra_v1.proto, dra_v1beta1.proto,
pluginregistration_v1.proto) against the kubelet's own definitions,
vendored as test input (tests/data/kubelet/dra, .../pluginregistration):
services, methods, messages, field numbers and types."""

from __future__ import annotations

from pathlib import Path

import pytest

from proto_support import compile_fds, shape

REPO = Path(__file__).resolve().parents[2]
OURS = REPO / "vgpu" / "k8s"
THEIRS = REPO / "tests" / "data" / "kubelet"


@pytest.mark.parametrize("ours,theirs", [
    ("dra_v1.proto", "dra/v1/api.proto"),
    ("dra_v1beta1.proto", "dra/v1beta1/api.proto"),
    ("pluginregistration_v1.proto", "pluginregistration/v1/api.proto"),
])
def test_our_protos_describe_the_kubelets(tmp_path, ours, theirs):
    a = compile_fds(OURS / ours, tmp_path)
    b = compile_fds(THEIRS / theirs, tmp_path, drop_gogo=True)
    sa, sb = shape(a), shape(b)
    assert sa["package"] == sb["package"]
    assert sa["services"] == sb["services"]
    for name in sb["messages"]:
        assert sa["messages"].get(name) == sb["messages"][name], name
    assert sa == sb
    # ours imports nothing and sets no option
    assert not a.dependency and not a.options.ListFields()


def test_the_two_dra_versions_of_ours_say_the_same(tmp_path):
    v1, v1beta1 = (shape(compile_fds(OURS / f, tmp_path))
                   for f in ("dra_v1.proto", "dra_v1beta1.proto"))
    assert (v1.pop("package"), v1beta1.pop("package")) == (
        "k8s.io.kubelet.pkg.apis.dra.v1", "k8s.io.kubelet.pkg.apis.dra.v1beta1")

    def unpackage(x):
        return repr(x).replace(".k8s.io.kubelet.pkg.apis.dra.v1beta1.", ".P.").replace(
            ".k8s.io.kubelet.pkg.apis.dra.v1.", ".P.")
    assert unpackage(v1) == unpackage(v1beta1)


def test_the_comparison_sees_a_changed_field(tmp_path):
    text = (OURS / "dra_v1.proto").read_text().replace("string device_name = 3;",
                                                       "string device_name = 5;")
    changed = tmp_path / "dra_v1.proto"
    changed.write_text(text)
    assert shape(compile_fds(changed, tmp_path)) != \
        shape(compile_fds(THEIRS / "dra/v1/api.proto", tmp_path, drop_gogo=True))
