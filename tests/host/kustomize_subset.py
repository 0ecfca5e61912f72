"""`kustomize build` for the kustomizations of deploy/ (test support): no
kustomize or kubectl exists on these machines, so this reads exactly the
parts of the format those files use, as kustomize defines them, and
refuses everything else (a file that starts using more fails its test
here rather than building differently on a cluster):

- ``resources``: YAML files, or directories with a kustomization of their
  own (kustomize's load restrictor refuses a file outside the
  kustomization's directory: so does this);
- ``generatorOptions.disableNameSuffixHash: true`` (required: no hashes
  are computed) and ``configMapGenerator`` with ``behavior: replace`` of a
  ConfigMap the resources have, from ``files`` (the key is the file's name);
- ``patches`` with a ``target`` of kind and name, whose ``patch`` is
  either an RFC 6902 JSON patch (a YAML list: ``add``, ``replace``,
  ``remove``; ``-`` appends) or a strategic-merge ``$patch: delete`` of the
  target.
"""
from __future__ import annotations

import copy
from pathlib import Path

import yaml

KNOWN = {"apiVersion", "kind", "resources", "generatorOptions", "configMapGenerator", "patches"}


class Unsupported(ValueError):
    pass


def build(directory: Path) -> list[dict]:
    directory = Path(directory).resolve()
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    if (k.get("apiVersion"), k.get("kind")) != ("kustomize.config.k8s.io/v1beta1",
                                                 "Kustomization"):
        raise Unsupported(f"{directory}: not a Kustomization")
    if set(k) - KNOWN:
        raise Unsupported(f"{directory}: {sorted(set(k) - KNOWN)} not read here")
    objs: list[dict] = []
    for r in k.get("resources") or []:
        p = (directory / r).resolve()
        if p.is_dir():
            objs += build(p)
        elif p.parent != directory and directory not in p.parents:
            raise Unsupported(f"{r}: a file outside {directory} (kustomize refuses it)")
        else:
            objs += [d for d in yaml.safe_load_all(p.read_text()) if d]
    gens = k.get("configMapGenerator") or []
    if gens and (k.get("generatorOptions") or {}) != {"disableNameSuffixHash": True}:
        raise Unsupported("generators need generatorOptions.disableNameSuffixHash: true here")
    for g in gens:
        if g.get("behavior") != "replace" or set(g) - {"name", "namespace", "behavior", "files"}:
            raise Unsupported(f"configMapGenerator {g.get('name')}: only behavior replace "
                              f"from files is read here")
        (cm,) = [o for o in objs if o["kind"] == "ConfigMap"
                 and o["metadata"]["name"] == g["name"]
                 and o["metadata"].get("namespace") == g.get("namespace")]
        cm["data"] = {Path(f).name: (directory / f).read_text() for f in g["files"]}
    for p in k.get("patches") or []:
        t = p["target"]
        if set(t) - {"kind", "name"} or set(p) - {"target", "patch"}:
            raise Unsupported(f"patch {p}: only a target by kind and name, inline")
        hits = [o for o in objs if o["kind"] == t["kind"] and o["metadata"]["name"] == t["name"]]
        if len(hits) != 1:
            raise Unsupported(f"patch target {t}: {len(hits)} objects")
        body = yaml.safe_load(p["patch"])
        if isinstance(body, list):
            i = objs.index(hits[0])
            objs[i] = json_patch(hits[0], body)
        elif isinstance(body, dict) and body.get("$patch") == "delete":
            objs.remove(hits[0])
        else:
            raise Unsupported(f"patch {t}: only JSON patches and $patch: delete")
    return objs


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise Unsupported(f"{path!r} is not a JSON pointer")
    return [s.replace("~1", "/").replace("~0", "~") for s in path[1:].split("/")]


def json_patch(doc: dict, ops: list[dict]) -> dict:
    """RFC 6902's add, replace and remove; a path that does not resolve
    is an error, as it is to kustomize."""
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = _pointer(op["path"])
        node = doc
        for s in parents:
            node = node[int(s)] if isinstance(node, list) else node[s]
        kind = op["op"]
        if isinstance(node, list):
            if kind == "add":
                idx = len(node) if last == "-" else int(last)
                if not 0 <= idx <= len(node):
                    raise IndexError(op["path"])
                node.insert(idx, copy.deepcopy(op["value"]))
            elif kind == "replace":
                node[int(last)] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del node[int(last)]
            else:
                raise Unsupported(kind)
        else:
            if kind == "add":
                node[last] = copy.deepcopy(op["value"])
            elif kind == "replace":
                if last not in node:
                    raise KeyError(op["path"])
                node[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del node[last]
            else:
                raise Unsupported(kind)
    return doc
