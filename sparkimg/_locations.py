"""Where sparkimg keeps things by default; a leaf, so the no-op answer can find the store
without loading the store's code."""

from __future__ import annotations

import os
from pathlib import Path


def default_store() -> Path:
    """``$SPARKIMG_STORE``, else ``$XDG_CACHE_HOME/sparkimg``, else ``~/.cache/sparkimg``."""
    if os.environ.get("SPARKIMG_STORE"):
        return Path(os.environ["SPARKIMG_STORE"])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "sparkimg"
