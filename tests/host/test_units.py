"""vgpu.values: the value parsers shared by the config file, the API and vgpuctl."""
import datetime
import subprocess
import sys

import pytest

from vgpu.values import (format_duration, format_percent, format_size, parse_clock,
                        parse_duration, parse_percent, parse_size, quote)

GiB = 1 << 30
MiB = 1 << 20


@pytest.mark.parametrize("v, n", [
    (0, 0), (4096, 4096), ("4096", 4096), (" 4096 ", 4096),
    ("8GiB", 8 * GiB), ("8gib", 8 * GiB), ("8 GiB", 8 * GiB), ("8G", 8 * GiB), ("8g", 8 * GiB),
    ("512MiB", 512 * MiB), ("512M", 512 * MiB), ("1KiB", 1024), ("1k", 1024),
    ("1TiB", 1 << 40), ("2T", 2 << 40), ("100B", 100), ("100b", 100),
    ("1.5GiB", 3 * GiB // 2), ("0.5KiB", 512), (".5MiB", 512 * 1024), ("2.MiB", 2 * MiB),
])
def test_parse_size_good(v, n):
    assert parse_size(v) == n
    assert type(parse_size(v)) is int


@pytest.mark.parametrize("v, words", [
    (-1, "negative"), ("-4GiB", "negative"), ("4GB", "decimal units"), ("4 gb", "decimal units"),
    ("4MB", "MiB"), ("abc", "not a size"), ("", "not a size"), ("GiB", "not a size"),
    ("1.1B", "whole number"), ("0.3KiB", "whole number"), ("1..5G", "not a size"),
    ("4 XiB", "not a size"), ("1e9", "not a size"), ("0x10", "not a size"), ("4GiB!", "not a size"),
    (True, "not a size"), (False, "not a size"), (1.5, "not a size"), (None, "not a size"),
    ([4], "not a size"), (1 << 70, "too large"), ("99999999TiB", "too large"),
])
def test_parse_size_bad(v, words):
    with pytest.raises(ValueError) as ei:
        parse_size(v)
    msg = str(ei.value)
    assert words in msg
    assert msg.startswith(quote(v))


def test_parse_size_decimal_hint_names_binary_unit():
    with pytest.raises(ValueError, match=r'"4GB" .*4GiB'):
        parse_size("4GB")


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


@pytest.mark.parametrize("v, x", [
    ("30%", 30.0), ("30", 30.0), (30, 30.0), (30.5, 30.5), ("12.5%", 12.5), (" 7 % ", 7.0),
    ("0%", 0.0), ("100%", 100.0), (0, 0.0), (100, 100.0), ("+5%", 5.0),
])
def test_parse_percent_good(v, x):
    assert parse_percent(v) == x


@pytest.mark.parametrize("v, words", [
    ("101%", "out of range"), (-1, "out of range"), ("-5%", "out of range"), (100.01, "out of range"),
    ("abc", "not a percentage"), ("30%%", "not a percentage"), ("%", "not a percentage"),
    ("", "not a percentage"), ("3 0", "not a percentage"), ("30 pct", "not a percentage"),
    ("--5", "not a percentage"), (True, "not a percentage"), (None, "not a percentage"),
    (float("nan"), "out of range"),
])
def test_parse_percent_bad(v, words):
    with pytest.raises(ValueError) as ei:
        parse_percent(v)
    assert words in str(ei.value)
    assert str(ei.value).startswith(quote(v))


@pytest.mark.parametrize("v, x", [
    ("100ms", 0.1), ("10s", 10.0), ("2m", 120.0), ("1h", 3600.0), ("250us", 0.00025),
    (5, 5.0), (0.5, 0.5), ("3", 3.0), ("1.5s", 1.5), ("2 min", 120.0), ("10S", 10.0),
])
def test_parse_duration_good(v, x):
    assert parse_duration(v) == pytest.approx(x)


@pytest.mark.parametrize("v, words", [
    (0, "not positive"), ("0s", "not positive"), (-1, "not positive"), ("-5s", "not positive"),
    ("10 parsecs", "units"), ("10d", "units"), ("", "not a duration"), ("s", "not a duration"),
    (True, "not a duration"), (None, "not a duration"), (float("inf"), "not a duration"),
    (float("nan"), "not a duration"),
])
def test_parse_duration_bad(v, words):
    with pytest.raises(ValueError) as ei:
        parse_duration(v)
    assert words in str(ei.value)
    assert str(ei.value).startswith(quote(v))


@pytest.mark.parametrize("x, text", [(0.1, "100ms"), (10, "10s"), (120, "2m"), (3600, "1h"),
                                     (1.5, "1.5s"), (0.00025, "250us"), (90, "90s")])
def test_format_duration(x, text):
    assert format_duration(x) == text
    assert parse_duration(text) == pytest.approx(x)


def test_format_percent():
    assert format_percent(30.0) == "30%"
    assert format_percent(12.5) == "12.5%"


@pytest.mark.parametrize("v, t", [("08:00", datetime.time(8)), ("8:05", datetime.time(8, 5)),
                                  ("00:00", datetime.time(0)), ("23:59", datetime.time(23, 59))])
def test_parse_clock_good(v, t):
    assert parse_clock(v) == t


@pytest.mark.parametrize("v", ["24:00", "12:60", "8", "08:0", "08:000", "ab:cd", "", "-1:00",
                               "08:00:00", 800, None, "8 :00"])
def test_parse_clock_bad(v):
    with pytest.raises(ValueError) as ei:
        parse_clock(v)
    assert str(ei.value).startswith(quote(v))
    assert "time of day" in str(ei.value)


def test_quote():
    assert quote("a") == '"a"'
    assert quote('say "x"') == '"say \\"x\\""'
    assert quote("\x00") == '"\\x00"'
    assert quote(5) == "5"
    assert len(quote("x" * 1000)) <= 82


def test_units_imports_only_cheap_modules():
    """vgpuctl imports vgpu.values on every start: no re, no datetime, no
    third-party module."""
    code = ("import sys; before = set(sys.modules); import vgpu.values; "
            "print(' '.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert set(out) <= {"vgpu", "vgpu.values", "math", "__future__"}, out
