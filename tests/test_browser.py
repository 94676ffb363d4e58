"""The HTML report in a real browser: headless Chromium driven over the DevTools protocol.

Checks, on the report of a real trace (tracelens H100 BERT when ../shared/traces is present)
and of the T4 sample: the roofline chart has one point per op signature with FLOPs, hovering
a point shows that op's name in the tooltip, the ops table sorts on a header click, no console
errors, no network requests. A report built from a hostile trace runs no script of its own.

The DevTools client is ~60 lines over --remote-debugging-pipe (NUL-separated JSON on fds 3/4):
no port, no websocket library, no browser download. Skips when Chromium is absent (CI
installs Debian's `chromium`; see .ci/run). A screenshot is saved next to the test's files
and copied to /tmp/traceana-browser.png.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, TRACES

try:
    import fcntl
except ImportError:  # not POSIX: no pipes to hand over, the tests skip
    fcntl = None
from traceana.cli import main

CHROMIUM = next((p for p in (os.environ.get("TRACEANA_CHROMIUM"), "/usr/bin/chromium",
                             shutil.which("chromium"), shutil.which("chromium-browser")) if p and os.path.exists(p)),
                None)
pytestmark = pytest.mark.skipif(CHROMIUM is None or fcntl is None,
                                reason="chromium not installed (apt-get install chromium)")
SCREENSHOT = Path("/tmp/traceana-browser.png")
BERT = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"


class Chromium:
    """A headless Chromium and one page, spoken to over the DevTools pipe."""

    def __init__(self, profile: Path) -> None:
        to_r, self._to = os.pipe()  # we write commands, Chromium reads fd 3
        self._from, from_w = os.pipe()  # Chromium writes fd 4, we read

        def fds() -> None:  # runs in the child: put the pipe ends at 3 and 4 (through fds >= 10,
            r = fcntl.fcntl(to_r, fcntl.F_DUPFD, 10)  # as either end may be fd 3 or 4 already)
            w = fcntl.fcntl(from_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)

        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
                 f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"]
        self.proc = subprocess.Popen([CHROMIUM, *flags], preexec_fn=fds, pass_fds=(3, 4),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []
        try:
            target = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
            self.session = self.call("Target.attachToTarget", targetId=target["targetId"],
                                     flatten=True)["sessionId"]
        except BaseException:
            self.close()
            raise

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from], [], [], left)[0]:
                raise TimeoutError("no answer from chromium")
            chunk = os.read(self._from, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def call(self, method: str, timeout: float = 30, page: bool = False, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if page:
            msg["sessionId"] = self.session
        os.write(self._to, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def page(self, method: str, **params) -> dict:
        return self.call(method, page=True, **params)

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        for i, ev in enumerate(self.events):
            if ev.get("method") == method:
                return self.events.pop(i)
        while True:
            ev = self._read(deadline)
            if ev.get("method") == method:
                return ev
            self.events.append(ev)

    def js(self, expression: str):
        r = self.page("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise AssertionError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def open(self, url: str) -> None:
        self.events.clear()
        self.page("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")
        self.js("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to)
        os.close(self._from)


@pytest.fixture(scope="module")
def browser():
    with tempfile.TemporaryDirectory(prefix="traceana-chromium-") as profile:
        try:
            b = Chromium(Path(profile))
        except (OSError, RuntimeError, TimeoutError) as exc:  # installed but cannot start here
            pytest.skip(f"{CHROMIUM} did not start: {exc}")
        try:
            for domain in ("Page", "Runtime", "Log", "Network"):
                b.page(f"{domain}.enable")
            b.page("Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1,
                   mobile=False)
            yield b
        finally:
            b.close()


def problems(b: Chromium, page_url: str) -> dict[str, list]:
    """Console errors, uncaught exceptions, CSP violations, dialogs and network requests so far."""
    out: dict[str, list] = {"errors": [], "requests": [], "dialogs": []}
    for ev in b.events:
        m, p = ev.get("method"), ev.get("params", {})
        if m == "Runtime.exceptionThrown":
            out["errors"].append(p["exceptionDetails"].get("text"))
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
            out["errors"].append([a.get("value", a.get("description")) for a in p.get("args", [])])
        elif m == "Log.entryAdded" and p["entry"].get("level") in ("error", "warning"):
            out["errors"].append(p["entry"].get("text"))
        elif m == "Network.requestWillBeSent" and p["request"]["url"] != page_url:
            out["requests"].append(p["request"]["url"])
        elif m == "Page.javascriptDialogOpening":
            out["dialogs"].append(p.get("message"))
    return out


def report(tmp_path: Path, trace: Path) -> tuple[Path, dict]:
    html, js = tmp_path / f"{trace.name}.html", tmp_path / f"{trace.name}.report.json"
    assert main(["report", str(trace), "-o", str(html), "-q"]) == 0
    assert main(["report", str(trace), "-o", str(js), "-q"]) == 0
    return html, json.loads(js.read_text())


def hover_each_point_kind(b: Chromium, analysis: dict) -> int:
    """Hover the topmost circle at several points' centres; the tooltip names that op."""
    names = {o["id"]: o["name"] for o in analysis["ops"]}
    ids = b.js("Array.from(document.querySelectorAll('#chart circle')).map(c => c.getAttribute('data-op'))")
    b.js("document.getElementById('chart').scrollIntoView({block: 'center'})")
    hovered = 0
    for op_id in ids[:: max(1, len(ids) // 6)]:
        where = b.js(f"""(() => {{
            const r = document.querySelector('#chart circle[data-op="{op_id}"]').getBoundingClientRect();
            const x = r.left + r.width / 2, y = r.top + r.height / 2;
            const top = document.elementFromPoint(x, y);
            return {{x, y, id: top && top.getAttribute('data-op')}};
        }})()""")
        if not where["id"]:
            continue
        b.page("Input.dispatchMouseEvent", type="mouseMoved", x=where["x"], y=where["y"])
        tip = b.js("(() => { const t = document.getElementById('tip');"
                   " return {hidden: t.hidden, name: (t.querySelector('.t-name') || {}).textContent}; })()")
        assert not tip["hidden"], where
        assert tip["name"] == names[where["id"]][:300], (tip, where)
        hovered += 1
    b.page("Input.dispatchMouseEvent", type="mouseMoved", x=5, y=5)
    assert b.js("document.getElementById('tip').hidden") is True
    return hovered


def click_header(b: Chromium, label: str) -> None:
    where = b.js(f"""(() => {{
        const btn = Array.from(document.querySelectorAll('#ops-table thead button'))
            .find(x => x.textContent.trim() === {json.dumps(label)});
        btn.scrollIntoView({{block: 'center'}});
        const r = btn.getBoundingClientRect();
        return {{x: r.left + r.width / 2, y: r.top + r.height / 2}};
    }})()""")
    for kind in ("mousePressed", "mouseReleased"):
        b.page("Input.dispatchMouseEvent", type=kind, x=where["x"], y=where["y"], button="left", clickCount=1)


def column(b: Chromium, index: int) -> list[str]:
    return b.js(f"Array.from(document.querySelectorAll('#ops-table tbody tr'))"
                f".map(r => r.cells[{index}].textContent.trim())")


def check_report_page(b: Chromium, html: Path, analysis: dict, shot: Path) -> None:
    url = html.resolve().as_uri()
    b.open(url)
    # the chart: one point per op signature that has FLOPs
    with_flops = [o for o in analysis["ops"] if (o.get("flops") or 0) > 0]
    circles = b.js("document.querySelectorAll('#chart circle').length")
    assert circles == len(with_flops) > 0
    assert b.js("document.querySelectorAll('#chart line.roof').length") >= 1
    # hovering shows the op's name
    assert hover_each_point_kind(b, analysis) >= 1
    # the table sorts on click: by name ascending, then descending, then by calls
    names = column(b, 0)
    assert len(names) == len(analysis["ops"][:2000])
    click_header(b, "name")
    by_name = column(b, 0)
    assert sorted(by_name) == sorted(names) and by_name != names or len(set(names)) < 2
    keyed = [n.lower() for n in by_name]
    assert keyed == sorted(keyed)
    assert b.js("document.querySelector('#ops-table th[aria-sort]').textContent.trim()") == "name"
    click_header(b, "name")
    assert [n.lower() for n in column(b, 0)] == sorted(keyed, reverse=True)
    click_header(b, "calls")
    calls = [float(v) for v in b.js("Array.from(document.querySelectorAll('#ops-table tbody tr'))"
                                    ".map(r => r.cells[3].getAttribute('data-v') || 'NaN')") if v == v]
    calls = [c for c in calls if c == c]
    assert calls == sorted(calls, reverse=True)
    # screenshot: the chart with one point hovered (its tooltip showing)
    b.js("document.getElementById('roofline').scrollIntoView({block: 'start'})")
    where = b.js("""(() => { const cs = document.querySelectorAll('#chart circle');
        const r = cs[cs.length - 1].getBoundingClientRect();
        return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()""")
    b.page("Input.dispatchMouseEvent", type="mouseMoved", x=where["x"], y=where["y"])
    png = b.page("Page.captureScreenshot", format="png", captureBeyondViewport=False)["data"]
    shot.write_bytes(base64.b64decode(png))
    found = problems(b, url)
    assert found == {"errors": [], "requests": [], "dialogs": []}, found


def test_real_trace_report_in_chromium(browser, tmp_path):
    bert = TRACES / BERT
    if not bert.exists():
        pytest.skip(f"{bert} not present")
    html, analysis = report(tmp_path, bert)
    shot = tmp_path / "bert.png"
    check_report_page(browser, html, analysis, shot)
    shutil.copyfile(shot, SCREENSHOT)


def test_t4_sample_report_in_chromium(browser, tmp_path):
    html, analysis = report(tmp_path, SAMPLES / "t4_seed_pow_mul.json")
    shot = tmp_path / "t4.png"
    check_report_page(browser, html, analysis, shot)
    if not SCREENSHOT.exists() or not (TRACES / BERT).exists():
        shutil.copyfile(shot, SCREENSHOT)


def test_hostile_trace_report_runs_no_script(browser, tmp_path):
    from tests.test_escaping import hostile_trace

    trace = tmp_path / "hostile.json"
    trace.write_text(json.dumps(hostile_trace()))
    html, analysis = report(tmp_path, trace)
    url = html.resolve().as_uri()
    browser.open(url)
    assert browser.js("document.scripts.length") == 2
    assert browser.js("document.querySelectorAll('img, iframe, object, embed, link, base, form').length") == 0
    assert browser.js("document.querySelectorAll('#chart circle').length") == sum(
        1 for o in analysis["ops"] if (o.get("flops") or 0) > 0)
    assert hover_each_point_kind(browser, analysis) >= 1
    click_header(browser, "name")
    found = problems(browser, url)
    assert found == {"errors": [], "requests": [], "dialogs": []}, found


QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


@pytest.mark.parametrize("width", [1280, 1920])
def test_ops_table_fits_and_filters(browser, tmp_path, width):
    """At 1280 and 1920 px the ops table needs no horizontal scroll, no number or dimension wraps
    inside itself, and the text / bound filters hide the rows that do not match."""
    trace = TRACES / QWEN
    if not trace.exists():
        trace = SAMPLES / "t4_seed_pow_mul.json"
    html, analysis = report(tmp_path, trace)
    url = html.resolve().as_uri()
    browser.page("Emulation.setDeviceMetricsOverride", width=width, height=1000, deviceScaleFactor=1, mobile=False)
    try:
        browser.open(url)
        fit = browser.js("""(() => { const w = document.querySelector('#ops .table-wrap');
            const t = document.getElementById('ops-table');
            return {wrap: w.clientWidth, table: t.scrollWidth, page: document.documentElement.scrollWidth}; })()""")
        assert fit["table"] <= fit["wrap"] and fit["page"] <= width, fit
        # a numeric cell's text is one line box, and a dims cell breaks only after ", "
        tall = browser.js("""Array.from(document.querySelectorAll('#ops-table td.num')).filter(td => {
            const r = document.createRange(); r.selectNodeContents(td);
            return r.getClientRects().length > 1; }).length""")
        assert tall == 0
        broken = browser.js("""Array.from(document.querySelectorAll('#ops-table td.dims')).filter(td => {
            const r = document.createRange(); const t = td.firstChild; if (!t) return false;
            let prevTop = null, bad = false;
            for (let i = 0; i < t.length; i += 1) {
              r.setStart(t, i); r.setEnd(t, i + 1); const rect = r.getBoundingClientRect();
              if (prevTop !== null && rect.top > prevTop + 2 && !/[ ,]/.test(t.data[i - 1])) bad = true;
              if (rect.height) prevTop = rect.top;
            }
            return bad; }).length""")
        assert broken == 0
        rows = len(analysis["ops"][:2000])
        # the text filter: "aten::mm" leaves the rows whose name, dims, dtypes or class contain it
        expected = sum(1 for o in analysis["ops"][:2000] if "aten::mm" in o["name"].lower())
        browser.js("(() => { const f = document.getElementById('ops-filter'); f.value = 'aten::mm';"
                   " f.dispatchEvent(new Event('input')); })()")
        shown = browser.js("Array.from(document.querySelectorAll('#ops-table tbody tr')).filter(r => !r.hidden).length")
        assert 0 < expected <= shown < rows
        # the bound filter on top of it: memory-bound rows only
        browser.js("(() => { const f = document.getElementById('ops-filter'); f.value = '';"
                   " f.dispatchEvent(new Event('input')); const b = document.getElementById('ops-bound');"
                   " b.value = 'memory'; b.dispatchEvent(new Event('change')); })()")
        bounds = browser.js("Array.from(document.querySelectorAll('#ops-table tbody tr')).filter(r => !r.hidden)"
                            ".map(r => r.getAttribute('data-bound'))")
        assert bounds and set(bounds) == {"memory"}
        assert len(bounds) == sum(1 for o in analysis["ops"][:2000] if o["bound"] == "memory")
        browser.js("document.getElementById('ops').scrollIntoView({block: 'start'})")
        png = browser.page("Page.captureScreenshot", format="png")["data"]
        (tmp_path / f"ops-{width}.png").write_bytes(base64.b64decode(png))
        found = problems(browser, url)
        assert found == {"errors": [], "requests": [], "dialogs": []}, found
    finally:
        browser.page("Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1,
                     mobile=False)
