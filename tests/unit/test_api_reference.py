"""docs/api.md is generated from ``sparkimg.api``'s docstrings (``scripts/api-reference``), never
edited by hand: it says what the facade exports today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_api_reference_is_current() -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "api-reference"), "--check"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_every_name_the_api_exports_exists() -> None:
    from sparkimg import api

    assert all(getattr(api, name, None) is not None for name in api.__all__)
    assert {"build", "noop_build", "Overrides", "NightOptions"} <= set(api.__all__)
