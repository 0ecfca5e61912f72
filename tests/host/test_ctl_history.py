"""vgpuctl history, report and forecast against the fake API server
(fake_vgpud.py): the request each sends, local validation (bad values quoted,
never sent), and the output (terminal view, --json, --csv, the HTML file)."""
import csv
import io
import json
import time

import pytest

from tools.testbed.fake_vgpud import make_history
from vgpu.cli import ctl, histview


def run(capsys, *argv):
    rc = ctl.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_history_request_defaults_and_selectors(fake, capsys):
    before = time.time()
    rc, out, err = run(capsys, "history", "--json")
    assert rc == 0, err
    [req] = fake.requests
    a = req["args"]
    assert req["op"] == "history" and set(a) == {"since", "until", "step"}
    assert before - 1 <= a["until"] <= time.time() + 1
    assert a["until"] - a["since"] == pytest.approx(86400)
    assert a["step"] == histview.auto_step(a["since"], a["until"], 60)
    assert json.loads(out)["series"] == []
    fake.requests.clear()
    rc, out, err = run(capsys, "history", "--container", "web", "--label", "team=web",
                       "--label", "tier=1", "--gpu", "1", "--since", "@1764576000",
                       "--until", "@1764579600", "--step", "5m", "--json")
    assert rc == 0, err
    a = fake.requests[0]["args"]
    assert a == {"container": "web", "label": {"team": "web", "tier": "1"}, "gpu": 1,
                 "since": 1764576000.0, "until": 1764579600.0, "step": 300.0}


@pytest.mark.parametrize("argv, message", [
    (["history", "--since", "yesterdayy"], 'invalid --since "yesterdayy": not a time'),
    (["history", "--since", "24h"], 'invalid --since "24h"'),
    (["history", "--since", "-1h", "--until", "-2h"], 'invalid --until "-2h": not after --since'),
    (["history", "--since", "+2h"], 'invalid --since "+2h": not in the past'),
    (["history", "--step", "soon"], 'invalid --step "soon": not a duration'),
    (["history", "--step", "10ms"], 'invalid --step "10ms": under a second'),
    (["history", "--gpu", "0,1"], 'invalid --gpu "0,1": names more than one GPU'),
    (["history", "--label", "team"], 'invalid --label "team": not a label'),
    (["history", "--container", "a/b"], 'invalid --container "a/b"'),
    (["history", "--csv", "--json"], "give --json or --csv, not both"),
    (["report"], "report: missing --html FILE"),
    (["report", "--html", ""], 'invalid --html ""'),
    (["forecast"], "forecast: missing LABEL"),
    (["forecast", "team"], 'invalid LABEL "team": not a label (use KEY=VALUE)'),
    (["forecast", "a=b", "--hours", "0"], 'invalid --hours "0": not a positive whole number'),
    (["forecast", "a=b", "--hours", "169"], 'invalid --hours "169": more than 168'),
    (["forecast", "a=b", "--reset", "--resume"], "give --reset or --resume, not both"),
    (["forecast", "a=b", "--reset", "--hours", "2"], "--hours has no use with --reset"),
])
def test_bad_values_quoted_never_sent(fake, capsys, argv, message):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == "", (out, err)
    assert err.startswith("vgpuctl: ") and message in err, err
    assert fake.requests == []


def test_history_terminal_view_and_csv(fake, capsys):
    fake.history_doc = make_history(1764576000.0)
    rc, out, err = run(capsys, "history", "--since", "@1764576000", "--until", "@1764579600")
    assert rc == 0, err
    assert "web  slice 3  GPU 0  team=web" in out and "memory" in out and "\x1b[" not in out
    assert max(len(line) for line in out.splitlines()) <= 100
    rc, out, err = run(capsys, "history", "--since", "@1764576000", "--until", "@1764579600",
                       "--csv")
    assert rc == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    assert tuple(rows[0]) == histview.CSV_HEADER and len(rows) == 13
    assert rows[1][0] == "web" and rows[1][4] == "team=web"


def test_history_empty(fake, capsys):
    rc, out, err = run(capsys, "history")
    assert rc == 0 and out.startswith("no history")


def test_report_writes_a_page(fake, capsys, tmp_path):
    fake.history_doc = make_history(1764576000.0)
    path = tmp_path / "r.html"
    rc, out, err = run(capsys, "report", "--html", str(path), "--label", "team=web",
                       "--since", "@1764576000", "--until", "@1764579600")
    assert rc == 0, err
    assert out == f"wrote {path} (1 series)\n"
    page = path.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "web" in page
    assert fake.requests[0]["args"]["label"] == {"team": "web"}
    rc, out, err = run(capsys, "report", "--html", str(tmp_path / "no" / "r.html"))
    assert rc == 1 and "report: cannot write" in err


def test_forecast_human_json_reset(fake, capsys):
    rc, out, err = run(capsys, "forecast", "team=web", "--hours", "3")
    assert rc == 0, err
    assert fake.requests[-1]["args"] == {"label": "team=web", "hours": 3}
    assert out.startswith("forecast for team=web: 2 slice(s) now; history: 2016 point(s)")
    assert "GPU P95" in out and out.count("40%") == 3
    assert "recommended: memory 3.45GiB for the label (1.72GiB a slice)" in out and "compute 46% of a GPU (23% a slice)" in out
    assert "adjusted now: w1 compute 46%" in out
    rc, out, err = run(capsys, "forecast", "team=web", "--json")
    assert rc == 0 and len(json.loads(out)["points"]) == 24
    assert fake.requests[-1]["args"] == {"label": "team=web"}
    rc, out, err = run(capsys, "forecast", "team=web", "--reset")
    assert rc == 0 and fake.requests[-1]["args"] == {"label": "team=web", "reset": True}
    assert "configured values restored for w1" in out
    rc, out, err = run(capsys, "forecast", "team=web", "--resume")
    assert rc == 0 and "resumed" in out


def test_status_shows_history(fake, capsys):
    fake.state = None
    rc, out, err = run(capsys, "status")
    assert rc == 0 and "history" not in out          # an older vgpud: no line
    orig = fake._op

    def op(name, args):
        r = orig(name, args)
        if name == "status":
            r["history"] = {"enabled": True, "state": "failing", "written": 120,
                            "path": "/var/lib/vgpu/history.db", "dropped": 3, "lost": 0,
                            "last_error": "disk I/O error"}
            r["forecast"] = {"adjusted": [{"container": "w1", "compute": 46.0}], "held": []}
        return r
    fake._op = op
    rc, out, err = run(capsys, "status")
    assert rc == 0, err
    assert ("history:   failing, 120 samples written (/var/lib/vgpu/history.db), 3 dropped; "
            "last error: disk I/O error") in out
    assert "forecast:  w1 compute 46%" in out
