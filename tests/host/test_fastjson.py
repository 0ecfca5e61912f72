"""vgpu.common.fastjson: json.loads and compact json.dumps without the json
package, on the json package's own C accelerator; the same values and the
same text as json, hostile inputs included."""
import json
import math
import pathlib
import subprocess
import sys

import pytest

from vgpu.common import fastjson

GOOD = [
    '{"ociVersion":"1.0.2","annotations":{"vgpu.io/memory":"4GiB"}}',
    ' \t\n{"a" : [1, -2, 3.5e10, 1E-7, true, false, null, "x"]} \r\n',
    '"\\u00e9\\ud83d\\ude00\\n\\"\\\\\\/"',
    '[]', '{}', '0', '-0', '-0.0', '1.7976931348623157e308', '123456789012345678901234567890',
    '{"dup":1,"dup":2}',                         # the last wins, as json's
    '[NaN, Infinity, -Infinity]',                # json.loads accepts them
    '"\\ud800"',                                 # a lone surrogate escape
    '[' * 50 + ']' * 50,
]
BAD = ['', ' ', '{', '[1,]', '{"a":1,}', "{'a':1}", '01', '1 2', '"\x01"', '"\\x"',
       '{"a" 1}', 'nul', 'tru', '[1] x', '"\\ud83d\\u"', '\ufeff{}', '"abc', '+1', '.5',
       '{"a":1}}']


@pytest.mark.parametrize("text", GOOD)
def test_loads_reads_what_json_reads(text):
    want = json.dumps(json.loads(text))           # NaN != NaN: compare the texts
    assert json.dumps(fastjson.loads(text)) == want
    assert json.dumps(fastjson.loads(text.encode())) == want


@pytest.mark.parametrize("text", BAD)
def test_loads_refuses_what_json_refuses(text):
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        fastjson.loads(text)


def test_loads_refuses_bytes_that_are_not_utf8_and_non_text():
    with pytest.raises(ValueError):
        fastjson.loads(b'{"a":"\xff"}')
    with pytest.raises(TypeError):
        fastjson.loads(42)


def test_deep_nesting_is_an_error_not_a_crash():
    with pytest.raises(RecursionError):
        fastjson.loads("[" * 100000 + "]" * 100000)


VALUES = [
    {"ociVersion": "1.0.2", "hooks": {"createRuntime": [{"path": "/x", "args": ["a", "b"],
                                                         "env": [], "timeout": 15}]},
     "linux": {"resources": {"devices": [{"allow": True, "type": "c", "major": 195,
                                          "access": "rw"}]}}},
    ["\u00e9\U0001F600\x00\x1f\"\\/", 1.5, 1e300, -0.0, 2 ** 80, None, True, False],
    {"nan": math.nan, "inf": math.inf, "ninf": -math.inf},
    "top-level string", 12, 3.25, None,
    {1: "int key", 2.5: "float key", True: "bool key", None: "none key"},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_dumps_writes_what_json_writes(value):
    assert fastjson.dumps(value) == json.dumps(value, separators=(",", ":"))
    assert fastjson.dumps(value, ensure_ascii=False) == json.dumps(value, separators=(",", ":"),
                                                                   ensure_ascii=False)


def test_dumps_refuses_what_json_refuses():
    loop: list = []
    loop.append(loop)
    for bad in (loop, {"a": object()}, {(1, 2): "tuple key"}, {1j}):
        with pytest.raises((TypeError, ValueError)):
            json.dumps(bad)
        with pytest.raises((TypeError, ValueError)):
            fastjson.dumps(bad)
    # circular detection is per call: the same list twice is no loop
    shared = [1]
    assert fastjson.dumps([shared, shared]) == "[[1],[1]]"


def test_importing_it_loads_neither_json_nor_re():
    code = ("import sys; import vgpu.common.fastjson as f; f.loads('{\"a\":[1]}'); f.dumps([1]); "
            "print(' '.join(m for m in ('json', 're', 'enum') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, "
                        f"{str(pathlib.Path(fastjson.__file__).parents[2])!r}); "
                        + code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == []


def test_an_error_inside_a_value_in_a_fresh_interpreter_is_jsons_error():
    """The C scanner's own errors need json.decoder loaded: without it
    loads imports json on that path and raises json's error, not a
    SystemError."""
    code = ("import sys, vgpu.common.fastjson as f\n"
            "for bad in ('{\"id\": \"c1\"', '[1, 2', '{\"a\" 1}', '\"abc'):\n"
            "    try:\n        f.loads(bad)\n    except ValueError as e:\n"
            "        print(type(e).__name__)\n")
    root = str(pathlib.Path(fastjson.__file__).parents[2])
    r = subprocess.run([sys.executable, "-I", "-S", "-c",
                        f"import sys; sys.path.insert(0, {root!r})\n" + code],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["JSONDecodeError"] * 4
