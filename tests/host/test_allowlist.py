"""vgpu.abi.allowlist: the allow-list file a profile's allow_list names and
`vgpuctl audit --allow-list` writes: parsing (every error names file, line
and value), rendering, the atomic write, and the round trip."""
import os

import pytest

from vgpu.abi import allowlist
from vgpu.abi import uapi

GOOD = """\
# vgpuctl audit c1 on node 7, 2024-05-01
kind\tnumber\tname

control\t0x20800a3e\t
escape\t0x5c\tNV_ESC_RM_EXPORT_OBJECT_TO_FD
  # an indented comment
uvm\t0x00000049
class\t0x0000c86f\tHOPPER_CHANNEL_GPFIFO_A\r
control\t0X2080014A\tNV2080_CTRL_CMD_X
"""


def errors(text, path="t.allow"):
    with pytest.raises(allowlist.AllowListError) as ei:
        allowlist.parse(text, path)
    assert str(ei.value) == "\n".join(ei.value.errors)
    assert isinstance(ei.value, ValueError)
    return ei.value.errors


def test_parse_good_file_sorted_by_kind_then_number():
    items = allowlist.parse(GOOD, "t.allow")
    assert [(i.kind, i.number, i.name) for i in items] == [
        ("escape", 0x5C, "NV_ESC_RM_EXPORT_OBJECT_TO_FD"),
        ("class", 0xC86F, "HOPPER_CHANNEL_GPFIFO_A"),
        ("control", 0x2080014A, "NV2080_CTRL_CMD_X"),
        ("control", 0x20800A3E, ""),
        ("uvm", 0x49, ""),
    ]
    # the kernel's pairs: (enum vgpu_audit_kind, number)
    assert items[0].pair == (uapi.VGPU_AUDIT_ESCAPE, 0x5C)
    assert items[-1].pair == (uapi.VGPU_AUDIT_UVM, 0x49)
    assert allowlist.KINDS == ("escape", "class", "control", "uvm")
    assert [allowlist.KINDS.index(k) for k in allowlist.KINDS] == [uapi.VGPU_AUDIT_ESCAPE, uapi.VGPU_AUDIT_CLASS,
                                                    uapi.VGPU_AUDIT_CONTROL, uapi.VGPU_AUDIT_UVM]


def test_header_only_is_an_empty_list():
    assert allowlist.parse("kind\tnumber\tname\n") == []
    assert allowlist.parse("# nothing yet\n\nkind\tnumber\tname") == []


@pytest.mark.parametrize("text,line,words", [
    ("", 1, "no header: the file must start with kind<TAB>number<TAB>name"),
    ("# only a comment\n", 1, "no header"),
    ("control\t0x1\t\n", 1, '"control\\t0x1\\t" is not the header kind<TAB>number<TAB>name'),
    ("kind number name\n", 1, '"kind number name" is not the header'),
    ("kind\tnumber\tname\ngadget\t0x1\tX\n", 2,
     'kind "gadget" is not one of escape, class, control, uvm'),
    ("kind\tnumber\tname\nControl\t0x1\n", 2, 'kind "Control" is not one of'),
    ("kind\tnumber\tname\ncontrol\t20800145\n", 2,
     'number "20800145" is not a hexadecimal number with 0x (e.g. 0x20800145)'),
    ("kind\tnumber\tname\ncontrol\t0x\n", 2, 'number "0x" is not a hexadecimal number'),
    ("kind\tnumber\tname\ncontrol\t0xzz\n", 2, 'number "0xzz" is not a hexadecimal'),
    ("kind\tnumber\tname\ncontrol\t-0x1\n", 2, 'number "-0x1" is not a hexadecimal'),
    ("kind\tnumber\tname\ncontrol\t0x100000000\n", 2,
     'number "0x100000000" is above 0xffffffff, the largest a u32'),
    ("kind\tnumber\tname\nescape\t0x100\n", 2,
     'number "0x100" is above 0xff, the largest an escape number'),
    ("kind\tnumber\tname\ncontrol 0x1 X\n", 2,
     '"control 0x1 X" is not kind<TAB>number<TAB>name (1 tab-separated field)'),
    ("kind\tnumber\tname\ncontrol\t0x1\tX\textra\n", 2, "(4 tab-separated fields)"),
    ("kind\tnumber\tname\nclass\t0x1\n\nclass\t0x00000001\tdup\n", 4,
     "class 0x00000001 is listed twice (first on line 2)"),
])
def test_errors_name_file_line_and_value(text, line, words):
    errs = errors(text)
    assert len(errs) == 1, errs
    assert errs[0].startswith(f"t.allow:{line}: ") and words in errs[0], errs[0]


def test_every_problem_is_reported_and_capped():
    text = "kind\tnumber\tname\n" + "".join(f"kind{i}\t0x1\n" for i in range(30))
    errs = errors(text)
    assert len(errs) == allowlist.MAX_ERRORS + 1
    assert errs[0].startswith("t.allow:2: ") and errs[1].startswith("t.allow:3: ")
    assert errs[-1] == f"... and {30 - allowlist.MAX_ERRORS} more problems"


def test_more_than_vgpu_max_allow_items():
    assert allowlist.MAX_ITEMS == uapi.VGPU_MAX_ALLOW == 4096
    rows = "".join(f"control\t0x{i:08x}\n" for i in range(allowlist.MAX_ITEMS))
    assert len(allowlist.parse("kind\tnumber\tname\n" + rows)) == allowlist.MAX_ITEMS
    errs = errors("kind\tnumber\tname\n" + rows + "uvm\t0x00000001\n")
    assert errs == [f"t.allow:{allowlist.MAX_ITEMS + 2}: uvm 0x00000001: more than 4096 items "
                    f"(VGPU_MAX_ALLOW, vgpu.ko's limit per slice)"]


def test_load_unreadable_and_not_utf8(tmp_path):
    missing = tmp_path / "nope.allow"
    with pytest.raises(allowlist.AllowListError) as ei:
        allowlist.load(missing)
    assert str(ei.value) == f"{missing}: cannot read: No such file or directory"
    with pytest.raises(allowlist.AllowListError) as ei:
        allowlist.load(tmp_path)
    assert str(ei.value).startswith(f"{tmp_path}: cannot read: ")
    bad = tmp_path / "bad.allow"
    bad.write_bytes(b"kind\tnumber\tname\nclass\t0x1\t\xff\n")
    with pytest.raises(allowlist.AllowListError) as ei:
        allowlist.load(bad)
    assert str(ei.value) == f"{bad}:2: not UTF-8 text (byte 0xff)"


def test_render_format_and_round_trip(tmp_path):
    items = allowlist.parse(GOOD)
    text = allowlist.render(items + items[:1])              # a repeat is written once
    assert text.splitlines() == [
        "kind\tnumber\tname",
        "escape\t0x5c\tNV_ESC_RM_EXPORT_OBJECT_TO_FD",
        "class\t0x0000c86f\tHOPPER_CHANNEL_GPFIFO_A",
        "control\t0x2080014a\tNV2080_CTRL_CMD_X",
        "control\t0x20800a3e\t",
        "uvm\t0x00000049\t",
    ]
    assert allowlist.parse(text) == items
    assert [i.name for i in allowlist.parse(text)] == [i.name for i in items]
    # a name that would break the line is left out
    odd = allowlist.AllowItem.of("class", 1, "A\tB")
    assert allowlist.render([odd]).splitlines()[1] == "class\t0x00000001\t"
    assert allowlist.format_number("escape", 5) == "0x05"
    assert allowlist.format_number("uvm", 5) == "0x00000005"


def test_write_is_atomic_and_counts(tmp_path):
    path = tmp_path / "trial.allow"
    path.write_text("old contents\n")
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        # the new text is complete in the temporary file before the rename
        seen.append((os.path.dirname(src) == str(tmp_path), open(src).read(),
                     path.read_text()))
        return real_replace(src, dst)
    os.replace = spy
    try:
        n = allowlist.write(path, allowlist.parse(GOOD))
    finally:
        os.replace = real_replace
    assert n == 5
    assert seen == [(True, allowlist.render(allowlist.parse(GOOD)), "old contents\n")]
    assert path.read_text() == allowlist.render(allowlist.parse(GOOD))
    assert sorted(os.listdir(tmp_path)) == ["trial.allow"]       # no temporary left
    assert allowlist.write(tmp_path / "empty.allow", []) == 0
    assert (tmp_path / "empty.allow").read_text() == "kind\tnumber\tname\n"


def test_write_failure_leaves_no_temporary(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    target = d / "x.allow"
    target.mkdir()                                   # rename over a directory fails
    with pytest.raises(OSError):
        allowlist.write(target, allowlist.parse(GOOD))
    assert sorted(os.listdir(d)) == ["x.allow"]
