"""The drift report as a browser shows it: headless Chromium opens a realistic night's page (a git
move with a hostile subject, a rebuilt and a reused layer, a few nights of history), its DOM holds
the status, the move and the layers, and the hostile subject as text, never as an element; a
failed night's page shows why it failed and its nights by entry id; a first night's page has no
empty plot. Screenshots are kept (pytest's tmp path, and ``$SPARKIMG_TEST_ARTIFACTS`` when set)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from sparkimg.nightly import html
from tests.nightly_reports import FAILED_CHECK, FAILED_COMPILE, history, report
from tests.support import unavailable

pytestmark = pytest.mark.integration

WIDTH, HEIGHT = 1280, 2000


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        unavailable("no chromium (apt-get install chromium)")
    assert found is not None
    return found


def browse(chromium: str, profile: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """One headless Chromium run with its own profile; as root it needs --no-sandbox."""
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
               f"--user-data-dir={profile}", *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_chromium_shows_the_night_and_runs_nothing_from_it(chromium: str, tmp_path: Path) -> None:
    night = report()
    html.write(night, tmp_path / "report.json", tmp_path / "report.html")
    url = (tmp_path / "report.html").as_uri()

    started = time.monotonic()
    dom = browse(chromium, tmp_path / "profile", "--dump-dom", url).stdout
    dumped_s = time.monotonic() - started
    assert "<title>sparkimg nightly: demo.yaml 20261203T020000Z</title>" in dom  # the hostile script never ran
    assert "<script" not in dom and "<img" not in dom and "pwned</title>" not in dom
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom  # the subject, shown as text
    assert 'class="badge built">built</span>' in dom
    assert ">vllm</td>" in dom and ">0123456789ab</code>" in dom and "[Kernel] Fix MoE for sm_121a" in dom
    assert ">demo-kernel</td>" in dom and ">six</td>" in dom
    assert 'class="s-rebuilt">rebuilt</td>' in dom and 'class="s-reused">reused</td>' in dom
    assert dom.count("<svg") == 3
    assert ">20261130T020000Z</text>" in dom and ">20261203T020000Z</text>" in dom  # nights by entry id

    shot_s = screenshot(chromium, tmp_path, "report")
    print(f"chromium: --dump-dom {dumped_s:.2f} s, --screenshot {shot_s:.2f} s; "
          f"page {(tmp_path / 'report.html').stat().st_size} bytes")


def screenshot(chromium: str, folder: Path, name: str) -> float:
    """A screenshot of ``folder/NAME.html``, checked drawn and kept; the seconds it took."""
    shot = folder / f"{name}.png"
    started = time.monotonic()
    browse(chromium, folder / "profile", f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}",
           (folder / f"{name}.html").as_uri())
    took = time.monotonic() - started
    assert shot.stat().st_size > 20_000  # a drawn page, not a blank one
    assert png_size(shot) == (WIDTH, HEIGHT)
    if artifacts := os.environ.get("SPARKIMG_TEST_ARTIFACTS"):
        kept = Path(artifacts)
        kept.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, kept / f"nightly-{name}.png")
        shutil.copy(folder / f"{name}.html", kept / f"nightly-{name}.html")
    return took


def test_chromium_shows_why_a_night_failed_and_each_night_by_its_entry(chromium: str, tmp_path: Path) -> None:
    """A failed compile after two nights of one day: the first error line as text, the entry ids on the
    axes (the two nights of 12-02 apart); a failed check: the files that differ."""
    same_day = {**history()[0], "entry": "20261202T140000Z", "started": "2026-12-02T14:00:00Z"}
    failed = {**FAILED_COMPILE, "history": [*history(), same_day]}
    html.write(failed, tmp_path / "failed.json", tmp_path / "failed.html")
    dom = browse(chromium, tmp_path / "profile", "--dump-dom", (tmp_path / "failed.html").as_uri()).stdout
    assert 'class="badge failed">failed</span>' in dom and "<h2>Why the night failed</h2>" in dom
    assert ("<th>first error line</th><td><code>csrc/moe.cu(41): error: identifier \"__nv_fp4&lt;T&gt;\" is "
            "undefined</code>") in dom  # the browser's serialisation: the quote as is, the brackets as text
    assert "<th>layer</th><td><code>demo-kernel</code>" in dom
    assert dom.count("<svg") == 3  # earlier nights have numbers for each; this failed night is a gap
    for entry in ("20261130T020000Z", "20261202T020000Z", "20261202T140000Z", "20261203T020000Z"):
        assert dom.count(f">{entry}</text>") == 3, entry  # one tick per night in each plot
    screenshot(chromium, tmp_path, "failed")

    html.write(FAILED_CHECK, tmp_path / "check.json", tmp_path / "check.html")
    dom = browse(chromium, tmp_path / "profile", "--dump-dom", (tmp_path / "check.html").as_uri()).stdout
    assert "3 files differ between the two builds" in dom and "usr/lib/python3/site-packages/demo/_C.so" in dom
    assert "etc/&lt;script&gt;x&lt;/script&gt;.conf" in dom and "<script" not in dom

    html.write(report(history=[]), tmp_path / "first.json", tmp_path / "first.html")
    dom = browse(chromium, tmp_path / "profile", "--dump-dom", (tmp_path / "first.html").as_uri()).stdout
    assert "<svg" not in dom and "the plot starts with a second night" in dom
