"""The name of a hermetic CUDA toolkit (``toolchain: cuda: wheels``): one rule for lock and build.

The lock writes the identity into the toolchain pin (so every compile key and gc's scan of the
lock see it); ``compile.toolkit`` unpacks the wheels into ``toolkits/IDENTITY``.
"""

from __future__ import annotations

from collections.abc import Iterable

from sparkimg.formats.canonical import digest_of, hex_of

LAYOUT = "sparkimg-cuda-wheels/2"  # how wheels become a tree: in the identity, so a change moves every key
# (2: the development links, libcudart.so -> libcudart.so.13)
FOLDER = "toolkits"  # in the store: toolkits/IDENTITY, made by ``compile.toolkit``, kept or removed by gc


def identity(sha256s: Iterable[str], headers: Iterable[str] = ()) -> str:
    """The toolkit tree's name: sha256 (hex) of the layout, the wheels' sha256s and those of the
    wheels only the headers of which are in the tree, each in any order."""
    parts: dict[str, object] = {"layout": LAYOUT, "wheels": sorted(sha256s)}
    if only_headers := sorted(headers):  # absent without: a tree of whole wheels keeps its name
        parts["headers"] = only_headers
    return hex_of(digest_of(parts))


def release(version: str) -> str:
    """nvcc's own words for a nvidia-cuda-nvcc version: ``13.0.88`` -> ``13.0, V13.0.88``."""
    major_minor = ".".join(version.split(".")[:2])
    return f"{major_minor}, V{version}"
