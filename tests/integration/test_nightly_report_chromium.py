"""The drift report as a browser shows it: headless Chromium opens a realistic night's page (a git
move with a hostile subject, a rebuilt and a reused layer, a few nights of history), its DOM holds
the status, the move and the layers, and the hostile subject as text, never as an element; a
screenshot of the page is kept (pytest's tmp path, and ``$SPARKIMG_TEST_ARTIFACTS`` when set)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from sparkimg.nightly import html
from tests.nightly_reports import report
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

    shot = tmp_path / "report.png"
    started = time.monotonic()
    browse(chromium, tmp_path / "profile", f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}", url)
    shot_s = time.monotonic() - started
    assert shot.stat().st_size > 20_000  # a drawn page, not a blank one
    assert png_size(shot) == (WIDTH, HEIGHT)
    if artifacts := os.environ.get("SPARKIMG_TEST_ARTIFACTS"):
        folder = Path(artifacts)
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, folder / "nightly-report.png")
        shutil.copy(tmp_path / "report.html", folder / "nightly-report.html")
    print(f"chromium: --dump-dom {dumped_s:.2f} s, --screenshot {shot_s:.2f} s; "
          f"page {(tmp_path / 'report.html').stat().st_size} bytes")
