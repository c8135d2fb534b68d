"""The built-in web page: in a real headless Chromium over the corpus, and its safety as plain HTTP."""

from __future__ import annotations

import html
import re
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from browser import Browser, Page, find_chromium
from logwriter import LogDir, event, partly_priced_log
from served import serve
from serving import http_get, write_config

from agentledger import display
from agentledger.shown import one_line

PANELS = ["spend", "sessions", "tools", "live", "ingest"]


@pytest.fixture(scope="module")
def corpus_daemon(oc_corpus, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui")
    served = serve(write_config(tmp, oc_corpus))
    yield served
    served.stop()


@pytest.fixture
def browser(tmp_path):
    executable = find_chromium()
    if executable is None:
        pytest.skip("no Chromium here: .ci/run installs Debian's `chromium` (apt-get install chromium)")
    b = Browser(executable, tmp_path / "profile")
    yield b
    b.close()


def _fetch(url: str) -> tuple[int, dict, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def test_the_page_shows_the_corpus_in_chromium(corpus_daemon, browser, oc_expected, tmp_path):
    # The corpus was written in early October 2026: show the 30 days that end with it.
    url = f"{corpus_daemon.url}/ui?until=2026-10-05&refresh=0"
    page = Page(browser, 1280, 900)
    page.open(url)
    assert page.errors() == []
    total = display.usd(oc_expected["totals"]["cost_usd"])
    assert page.evaluate("document.getElementById('total').textContent") == total
    assert page.evaluate("document.getElementById('window-total').textContent") == total
    panels = page.evaluate("[...document.querySelectorAll('section.panel')]"
                           ".map(p => [p.id, p.querySelectorAll('svg').length])")
    assert [p for p, _ in panels] == PANELS
    assert all(charts >= 1 for _, charts in panels), panels
    # One bar segment per day and model that spent, in the corpus's five days.
    pairs = sum(len(day["per_model"]) for day in oc_expected["per_day"].values()) \
        if all("per_model" in day for day in oc_expected["per_day"].values()) else None
    segments = page.evaluate("document.querySelectorAll('#spend svg rect').length")
    assert segments >= 5 and (pairs is None or segments == pairs)
    assert "session-cost" in page.evaluate("document.getElementById('live').textContent")
    shot = page.screenshot(tmp_path / "ui.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    phone = Page(browser, 390, 844, mobile=True)
    phone.open(url)
    assert phone.errors() == []
    # Readable on a phone: nothing wider than the screen, so no sideways scrolling.
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    phone.screenshot(tmp_path / "ui-phone.png")


def test_the_console_check_sees_errors(browser):
    page = Page(browser, 400, 300)
    page.open("data:text/html,<p>x</p><script>console.error('boom'); undefined_call()</script>")
    errors = page.errors()
    assert "boom" in errors and any("undefined_call" in e or "Uncaught" in e for e in errors), errors


def test_the_page_runs_no_script_and_escapes_what_the_logs_say(tmp_path):
    logs = LogDir(tmp_path / "logs")
    hostile = "<img src=x onerror=alert(1)>"
    logs.append(event(1, "llm.call", {"callIndex": 1, "provider": "anthropic", "model": "<b>model</b>",
                                      "delta": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "total": 2},
                                      "costUsd": 1.25}, session=hostile, ts=time.time_ns() // 1_000_000))
    served = serve(write_config(tmp_path, logs.root))
    try:
        status, headers, body = _fetch(f"{served.url}/ui")
        assert status == 200
        assert headers["Content-Type"].startswith("text/html")
        assert "script-src" not in headers["Content-Security-Policy"]  # default-src 'none': no script at all
        assert "<script" not in body and hostile not in body and "<b>model</b>" not in body
        assert "agent:main:&lt;img src=x onerror=alert(1)&gt;" in body
        assert "$1.25" in body
        for bad in ("days=0", "days=x", "until=yesterday", "tz=Mars/Base", "refresh=-1", "day=7"):
            status, _, body = _fetch(f"{served.url}/ui?{bad}")
            assert status == 400, bad
            assert body.count("\n") == 1  # one line naming the problem
    finally:
        served.stop()


def test_the_page_shows_controls_and_bidi_overrides_from_the_logs_as_escapes_as_tables_do(tmp_path):
    # HTML escaping left a NUL and a right-to-left override raw in labels, tooltips and the legend: one
    # reordered what followed it on the page, and two names that differ by one looked the same.
    logs = LogDir(tmp_path / "logs")
    now = time.time_ns() // 1_000_000
    agent, session, model, tool = "ma\u202ein", "s\x00\u202eevil\x1b[2J", "m\u202e\x00odel", "to\x1bol\u202e"
    usage = {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "total": 2}
    logs.append(event(1, "llm.call", {"callIndex": 1, "provider": "anthropic", "model": model, "delta": usage,
                                      "costUsd": 1.25}, agent=agent, session=session, ts=now - 2000)
                + event(2, "tool.end", {"toolName": tool, "toolCallId": "t1", "isError": True, "durationMs": 5},
                        agent=agent, session=session, ts=now - 1000))
    served = serve(write_config(tmp_path, logs.root))
    try:
        status, _, body = _fetch(f"{served.url}/ui?refresh=0")
    finally:
        served.stop()
    assert status == 200
    assert not {"\x00", "\x1b", "\u202e"} & set(body)
    key = one_line(f"agent:{agent}:{session}")
    assert key == "agent:ma\\u202ein:s\\x00\\u202eevil\\x1b[2J"
    for shown in (key, one_line(agent), one_line(model), one_line(tool)):
        assert html.escape(shown) in body, shown
    assert f"<title>{key}</title>{key}</text>" in body  # the top sessions' and burn rates' bars
    assert f"</i>{html.escape(one_line(model))} $1.25</li>" in body  # the legend
    assert f"<title>{one_line(tool)}</title>{one_line(tool)}</text>" in body  # the tools' error rates


def test_the_calendar_s_ends_are_an_answer(corpus_daemon):
    # The last day Python's calendar has: its page ends where the ledger's times do.
    status, _, body = _fetch(f"{corpus_daemon.url}/ui?until=9999-12-31&tz=Pacific/Kiritimati")
    assert status == 200 and "9999-12-31" in body
    # Before 1970 the ledger holds nothing, and 30 days back from year 1 leave the calendar.
    status, _, body = _fetch(f"{corpus_daemon.url}/ui?until=0001-01-01")
    assert (status, body) == (400, "until must be a date from 1970-01-01 to 9999-12-31, not '0001-01-01'\n")


@pytest.mark.parametrize("param", ["days", "refresh"])
@pytest.mark.parametrize("value", ["%C2%B2", "9" * 5000, "86401"])  # '²' is a digit int() refuses
def test_numbers_it_cannot_read_are_400_naming_the_parameter(corpus_daemon, param, value):
    status, _, body = _fetch(f"{corpus_daemon.url}/ui?{param}={value}")
    assert status == 400 and body.startswith(f"{param} must be a whole number from ")


def test_costs_that_leave_out_unpriced_calls_are_marked_on_the_page_and_counted_in_the_overview(tmp_path):
    logs = partly_priced_log(tmp_path / "logs")
    served = serve(write_config(tmp_path, logs.root))
    try:
        status, _, body = _fetch(f"{served.url}/ui?refresh=0")
        status_json, overview = http_get(served.url, "/v1/overview")
    finally:
        served.stop()
    assert status == status_json == 200
    for total in ("total", "window-total", "today"):
        assert f'<dd id="{total}">≥$0.5000*</dd>' in body
    assert body.count(display.UNPRICED_NOTE) == 1
    assert "acme-unknown-9 —*</li>" in body and "claude-sonnet-4-5 $0.5000</li>" in body  # the legend
    assert "acme-unknown-9 —*</title>" in body  # today's bar
    top = body[body.index('id="sessions"'):body.index('id="tools"')]
    assert 'class="value">≥$0.5000*</text>' in top and 'class="value">—*</text>' in top
    live = body[body.index('id="live"'):body.index('id="ingest"')]
    # $0.50 in the last ten minutes is $3.00 an hour, and more by what the unpriced call cost.
    assert "<td class=num>≥$0.5000*</td><td class=num>≥$3.00/h*</td>" in live
    assert "<td class=num>—*</td><td class=num>—*</td>" in live
    assert "session-cost: ≥$0.5000* of $5.00" in live
    assert (overview["today_unpriced_calls"], overview["total_unpriced_calls"]) == (2, 2)
    sessions = {s["session_key"]: s for s in overview["sessions"]}
    assert [(sessions[f"agent:main:{k}"]["unpriced_calls"], sessions[f"agent:main:{k}"]["recent_unpriced_calls"])
            for k in ("s1", "s2")] == [(1, 1), (1, 1)]
    gates = {g["gate"]: g for g in sessions["agent:main:s1"]["gates"]}
    assert (gates["session-cost"]["value"], gates["session-cost"]["unpriced_calls"]) == (0.5, 1)
    assert gates["fleet-day"]["unpriced_calls"] == 2


def test_the_latest_failures_are_those_of_the_page_s_days(corpus_daemon):
    # The corpus's failures run to 2026-10-05: a page of October 1st and 2nd lists none after them.
    status, _, body = _fetch(f"{corpus_daemon.url}/ui?until=2026-10-02&days=2&refresh=0")
    listed = re.findall(r"<time>([^<]*)</time>", body)
    assert status == 200 and listed
    assert all("2026-10-01" <= at[:10] <= "2026-10-02" for at in listed), listed


def test_a_zone_is_read_as_costs_reads_it(corpus_daemon):
    status, _, body = _fetch(f"{corpus_daemon.url}/ui?tz=utc&until=2026-10-05&refresh=0")
    assert status == 200 and "Spend per day by model, 2026-09-06 to 2026-10-05 (UTC)" in body


def _midnight_at(hour: int) -> str:
    """A zone whose day starts at this hour of UTC's."""
    east = (24 - hour) % 24
    return f"Etc/GMT-{east}" if east <= 14 else f"Etc/GMT+{24 - east}"


def test_gate_meters_measure_the_gates_day_whatever_zone_cuts_the_charts(tmp_path):
    # The gates' day started this hour; the page's ?tz day an hour before it. 2,000 tokens spent a minute
    # before this hour are that zone's today, not the gates'.
    now = time.time_ns() // 1_000_000
    hour = now - now % 3_600_000
    gates_zone, page_zone = _midnight_at(hour // 3_600_000 % 24), _midnight_at((hour // 3_600_000 - 1) % 24)
    logs = LogDir(tmp_path / "logs")
    logs.append(event(1, "llm.call", {"callIndex": 1, "provider": "anthropic", "model": "claude-sonnet-4-5",
                                      "delta": {"input": 2000, "output": 0, "cacheRead": 0, "cacheWrite": 0,
                                                "total": 2000}, "costUsd": 0.01}, ts=hour - 60_000))
    config = write_config(tmp_path, logs.root, extra="""
[[gates]]
name = "day-tokens"
scope = "global-day"
metric = "tokens"
limit = 1000
action = "block"
""")
    config.write_text(f'timezone = "{gates_zone}"\n' + config.read_text())
    served = serve(config)
    try:
        _, gate = http_get(served.url, "/v1/gate?session_key=agent:main:s1&tool=exec")
        # quoted: a zone west of UTC is Etc/GMT+N, whose "+" a query string reads as a space
        pages = [_fetch(f"{served.url}/ui?refresh=0{tz}")[2] for tz in ("", f"&tz={urllib.parse.quote(page_zone)}")]
    finally:
        served.stop()
    assert gate["decision"] == "allow"
    for body in pages:
        assert "day-tokens: 0 of 1,000 · trips in —" in body
    assert f"today ({gates_zone})" in pages[1] and f"({page_zone})</h2>" in pages[1]


def test_a_bar_label_is_cut_to_the_chart_s_cells_keeping_both_ends():
    # Cut at 60 characters, a label of ideographs took 120 cells and ran past the chart's edge.
    from rich.cells import cell_len

    from agentledger.ui import LABEL_CELLS, hbars

    for name in ("agent:研究:" + "会话" * 40 + ":末尾", "agent:main:" + "x" * 80 + ":end", "agent:🫨:" + "🎉" * 50):
        svg = hbars([(name, 1.0, "$1.00")], "top sessions", "none")
        shown = re.search(r"</title>(.*?)</text>", svg).group(1)
        assert cell_len(shown) <= LABEL_CELLS and "…" in shown, shown
        head, _, tail = shown.partition("…")
        assert name.startswith(head) and name.endswith(tail) and len(head) > 3 and len(tail) > 2, shown
    assert re.search(r"</title>(.*?)</text>", hbars([("agent:研究:短", 1.0, "$1")], "t", "none")).group(1) == "agent:研究:短"
