"""tools/nvgen/names.py: vgpu/abi/nvnames.py is what the committed
kmod/vgpu/policy/<release>.tsv say (the --check run), and the generator's rules
(newest release first, first non-empty name, "?" numbers left out) on a
small policy directory of its own."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from tools.nvgen import names

HEADER = "kind\tvalue\tname\tsize\tverdict\treason\tembedded\n"


def _tsv(*rows) -> str:
    return HEADER + "".join("\t".join((k, v, n, "8", "forward", "r", "-")) + "\n"
                            for k, v, n in rows)


def test_committed_nvnames_is_current():
    r = subprocess.run([sys.executable, "-m", "tools.nvgen.names", "--check"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_nvnames_answers_by_kind_and_number():
    from vgpu.abi import nvnames
    assert nvnames.name("escape", 0x5C) == "NV_ESC_RM_EXPORT_OBJECT_TO_FD"
    assert nvnames.name("control", 0x20801301) == "NV2080_CTRL_CMD_FB_GET_INFO"
    assert nvnames.name("class", 0x80) == "NV01_DEVICE_0"
    assert nvnames.name("uvm", 0x1) == "UVM_RESERVE_VA"
    assert nvnames.name("control", 0xFFFFFFFF) == "" and nvnames.name("gadget", 1) == ""
    assert set(nvnames.BY_KIND) == {"escape", "class", "control", "uvm"}
    # the kinds in enum vgpu_audit_kind's order
    from vgpu.abi import uapi as U
    assert tuple(k for k, _ in names.KINDS) == U.AUDIT_KINDS


def test_rules_newest_release_first(tmp_path):
    (tmp_path / "535.1.tsv").write_text(_tsv(("control", "0x00000001", "OLD_NAME"),
                                             ("control", "0x00000002", "ONLY_IN_OLD"),
                                             ("escape", "0x2a", "NV_ESC_OLD")))
    (tmp_path / "580.10.tsv").write_text(_tsv(("control", "0x00000001", "NEW_NAME"),
                                              ("control", "0x00000001", "NEW_ALIAS"),
                                              ("control", "0x00000002", ""),
                                              ("class", "?", "UNKNOWN_NUMBER"),
                                              ("uvm", "0x00000003", "UVM_X")))
    # 580.10 is newer than 535.1 though it sorts before it as text
    (tmp_path / "580.9.tsv").write_text(_tsv(("control", "0x00000001", "MIDDLE_NAME")))
    assert names.releases(tmp_path) == ["580.10", "580.9", "535.1"]
    t = names.names(tmp_path)
    assert t == {"escape": {0x2A: "NV_ESC_OLD"}, "class": {},
                 "control": {1: "NEW_NAME", 2: "ONLY_IN_OLD"}, "uvm": {3: "UVM_X"}}
    text = names.render(tmp_path)
    ns: dict = {}
    exec(compile(text, "nvnames.py", "exec"), ns)
    assert ns["CONTROLS"] == {1: "NEW_NAME", 2: "ONLY_IN_OLD"}
    assert ns["ESCAPES"] == {0x2A: "NV_ESC_OLD"}
    assert ns["name"]("uvm", 3) == "UVM_X"
    assert "0x2a: " in text and "0x00000001: " in text


def test_check_and_write(tmp_path):
    pol = tmp_path / "policy"
    pol.mkdir()
    (pol / "595.45.04.tsv").write_text(_tsv(("escape", "0x2a", "NV_ESC_RM_CONTROL")))
    out = tmp_path / "nvnames.py"
    assert names.main(["--policy", str(pol), "--out", str(out), "--check"]) == 1
    assert names.main(["--policy", str(pol), "--out", str(out)]) == 0
    assert names.main(["--policy", str(pol), "--out", str(out), "--check"]) == 0
    (pol / "595.45.04.tsv").write_text(_tsv(("escape", "0x2a", "NV_ESC_RENAMED")))
    assert names.main(["--policy", str(pol), "--out", str(out), "--check"]) == 1


@pytest.mark.parametrize("rows,words", [
    ((("gadget", "0x1", "X"),), "kind 'gadget' is not one of escape, class, control, uvm"),
    ((("class", "zz", "X"),), "value 'zz' is not a hex number"),
])
def test_bad_policy_rows(tmp_path, rows, words, capsys):
    (tmp_path / "595.45.04.tsv").write_text(_tsv(*rows))
    with pytest.raises(names.NamesError) as ei:
        names.names(tmp_path)
    assert "595.45.04.tsv:2: " in str(ei.value) and words in str(ei.value)
    assert names.main(["--policy", str(tmp_path), "--out", str(tmp_path / "o.py")]) == 2
    assert words in capsys.readouterr().err
