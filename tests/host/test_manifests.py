"""The Kubernetes manifests (deploy/kubernetes): each object against the
API's own schema (kubernetes-validate, strict: no unknown fields), and the
facts they share with the code: the config vgpud parses, the resource
names the device plugin advertises, the node selector the RuntimeClass and
the DaemonSet agree on, the paths the daemon uses, and commands the
example's image has."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

import kustomize_subset
from vgpu.daemon.config import parse_config
from vgpu.k8s.devices import RESOURCES

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "kubernetes"
#: the oldest Kubernetes release whose schema the manifests must pass
#: (RuntimeClass node.k8s.io/v1 and sidecar-era fields are older than it)
K8S_VERSIONS = ("1.30", "1.37")


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def by_kind(kind: str) -> list[dict]:
    return [d for name in FILES for d in docs(name) if d["kind"] == kind]


FILES = ("example-pod.yaml", "runtimeclass.yaml", "vgpud.yaml")


def test_every_file_is_here():
    assert tuple(sorted(p.name for p in DEPLOY.glob("*.yaml"))) == tuple(sorted(
        FILES + ("kustomization.yaml",)))


def test_the_kustomization_is_the_daemonset_and_its_runtime_class():
    """kubectl apply -k deploy/kubernetes: vgpud.yaml and runtimeclass.yaml
    as they are (deploy/dra builds on it)."""
    assert kustomize_subset.build(DEPLOY) == docs("vgpud.yaml") + docs("runtimeclass.yaml")


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", FILES)
def test_schema(name, version):
    for d in docs(name):
        kubernetes_validate.validate(d, version, strict=True)


def test_schema_check_can_fail():
    """The check above refuses what the API server would."""
    (ds,) = by_kind("DaemonSet")
    ds["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSIONS[0], strict=True)


def test_config_map_is_a_config_vgpud_takes():
    (cm,) = by_kind("ConfigMap")
    cfg = parse_config(cm["data"]["vgpud.toml"], "vgpud-config")
    (ds,) = by_kind("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    # every path vgpud uses is a volume of the pod
    for path in (Path(cfg.paths.socket).parent, Path(cfg.paths.fuse_mount).parent.parent,
                 Path(cfg.paths.state_dir)):
        assert str(path) in mounts, path
    # the FUSE mount leaves the pod for the hook on the host to find
    assert mounts[str(Path(cfg.paths.fuse_mount).parent.parent)]["mountPropagation"] == \
        "Bidirectional"
    assert cfg.kubernetes.device_plugin
    assert str(cfg.kubernetes.kubelet_dir) in mounts
    assert pod["hostNetwork"] and pod["hostPID"]
    assert pod["containers"][0]["securityContext"]["privileged"]
    assert mounts["/etc/vgpu"]["readOnly"]


def test_runtime_class_and_daemonset_select_the_same_nodes():
    """And tolerate the same taints: a pod of the class can be scheduled
    wherever vgpud runs (the RuntimeClass's tolerations join the pod's)."""
    (rc,) = by_kind("RuntimeClass")
    (ds,) = by_kind("DaemonSet")
    assert rc["handler"] == "vgpu"
    assert rc["scheduling"]["nodeSelector"] == ds["spec"]["template"]["spec"]["nodeSelector"]
    assert rc["scheduling"]["tolerations"] == ds["spec"]["template"]["spec"]["tolerations"]


def test_metrics_stay_on_the_nodes_loopback():
    """Under hostNetwork the metrics port is the node's, and the metrics
    name every tenant's pods: the DaemonSet's vgpud serves them on loopback
    only."""
    (cm,) = by_kind("ConfigMap")
    cfg = parse_config(cm["data"]["vgpud.toml"], "vgpud-config")
    host = cfg.metrics_listen.rpartition(":")[0].strip("[]")
    assert ipaddress.ip_address(host).is_loopback, cfg.metrics_listen


def test_the_namespace_admits_vgpud_by_its_own_label():
    """vgpud is privileged, with the host's network and PIDs: only Pod
    Security's "privileged" level admits it; the namespace says so itself
    rather than relying on the cluster's default."""
    (ns,) = by_kind("Namespace")
    (ds,) = by_kind("DaemonSet")
    assert ds["metadata"]["namespace"] == ns["metadata"]["name"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_example_asks_for_what_the_plugin_advertises():
    names = set(RESOURCES)
    pods = docs("example-pod.yaml")
    asked = set()
    for p in pods:
        assert p["spec"]["runtimeClassName"] == "vgpu"
        for c in p["spec"]["containers"]:
            asked |= set(c.get("resources", {}).get("limits", {}))
    assert asked and asked <= names


@pytest.mark.skipif(not shutil.which("busybox"), reason="no busybox on this machine")
def test_example_commands_exist_in_its_image():
    """The example runs busybox: every command its shell lines start exists
    as a busybox applet (the busybox here stands in for the image's)."""
    applets = set(subprocess.run(["busybox", "--list"], capture_output=True, text=True,
                                 check=True).stdout.split())
    for p in docs("example-pod.yaml"):
        for c in p["spec"].get("initContainers", []) + p["spec"]["containers"]:
            assert c["image"].startswith("docker.io/library/busybox:")
            argv = c["command"]
            assert argv[0] in applets
            if argv[:2] == ["sh", "-c"]:
                for part in argv[2].split(";"):
                    assert part.split()[0] in applets, part
