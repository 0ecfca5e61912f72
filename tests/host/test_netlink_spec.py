"""vgpu.ko's netlink family is described once, in kmod/netlink/vgpu.yaml:
tools/ynl_gen.py generates the uapi header, netlink-gen.[ch] (policies, ops
table, multicast groups) and the Python tables from it.

Here: the committed outputs are what the spec generates now; the request
policies are strict (every attribute refused or typed, every integer and
string a request may carry bounded, or its spec says why every value is
meaningful); netlink.c defines no policy or ops table of its own; the
spec's request attributes per command are the ones its handlers read.
"""

from __future__ import annotations

import copy
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tools import ynl_gen as G

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fam():
    return G.load()


def test_committed_outputs_are_generated_from_the_spec(fam):
    stale = [rel for rel, text in G.render_all(fam).items()
             if not (ROOT / rel).exists() or (ROOT / rel).read_text() != text]
    assert not stale, f"out of date with {G.SPEC_REL} (run make generate): {stale}"


def test_generator_check_mode_agrees(tmp_path):
    """`ynl_gen.py --check` (what a CI or a pre-commit runs) passes on the tree
    and fails on a tree where one output was edited by hand."""
    r = subprocess.run([sys.executable, "tools/ynl_gen.py", "--check"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert G.main(["--out", str(tmp_path)]) == 0
    p = tmp_path / G.OUT_GEN_C
    p.write_text(p.read_text().replace("NLA_POLICY_MIN(NLA_U32, 1)", "{ .type = NLA_U32 }"))
    assert G.main(["--out", str(tmp_path), "--check"]) == 1


def test_every_output_says_it_is_generated(fam):
    for rel, text in G.render_all(fam).items():
        assert G.GENERATED in "\n".join(text.split("\n")[:3]), rel


def test_policies_are_strict(fam):
    assert G.strictness_problems(fam) == []
    policied = {s.policy: s for s in fam.sets.values() if s.policy}
    assert set(policied) == {"vgpu_policy", "vgpu_list_policy", "vgpu_allow_policy",
                             "vgpu_gpu_policy"}
    for s in policied.values():
        full = fam.sets[s.subset_of] if s.subset_of else s
        assert [a.name for a in s.attrs] == [a.name for a in full.attrs], s.policy
        for a in s.attrs[1:]:
            entry = G._policy_entry(fam, a)
            if a.rejected:
                assert entry.startswith("{ .type = NLA_REJECT"), (s.policy, a.cname)
                # an attribute a client sends by mistake is named by the extack
                if a.type != "pad":
                    assert a.reject, (s.policy, a.cname)
            elif a.type in G.INT_TYPES and not a.unbounded:
                assert re.match(r"NLA_POLICY_(MIN|MAX|RANGE|FULL_RANGE|MASK)\(", entry), entry
            elif a.type == "string":
                assert ".len = " in entry, entry


def _lax(raw: dict, setname: str, attr: str, **change) -> dict:
    raw = copy.deepcopy(raw)
    s = next(x for x in raw["attribute-sets"] if x["name"] == setname)
    a = next(x for x in s["attributes"] if x["name"] == attr)
    for k, v in change.items():
        if v is None:
            a.pop(k, None)
        else:
            a[k] = v
    return raw


@pytest.mark.parametrize("setname,attr,change,needle", [
    ("slice", "slice-id", {"checks": None}, "u32 accepted without bounds"),
    ("slice", "slice-name", {"checks": None}, "string accepted without checks: max-len"),
    ("gpu", "mem-limit", {"unbounded": None}, "u64 accepted without bounds"),
    ("gpu", "mem-used", {"reply-only": None}, "u64 accepted without bounds"),
    ("allow", "gpu", {"reject": None}, "nested-attributes naming a set with a policy"),
])
def test_strictness_check_refuses_a_lax_spec(tmp_path, setname, attr, change, needle):
    """The check is not vacuous: a spec that leaves an attribute unbounded,
    or accepts a reply-only one, is refused by the generator."""
    import yaml
    raw = _lax(yaml.safe_load(G.SPEC.read_text()), setname, attr, **change)
    if setname == "allow" and "reject" in change:
        # a subset entry keeps the parent's type: accepting the GPU nest here
        # needs its nested set to carry a policy, which allow's own does not
        s = next(x for x in raw["attribute-sets"] if x["name"] == "allow")
        next(x for x in s["attributes"] if x["name"] == "gpu")["nested-attributes"] = "audit"
    p = tmp_path / "vgpu.yaml"
    p.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(G.SpecError, match=re.escape(needle)):
        G.load(p)


def test_a_subset_must_name_every_attribute(tmp_path):
    import yaml
    raw = yaml.safe_load(G.SPEC.read_text())
    s = next(x for x in raw["attribute-sets"] if x["name"] == "allow")
    s["attributes"] = [a for a in s["attributes"] if a["name"] != "pid"]
    p = tmp_path / "vgpu.yaml"
    p.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(G.SpecError, match="VGPU_A_PID has no entry"):
        G.load(p)


def test_netlink_c_uses_the_generated_tables():
    src = (ROOT / "kmod" / "vgpu" / "netlink.c").read_text()
    assert '#include "netlink-gen.h"' in src
    assert not re.search(r"\bstruct\s+nla_policy\s+\w+\s*\[", src), \
        "netlink.c defines a policy: it belongs in the spec"
    assert not re.search(r"\bstruct\s+genl_ops\s+\w+\s*\[", src), \
        "netlink.c defines an ops table: it belongs in the spec"
    fam = re.search(r"struct\s+genl_family\s+vgpu_family\b[^=;]*=\s*\{(.*?)\};", src, re.S)
    assert fam, "no vgpu_family in netlink.c"
    body = fam.group(1)
    assert re.search(r"\.policy\s*=\s*vgpu_policy\b", body)
    assert re.search(r"\.maxattr\s*=\s*VGPU_A_MAX\b", body)
    assert re.search(r"\.ops\s*=\s*vgpu_ops\b", body)
    assert re.search(r"\.mcgrps\s*=\s*vgpu_mcgrps\b", body)
    kbuild = (ROOT / "kmod" / "vgpu" / "Kbuild").read_text()
    assert "netlink-gen.o" in kbuild


def test_spec_request_attributes_are_what_the_handlers_read(fam):
    """Per command, the attributes the spec lists as its request are the
    top-level attributes its handlers (followed through netlink.c's static
    calls, as the fuzzer does) read: the spec's description of a command is
    true of the code."""
    spec = importlib.util.spec_from_file_location("nlfuzz_spec_check",
                                                  ROOT / "tools" / "fuzz" / "nlfuzz.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("nlfuzz_spec_check", mod)
    spec.loader.exec_module(mod)
    nl = mod.Spec()
    top = fam.sets["slice"].by_name()
    errors = []
    cmd_ops = [op for op in fam.ops if "do" in op or "dump" in op]
    assert {nl.ops[c].name for c in nl.ops} == {
        "VGPU_CMD_" + G.cname(op["name"]) for op in cmd_ops}
    for op in cmd_ops:
        want = set()
        for kind in ("do", "dump"):
            want |= {top[a].value for a in
                     ((op.get(kind) or {}).get("request") or {}).get("attributes", [])}
        got = nl.ops[nl.cmds["VGPU_CMD_" + G.cname(op["name"])]]
        if got.reads != want:
            errors.append(f"{op['name']}: the spec's request {sorted(want)}, the handlers "
                          f"read {sorted(got.reads)}")
        if not got.required <= want:
            errors.append(f"{op['name']}: handlers require {sorted(got.required - want)} "
                          f"that the spec's request lacks")
        assert got.admin == ("admin-perm" in op.get("flags", []))
    assert not errors, "\n".join(errors)


def test_outside_definitions_agree_with_their_headers(fam):
    """A value the spec repeats from a header it does not generate (`header:`)
    is that header's: a bound would drift silently otherwise."""
    raw = [d for d in fam.raw["definitions"] if "header" in d]
    assert raw, "no outside definition: this test has nothing to hold"
    for d in raw:
        text = (ROOT / "kmod" / "include" / d["header"]).read_text()
        m = re.search(rf"^#define\s+{G.cname(d['name'])}\s+(\d+)\b", text, re.M)
        assert m, f"{d['header']} lacks {G.cname(d['name'])}"
        assert int(m.group(1)) == d["value"], G.cname(d["name"])
