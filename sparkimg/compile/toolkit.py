"""A hermetic CUDA toolkit: NVIDIA's toolkit wheels, pinned by sha256, unpacked once into the store.

With ``toolchain: cuda: wheels`` the toolkit is not whatever a machine has at /usr/local/cuda but
the wheels the lock pins for the spec's platform (nvidia-cuda-nvcc, -crt, nvidia-nvvm,
-cuda-runtime, -cuda-cccl, and any headers a layer asks for): two machines, or an x86 machine
building for arm64, compile with the same toolkit bytes. Each wheel holds its part of one
toolkit tree under ``nvidia/cuNN/`` (bin, include, lib, nvvm); the members under that prefix are
unpacked into ``toolkits/IDENTITY`` with their exec bits (a zip keeps them in the external
attributes, which a plain unzip drops), plus ``lib64 -> lib``, the folder nvcc's profile links
from, and the development links (``libcudart.so -> libcudart.so.13``) an installer makes.
``IDENTITY`` is the sha256 of the layout version and every wheel's sha256 (``formats.toolkit``),
so the whole tree, not only nvcc's binary, is in every compile key (the lock's toolchain pin
names it); the folder is written under a temp name and renamed, so a kill -9 or a second build
never sees half a tree. It is mounted read-only at ``MOUNT`` in compile containers and prewarm
containers. gc keeps a tree a live lock names.
"""

from __future__ import annotations

import re
import shutil
import stat
import zipfile
from pathlib import Path, PurePosixPath

from sparkimg.errors import BuildError
from sparkimg.formats.lockfile import ToolchainPin
from sparkimg.formats.toolkit import FOLDER
from sparkimg.store import trees
from sparkimg.store.content import Store

MOUNT = "/usr/local/cuda"  # where a compile container sees it (CUDA_HOME)
PREFIX = re.compile(r"^nvidia/cu\d+/")


def path(store: Store, pin: ToolchainPin) -> Path:
    """Where the tree of ``pin`` is (or will be) in ``store``."""
    assert pin.toolkit is not None
    return at(store.root, pin.toolkit)


def at(store_root: Path, identity: str) -> Path:
    """Where the toolkit ``identity`` (``formats.toolkit.identity``) is in the store at ``store_root``."""
    return store_root / FOLDER / identity


def tree(store: Store, pin: ToolchainPin) -> Path:
    """The unpacked toolkit of ``pin`` in the store, made now from its wheels (fetched blobs)
    when it is not there yet."""

    def make(staged: Path) -> None:
        prefixes: set[str] = set()
        for name, sha256 in pin.wheels:
            prefixes |= _unpack(store.blob(sha256), staged, name)
        for name, sha256 in pin.headers:  # their include/ only: cuBLAS's libraries are 600 MB
            prefixes |= _unpack(store.blob(sha256), staged, name, only="include")
        if len(prefixes) > 1:
            raise BuildError(f"toolchain.wheels: the wheels hold toolkits of several CUDA majors "
                             f"({', '.join(sorted(prefixes))})", hint="pin every toolkit wheel of one CUDA release")
        if not (staged / "bin" / "nvcc").is_file():
            raise BuildError("toolchain.wheels: no bin/nvcc in the toolkit's wheels",
                             hint="list the source of nvidia-cuda-nvcc in toolchain.wheels")
        if (staged / "lib").is_dir():
            _development_links(staged / "lib")
            if not (staged / "lib64").exists():
                (staged / "lib64").symlink_to("lib")

    return trees.made(store, path(store, pin), make, "toolkit.")


SONAME = re.compile(r"^(lib[\w+-]+)\.so\.\d+$")


def _development_links(lib: Path) -> None:
    """``libcudart.so -> libcudart.so.13`` for each library the wheels ship by its soname only: what
    a toolkit installer links, so that ``-lcudart`` (FlashInfer's JIT link, CMake's
    FindCUDAToolkit) finds it; the wheels leave it to pip, which makes none."""
    for library in sorted(lib.iterdir()):
        found = SONAME.match(library.name)
        if found is not None and not (link := lib / f"{found.group(1)}.so").exists():
            link.symlink_to(library.name)


def _unpack(wheel: Path, into: Path, name: str, *, only: str | None = None) -> set[str]:
    """The wheel's members under ``nvidia/cuNN/`` (``only``: under ``nvidia/cuNN/ONLY/``) into
    ``into``, exec bits kept; the prefixes seen."""
    seen: set[str] = set()
    try:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                found = PREFIX.match(info.filename)
                if found is None or info.is_dir():
                    continue
                relative = PurePosixPath(info.filename[found.end():])
                if only is not None and relative.parts[:1] != (only,):
                    continue
                if not relative.parts or relative.is_absolute() or ".." in relative.parts:
                    raise BuildError(f"toolchain.wheels: {name}: member {info.filename!r} leaves the toolkit's folder",
                                     hint="pin NVIDIA's own wheel")
                seen.add(found.group(0))
                target = into.joinpath(*relative.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                if target.exists():
                    raise BuildError(f"toolchain.wheels: {name}: {relative} is in another wheel of the toolkit too",
                                     hint="list each toolkit wheel once")
                with archive.open(info) as source, target.open("wb") as sink:
                    shutil.copyfileobj(source, sink, 1 << 20)
                executable = (info.external_attr >> 16) & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
                target.chmod(0o755 if executable else 0o644)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise BuildError(f"toolchain.wheels: {name}: cannot unpack {wheel.name}: {exc}",
                         hint="the store's copy is damaged; `sparkimg fetch` the spec again") from None
    return seen
