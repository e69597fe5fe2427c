"""The HTML report in a real headless Chromium, with the network off.

The page is loaded twice with Debian's ``chromium`` (installed by ``.ci/run``): once as written, for a screenshot;
once with a probe script prepended that records script errors and ``alert`` calls and writes what it saw (plot DOM,
the plot's box, resource loads) into the DOM, which ``--dump-dom`` returns. Pixels are read from the screenshot with
the standard library's zlib (PNG scanlines un-filtered here), inside the box the probe reported.
"""

from __future__ import annotations

import html as html_lib
import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from iotrace.trace.render.html import report_html
from iotrace.trace.reports.report import build_report
from iotrace.trace.tables import build
from tests.conftest import load_corpus

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
pytestmark = [pytest.mark.slow,  # a real browser loads each page: make test-fast leaves these out
              pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium; "
                                                          "make test installs it where it runs as root)")]

WINDOW = (1200, 1800)
# Network off: every host name resolves to nothing and every request goes to a closed local port.
OFFLINE = ["--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9",
           "--proxy-bypass-list=<-loopback>"]
BASE = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
        f"--window-size={WINDOW[0]},{WINDOW[1]}", "--virtual-time-budget=8000", *OFFLINE]

PROBE = """<script>
window.__errors = []; window.__alerted = false;
window.addEventListener('error', e => window.__errors.push(String(e.message || e.type)), true);
const __err = console.error; console.error = (...a) => { window.__errors.push(a.join(' ')); __err(...a); };
window.alert = () => { window.__alerted = true; };
window.addEventListener('load', () => setTimeout(() => {
  const svg = document.querySelector('#plot-0 .main-svg');
  const r = svg ? svg.getBoundingClientRect() : null;
  const out = document.createElement('pre'); out.id = 'iotrace-probe';
  out.textContent = JSON.stringify({
    errors: window.__errors, alerted: window.__alerted,
    plots: document.querySelectorAll('.js-plotly-plot').length,
    svgs: document.querySelectorAll('.js-plotly-plot .main-svg').length,
    traces: document.querySelectorAll('#plot-0 .scatterlayer .trace').length,
    rect: r && {x: r.x, y: r.y + window.scrollY, w: r.width, h: r.height},
    resources: performance.getEntriesByType('resource').map(e => e.name),
    text: document.body.innerText});
  document.body.appendChild(out);
}, 1000));
</script>"""


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CHROMIUM, *BASE, *args], capture_output=True, text=True, timeout=120)


def _probe(page: Path, tmp_path: Path) -> dict:
    probed = tmp_path / f"probed-{page.name}"
    probed.write_text(page.read_text(encoding="utf-8").replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    result = _chromium("--dump-dom", probed.as_uri())
    found = re.search(r'<pre id="iotrace-probe">(.*?)</pre>', result.stdout, re.S)
    assert found, f"the probe did not run: {result.stderr[-2000:]}"
    return json.loads(html_lib.unescape(found.group(1)))


def _png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB(A) rows of an 8-bit PNG, with the scanline filters undone."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = prev[i], prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, [bytes(r) for r in rows], channels  # type: ignore[return-value]


def _assert_offline_and_rendered(page: Path, tmp_path: Path) -> dict:
    text = page.read_text(encoding="utf-8")
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="https?://', text), "the page loads something remote"
    probe = _probe(page, tmp_path)
    assert probe["errors"] == [], probe["errors"]
    assert probe["plots"] >= 2 and probe["svgs"] >= 2 and probe["traces"] >= 1
    assert [r for r in probe["resources"] if not r.startswith("file:")] == []
    shot = tmp_path / f"{page.stem}.png"
    result = _chromium(f"--screenshot={shot}", page.as_uri())
    assert shot.exists(), result.stderr[-2000:]
    width, height, rows, channels = _png_pixels(shot)
    rect = probe["rect"]
    x0, y0 = max(int(rect["x"]), 0), max(int(rect["y"]), 0)
    x1, y1 = min(int(rect["x"] + rect["w"]), width), min(int(rect["y"] + rect["h"]), height)
    assert x1 - x0 > 200 and y1 - y0 > 200, (rect, width, height)
    inked = sum(1 for y in range(y0, y1) for x in range(x0, x1)
                if min(rows[y][x * channels:x * channels + 3]) < 200)
    share = inked / ((x1 - x0) * (y1 - y0))
    assert 0.005 < share < 0.8, f"plot area is blank or solid: {share:.3%} of its pixels inked"
    return probe


def test_t4_report_renders_offline_with_no_script_errors(corpus: Path, tmp_path: Path) -> None:
    page = tmp_path / "t4.html"
    page.write_text(report_html(build_report(load_corpus(corpus / "ncu-rep/t4_matrix_add2d_full_ncu2024.2.ncu-rep"))),
                    encoding="utf-8")
    probe = _assert_offline_and_rendered(page, tmp_path)
    assert "Memory bound: memory throughput" in probe["text"] and "saves up to" in probe["text"]
    assert "Nsight Compute's own analysis" in probe["text"]


def test_kernel_names_are_text_not_markup(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    tables = build(Path("evil.json"), kernels=[{
        "id": 0, "name": evil, "start_ns": 0, "end_ns": 50_000, "duration_ns": 50_000.0, "grid_x": 64, "grid_y": 1,
        "grid_z": 1, "block_x": 128, "block_y": 1, "block_z": 1, "registers_per_thread": 32, "smem_bytes": 0}],
        metrics=[{"kernel_id": 0, "metric": m, "unit": "", "value": v} for m, v in (
            ("dram__bytes.sum", 4e6), ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum", 1e6),
            ("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", 9.0),
            ("smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", 1.0))],
        devices=[{"device": 0, "name": "NVIDIA A100-SXM4-40GB", "cc": "8.0", "card": "a100-sxm4-40gb"}],
        meta={"format": "test", "tool": "test"})
    text = report_html(build_report(tables))
    assert evil not in text and "<script>alert" not in text and "<img src=x" not in text
    assert html_lib.escape(evil) in text
    page = tmp_path / "evil.html"
    page.write_text(text, encoding="utf-8")
    probe = _assert_offline_and_rendered(page, tmp_path)
    assert probe["alerted"] is False
    assert "<script>alert(1)</script>" in probe["text"]  # shown as text, as typed


def test_the_probe_sees_a_page_without_plotly_as_broken(corpus: Path, tmp_path: Path) -> None:
    """The harness itself: strip the embedded plotly.js and the probe must report errors and no plots."""
    text = report_html(build_report(load_corpus(corpus / "ncu-rep/t4_matrix_add2d_full_ncu2024.2.ncu-rep")))
    start = text.index("<script>", text.index("</style>"))
    broken = text[:start] + text[text.index("</script>", start) + len("</script>"):]
    page = tmp_path / "broken.html"
    page.write_text(broken, encoding="utf-8")
    probe = _probe(page, tmp_path)
    assert probe["errors"] and any("Plotly" in e for e in probe["errors"])
    assert probe["svgs"] == 0
