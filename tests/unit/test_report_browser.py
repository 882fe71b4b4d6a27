"""report.html as a person sees it: opened in a real headless browser (Debian's chromium), the
rendered page holds every table and figure the analysis wrote, logs no console message, and its
screenshot is a picture, not a blank page. Without chromium the test is skipped, except under
CI=true, where its absence fails it (tests/run.sh installs it)."""

from __future__ import annotations

import base64
import io
import os
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg

from tests import envneeds

from nodewarden.analysis import report, tables
from nodewarden.analysis.ingest import IngestStats

BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                 "--disable-extensions", "--enable-logging=stderr", "--v=0")


def _chromium() -> str:
    return envneeds.command("chromium", "renders report.html (apt-get install chromium; tests/run.sh does it as root)",
                            "chromium-browser")


def _events():
    def xid(t, host, code):
        return (t, host, "xid", code, None, None, "0000:07:00.0", "file")

    def link(t, host, up):
        return (t, host, "ib_link_up" if up else "ib_link_down", None, None, "mlx5_0/1", None, "file")

    return tables.make_frame([
        xid("2023-10-15T01:00:00Z", "n1", 63), xid("2023-10-20T01:00:00Z", "n1", 79),
        xid("2023-11-02T01:00:00Z", "n2", 119), xid("2023-11-03T01:00:00Z", "n2", 31),
        link("2023-11-10T00:00:00Z", "n1", False), link("2023-11-10T00:00:05Z", "n1", True),
        ("2023-11-12T00:00:00Z", "n1", "cpu_ecc", None, None, "mc0/DIMM0", None, "file", 3),
        xid("2023-12-03T01:00:00Z", "n2", 74),
    ])


class _Dom(HTMLParser):
    """Counts what the rendered DOM holds: tables, images (their src), links (their href)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables = 0
        self.imgs: list[str] = []
        self.links: list[str] = []
        self.h1: list[str] = []
        self._in_h1 = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.tables += 1
        elif tag == "img":
            self.imgs.append(a.get("src") or "")
        elif tag == "a" and a.get("href"):
            self.links.append(a["href"])
        elif tag == "h1":
            self._in_h1 = True

    def handle_endtag(self, tag):
        if tag == "h1":
            self._in_h1 = False

    def handle_data(self, data):
        if self._in_h1:
            self.h1.append(data)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HOME": str(cwd)})  # a profile of its own, in tmp


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    assert report.run(_events(), IngestStats(files=1, events=8), out_dir=str(out), stream=io.StringIO()) == 0
    return out


def _tables_written(out: Path) -> int:
    """Tables the analysis wrote with rows: NAME.md files holding a Markdown table, but the
    every-cut list (the page gives its count) and the discrepancies (a list on the page)."""
    n = 0
    for md in out.glob("*.md"):
        if md.stem in ("report", "ib_flash_cuts", "discrepancies"):
            continue
        n += bool(re.search(r"^\|[:-]", md.read_text(), re.M))
    return n


def test_report_renders_every_table_and_figure(written: Path) -> None:
    exe = _chromium()
    page = written / "report.html"
    got = _run([exe, *BROWSER_FLAGS, "--dump-dom", page.as_uri()], written)
    assert got.returncode == 0, got.stderr[-2000:]
    dom = _Dom()
    dom.feed(got.stdout)
    assert "".join(dom.h1) == "Failure statistics", got.stdout[:500]  # the page, not an error page
    assert "main-frame-error" not in got.stdout
    console = [line for line in got.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []
    assert dom.tables == _tables_written(written) >= 10
    pngs = {p.read_bytes(): p.name for p in written.glob("*.png")}
    assert len(dom.imgs) == len(pngs) == 3
    shown = []
    for src in dom.imgs:
        assert src.startswith("data:image/png;base64,"), src[:60]
        shown.append(pngs.get(base64.b64decode(src.split(",", 1)[1])))
    assert sorted(shown) == sorted(pngs.values())  # each figure file, once
    assert dom.links and all((written / href).is_file() for href in dom.links)


def test_report_screenshot_is_not_blank(written: Path) -> None:
    exe = _chromium()
    shot = written / "screenshot.png"
    got = _run([exe, *BROWSER_FLAGS, f"--screenshot={shot}", "--window-size=1280,4000",
                (written / "report.html").as_uri()], written)
    assert got.returncode == 0 and shot.is_file(), got.stderr[-2000:]
    img = mpimg.imread(shot)  # floats 0..1, rows x columns x RGB(A)
    assert img.shape[:2] == (4000, 1280)
    rgb = (img[..., :3] * 255).astype(np.uint32)
    colours = np.unique((rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2])
    assert len(colours) > 10  # text, table borders, the figures' bars
    top = img[:400, :, :3]  # the title and the Data list are drawn: dark pixels on white
    assert (top.mean(axis=-1) < 0.3).mean() > 0.001
