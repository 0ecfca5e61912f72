"""vgpu.common.values: one parser per value (sizes, percentages, durations, clock
times, policies, priorities, container names, GPUs, pids, profile names,
labels, booleans), its error text built once (BadValue), and the same core
message from vgpuctl, the API, the config file and the hook."""
import datetime
import json
import subprocess
import sys

import pytest

from vgpu.abi import uapi
from vgpu.cli import ctl
from vgpu.cli.hook import container
from vgpu.daemon.api import ApiError, parse_request
from vgpu.daemon.config import ConfigError, parse_config
from vgpu.daemon.config.parse import parse_clock
from vgpu.common.values import (CONTAINER_MAX, LAYER_FLAGS, POLICIES, POLICY_CODES, PRIORITIES,
                         PRIORITY_CODES, BadValue, format_duration, format_percent, format_size,
                         parse_bool, parse_compute, parse_container,
                         parse_duration, parse_gpu, parse_gpus, parse_label, parse_labels,
                         parse_percent, parse_pid, parse_policy, parse_priority, parse_profile,
                         parse_size, quote)

GiB = 1 << 30
MiB = 1 << 20


def refused(parse, v, *args) -> BadValue:
    """The BadValue parse(v) raises; its message is always the quoted value
    and the reason."""
    with pytest.raises(BadValue) as ei:
        parse(v, *args)
    e = ei.value
    assert isinstance(e, ValueError)
    assert str(e) == f"{quote(e.value)} {e.reason}"
    return e


# ------------------------------------------------------------ BadValue, quote
def test_bad_value_carries_value_reason_and_where():
    e = BadValue("4GB", "is not a size", "[2]")
    assert (e.value, e.reason, e.at) == ("4GB", "is not a size", "[2]")
    assert str(e) == '"4GB" is not a size' and isinstance(e, ValueError)


def test_quote():
    assert quote("a") == '"a"'
    assert quote('say "x"') == '"say \\"x\\""'
    assert quote("back\\slash") == '"back\\\\slash"'
    assert quote("\x00") == '"\\x00"'
    assert quote("tab\there") == '"tab\\there"'
    assert quote(5) == "5"
    assert quote(1.5) == "1.5"
    assert len(quote("x" * 1000)) <= 82 and quote("x" * 1000).endswith('..."')


@pytest.mark.parametrize("v, text", [
    (True, "true"), (False, "false"), (None, "null"), ([30], "[30]"), ([], "[]"),
    (["a", 1, None], '["a", 1, null]'), ({"a": 1}, '{"a": 1}'), ((0, "GPU-x"), '[0, "GPU-x"]'),
    (float("nan"), "nan"),
])
def test_quote_writes_values_as_json_and_toml_do(v, text):
    assert quote(v) == text


def test_quote_is_bounded_for_big_and_deep_values():
    assert len(quote(list(range(10000)))) <= 80
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    assert len(quote(deep)) <= 80


# ------------------------------------------------------------ sizes
@pytest.mark.parametrize("v, n", [
    (0, 0), (4096, 4096), ("4096", 4096), (" 4096 ", 4096),
    # Kubernetes quantities: binary Ki..Ei, decimal k M G T P E
    ("8Gi", 8 * GiB), ("512Mi", 512 * MiB), ("1Ki", 1024), ("2Ti", 2 << 40), ("1Pi", 1 << 50),
    ("1Ei", 1 << 60), ("1.5Gi", 3 * GiB // 2), ("4096Mi", 4 * GiB),
    ("4G", 4 * 10 ** 9), ("500M", 500 * 10 ** 6), ("2k", 2000), ("3T", 3 * 10 ** 12),
    ("1P", 10 ** 15), ("1E", 10 ** 18), ("1.5G", 1500 * 10 ** 6), ("0.5k", 500),
    # the IEC names, any case
    ("8GiB", 8 * GiB), ("8gib", 8 * GiB), ("8 GiB", 8 * GiB), ("512MiB", 512 * MiB),
    ("1KiB", 1024), ("1TiB", 1 << 40), ("100B", 100), ("100b", 100),
    ("0.5KiB", 512), (".5MiB", 512 * 1024), ("2.MiB", 2 * MiB),
])
def test_parse_size_good(v, n):
    assert parse_size(v) == n
    assert type(parse_size(v)) is int


@pytest.mark.parametrize("v, message", [
    (-1, "-1 is negative (a size is 0 or more bytes)"),
    ("-4GiB", '"-4GiB" is negative (a size is 0 or more bytes)'),
    ("4GB", '"4GB" is not a size: write 4G (10^9 bytes) or 4Gi (2^30)'),
    ("4 gb", '"4 gb" is not a size: write 4G (10^9 bytes) or 4Gi (2^30)'),
    ("4MB", '"4MB" is not a size: write 4M (10^6 bytes) or 4Mi (2^20)'),
    # what vgpu read as binary before Kubernetes quantities: refused, not reread
    ("8g", '"8g" is not a size: write 8Gi (2^30 bytes) or 8G (10^9, as Kubernetes)'),
    ("512m", '"512m" is not a size: m is milli in Kubernetes quantities: write 512Mi '
             '(2^20 bytes) or 512M (10^6)'),
    ("1K", '"1K" is not a size: write 1k (10^3 bytes) or 1Ki (2^10)'),
    ("2t", '"2t" is not a size: write 2Ti (2^40 bytes) or 2T (10^12, as Kubernetes)'),
    ("abc", '"abc" is not a size (use e.g. 4Gi, 512Mi, 4G or bytes)'),
    ("", '"" is not a size (use e.g. 4Gi, 512Mi, 4G or bytes)'),
    ("GiB", '"GiB" is not a size (use e.g. 4Gi, 512Mi, 4G or bytes)'),
    ("1.1B", '"1.1B" is not a whole number of bytes'),
    ("0.3KiB", '"0.3KiB" is not a whole number of bytes'),
    ("1..5G", '"1..5G" is not a size (use e.g. 4Gi, 512Mi, 4G or bytes)'),
    ("4 XiB", '"4 XiB" is not a size (use e.g. 4Gi, 512Mi, 4G or bytes)'),
    ("1e9", '"1e9" is not a size (use e.g. 4Gi, 512Mi, 4G or bytes)'),
    ("0x10", '"0x10" is not a size (use e.g. 4Gi, 512Mi, 4G or bytes)'),
    ("4GiB!", '"4GiB!" is not a size (use e.g. 4Gi, 512Mi, 4G or bytes)'),
    (True, "true is not a size (use e.g. 4Gi, 512Mi, 4G or bytes)"),
    (False, "false is not a size (use e.g. 4Gi, 512Mi, 4G or bytes)"),
    (1.5, '1.5 is not a size (use an integer of bytes, or e.g. "1.5Gi")'),
    (None, "null is not a size (use e.g. 4Gi, 512Mi, 4G or bytes)"),
    ([4], "[4] is not a size (use e.g. 4Gi, 512Mi, 4G or bytes)"),
    (1 << 70, f"{1 << 70} is too large"),
    ("99999999TiB", '"99999999TiB" is too large'),
])
def test_parse_size_bad(v, message):
    assert str(refused(parse_size, v)) == message


@pytest.mark.parametrize("n, text", [
    (8 * GiB, "8 GiB"), (3 * GiB // 2, "1.5 GiB"), (512 * MiB, "512 MiB"), (100, "100 B"),
    (0, "0 B"), (1024, "1 KiB"), (1 << 40, "1 TiB"), (GiB + GiB // 4, "1.25 GiB"),
    (-2 * GiB, "-2 GiB"),
])
def test_format_size(n, text):
    assert format_size(n) == text


def test_format_size_round_trips_whole_units():
    for n in (1, 1023, 4096, 7 * MiB, 16 * GiB, 3 << 40):
        assert parse_size(format_size(n).replace(" ", "")) == n


def test_format_size_wants_int():
    with pytest.raises(TypeError):
        format_size(1.5)


# ------------------------------------------------------------ percentages
@pytest.mark.parametrize("v, x", [
    ("30%", 30.0), ("30", 30.0), (30, 30.0), (30.5, 30.5), ("12.5%", 12.5), (" 7 % ", 7.0),
    ("0%", 0.0), ("100%", 100.0), (0, 0.0), (100, 100.0), ("+5%", 5.0),
])
def test_parse_percent_good(v, x):
    assert parse_percent(v) == x


@pytest.mark.parametrize("v, message", [
    ("101%", '"101%" is out of range (a percentage is 0 to 100)'),
    (-1, "-1 is out of range (a percentage is 0 to 100)"),
    ("-5%", '"-5%" is out of range (a percentage is 0 to 100)'),
    (100.01, "100.01 is out of range (a percentage is 0 to 100)"),
    (float("nan"), "nan is out of range (a percentage is 0 to 100)"),
    (float("inf"), "inf is out of range (a percentage is 0 to 100)"),
    ("abc", '"abc" is not a percentage (use e.g. 30%)'),
    ("30%%", '"30%%" is not a percentage (use e.g. 30%)'),
    ("%", '"%" is not a percentage (use e.g. 30%)'),
    ("", '"" is not a percentage (use e.g. 30%)'),
    ("3 0", '"3 0" is not a percentage (use e.g. 30%)'),
    ("30 pct", '"30 pct" is not a percentage (use e.g. 30%)'),
    ("--5", '"--5" is not a percentage (use e.g. 30%)'),
    (True, "true is not a percentage (use e.g. 30%)"),
    (None, "null is not a percentage (use e.g. 30%)"),
])
def test_parse_percent_bad(v, message):
    assert str(refused(parse_percent, v)) == message


@pytest.mark.parametrize("v, x", [("30%", 30), ("12.5%", 12.5), (50, 50), (7.0, 7)])
def test_parse_compute_sends_whole_percentages_as_int(v, x):
    assert parse_compute(v) == x and type(parse_compute(v)) is type(x)


def test_parse_compute_refuses_as_parse_percent():
    assert str(refused(parse_compute, "130%")) == str(refused(parse_percent, "130%"))


def test_format_percent():
    assert format_percent(30.0) == "30%"
    assert format_percent(12.5) == "12.5%"


# ------------------------------------------------------------ durations, times
@pytest.mark.parametrize("v, x", [
    ("100ms", 0.1), ("10s", 10.0), ("2m", 120.0), ("1h", 3600.0), ("250us", 0.00025),
    (5, 5.0), (0.5, 0.5), ("3", 3.0), ("1.5s", 1.5), ("2 min", 120.0), ("10S", 10.0),
])
def test_parse_duration_good(v, x):
    assert parse_duration(v) == pytest.approx(x)


@pytest.mark.parametrize("v, message", [
    (0, "0 is not positive (a duration is more than 0)"),
    ("0s", '"0s" is not positive (a duration is more than 0)'),
    (-1, "-1 is not positive (a duration is more than 0)"),
    ("-5s", '"-5s" is not positive (a duration is more than 0)'),
    ("10 parsecs", '"10 parsecs" is not a duration (units: ms, s, m, h)'),
    ("10d", '"10d" is not a duration (units: ms, s, m, h)'),
    ("", '"" is not a duration (use e.g. 100ms, 10s, 2m, 1h)'),
    ("s", '"s" is not a duration (use e.g. 100ms, 10s, 2m, 1h)'),
    (True, "true is not a duration (use e.g. 100ms, 10s, 2m, 1h)"),
    (None, "null is not a duration (use e.g. 100ms, 10s, 2m, 1h)"),
    (float("inf"), "inf is not a duration (use e.g. 100ms, 10s, 2m, 1h)"),
    (float("nan"), "nan is not a duration (use e.g. 100ms, 10s, 2m, 1h)"),
])
def test_parse_duration_bad(v, message):
    assert str(refused(parse_duration, v)) == message


@pytest.mark.parametrize("x, text", [(0.1, "100ms"), (10, "10s"), (120, "2m"), (3600, "1h"),
                                     (1.5, "1.5s"), (0.00025, "250us"), (90, "90s")])
def test_format_duration(x, text):
    assert format_duration(x) == text
    assert parse_duration(text) == pytest.approx(x)


@pytest.mark.parametrize("v, t", [("08:00", datetime.time(8)), ("8:05", datetime.time(8, 5)),
                                  ("00:00", datetime.time(0)), ("23:59", datetime.time(23, 59)),
                                  (" 08:00 ", datetime.time(8))])
def test_parse_clock_good(v, t):
    assert parse_clock(v) == t


@pytest.mark.parametrize("v, message", [
    ("24:00", '"24:00" is not a time of day (00:00 to 23:59)'),
    ("12:60", '"12:60" is not a time of day (00:00 to 23:59)'),
    ("8", '"8" is not a time of day (use HH:MM, e.g. 08:00)'),
    ("08:0", '"08:0" is not a time of day (use HH:MM, e.g. 08:00)'),
    ("08:000", '"08:000" is not a time of day (use HH:MM, e.g. 08:00)'),
    ("ab:cd", '"ab:cd" is not a time of day (use HH:MM, e.g. 08:00)'),
    ("", '"" is not a time of day (use HH:MM, e.g. 08:00)'),
    ("-1:00", '"-1:00" is not a time of day (use HH:MM, e.g. 08:00)'),
    ("08:00:00", '"08:00:00" is not a time of day (use HH:MM, e.g. 08:00)'),
    ("8 :00", '"8 :00" is not a time of day (use HH:MM, e.g. 08:00)'),
    (800, "800 is not a time of day (use HH:MM, e.g. 08:00)"),
    (None, "null is not a time of day (use HH:MM, e.g. 08:00)"),
])
def test_parse_clock_bad(v, message):
    assert str(refused(parse_clock, v)) == message


# ------------------------------------------------------------ policies, priorities
def test_names_are_the_kernels():
    """The names come from vgpu.abi.uapi's tables; the numbers are the kernel's."""
    assert POLICIES == ("share", "fixed", "burst") and PRIORITIES == ("high", "low")
    assert POLICY_CODES == {"share": uapi.VGPU_COMPUTE_SHARE, "fixed": uapi.VGPU_COMPUTE_FIXED,
                            "burst": uapi.VGPU_COMPUTE_BURST}
    assert PRIORITY_CODES == {"high": uapi.VGPU_PRIORITY_HIGH, "low": uapi.VGPU_PRIORITY_LOW}
    assert all(uapi.COMPUTE_POLICY_NAMES[c] == n for n, c in POLICY_CODES.items())
    assert all(uapi.PRIORITY_NAMES[c] == n for n, c in PRIORITY_CODES.items())
    assert LAYER_FLAGS == {"tsg": uapi.VGPU_SCHED_L_TSG, "doorbell": uapi.VGPU_SCHED_L_DOORBELL}


@pytest.mark.parametrize("v", POLICIES)
def test_parse_policy_good(v):
    assert parse_policy(v) == v


@pytest.mark.parametrize("v, message", [
    ("greedy", '"greedy" is not a policy (share, fixed or burst)'),
    ("none", '"none" is not a policy (share, fixed or burst)'),     # the kernel's "unset"
    ("Share", '"Share" is not a policy (share, fixed or burst)'),
    (" share", '" share" is not a policy (share, fixed or burst)'),
    ("", '"" is not a policy (share, fixed or burst)'),
    (1, "1 is not a policy (share, fixed or burst)"),
    (None, "null is not a policy (share, fixed or burst)"),
])
def test_parse_policy_bad(v, message):
    assert str(refused(parse_policy, v)) == message


@pytest.mark.parametrize("v", PRIORITIES)
def test_parse_priority_good(v):
    assert parse_priority(v) == v


@pytest.mark.parametrize("v, message", [
    ("urgent", '"urgent" is not a priority (high or low)'),
    ("HIGH", '"HIGH" is not a priority (high or low)'),
    ("", '"" is not a priority (high or low)'),
    (1, "1 is not a priority (high or low)"),
    (["high"], '["high"] is not a priority (high or low)'),
])
def test_parse_priority_bad(v, message):
    assert str(refused(parse_priority, v)) == message


# ------------------------------------------------------------ container names
@pytest.mark.parametrize("v", ["c1", "k8s_pod-1.x", "x" * CONTAINER_MAX, "é" * 63, "a b", "...",
                               ".hidden"])
def test_parse_container_good(v):
    assert parse_container(v) == v


@pytest.mark.parametrize("v, message", [
    ("", '"" is empty (a container name is 1 to 127 bytes)'),
    ("x" * 128, f'"{"x" * 77}..." is longer than 127 bytes'),
    ("é" * 64, f'"{"é" * 64}" is longer than 127 bytes'),
    ("a/b", "\"a/b\" contains '/' or control characters"),
    ("/", "\"/\" contains '/' or control characters"),
    ("a\nb", "\"a\\nb\" contains '/' or control characters"),
    ("a\x7fb", "\"a\\x7fb\" contains '/' or control characters"),
    (".", '"." is not a container name (not "." or "..")'),
    ("..", '".." is not a container name (not "." or "..")'),
    ("\udcff", '"\\udcff" is not UTF-8 text'),
    (5, "5 is not a container name (a string of 1 to 127 bytes)"),
    (None, "null is not a container name (a string of 1 to 127 bytes)"),
])
def test_parse_container_bad(v, message):
    assert str(refused(parse_container, v)) == message


def test_container_max_is_the_kernels():
    assert CONTAINER_MAX == uapi.VGPU_SLICE_NAME_MAX - 1 == 127


# ------------------------------------------------------------ GPUs
@pytest.mark.parametrize("v, g", [(0, 0), (7, 7), (1023, 1023), ("GPU-8f6d-aa", "GPU-8f6d-aa"),
                                  ("x" * 128, "x" * 128)])
def test_parse_gpu_good(v, g):
    assert parse_gpu(v) == g


@pytest.mark.parametrize("v, message", [
    (-1, "-1 is negative (GPU indexes start at 0)"),
    (1024, "1024 is out of range (GPU indexes are 0 to 1023)"),
    ("1", '"1" is not a GPU UUID (write an index as a number, without quotes)'),
    ("", '"" is not a GPU UUID (e.g. GPU-8f6d...; no blanks or commas, at most 128 characters)'),
    ("GPU a", '"GPU a" is not a GPU UUID (e.g. GPU-8f6d...; no blanks or commas, at most 128 '
              'characters)'),
    ("a,b", '"a,b" is not a GPU UUID (e.g. GPU-8f6d...; no blanks or commas, at most 128 '
            'characters)'),
    (True, "true is not a GPU index or UUID"),
    (1.5, "1.5 is not a GPU index or UUID"),
    (None, "null is not a GPU index or UUID"),
])
def test_parse_gpu_bad(v, message):
    e = refused(parse_gpu, v)
    assert str(e) == message and e.at == ""


@pytest.mark.parametrize("v, gpus", [
    ("0", [0]), ("0,1", [0, 1]), (" 0 , 1 ", [0, 1]), ("GPU-a,3", ["GPU-a", 3]),
    ("0,1,2,3,4,5,6,7", list(range(8))),
    ([0], [0]), ([1, "GPU-a"], [1, "GPU-a"]), ((2, 3), [2, 3]), (list(range(8)), list(range(8))),
])
def test_parse_gpus_good(v, gpus):
    assert parse_gpus(v) == gpus


@pytest.mark.parametrize("v, at, message", [
    # the text form (vgpuctl's --gpu, the vgpu.io/gpus annotation): the whole text is quoted
    ("", "", '"" is not a GPU list (e.g. 0, 0,1 or GPU-...)'),
    ("0,,1", "", '"0,,1" is not a GPU list (e.g. 0, 0,1 or GPU-...)'),
    ("0,GPU a", "", '"0,GPU a" is not a GPU list (e.g. 0, 0,1 or GPU-...)'),
    ("5000", "", '"5000" names GPU index 5000, out of range (0 to 1023)'),
    ("0,0", "", '"0,0" names GPU 0 twice'),
    ("0,1,2,3,4,5,6,7,8", "", '"0,1,2,3,4,5,6,7,8" names more than 8 GPUs'),
    # the list form (API, config): the bad item and where it is
    ([], "", "[] names no GPU (list GPU indexes or UUIDs)"),
    (list(range(9)), "", "[0, 1, 2, 3, 4, 5, 6, 7, 8] names more than 8 GPUs"),
    ([0, 0], "[1]", "0 is listed twice"),
    ([0, "1"], "[1]", '"1" is not a GPU UUID (write an index as a number, without quotes)'),
    ([0, -1], "[1]", "-1 is negative (GPU indexes start at 0)"),
    ([True], "[0]", "true is not a GPU index or UUID"),
    (5, "", "5 is not a list of GPU indexes or UUIDs"),
    ({"0": 1}, "", '{"0": 1} is not a list of GPU indexes or UUIDs'),
])
def test_parse_gpus_bad(v, at, message):
    e = refused(parse_gpus, v)
    assert (e.at, str(e)) == (at, message)


def test_parse_gpus_bound():
    assert parse_gpus(list(range(20)), None) == list(range(20))
    assert str(refused(parse_gpus, [0, 1, 2], 2)) == "[0, 1, 2] names more than 2 GPUs"


# ------------------------------------------------------------ pids, profiles, labels, booleans
@pytest.mark.parametrize("v, n", [(1, 1), (4194303, 4194303), ("42", 42)])
def test_parse_pid_good(v, n):
    assert parse_pid(v) == n


@pytest.mark.parametrize("v, message", [
    (0, "0 is not a process id"), (4194304, "4194304 is not a process id"),
    (-1, "-1 is not a process id"), ("0", '"0" is not a process id'),
    ("abc", '"abc" is not a process id'), ("", '"" is not a process id'),
    ("+5", '"+5" is not a process id'), ("٣", '"٣" is not a process id'),
    (True, "true is not a process id"), (1.0, "1.0 is not a process id"),
])
def test_parse_pid_bad(v, message):
    assert str(refused(parse_pid, v)) == message


@pytest.mark.parametrize("v", ["small", "a", "0", "inference-day", "x.y_z", "p" * 63])
def test_parse_profile_good(v):
    assert parse_profile(v) == v


@pytest.mark.parametrize("v", ["", "bad name", "-x", ".x", "_x", "p" * 64, "a/b", "é", 5, None])
def test_parse_profile_bad(v):
    assert str(refused(parse_profile, v)) == \
        f"{quote(v)} is not a profile name (letters, digits, _ . -; up to 63)"


@pytest.mark.parametrize("v, kv", [("team=ml", ("team", "ml")), (" team =ml", ("team", "ml")),
                                   ("k=", ("k", "")), ("k=a=b", ("k", "a=b"))])
def test_parse_label_good(v, kv):
    assert parse_label(v) == kv


@pytest.mark.parametrize("v, message", [
    ("novalue", '"novalue" is not a label (use KEY=VALUE)'),
    ("=v", '"=v" is not a label (use KEY=VALUE)'),
    (" =v", '" =v" is not a label (use KEY=VALUE)'),
    ("k" * 254 + "=v", f'"{"k" * 77}..." has a key that is not a label key (1 to 253 characters)'),
    ("k=" + "v" * 254, '"k=' + "v" * 75 + '..." has a value that is not a label value (a string '
                                           'of at most 253 characters)'),
])
def test_parse_label_bad(v, message):
    assert str(refused(parse_label, v)) == message


def test_parse_labels():
    assert parse_labels({}) == {}
    assert parse_labels({"team": "ml", "k": ""}) == {"team": "ml", "k": ""}
    e = refused(parse_labels, {"team": 1})
    assert (e.at, str(e)) == (".team", "1 is not a label value (a string of at most 253 "
                                       "characters)")
    e = refused(parse_labels, {"": "x"})
    assert (e.at, str(e)) == (".", '"" is not a label key (1 to 253 characters)')
    e = refused(parse_labels, {str(i): "" for i in range(65)})
    assert e.at == "" and e.reason == "is not an object of at most 64 string labels"
    assert str(refused(parse_labels, ["a"])) == \
        '["a"] is not an object of at most 64 string labels'


def test_parse_bool():
    assert parse_bool(True) is True and parse_bool(False) is False
    for v, text in ((1, "1"), ("yes", '"yes"'), (None, "null"), ("true", '"true"')):
        assert str(refused(parse_bool, v)) == f"{text} is not true or false"


# ------------------------------------------------------------ one message everywhere
def cli_error(*argv: str) -> str:
    with pytest.raises(ctl.UsageError) as ei:
        ctl.parse_args(list(argv))
    return str(ei.value)


def api_error(op: str, **args) -> str:
    with pytest.raises(ApiError) as ei:
        parse_request(json.dumps({"v": 1, "op": op, "args": args}).encode())
    assert ei.value.code == "bad-request"
    return ei.value.message


def config_errors(text: str) -> list[str]:
    with pytest.raises(ConfigError) as ei:
        parse_config(text, "f.toml")
    return ei.value.errors


def hook_error(key: str, v: str) -> str:
    with pytest.raises(ValueError) as ei:
        container.validate({key: v}, "annotation")
    return str(ei.value)


def toml(v) -> str:
    return f'"{v}"' if isinstance(v, str) else str(v)


@pytest.mark.parametrize("key, v, parse", [
    ("memory", "4GB", parse_size), ("memory", "lots", parse_size),
    ("memory", "-1GiB", parse_size), ("memory", "1.1B", parse_size),
    ("compute", "130%", parse_percent), ("compute", "half", parse_percent),
    ("priority", "urgent", parse_priority), ("policy", "greedy", parse_policy),
])
def test_cli_api_config_and_hook_give_the_same_core_message(key, v, parse):
    """The same bad value gives one core text, worded by each layer around it."""
    core = refused(parse, v)
    assert api_error("set-quota", container="c1", **{key: v}) == f"args.{key}: {core}"
    assert config_errors(f"[defaults]\n{key} = {toml(v)}\n") == [f"f.toml: defaults.{key}: {core}"]
    assert config_errors(f"[profiles.p]\n{key} = {toml(v)}\n") == \
        [f"f.toml: profiles.p.{key}: {core}"]
    assert cli_error("set-quota", "c1", f"--{key}", v) == \
        f"invalid --{key} {quote(v)}: {core.reason.removeprefix('is ')}"
    assert hook_error(key, v) == f"vgpu.io/{key} {quote(v)}: {core.reason}"


@pytest.mark.parametrize("v", ["a/b", "", "..", "x" * 200])
def test_container_names_cli_and_api(v):
    core = refused(parse_container, v)
    assert api_error("show", container=v) == f"args.container: {core}"
    assert cli_error("show", v) == \
        f"invalid CONTAINER {quote(v)}: {core.reason.removeprefix('is ')}"
    assert cli_error("set-audit", v, "on").startswith(f"invalid CONTAINER {quote(v)}: ")


@pytest.mark.parametrize("v", ["bad name", "-x", "p" * 64])
def test_profile_names_cli_api_config_and_hook(v):
    core = refused(parse_profile, v)
    assert api_error("set-quota", container="c1", profile=v) == f"args.profile: {core}"
    assert config_errors(f'[profiles."{v}"]\nmemory = 1\n') == [f"f.toml: profiles.{v}: {core}"]
    assert cli_error("set-quota", "c1", "--profile", v) == \
        f"invalid --profile {quote(v)}: {core.reason.removeprefix('is ')}"
    assert hook_error("profile", v) == f"vgpu.io/profile {quote(v)}: {core.reason}"


@pytest.mark.parametrize("text", ["0,,1", "5000", "0,0", "GPU a"])
def test_gpu_text_cli_and_hook(text):
    core = refused(parse_gpus, text)
    assert cli_error("create", "c1", "--gpu", text) == \
        f"invalid --gpu {quote(text)}: {core.reason.removeprefix('is ')}"
    assert hook_error("gpus", text) == f"vgpu.io/gpus {quote(text)}: {core.reason}"


@pytest.mark.parametrize("gpus, where", [([-1], "[0]"), ([0, "1"], "[1]"), ([0, 0], "[1]"),
                                         ([True], "[0]")])
def test_gpu_lists_api_and_config(gpus, where):
    core = refused(parse_gpus, gpus)
    assert core.at == where
    assert api_error("create", container="c1", gpus=gpus) == f"args.gpus{where}: {core}"
    assert config_errors(f"[node]\ngpus = {quote(gpus)}\n") == [f"f.toml: node.gpus{where}: {core}"]


@pytest.mark.parametrize("v", ["abc", "0"])
def test_pids_cli_and_api(v):
    core = refused(parse_pid, v)
    assert cli_error("create", "c1", "--pid", v) == \
        f"invalid --pid {quote(v)}: {core.reason.removeprefix('is ')}"
    assert api_error("create", container="c1", pid=0) == "args.pid: 0 is not a process id"


def test_labels_cli_and_api():
    core = refused(parse_label, "novalue")
    assert cli_error("create", "c1", "--label", "novalue") == \
        f'invalid --label "novalue": {core.reason.removeprefix("is ")}'
    assert api_error("create", container="c1", labels={"team": 1}) == \
        f"args.labels.team: {refused(parse_labels, {'team': 1})}"


# ------------------------------------------------------------ cost
def test_values_imports_only_cheap_modules():
    """vgpuctl and the hook import vgpu.common.values on every start: no re, no
    third-party module; vgpu.abi.uapi for the kernel's names (their values in
    vgpu.abi.uapi_gen, generated from the netlink spec)."""
    code = ("import sys; before = set(sys.modules); import vgpu.common.values; "
            "print(' '.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert set(out) <= {"vgpu", "vgpu.common", "vgpu.common.values", "vgpu.abi", "vgpu.abi.uapi",
                        "vgpu.abi.uapi_gen", "math", "datetime", "_datetime", "__future__"}, out
