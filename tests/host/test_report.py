"""vgpuctl report --html (vgpu.cli.report): a self-contained page, hostile
names escaped, charts drawn; and the page in a real headless browser
(Debian's chromium), whose screenshot must show the charts."""

from __future__ import annotations

import datetime
import html.parser
import os
import re
import shutil
import struct
import subprocess
import zlib

import pytest

from vgpu.cli import histview
from vgpu.cli import report

CET = datetime.timezone(datetime.timedelta(hours=1))
GIB = 1 << 30
DAY0 = datetime.datetime(2026, 12, 1, tzinfo=CET).timestamp()
HOSTILE = "<script>alert(1)</script>"


def sample(**kw):
    return report.sample_doc(DAY0, tz=CET, **kw)


class Tags(html.parser.HTMLParser):
    """Every start tag and attribute of a page, as a browser's parser sees
    them."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v) for k, v in attrs]

    def handle_data(self, data):
        self.text.append(data)


def parse(page: str) -> Tags:
    p = Tags()
    p.feed(page)
    p.close()
    return p


#: what a report is made of: no script, no image, no link, no frame
ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "div",
                "span", "table", "thead", "tbody", "tr", "th", "td", "footer", "svg", "rect",
                "line", "path", "text"}


def test_page_is_self_contained():
    page = report.render_html(sample(), tz=CET)
    low = page.lower()
    for bad in ("http:", "https:", "//", "url(", "@import", "src=", "href=", "<script", "<link",
                "<img", "<iframe", "<object", "<embed", "javascript:", "xlink"):
        assert bad not in low.replace("</", "<"), bad
    tags = parse(page)
    assert set(tags.tags) <= ALLOWED_TAGS, set(tags.tags) - ALLOWED_TAGS
    assert not [a for a in tags.attrs if a[1].startswith("on")]
    csp = [v for t, k, v in tags.attrs if t == "meta" and k == "content" and "default-src" in v]
    assert csp == ["default-src 'none'; style-src 'unsafe-inline'"]


def test_hostile_strings_are_escaped():
    d = sample()
    d["series"][0]["container"] = HOSTILE
    d["series"][1]["container"] = '"><img src=x onerror=alert(2)>'
    d["series"][1]["labels"] = {"vgpu.io/class": "training", "x": "</style><script>3</script>"}
    d["series"][0]["gpu_uuid"] = "GPU-<b>&amp;"
    d["windows"][0]["profile"] = "<svg onload=alert(4)>"
    page = report.render_html(d, title="<i>t</i>", tz=CET)
    tags = parse(page)
    assert set(tags.tags) <= ALLOWED_TAGS, set(tags.tags) - ALLOWED_TAGS
    assert "i" not in tags.tags and "b" not in tags.tags
    assert not [a for a in tags.attrs if a[1].startswith("on")]
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 2   # summary and heading
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    assert "&lt;/style&gt;&lt;script&gt;3&lt;/script&gt;" in page
    assert "GPU-&lt;b&gt;&amp;amp;" in page
    assert "&lt;svg onload=alert(4)&gt;" in page
    # the text a reader sees is the names as they are
    text = "".join(tags.text)
    assert HOSTILE in text and "<svg onload=alert(4)>" in text


def test_charts_per_series_and_windows_where_they_belong():
    d = sample()
    page = report.render_html(d, tz=CET)
    assert page.count("<svg ") == 4                       # memory and GPU time, two slices
    web, trainer = page.split("<h2>web · slice 3 · GPU 0</h2>")[1].split(
        "<h2>trainer · slice 4 · GPU 0</h2>")
    # each slice's charts are shaded by its own label's window only
    assert "inference-day" in web and "training-night" not in web
    assert "training-night" in trainer and "inference-day" not in trainer
    # axes: binary sizes, percentages, round local times, unit titles
    assert ">24 GiB</text>" in web and ">48 GiB</text>" in trainer
    assert ">60%</text>" in web and ">100%</text>" in trainer
    assert ">08:00</text>" in web and ">Tue 01 Dec</text>" in web
    assert ">memory</text>" in web and ">GPU time (of one GPU)</text>" in web
    # the trainer's refusals are marked, with their time
    assert "refused at 2026-12-01 20:" in trainer and "refused at" not in web
    assert "times in UTC+01:00" in page and "buckets of 5 min" in page
    # summary table: one line per slice, with the figures
    assert re.search(r"<td class=\"l\">web</td>.*<td class=\"\">8 GiB to 24 GiB</td>", page)
    assert "<td class=\"bad\">6</td>" in page                   # trainer's refusals


def test_gaps_break_the_lines():
    d = sample()
    rows = d["series"][0]["rows"]
    d["series"][0]["rows"] = rows[:100] + rows[150:]            # four hours missing
    d["series"][1]["rows"] = []
    page = report.render_html(d, tz=CET)
    chart = page.split("Memory: configured vs used")[1]
    used = re.search(r'<path d="([^"]*)" fill="none" stroke="#1c6fd6"', chart)[1]
    assert used.count("M") == 2
    assert "No samples in this range." in page


def test_long_series_are_thinned_to_the_charts_width():
    d = report.sample_doc(DAY0, step=60, hours=72, tz=CET)         # 4320 points a slice
    rows = d["series"][1]["rows"]
    d["series"][1]["rows"] = rows[:1500] + rows[1800:]        # five hours missing
    page = report.render_html(d, tz=CET)
    assert len(page) < 3_000_000
    trainer = page.split("<h2>trainer")[1]
    used = re.search(r'<path d="([^"]*)" fill="none" stroke="#1c6fd6"', trainer)[1]
    assert used.count("M") == 2 and used.count("L") <= report.MAX_POINTS
    assert "<td class=\"\">4020</td>" in page              # the table counts them all


def test_unknown_values_and_empty_documents():
    assert "No history for this selection." in report.render_html({"series": []})
    d = sample()
    for r in d["series"][0]["rows"]:
        r["share"] = r["compute_bp"] = r["gpu_time_ns"] = None
        r["mem_used_min"] = r["mem_used_max"] = "?"
    page = report.render_html(d, tz=CET)
    assert page.count("<svg ") == 4 and "none</td>" in page


@pytest.mark.parametrize("junk", [-1, 0, 1e300, -1e300, "x", [1], {"a": 1}, None, True,
                                  float("inf")])
def test_junk_numbers_do_not_break_anything(junk):
    d = sample(hours=2)
    for r in d["series"][0]["rows"][::3]:
        for k in list(r):
            r[k] = junk
    d["since"] = d["until"] = junk if junk != 0 else None
    d["step"] = junk
    d["windows"].append({"profile": junk, "label": junk, "start": junk, "end": 1e300})
    page = report.render_html(d, tz=CET)
    assert page.endswith("</html>\n")
    histview.render_terminal(d, width=80, tz=CET)
    histview.render_csv(d)


def test_sample_document_is_what_the_brief_wants():
    d = sample()
    web, trainer = d["series"]
    assert len(web["rows"]) == len(trainer["rows"]) == 288
    noon = [r for r in web["rows"] if r["t"] == DAY0 + 12 * 3600][0]
    night = [r for r in trainer["rows"] if r["t"] == DAY0 + 2 * 3600][0]
    assert noon["share"] > 0.4 and night["share"] > 0.5
    assert {w["profile"] for w in d["windows"]} == {"inference-day", "training-night"}


# ------------------------------------------------------------ a real browser
def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def read_png(data: bytes) -> tuple[int, int, int, int, list[bytes]]:
    """(width, height, bytes per pixel, IDAT bytes, rows of pixels) of an
    8-bit RGB or RGBA PNG, not interlaced."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, hdr = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = hdr
    assert depth == 8 and ctype in (2, 6) and interlace == 0, hdr
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = w * bpp
    assert len(raw) == h * (stride + 1)
    prev = bytearray(stride)
    rows = []
    for y in range(h):
        f = raw[y * (stride + 1)]
        ln = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                ln[i] = (ln[i] + ln[i - bpp]) & 255
        elif f == 2:
            ln = bytearray((a + b) & 255 for a, b in zip(ln, prev))
        elif f == 3:
            for i in range(stride):
                ln[i] = (ln[i] + (((ln[i - bpp] if i >= bpp else 0) + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = ln[i - bpp] if i >= bpp else 0
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                ln[i] = (ln[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(ln))
        prev = ln
    return w, h, bpp, sum(len(x) for x in idat), rows


def hexrgb(c: str) -> tuple[int, int, int]:
    return int(c[1:3], 16), int(c[3:5], 16), int(c[5:7], 16)


def test_report_in_headless_chromium(tmp_path):
    browser = chromium()
    if browser is None:
        pytest.skip("no chromium binary on PATH (Debian: apt-get install chromium; "
                    "mk/deps.mk's APT_PACKAGES should list it)")
    d = sample()
    d["series"][0]["container"] = HOSTILE
    page = tmp_path / "report.html"
    page.write_text(report.render_html(d, tz=CET, generated=DAY0 + 86400), encoding="utf-8")
    shot = tmp_path / "shot.png"
    r = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
         "--window-size=1400,1800", page.as_uri()],
        capture_output=True, text=True, timeout=180, env={**os.environ, "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert shot.is_file(), r.stderr[-3000:]
    keep = os.environ.get("VGPU_REPORT_SCREENSHOT")
    if keep:            # to look at it: VGPU_REPORT_SCREENSHOT=/tmp/report.png pytest ...
        shutil.copyfile(shot, keep)
    data = shot.read_bytes()
    assert len(data) > 50_000, len(data)
    w, h, bpp, idat_len, rows = read_png(data)
    assert (w, h) == (1400, 1800) and idat_len > 50_000

    # not one colour; and the charts' own colours are there, so the SVG drew
    def count(rgb, tol):
        n = 0
        for row in rows[::2]:
            for i in range(0, len(row), bpp):
                if abs(row[i] - rgb[0]) + abs(row[i + 1] - rgb[1]) + abs(row[i + 2] - rgb[2]) \
                        <= tol:
                    n += 1
        return n
    colours = {row[i:i + 3] for row in rows[::8] for i in range(0, len(row), bpp * 8)}
    assert len(colours) > 50, len(colours)
    for name, c in (("limit", report.LIMIT), ("used", report.USED), ("achieved", report.ACHIEVED)):
        assert count(hexrgb(c), 40) > 500, name
    # the inference-day shading: its colour at 13 % over white
    wc = hexrgb(report.WINDOW_COLOURS[1] if d["windows"][0]["profile"] == "training-night"
                else report.WINDOW_COLOURS[0])
    shade = tuple(round(255 - 0.13 * (255 - x)) for x in wc)
    assert count(shade, 9) > 10_000, shade
