"""vgpu.daemon.config: the config file's schema, every error path, precedence, reload."""
import dataclasses
import datetime
import re
from pathlib import Path

import pytest

from vgpu.abi import uapi
from vgpu.abi.allowlist import AllowItem
from vgpu.daemon.config import (DEFAULT_CONFIG_PATH, AuditSpec, Config, ConfigError, Node, SliceSpec,
                         Window, describe_changes, load_config, parse_config)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config" / "vgpud.example.toml"
GiB = 1 << 30
MON = datetime.datetime(2024, 1, 1)     # a Monday
assert MON.weekday() == 0


def errors(text, path="f.toml"):
    with pytest.raises(ConfigError) as ei:
        parse_config(text, path)
    e = ei.value
    assert str(e) == "\n".join(e.errors)
    return e.errors


def one_error(text, path="f.toml"):
    errs = errors(text, path)
    assert len(errs) == 1, errs
    return errs[0]


# ---- the example and the defaults -----------------------------------------

def test_example_loads():
    c = load_config(EXAMPLE)
    assert c.path == str(EXAMPLE)
    assert c.profiles["small"] == SliceSpec(memory=4 * GiB, compute=25.0)
    assert c.defaults == SliceSpec(memory=4 * GiB, compute=25.0, priority="low", policy="share")
    assert len(c.schedule) == 3
    assert c.schedule[0].days == frozenset(range(5))


def test_example_documents_every_key():
    """Every key the parser knows appears (uncommented) in the example."""
    text = EXAMPLE.read_text()
    for key in ["socket", "state_dir", "fuse_mount", "group", "gpus", "placement",
                "oversubscribe_memory", "uvm", "over_quota_action", "max_channels", "memory",
                "compute", "priority", "policy", "period", "listen", "level", "interval",
                "label", "profile", "from", "to", "days", "audit", "enabled", "path",
                "raw_retention", "step", "retention", "max_size", "forecast",
                "forecast_label", "forecast_lead"]:
        assert re.search(rf"^{key} = ", text, re.M), key
    for section in ["paths", "api", "node", "defaults", "scheduler", "metrics", "log", "gc"]:
        assert f"[{section}]" in text
    # and every key of these tables, as the parser lists them (commented
    # out where the default is right for most nodes)
    for section in ["paths", "api", "scheduler", "metrics", "log", "gc", "history", "node",
                    "kubernetes", "rdma"]:
        (err,) = errors(f"[{section}]\nzz = 1")
        known = re.search(r"\(known: ([^)]*)\)", err).group(1).split(", ")
        for key in known:
            assert re.search(rf"^(# )?({key} = |\[{section}\.{key}\]$)", text, re.M), \
                f"{section}.{key}"


def test_docs_example_parses():
    """The example in docs/config.md is valid too."""
    md = (ROOT / "docs" / "config.md").read_text()
    block = md.split("```toml", 1)[1].split("```", 1)[0]
    parse_config(block, "docs/config.md")


def test_empty_file_gives_builtin_defaults():
    c = parse_config("")
    assert c.path == "<string>"
    assert c == Config(path="<string>")
    assert c.paths.socket == Path("/run/vgpu/vgpud.sock")
    assert c.paths.state_dir == Path("/var/lib/vgpu")
    assert c.node == Node()
    assert c.node.gpus == "all" and c.node.placement == "spread"
    assert c.node.oversubscribe_memory is False
    assert c.node.max_channels == 256
    assert c.defaults == SliceSpec(None, None, "low", "share")
    assert c.scheduler_period == 0.1 and c.gc_interval == 10.0
    assert c.metrics_listen == "127.0.0.1:19400" and c.log_level == "info"
    assert c.api_group == "" and c.profiles == {} and c.schedule == ()
    assert DEFAULT_CONFIG_PATH == "/etc/vgpu/vgpud.toml"


def test_config_is_frozen():
    c = parse_config("")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.log_level = "debug"


def test_values_parsed():
    c = parse_config('''
[paths]
socket = "/tmp/x.sock"
[api]
group = "vgpu"
[node]
gpus = [0, "GPU-abc"]
placement = "binpack"
oversubscribe_memory = true
uvm = "refuse"
over_quota_action = "kill"
max_channels = 64
[defaults]
memory = 1073741824
compute = 30
[scheduler]
period = 0.05
[metrics]
listen = ""
[log]
level = "DEBUG"
[gc]
interval = "2m"
''')
    assert c.paths.socket == Path("/tmp/x.sock")
    assert c.api_group == "vgpu"
    assert c.node == Node(gpus=(0, "GPU-abc"), placement="binpack", oversubscribe_memory=True,
                          uvm="refuse", over_quota_action="kill", max_channels=64)
    assert c.node.selects(0, "GPU-x") and c.node.selects(3, "GPU-abc")
    assert not c.node.selects(1, "GPU-def")
    assert c.defaults == SliceSpec(GiB, 30.0, "low", "share")
    assert c.scheduler_period == 0.05 and c.gc_interval == 120.0
    assert c.metrics_listen == "" and c.log_level == "debug"


# ---- TOML syntax -----------------------------------------------------------

@pytest.mark.parametrize("text, line", [
    ("[node]\nplacement = spread\n", 2),
    ("\n\n\n[node\n", 4),
    ("[node]\nuvm = \"count\"\nuvm = \"refuse\"\n", 3),
    ('[paths]\nsocket = "/x', 2),
])
def test_toml_syntax_error_has_line(text, line):
    e = one_error(text)
    assert e.startswith(f"f.toml:{line}: "), e


def test_unreadable_file(tmp_path):
    with pytest.raises(ConfigError) as ei:
        load_config(tmp_path / "nope.toml")
    assert str(ei.value).startswith(f"{tmp_path / 'nope.toml'}: cannot read")


def test_not_utf8(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_bytes(b"# ok\n[log]\nlevel = \"\xff\"\n")
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert str(ei.value).startswith(f"{p}:3: not UTF-8")


# ---- unknown keys and sections --------------------------------------------

@pytest.mark.parametrize("text, key", [
    ("[bogus]\nx = 1\n", "bogus"),
    ("top = 1\n", "top"),
    ("[paths]\nsock = \"/x\"\n", "paths.sock"),
    ("[api]\ngroups = \"x\"\n", "api.groups"),
    ("[node]\ngpu = \"all\"\n", "node.gpu"),
    ("[defaults]\nmem = \"1GiB\"\n", "defaults.mem"),
    ("[scheduler]\nperiod_ms = 100\n", "scheduler.period_ms"),
    ("[metrics]\naddress = \"\"\n", "metrics.address"),
    ("[log]\nfile = \"/x\"\n", "log.file"),
    ("[gc]\nperiod = \"1s\"\n", "gc.period"),
    ("[profiles.a]\nmemroy = \"1GiB\"\n", "profiles.a.memroy"),
    ('[profiles.a]\n[[schedule]]\nlabel="a=b"\nprofile="a"\nfrom="01:00"\nto="02:00"\nday=["mon"]\n',
     "schedule[0].day"),
])
def test_unknown_key(text, key):
    e = one_error(text)
    assert e.startswith(f"f.toml: {key}: unknown key"), e


# ---- every key's bad values -------------------------------------------------

BAD = [
    # (section, key, TOML value, expected dotted key, words in the reason)
    ("paths", "socket", '"relative.sock"', "paths.socket", "absolute"),
    ("paths", "socket", "5", "paths.socket", "not a string"),
    ("paths", "socket", '"/' + "s" * 107 + '"', "paths.socket", "too long for a Unix socket"),
    ("paths", "state_dir", '"var/lib"', "paths.state_dir", "absolute"),
    ("paths", "fuse_mount", "true", "paths.fuse_mount", "not a string"),
    ("api", "group", "5", "api.group", "not a string"),
    ("api", "group", '"bad group!"', "api.group", "not a group"),
    ("node", "gpus", '"some"', "node.gpus", "not \"all\""),
    ("node", "gpus", "0", "node.gpus", "not \"all\""),
    ("node", "gpus", "[]", "node.gpus", "selects no GPU"),
    ("node", "gpus", "[-1]", "node.gpus[0]", "negative"),
    ("node", "gpus", '[0, "1"]', "node.gpus[1]", "without quotes"),
    ("node", "gpus", '[""]', "node.gpus[0]", "not a GPU UUID"),
    ("node", "gpus", "[0, 0]", "node.gpus[1]", "twice"),
    ("node", "gpus", "[true]", "node.gpus[0]", "not a GPU index"),
    ("node", "gpus", "[1.5]", "node.gpus[0]", "not a GPU index"),
    ("node", "placement", '"random"', "node.placement", "spread, binpack"),
    ("node", "placement", "1", "node.placement", "spread, binpack"),
    ("node", "oversubscribe_memory", '"yes"', "node.oversubscribe_memory", "true or false"),
    ("node", "oversubscribe_memory", "1", "node.oversubscribe_memory", "true or false"),
    ("node", "uvm", '"allow"', "node.uvm", "count, refuse"),
    ("node", "over_quota_action", '"ignore"', "node.over_quota_action", "log, event, kill"),
    ("node", "max_channels", "true", "node.max_channels", "not an integer"),
    ("node", "max_channels", "1.5", "node.max_channels", "not an integer"),
    ("node", "max_channels", '"64"', "node.max_channels", "not an integer"),
    ("node", "max_channels", "-1", "node.max_channels", "negative"),
    ("node", "max_channels", "4294967296", "node.max_channels", "above 4294967295"),
    ("defaults", "memory", '"4GB"', "defaults.memory", "or 4Gi"),
    ("defaults", "memory", "-5", "defaults.memory", "negative"),
    ("defaults", "memory", "1.5", "defaults.memory", "not a size"),
    ("defaults", "memory", "true", "defaults.memory", "not a size"),
    ("defaults", "memory", '"lots"', "defaults.memory", "not a size"),
    ("defaults", "compute", '"130%"', "defaults.compute", "out of range"),
    ("defaults", "compute", '"half"', "defaults.compute", "not a percentage"),
    ("defaults", "compute", "[30]", "defaults.compute", "not a percentage"),
    ("defaults", "priority", '"urgent"', "defaults.priority", "high or low"),
    ("defaults", "priority", "1", "defaults.priority", "high or low"),
    ("defaults", "policy", '"greedy"', "defaults.policy", "share, fixed or burst"),
    ("scheduler", "period", '"0s"', "scheduler.period", "not positive"),
    ("scheduler", "period", '"fast"', "scheduler.period", "not a duration"),
    ("scheduler", "period", '"100us"', "scheduler.period", "out of range"),
    ("scheduler", "period", '"1m"', "scheduler.period", "out of range"),
    ("scheduler", "period", "true", "scheduler.period", "not a duration"),
    ("metrics", "listen", '"9400"', "metrics.listen", "host:port"),
    ("metrics", "listen", '":9400"', "metrics.listen", "host:port"),
    ("metrics", "listen", '"localhost:http"', "metrics.listen", "bad port"),
    ("metrics", "listen", '"localhost:0"', "metrics.listen", "bad port"),
    ("metrics", "listen", '"localhost:70000"', "metrics.listen", "bad port"),
    ("metrics", "listen", '"::1:9400"', "metrics.listen", "without brackets"),
    ("metrics", "listen", '"[zz::1]:9400"', "metrics.listen", "bad IPv6"),
    ("metrics", "listen", '"300.1.1.1:9400"', "metrics.listen", "bad IPv4"),
    ("metrics", "listen", '"bad_host!:9400"', "metrics.listen", "bad host name"),
    ("metrics", "listen", "9400", "metrics.listen", "not a string"),
    ("log", "level", '"verbose"', "log.level", "debug, info, warning, error"),
    ("log", "level", "3", "log.level", "debug, info, warning, error"),
    ("gc", "interval", '"-1s"', "gc.interval", "not positive"),
    ("gc", "interval", '"2d"', "gc.interval", "units"),
    ("gc", "interval", '"10ms"', "gc.interval", "out of range"),
]


@pytest.mark.parametrize("section, key, value, dotted, words", BAD,
                         ids=[f"{b[3]}={b[2]}" for b in BAD])
def test_bad_value(section, key, value, dotted, words):
    e = one_error(f"[{section}]\n{key} = {value}\n")
    assert e.startswith(f"f.toml: {dotted}: "), e
    assert words in e, e


@pytest.mark.parametrize("value, quoted", [('"4GB"', '"4GB"'), ("-5", "-5"), ('"lots"', '"lots"')])
def test_bad_value_is_quoted(value, quoted):
    e = one_error(f"[profiles.small]\nmemory = {value}\n", "/etc/vgpu/vgpud.toml")
    assert e.startswith(f"/etc/vgpu/vgpud.toml: profiles.small.memory: {quoted} "), e


def test_docs_error_example():
    e = one_error('[profiles.small]\nmemory = "4GB"\n', "/etc/vgpu/vgpud.toml")
    assert e == ('/etc/vgpu/vgpud.toml: profiles.small.memory: "4GB" is not a size: '
                 'write 4G (10^9 bytes) or 4Gi (2^30)')


@pytest.mark.parametrize("section", ["paths", "api", "node", "defaults", "scheduler", "metrics",
                                     "log", "gc", "profiles"])
def test_section_not_a_table(section):
    e = one_error(f'{section} = "x"\n')
    assert e.startswith(f'f.toml: {section}: "x" is a string, not a table'), e


def test_good_listen_addresses():
    for v in ["127.0.0.1:19400", "0.0.0.0:1", "[::1]:9400", "[::]:65535", "localhost:9400",
              "node-1.example.com:80", ""]:
        assert parse_config(f'[metrics]\nlisten = "{v}"\n').metrics_listen == v


@pytest.mark.parametrize("value", [0, 1, 256, 4096, 2**32 - 1])
def test_max_channels_accepted(value):
    assert parse_config(f"[node]\nmax_channels = {value}\n").node.max_channels == value


@pytest.mark.parametrize("value, quoted, words", [
    ("true", "true", "is a boolean, not an integer"),      # as TOML writes it
    ("false", "false", "is a boolean, not an integer"),
    ("1.5", "1.5", "is a number, not an integer"),
    ("64.0", "64.0", "is a number, not an integer"),
    ('"64"', '"64"', "is a string, not an integer"),
    ('"none"', '"none"', "is a string, not an integer"),
    ("[64]", "[64]", "is an array, not an integer"),
    ("-1", "-1", "is negative (0 means no cap)"),
    ("4294967296", "4294967296", "is above 4294967295"),
    ("18446744073709551615", "18446744073709551615", "is above 4294967295"),
])
def test_max_channels_refused_quoting_the_value(value, quoted, words):
    e = one_error(f"[node]\nmax_channels = {value}\n")
    assert e.startswith(f"f.toml: node.max_channels: {quoted} {words}"), e


def test_max_channels_change_is_described():
    a = parse_config("")
    b = parse_config("[node]\nmax_channels = 0\n")
    assert describe_changes(a, b) == ["node.max_channels: 256 -> no cap"]
    assert describe_changes(b, a) == ["node.max_channels: no cap -> 256"]


def test_group_by_number():
    assert parse_config('[api]\ngroup = "1001"\n').api_group == "1001"


def test_every_error_is_reported_at_once():
    errs = errors('''
[node]
placement = "random"
uvm = 5
[defaults]
memory = "4GB"
compute = "200%"
[log]
level = "loud"
[extra]
''')
    keys = [e.split(": ")[1] for e in errs]
    assert keys == ["extra", "node.placement", "node.uvm", "defaults.memory",
                    "defaults.compute", "log.level"]


# ---- profiles ----------------------------------------------------------------

def test_profiles():
    c = parse_config('''
[profiles.small]
memory = "4GiB"
compute = "25%"
[profiles."gpu.big_1"]
memory = "1.5GiB"
priority = "high"
policy = "fixed"
[profiles.empty]
''')
    assert c.profiles == {"small": SliceSpec(4 * GiB, 25.0), "gpu.big_1":
                          SliceSpec(3 * GiB // 2, None, "high", "fixed"), "empty": SliceSpec()}


@pytest.mark.parametrize("text, key, words", [
    ('[profiles]\nsmall = "4GiB"\n', "profiles.small", "not a table"),
    ('[profiles."bad name"]\nmemory = 1\n', "profiles.bad name", "not a profile name"),
    ('[profiles."-x"]\nmemory = 1\n', "profiles.-x", "not a profile name"),
    ('[profiles.a]\ncompute = "-1%"\n', "profiles.a.compute", "out of range"),
    ('[profiles.a]\npolicy = "fixd"\n', "profiles.a.policy", "share, fixed or burst"),
])
def test_bad_profile(text, key, words):
    e = one_error(text)
    assert e.startswith(f"f.toml: {key}: "), e
    assert words in e


# ---- schedule ------------------------------------------------------------------

SCHED = '''
[profiles.day]
compute = "70%"
[profiles.night]
compute = "20%"
[[schedule]]
label = "{label}"
profile = "{profile}"
from = {start}
to = {end}
{extra}
'''


def sched(label="vgpu.io/class=inference", profile="day", start='"08:00"', end='"20:00"',
          extra=""):
    return SCHED.format(label=label, profile=profile, start=start, end=end, extra=extra)


def test_schedule_parsed():
    c = parse_config(sched(extra='days = ["mon", "Wednesday", "fri-sun"]'))
    assert c.schedule == (Window("vgpu.io/class=inference", "day", datetime.time(8),
                                 datetime.time(20), frozenset({0, 2, 4, 5, 6})),)
    w = c.schedule[0]
    assert w.label_key == "vgpu.io/class" and w.label_value == "inference"


def test_schedule_toml_local_time():
    c = parse_config(sched(start="08:30:00", end="17:00:00"))
    assert c.schedule[0].start == datetime.time(8, 30)


def test_schedule_days_wrapping_range():
    c = parse_config(sched(extra='days = "sat-mon"'))
    assert c.schedule[0].days == frozenset({5, 6, 0})


@pytest.mark.parametrize("kw, key, words", [
    ({"profile": "evening"}, "schedule[0].profile", "not a defined profile (profiles: day, night)"),
    ({"label": "inference"}, "schedule[0].label", "not a label selector"),
    ({"label": "=x"}, "schedule[0].label", "not a label selector"),
    ({"label": "a=b c"}, "schedule[0].label", "not a label selector"),
    ({"start": '"25:00"'}, "schedule[0].from", "not a time of day"),
    ({"start": '"8am"'}, "schedule[0].from", "not a time of day"),
    ({"end": "2000"}, "schedule[0].to", "not a time of day"),
    ({"end": "20:00:30"}, "schedule[0].to", "whole minutes"),
    ({"end": '"08:00"'}, "schedule[0].to", "would be empty"),
    ({"extra": 'days = ["mon", "someday"]'}, "schedule[0].days[1]", "not a day"),
    ({"extra": 'days = ["mon-xyz"]'}, "schedule[0].days[0]", "not a day"),
    ({"extra": 'days = ["mon", "mon"]'}, "schedule[0].days[1]", "repeats a day"),
    ({"extra": 'days = ["mon-fri", "wed"]'}, "schedule[0].days[1]", "repeats a day"),
    ({"extra": "days = []"}, "schedule[0].days", "names no day"),
    ({"extra": "days = 5"}, "schedule[0].days", "not a list of days"),
    ({"extra": "days = [1]"}, "schedule[0].days[0]", "not a day"),
])
def test_bad_schedule(kw, key, words):
    e = one_error(sched(**kw))
    assert e.startswith(f"f.toml: {key}: "), e
    assert words in e, e


def test_schedule_unknown_profile_quotes_it():
    e = one_error(sched(profile="evening"))
    assert '"evening"' in e


def test_schedule_missing_keys():
    errs = errors('[[schedule]]\nlabel = "a=b"\n')
    assert [e.split(": ")[1] for e in errs] == ["schedule[0].profile", "schedule[0].from",
                                                "schedule[0].to"]
    assert all("missing" in e for e in errs)


def test_schedule_not_array_of_tables():
    e = one_error('schedule = "x"\n')
    assert e.startswith('f.toml: schedule: "x" is a string, not an array of tables')
    e = one_error('schedule = [1]\n')
    assert e.startswith("f.toml: schedule[0]: 1 is an integer, not a table")


def test_schedule_naming_a_broken_profile_reports_only_the_profile():
    errs = errors(sched(profile="bad") + '[profiles.bad]\nmemory = "4GB"\n')
    assert len(errs) == 1 and errs[0].startswith("f.toml: profiles.bad.memory"), errs


# ---- windows ----------------------------------------------------------------

def at(day, hh, mm=0):
    return MON + datetime.timedelta(days=day, hours=hh, minutes=mm)


def test_window_plain():
    w = Window("a=b", "p", datetime.time(8), datetime.time(20), frozenset({0}))
    assert not w.active(at(0, 7, 59))
    assert w.active(at(0, 8))
    assert w.active(at(0, 19, 59))
    assert not w.active(at(0, 20))        # [from, to)
    assert not w.active(at(1, 9))         # Tuesday not listed


def test_window_wraps_past_midnight():
    w = Window("a=b", "p", datetime.time(20), datetime.time(8), frozenset({4}))   # Friday night
    assert not w.active(at(4, 19, 59))
    assert w.active(at(4, 20))
    assert w.active(at(4, 23, 59))
    assert w.active(at(5, 0))             # Saturday morning belongs to Friday's window
    assert w.active(at(5, 7, 59))
    assert not w.active(at(5, 8))
    assert not w.active(at(5, 21))        # Saturday evening: not a listed day
    assert not w.active(at(4, 3))         # Friday early morning belongs to Thursday's


def test_window_every_day_wrap():
    w = Window("a=b", "p", datetime.time(22), datetime.time(6))
    for d in range(7):
        assert w.active(at(d, 23)) and w.active(at(d, 5)) and not w.active(at(d, 12))


def test_window_aware_datetime_uses_wall_clock():
    w = Window("a=b", "p", datetime.time(8), datetime.time(20))
    tz = datetime.timezone(datetime.timedelta(hours=9))
    assert w.active(datetime.datetime(2024, 1, 1, 9, tzinfo=tz))


def test_window_profile_first_match_wins():
    c = parse_config(sched() + '''
[[schedule]]
label = "vgpu.io/class=inference"
profile = "night"
from = "00:00"
to = "23:59"
''')
    inf = {"vgpu.io/class": "inference", "other": "x"}
    assert c.window_profile(inf, at(0, 9)) == "day"
    assert c.window_profile(inf, at(0, 21)) == "night"
    assert c.window_profile({"vgpu.io/class": "training"}, at(0, 9)) is None
    assert c.window_profile({}, at(0, 9)) is None


# ---- effective settings ---------------------------------------------------------

def effective_config():
    return parse_config('''
[defaults]
memory = "2GiB"
compute = "10%"
priority = "low"
policy = "share"
[profiles.small]
memory = "4GiB"
compute = "25%"
[profiles.day]
compute = "70%"
priority = "high"
[[schedule]]
label = "class=inference"
profile = "day"
from = "08:00"
to = "20:00"
''')


def test_effective_defaults_only():
    c = effective_config()
    assert c.effective(SliceSpec(), None, {}, at(0, 9)) == SliceSpec(2 * GiB, 10.0, "low", "share")


def test_effective_profile_over_defaults():
    c = effective_config()
    assert c.effective(SliceSpec(), "small", {}, at(0, 9)) == SliceSpec(4 * GiB, 25.0, "low",
                                                                       "share")


def test_effective_explicit_over_profile():
    c = effective_config()
    got = c.effective(SliceSpec(memory=GiB, policy="fixed"), "small", {}, at(0, 9))
    assert got == SliceSpec(GiB, 25.0, "low", "fixed")


def test_effective_window_over_own_profile_then_back():
    c = effective_config()
    labels = {"class": "inference"}
    # by day the window's profile replaces the slice's own ("small" sets memory 4GiB,
    # "day" does not: memory then comes from [defaults])
    assert c.effective(SliceSpec(), "small", labels, at(0, 9)) == SliceSpec(2 * GiB, 70.0,
                                                                           "high", "share")
    # explicit values still win over the window
    assert c.effective(SliceSpec(compute=5), "small", labels, at(0, 9)).compute == 5.0
    # out of the window, its own profile again
    assert c.effective(SliceSpec(), "small", labels, at(0, 21)) == SliceSpec(4 * GiB, 25.0,
                                                                            "low", "share")
    # a slice without the label is not affected
    assert c.effective(SliceSpec(), "small", {"class": "training"}, at(0, 9)).compute == 25.0


def test_effective_unknown_profile():
    with pytest.raises(ValueError, match='profile "nope" is not defined'):
        effective_config().effective(SliceSpec(), "nope", {}, at(0, 9))


def test_merged_over():
    a = SliceSpec(memory=1, priority="high")
    b = SliceSpec(memory=2, compute=3.0, priority="low", policy="burst")
    assert a.merged_over(b) == SliceSpec(1, 3.0, "high", "burst")
    assert b.merged_over(a) == b
    assert SliceSpec().merged_over(b) == b
    assert a.merged_over(SliceSpec()) == a


def test_slicespec_from_values():
    assert SliceSpec.from_values("8GiB", "30%", "high", "fixed") == SliceSpec(8 * GiB, 30.0,
                                                                              "high", "fixed")
    assert SliceSpec.from_values() == SliceSpec()
    with pytest.raises(ValueError, match=r'^memory: "4GB" is not a size'):
        SliceSpec.from_values(memory="4GB")
    with pytest.raises(ValueError, match=r'^policy: "x" is not a policy'):
        SliceSpec.from_values(policy="x")
    s = SliceSpec(GiB, 12.5, "low", "burst")
    assert SliceSpec.from_dict(s.to_dict()) == s


# ---- reload: describe_changes ------------------------------------------------------

def test_describe_no_changes():
    c = load_config(EXAMPLE)
    assert describe_changes(c, load_config(EXAMPLE)) == []


def test_describe_changes():
    old = parse_config('''
[paths]
socket = "/run/a.sock"
[scheduler]
period = "100ms"
[profiles.small]
memory = "4GiB"
[profiles.gone]
compute = 5
[[schedule]]
label = "a=b"
profile = "small"
from = "08:00"
to = "20:00"
''')
    new = parse_config('''
[paths]
socket = "/run/b.sock"
[scheduler]
period = "50ms"
[node]
oversubscribe_memory = true
[profiles.small]
memory = "6GiB"
priority = "high"
[profiles.new]
memory = "1GiB"
[[schedule]]
label = "a=b"
profile = "small"
from = "09:00"
to = "20:00"
days = ["mon-fri"]
[[schedule]]
label = "c=d"
profile = "new"
from = "20:00"
to = "08:00"
''')
    lines = describe_changes(old, new)
    assert lines == [
        'paths.socket: "/run/a.sock" -> "/run/b.sock" (takes effect on restart)',
        "node.oversubscribe_memory: false -> true",
        "scheduler.period: 100ms -> 50ms",
        "profiles.small.memory: 4 GiB -> 6 GiB",
        'profiles.small.priority: unset -> "high"',
        "profiles.gone: removed",
        "profiles.new: added (memory 1 GiB)",
        "schedule[0]: a=b gets small 08:00-20:00 every day -> a=b gets small 09:00-20:00 "
        "mon-fri",
        "schedule[1]: added (c=d gets new 20:00-08:00 every day)",
    ]
    back = describe_changes(new, old)
    assert "schedule[1]: removed (c=d gets new 20:00-08:00 every day)" in back


@pytest.mark.parametrize("days, text", [
    (range(7), "every day"), (range(5), "mon-fri"), ({0, 1}, "mon,tue"),
    ({0, 2, 3, 4, 6}, "mon,wed-fri,sun"), ({5, 6}, "sat,sun"),
])
def test_window_describe_days(days, text):
    w = Window("a=b", "p", datetime.time(8), datetime.time(9), frozenset(days))
    assert w.describe() == f"a=b gets p 08:00-09:00 {text}"


# ---- profile limits and requests from images (the operator bounds them) ---

LIMITED = """
[profiles.small]
memory = "4GiB"
compute = "25%"
max_memory = "8GiB"
max_compute = "50%"
allow_priorities = ["low"]
allow_policies = ["share", "burst"]
allow_image_env = true
[profiles.big]
memory = "16GiB"
"""


def test_example_limits_parse_when_uncommented():
    text = EXAMPLE.read_text()
    block = re.search(r"\[profiles\.small\]\n(?:.*\n)*?\n", text).group(0)
    assert "# allow_image_env = true" in block
    c = parse_config(text.replace(block, block.replace("# ", "")), "example")
    assert c.limits["small"].allow_image_env and c.image_env_profiles == ["small"]


def test_limits_parse_and_admit():
    c = parse_config(LIMITED)
    lim = c.limits["small"]
    assert (lim.max_memory, lim.max_compute) == (8 * GiB, 50.0)
    assert lim.allow_priorities == ("low",) and lim.allow_policies == ("share", "burst")
    assert c.image_env_profiles == ["small"] and "big" not in c.limits
    c.admit(SliceSpec(memory=8 * GiB, compute=50.0), "small")
    c.admit(SliceSpec(memory=64 * GiB, priority="high"), "big")      # no limits there
    c.admit(SliceSpec(memory=64 * GiB), None)                         # nor without a profile
    c.admit(SliceSpec(memory=6 * GiB), "small", from_image=True)


@pytest.mark.parametrize("spec,profile,from_image,words", [
    (SliceSpec(memory=16 * GiB), "small", False, 'memory 16 GiB exceeds profile "small"\'s '
                                                 'max_memory 8 GiB'),
    (SliceSpec(compute=80.0), "small", False, 'compute 80% exceeds profile "small"\'s '
                                              'max_compute 50%'),
    (SliceSpec(priority="high"), "small", False, 'priority "high" is not allowed by profile '
                                                 '"small" (allow_priorities: low)'),
    (SliceSpec(policy="fixed"), "small", False, 'policy "fixed" is not allowed by profile '
                                                '"small" (allow_policies: share, burst)'),
    (SliceSpec(memory=4 * GiB), None, True, "needs a profile with allow_image_env = true; "
                                            "none was named (such profiles: small)"),
    (SliceSpec(memory=4 * GiB), "big", True, 'profile "big" does not have it'),
    (SliceSpec(memory=16 * GiB), "small", True, "max_memory 8 GiB"),
])
def test_admit_refuses_quoting_value_and_limit(spec, profile, from_image, words):
    with pytest.raises(ValueError) as ei:
        parse_config(LIMITED).admit(spec, profile, from_image)
    assert words in str(ei.value), str(ei.value)


@pytest.mark.parametrize("body,words", [
    ('max_memory = "8GB"', 'profiles.p.max_memory: "8GB" is not a size'),
    ("max_memory = 0", "profiles.p.max_memory: 0 is zero"),
    ('max_compute = "150%"', "profiles.p.max_compute: "),
    ('allow_priorities = "low"', 'profiles.p.allow_priorities: "low" is not a non-empty list'),
    ("allow_priorities = []", "profiles.p.allow_priorities: [] is not a non-empty list"),
    ('allow_policies = ["share", "greedy"]', 'profiles.p.allow_policies[1]: "greedy" is not a '
                                             'policy (share, fixed or burst)'),
    ('allow_policies = ["share", "share"]', 'profiles.p.allow_policies[1]: "share" is listed twice'),
    ('allow_image_env = "yes"', 'profiles.p.allow_image_env: "yes" is not true or false'),
    ("allow_image_env = true", "profiles.p.allow_image_env: true needs max_memory and "
                               "max_compute in [profiles.p]"),
    ('memory = "12GiB"\nmax_memory = "8GiB"', "profiles.p: its own settings (over [defaults]) "
                                              "break its limits: memory 12 GiB exceeds"),
    ('allow_policies = ["fixed"]', 'policy "share" is not allowed by profile "p"'),
    ("max_memry = 1", "profiles.p.max_memry: unknown key (known: memory, compute, priority, "
                      "policy, max_memory, max_compute, allow_priorities, allow_policies, "
                      "allow_image_env, allow_rdma, audit, allow_list, forecast, forecast_label, "
                      "forecast_lead)"),
])
def test_limit_errors(body, words):
    e = one_error(f'[defaults]\nmemory = "4GiB"\n[profiles.p]\n{body}\n')
    assert e.startswith("f.toml: ") and words in e, e


def test_describe_limit_changes():
    a = parse_config(LIMITED)
    b = parse_config(LIMITED.replace('max_memory = "8GiB"', 'max_memory = "12GiB"'))
    (line,) = describe_changes(a, b)
    assert line.startswith("profiles.small limits: max_memory 8 GiB") and "12 GiB" in line


# ---- audit mode and allow-lists --------------------------------------------

ALLOW = "kind\tnumber\tname\ncontrol\t0x20800a3e\t\nescape\t0x5c\tNV_ESC_RM_EXPORT_OBJECT_TO_FD\n"


def _audit_config(tmp_path, body, allow=ALLOW, name="trial.allow"):
    f = tmp_path / name
    if allow is not None:
        f.write_text(allow)
    return f'[defaults]\nmemory = "4GiB"\n[profiles.trial]\n{body.format(f=f)}\n'


def test_audit_keys_parse(tmp_path):
    c = parse_config(_audit_config(tmp_path, 'audit = true\nallow_list = "{f}"'))
    a = c.audit_of("trial")
    assert a.audit is True and a.allow_list == str(tmp_path / "trial.allow")
    assert a.allow == (AllowItem.of("escape", 0x5C, "NV_ESC_RM_EXPORT_OBJECT_TO_FD"),
                       AllowItem.of("control", 0x20800A3E))
    assert a.pairs == [(uapi.VGPU_AUDIT_ESCAPE, 0x5C), (uapi.VGPU_AUDIT_CONTROL, 0x20800A3E)]
    assert a.describe() == f'audit mode, allow_list "{tmp_path}/trial.allow" (2 items)'
    # the audit keys are not slice settings nor limits
    assert c.profiles["trial"] == SliceSpec() and "trial" not in c.limits
    # a profile that sets neither, no profile, an unknown profile: nothing
    c = parse_config(_audit_config(tmp_path, "audit = false") + '[profiles.plain]\nmemory = 1\n')
    assert c.audit == {} and c.audit_of("trial") == AuditSpec()
    assert c.audit_of(None) == c.audit_of("plain") == c.audit_of("nope") == AuditSpec()
    assert AuditSpec().describe() == "no audit mode, no allow-list"
    c = parse_config(_audit_config(tmp_path, 'allow_list = "{f}"'))
    assert c.audit_of("trial").audit is False and len(c.audit_of("trial").allow) == 2


def test_example_allow_list_parses_when_uncommented(tmp_path):
    text = EXAMPLE.read_text()
    line = '# allow_list = "/etc/vgpu/trial.allow"'
    assert line in text
    f = tmp_path / "trial.allow"
    f.write_text(ALLOW)
    c = parse_config(text.replace(line, f'allow_list = "{f}"'), "example")
    assert len(c.audit_of("trial").allow) == 2 and c.audit_of("trial").audit is False


@pytest.mark.parametrize("body,allow,words", [
    ('audit = "yes"', None, 'profiles.trial.audit: "yes" is a string, not true or false'),
    ("audit = 1", None, "profiles.trial.audit: 1 is an integer, not true or false"),
    ("allow_list = 5", None, "profiles.trial.allow_list: 5 is an integer, not a path"),
    ('allow_list = "trial.allow"', None, 'profiles.trial.allow_list: "trial.allow" is not an '
                                         'absolute path (e.g. "/etc/vgpu/trial.allow")'),
    ('allow_list = "{f}"', None, "profiles.trial.allow_list: {f}: cannot read: No such file "
                                 "or directory"),
    ('allow_list = "{f}"', "kind\tnumber\tname\nctrl\t0x1\n",
     'profiles.trial.allow_list: {f}:2: kind "ctrl" is not one of escape, class, control, uvm'),
    ('allow_list = "{f}"', "kind\tnumber\tname\n# c\ncontrol\t20800a3e\n",
     'profiles.trial.allow_list: {f}:3: number "20800a3e" is not a hexadecimal number with 0x'),
    ('allow_list = "{f}"', "control\t0x1\n",
     'profiles.trial.allow_list: {f}:1: "control\\t0x1" is not the header'),
    ('allow_list = "{f}"', "kind\tnumber\tname\n" +
     "".join(f"control\t0x{i:08x}\n" for i in range(uapi.VGPU_MAX_ALLOW + 1)),
     f"profiles.trial.allow_list: {{f}}:{uapi.VGPU_MAX_ALLOW + 2}: control 0x00001000: more than "
     f"4096 items (VGPU_MAX_ALLOW"),
])
def test_audit_errors_name_file_line_and_value(tmp_path, body, allow, words):
    e = one_error(_audit_config(tmp_path, body, allow))
    f = tmp_path / "trial.allow"
    assert e.startswith("f.toml: ") and words.format(f=f) in e, e


def test_allow_list_errors_are_all_reported(tmp_path):
    errs = errors(_audit_config(tmp_path, 'audit = "on"\nallow_list = "{f}"',
                                "kind\tnumber\tname\nctrl\t0x1\nclass\t1\n"))
    f = tmp_path / "trial.allow"
    assert errs == [
        'f.toml: profiles.trial.audit: "on" is a string, not true or false',
        f'f.toml: profiles.trial.allow_list: {f}:2: kind "ctrl" is not one of escape, class, '
        f'control, uvm',
        f'f.toml: profiles.trial.allow_list: {f}:3: number "1" is not a hexadecimal number '
        f'with 0x (e.g. 0x20800145)',
    ]


def test_load_config_reads_the_allow_list(tmp_path):
    cfg = tmp_path / "vgpud.toml"
    cfg.write_text(_audit_config(tmp_path, 'allow_list = "{f}"'))
    assert len(load_config(cfg).audit_of("trial").allow) == 2


def test_describe_audit_changes(tmp_path):
    a = parse_config(_audit_config(tmp_path, "audit = false"))
    b = parse_config(_audit_config(tmp_path, 'audit = true\nallow_list = "{f}"'))
    f = tmp_path / "trial.allow"
    note = " (slices created from now on)"
    assert describe_changes(a, b) == [
        "profiles.trial.audit: false -> true" + note,
        f'profiles.trial.allow_list: unset -> "{f}" (2 items)' + note,
    ]
    assert describe_changes(b, b) == []
    # the same file, other contents: a reload says so
    (tmp_path / "trial.allow").write_text(ALLOW + "uvm\t0x00000049\t\n")
    c = parse_config(_audit_config(tmp_path, 'audit = true\nallow_list = "{f}"', allow=None))
    assert describe_changes(b, c) == [
        f'profiles.trial.allow_list: "{f}": contents changed, 2 items -> 3 items' + note]


# ---- [kubernetes] (the device plugin vgpud runs) ---------------------------

def test_kubernetes_defaults_and_values():
    k = parse_config("").kubernetes
    assert (k.device_plugin, str(k.kubelet_dir), k.profile, k.oversubscribe_factor,
            k.runtime_guard) == (False, "/var/lib/kubelet/device-plugins", "", 2.0, True)
    k = parse_config('[kubernetes]\ndevice_plugin = true\nkubelet_dir = "/k/dp"\n'
                     'profile = "small"\noversubscribe_factor = 1.5\nruntime_guard = false\n'
                     '[node]\noversubscribe_memory = true\n'
                     '[profiles.small]\nmemory = "4GiB"\n').kubernetes
    assert (k.device_plugin, str(k.kubelet_dir), k.profile, k.oversubscribe_factor,
            k.runtime_guard) == (True, "/k/dp", "small", 1.5, False)


@pytest.mark.parametrize("body,error", [
    ('foo = 1', 'kubernetes.foo: unknown key (known: device_plugin, kubelet_dir, profile, '
                'oversubscribe_factor, runtime_guard, pod_requests, namespace_profiles, '
                'dra_plugin, dra_admin_access, node_name, api_server, cdi_dir)'),
    ('dra_admin_access = true', 'kubernetes.dra_admin_access: has no effect without '
                                'kubernetes.dra_plugin = true'),
    ('dra_plugin = true\ndra_admin_access = "yes"',
     'kubernetes.dra_admin_access: "yes" is not true or false'),
    ('dra_plugin = 1', 'kubernetes.dra_plugin: 1 is not true or false'),
    ('dra_plugin = true\nkubelet_dir = "/' + "d" * 70 + '/dp"',
     "parent is too long for the DRA plugin's Unix sockets in it (at most 69 bytes)"),
    ('node_name = "Node_1"', 'kubernetes.node_name: "Node_1" is not a Kubernetes node name'),
    ('api_server = "10.0.0.1:6443"', 'kubernetes.api_server: "10.0.0.1:6443" is not an '
                                     'http(s) URL'),
    ('cdi_dir = "run/cdi"', 'kubernetes.cdi_dir: "run/cdi" is not an absolute path'),
    ('pod_requests = "some"', 'kubernetes.pod_requests: "some" is not one of allocated, any'),
    ('pod_requests = "any"\n[kubernetes.namespace_profiles]\nteam = []',
     'kubernetes.namespace_profiles: has no effect: kubernetes.pod_requests is "any"'),
    ('pod_requests = "allocated"\nnamespace_profiles = 1',
     'kubernetes.namespace_profiles: 1 is an integer, not a table'),
    ('pod_requests = "allocated"\n[kubernetes.namespace_profiles]\nTeam_A = []',
     'kubernetes.namespace_profiles.Team_A: "Team_A" is not a Kubernetes namespace name'),
    ('pod_requests = "allocated"\n[kubernetes.namespace_profiles]\nteam = "small"',
     'kubernetes.namespace_profiles.team: "small" is a string, not an array of profile names'),
    ('pod_requests = "allocated"\n[kubernetes.namespace_profiles]\nteam = ["big"]',
     'kubernetes.namespace_profiles.team: "big" is not a defined profile'),
    ('runtime_guard = "no"', 'kubernetes.runtime_guard: "no" is not true or false'),
    ('device_plugin = "yes"', 'kubernetes.device_plugin: "yes" is not true or false'),
    ('kubelet_dir = "var/lib"', 'kubernetes.kubelet_dir: "var/lib" is not an absolute path'),
    ('kubelet_dir = "/' + "d" * 90 + '"', "is too long for the plugin's Unix sockets in it "
                                          "(at most 81 bytes)"),
    ('profile = "nope"', 'kubernetes.profile: "nope" is not a defined profile '
                         '(profiles: none defined)'),
    ('profile = 3', 'kubernetes.profile: 3 is an integer, not a string'),
    ('oversubscribe_factor = 2', 'kubernetes.oversubscribe_factor: 2 has no effect: '
                                 'node.oversubscribe_memory is false'),
    ('oversubscribe_factor = "2"', 'kubernetes.oversubscribe_factor: "2" is a string, not a number'),
    ('oversubscribe_factor = true', 'kubernetes.oversubscribe_factor: true is a boolean'),
])
def test_kubernetes_errors(body, error):
    e = one_error(f"[kubernetes]\n{body}\n", "f.toml")
    assert e.startswith("f.toml: kubernetes."), e
    assert error in e, e


@pytest.mark.parametrize("v", ["0.5", "17", "nan"])
def test_kubernetes_factor_range(v):
    e = one_error(f"[node]\noversubscribe_memory = true\n[kubernetes]\noversubscribe_factor = {v}\n")
    assert f"kubernetes.oversubscribe_factor: {v} is out of range (1 to 16)" in e


def test_kubernetes_pod_requests_and_namespace_profiles():
    """pod_requests follows device_plugin unless set; a namespace's profiles
    are its own and "*"'s."""
    assert parse_config("").kubernetes.pod_requests == "any"
    assert parse_config("[kubernetes]\ndevice_plugin = true\n").kubernetes.pod_requests == \
        "allocated"
    k = parse_config('[profiles.a]\nmemory = "1GiB"\n[profiles.b]\npriority = "high"\n'
                     '[kubernetes]\ndevice_plugin = true\npod_requests = "allocated"\n'
                     '[kubernetes.namespace_profiles]\nteam-a = ["b", "a", "b"]\n'
                     '"*" = ["a"]\n').kubernetes
    assert k.namespace_profiles == {"team-a": ("b", "a"), "*": ("a",)}
    assert (k.profiles_for("team-a"), k.profiles_for("other")) == (("a", "b"), ("a",))
    a = parse_config('[profiles.a]\n[kubernetes]\ndevice_plugin = true\n')
    b = parse_config('[profiles.a]\n[kubernetes]\ndevice_plugin = true\n'
                     '[kubernetes.namespace_profiles]\nteam-a = ["a"]\n')
    assert describe_changes(a, b) == ['kubernetes.namespace_profiles: {} -> {"team-a" = ["a"]}']


def test_kubernetes_dra_plugin_keys():
    k = parse_config("").kubernetes
    assert (k.dra_plugin, k.node_name, k.api_server, str(k.cdi_dir)) == (
        False, "", "", "/var/run/cdi")
    k = parse_config('[kubernetes]\ndra_plugin = true\nnode_name = "gpu-7.example.com"\n'
                     'api_server = "https://10.0.0.1:6443"\ncdi_dir = "/etc/cdi"\n').kubernetes
    assert (k.dra_plugin, k.node_name, k.api_server, str(k.cdi_dir)) == (
        True, "gpu-7.example.com", "https://10.0.0.1:6443", "/etc/cdi")
    assert describe_changes(parse_config(""), parse_config("[kubernetes]\ndra_plugin = true\n")) \
        == ["kubernetes.dra_plugin: false -> true"]
    k = parse_config("[kubernetes]\ndra_plugin = true\ndra_admin_access = true\n").kubernetes
    assert k.dra_admin_access is True


def test_kubernetes_not_a_table_and_reload_lines():
    assert 'kubernetes: 1 is an integer, not a table (write [kubernetes])' in one_error("kubernetes = 1")
    a = parse_config("")
    b = parse_config('[kubernetes]\ndevice_plugin = true\n')
    assert describe_changes(a, b) == ["kubernetes.device_plugin: false -> true",
                                      'kubernetes.pod_requests: "any" -> "allocated"']


# ---- [history] and forecasts ------------------------------------------------

def test_history_defaults_and_example():
    from vgpu.daemon.config import ForecastSpec, History
    c = parse_config("")
    assert c.history == History() and c.history.enabled
    assert c.history.db_path(c.paths.state_dir) == c.paths.state_dir / "history.db"
    assert (c.history.interval, c.history.step, c.history.raw_retention,
            c.history.retention, c.history.max_size) == (10.0, 300.0, 86400.0, 35 * 86400.0,
                                                          256 << 20)
    assert c.forecasts == {} and c.forecast_of("anything") == ForecastSpec()
    e = load_config(EXAMPLE)
    assert e.history.path == Path("/var/lib/vgpu/history.db")
    assert e.forecast_of("web") == ForecastSpec("recommend", "team=web", 1800.0)
    assert e.forecast_of("small").mode == "off"


def test_history_values():
    c = parse_config('[paths]\nstate_dir = "/s"\n[history]\nenabled = false\n'
                     'interval = "30s"\nraw_retention = "2d"\nstep = "15m"\n'
                     'retention = "2w"\nmax_size = "64Mi"\n')
    h = c.history
    assert (h.enabled, h.interval, h.raw_retention, h.step, h.retention, h.max_size) == \
        (False, 30.0, 2 * 86400.0, 900.0, 14 * 86400.0, 64 << 20)
    assert h.db_path(c.paths.state_dir) == Path("/s/history.db")


@pytest.mark.parametrize("body, words", [
    ("foo = 1", "history.foo: unknown key (known: enabled, path, interval, raw_retention, "
                "step, retention, max_size)"),
    ('enabled = "yes"', 'history.enabled: "yes" is not true or false'),
    ('path = "h.db"', 'history.path: "h.db" is not an absolute path'),
    ('interval = "0.5s"', 'history.interval: "0.5s" is out of range (1s to 1h)'),
    ('interval = "often"', 'history.interval: "often" is not a duration'),
    ('interval = "10m"', 'history.interval: "10m" is not shorter than step (5m)'),
    ('step = "7m"', 'history.step: "7m" does not divide a day'),
    ('step = "10s"', 'history.step: "10s" is out of range (1m to 1d)'),
    ('retention = "3x"', 'history.retention: "3x" is not a duration (units: ms, s, m, h, d, w'),
    ('retention = "12h"', 'history.retention: "12h" is shorter than raw_retention (1d)'),
    ('raw_retention = "1m"', 'history.raw_retention: "1m" is out of range (5m to 3660d)'),
    ('max_size = "1k"', 'history.max_size: "1k" is below 1 MiB'),
    ('max_size = "lots"', 'history.max_size: "lots" is not a size'),
])
def test_history_errors(body, words):
    e = one_error(f"[history]\n{body}\n")
    assert e.startswith("f.toml: ") and words in e, e


@pytest.mark.parametrize("body, words", [
    ('forecast = "act"', 'profiles.p.forecast: "act" needs forecast_label'),
    ('forecast = "maybe"\nforecast_label = "a=b"',
     'profiles.p.forecast: "maybe" is not one of off, recommend, act'),
    ('forecast = "act"\nforecast_label = "team"',
     'profiles.p.forecast_label: "team" is not a label selector'),
    ('forecast_lead = "10s"', 'profiles.p.forecast_lead: "10s" is out of range (1m to 24h)'),
    ('forecast_lead = "soon"', 'profiles.p.forecast_lead: "soon" is not a duration'),
])
def test_forecast_errors(body, words):
    e = one_error(f'[defaults]\nmemory = "4GiB"\n[profiles.p]\n{body}\n')
    assert e.startswith("f.toml: ") and words in e, e


def test_history_and_forecast_changes_described():
    a = parse_config('[profiles.p]\nmemory = "1GiB"\n')
    b = parse_config('[history]\ninterval = "20s"\n[profiles.p]\nmemory = "1GiB"\n'
                     'forecast = "act"\nforecast_label = "a=b"\n')
    lines = describe_changes(a, b)
    assert "history.interval: 10s -> 20s (takes effect on restart)" in lines
    assert "profiles.p: forecast off -> forecast act for a=b, lead 30m" in lines


def test_rdma_limits():
    c = parse_config("")
    assert (c.rdma.hca_handles, c.rdma.hca_objects) == (16, 65536)
    c = parse_config("[rdma]\nhca_handles = 4\nhca_objects = 1000\n")
    assert (c.rdma.hca_handles, c.rdma.hca_objects) == (4, 1000)
    assert describe_changes(parse_config(""), c) == ["rdma.hca_handles: 16 -> 4",
                                                     "rdma.hca_objects: 65536 -> 1000"]
    assert one_error("[rdma]\nhca_handles = 0") == \
        "f.toml: rdma.hca_handles: 0 is not a whole number from 1 to 65536"
    assert one_error('[rdma]\nhca_objects = "many"') == \
        'f.toml: rdma.hca_objects: "many" is not a whole number from 1 to 16777216'
    assert "rdma.max: unknown key (known: hca_handles, hca_objects)" in \
        one_error("[rdma]\nmax = 1")
