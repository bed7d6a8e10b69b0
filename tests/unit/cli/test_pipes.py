"""A reader that goes away (`sparkimg ... --json | head -1`) ends sparkimg quietly with 141, as it
ends git or yes: no traceback, no "disk full", nothing said on stderr about it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.formats import GOOD


def _closed_reader(*args: str) -> subprocess.CompletedProcess[str]:
    """``sparkimg ARGS`` with a stdout whose reader is already gone: its first write fails (EPIPE)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "sparkimg.cli", *args], stdout=write, stderr=subprocess.PIPE,
                              text=True, check=False, timeout=120)
    finally:
        os.close(write)


@pytest.mark.parametrize("command", ["gc", "doctor-clean", "check"])
def test_a_closed_pipe_is_a_quiet_exit_141(tmp_path: Path, project: Callable[..., Path], command: str) -> None:
    spec = project(GOOD.replace("platform: linux/arm64\n", "platform: native\n", 1))
    store = str(tmp_path / "store")
    args = {"gc": ["--store", store, "gc", "--json"],
            "doctor-clean": ["--store", store, "doctor", "--clean", "--json"],
            "check": ["--store", store, "check", str(spec), "--json"]}[command]
    done = _closed_reader(*args)
    assert done.returncode == 141, done.stderr
    assert done.stderr == ""  # no traceback, no "Exception ignored", no "disk full"
