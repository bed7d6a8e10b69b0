"""Parsing and printing of byte sizes (``4g``, ``512m``, ``1.5GiB``)."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_FACTOR = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(value: object) -> int:
    """Bytes from an int or a string like ``4g``; ``ValueError`` otherwise."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(value)
        return value
    if not isinstance(value, str):
        raise ValueError(value)
    match = _SIZE.match(value)
    if not match:
        raise ValueError(value)
    number = float(match.group(1)) * _FACTOR[match.group(2).lower()]
    if number < 1:
        raise ValueError(value)
    return int(number)


def format_size(n: int | float) -> str:
    """A short human form: ``3.2 GiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def mib(size: int) -> str:
    """Bytes in MiB with one decimal (``12.0 MiB``): how progress lines count a download or a pull."""
    return f"{size / (1 << 20):,.1f} MiB"
