"""A hermetic toolkit: NVIDIA's wheels unpacked into one tree in the store, exec bits kept, named
by every wheel's bytes, written whole or not at all; the lock pins it, gc keeps what a lock names."""

from __future__ import annotations

import io
import json
import os
import stat
import zipfile
from pathlib import Path

import pytest

from sparkimg.compile import toolkit
from sparkimg.errors import BuildError
from sparkimg.formats.lockfile import LockFile, ToolchainPin
from sparkimg.formats.toolkit import identity, release
from sparkimg.store.content import Store
from sparkimg.store.gc import collect
from sparkimg.store.roots import remember_root
from tests.formats import lock_json


def _wheel(members: dict[str, tuple[bytes, int]]) -> bytes:
    """A wheel's bytes: each member with its content and mode (kept in the external attributes)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, (data, mode) in members.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | mode) << 16
            archive.writestr(info, data)
        archive.writestr("nvidia_x-13.0.dist-info/RECORD", "")
    return buffer.getvalue()


def _pin(store: Store, wheels: dict[str, dict[str, tuple[bytes, int]]]) -> ToolchainPin:
    pinned = tuple((name, store.put_bytes(_wheel(members), what=name)) for name, members in wheels.items())
    return ToolchainPin("wheels", nvcc_version=release("13.0.88"), wheels=pinned,
                        toolkit=identity(sha256 for _, sha256 in pinned))


NVCC = {"nvidia/cu13/bin/nvcc": (b"\x7fELF nvcc", 0o755), "nvidia/cu13/bin/nvcc.profile": (b"TOP = ..", 0o644),
        "nvidia/__init__.py": (b"", 0o644)}
RUNTIME = {"nvidia/cu13/lib/libcudart.so.13": (b"\x7fELF cudart", 0o644),
           "nvidia/cu13/include/cuda_runtime.h": (b"// cudart", 0o644)}


def test_the_wheels_become_one_tree_with_their_exec_bits(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    pin = _pin(store, {"cuda-nvcc": NVCC, "cuda-runtime": RUNTIME})
    tree = toolkit.tree(store, pin)
    assert tree == store.root / "toolkits" / str(pin.toolkit)
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_symlink() or not p.is_dir()) == [
        "bin/nvcc", "bin/nvcc.profile", "include/cuda_runtime.h", "lib/libcudart.so", "lib/libcudart.so.13", "lib64"]
    assert os.access(tree / "bin" / "nvcc", os.X_OK) and not os.access(tree / "bin" / "nvcc.profile", os.X_OK)
    assert os.readlink(tree / "lib64") == "lib"  # where nvcc's profile links from
    assert os.readlink(tree / "lib" / "libcudart.so") == "libcudart.so.13"  # what -lcudart finds
    (tree / "bin" / "marker").write_text("kept")
    assert toolkit.tree(store, pin) == tree and (tree / "bin" / "marker").exists()  # made once
    assert not list((store.root / "tmp").glob("toolkit.*"))


def test_the_identity_is_every_wheels_bytes_in_any_order() -> None:
    assert identity(["a" * 64, "b" * 64]) == identity(["b" * 64, "a" * 64]) != identity(["a" * 64])
    assert release("13.0.88") == "13.0, V13.0.88"


@pytest.mark.parametrize(("wheels", "message"), [
    ({"cuda-runtime": RUNTIME}, "no bin/nvcc in the toolkit's wheels"),
    ({"cuda-nvcc": NVCC, "old": {"nvidia/cu12/include/x.h": (b"", 0o644)}}, "toolkits of several CUDA majors"),
    ({"cuda-nvcc": NVCC, "again": {"nvidia/cu13/bin/nvcc": (b"", 0o755)}}, "bin/nvcc is in another wheel"),
    ({"cuda-nvcc": NVCC, "evil": {"nvidia/cu13/../../../x": (b"", 0o644)}}, "leaves the toolkit's folder"),
])
def test_a_toolkit_that_is_not_one_is_refused_and_nothing_is_left(tmp_path: Path, wheels: dict[str, dict[str, tuple[
        bytes, int]]], message: str) -> None:
    store = Store(tmp_path / "store")
    pin = _pin(store, wheels)
    with pytest.raises(BuildError, match=message):
        toolkit.tree(store, pin)
    assert not toolkit.path(store, pin).exists()
    assert not list((store.root / "tmp").glob("toolkit.*"))


CUBLAS = {"nvidia/cu13/include/cublasLt.h": (b"// cublasLt", 0o644),
          "nvidia/cu13/lib/libcublasLt.so.13": (b"\x7fELF 500 MB of it", 0o755)}


def test_a_header_wheel_gives_the_tree_its_include_folder_alone(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    pin = _pin(store, {"cuda-nvcc": NVCC, "cuda-runtime": RUNTIME})
    cublas = store.put_bytes(_wheel(CUBLAS), what="cublas")
    headed = ToolchainPin("wheels", nvcc_version=pin.nvcc_version, wheels=pin.wheels, headers=(("cublas", cublas),),
                          toolkit=identity((sha256 for _, sha256 in pin.wheels), [cublas]))
    tree = toolkit.tree(store, headed)
    assert (tree / "include" / "cublasLt.h").read_bytes() == b"// cublasLt"
    assert not (tree / "lib" / "libcublasLt.so.13").exists() and not (tree / "lib" / "libcublasLt.so").exists()
    # Another tree than the same wheels whole, or without the headers.
    assert headed.toolkit != identity(s for _, s in (*pin.wheels, ("cublas", cublas))) != pin.toolkit
    assert headed.toolkit != pin.toolkit


def test_a_wheels_toolchain_round_trips_through_the_lock() -> None:
    data = lock_json()
    data["toolchain"] = {"cuda": "wheels", "toolkit": "1" * 64, "nvcc_version": "13.0, V13.0.88",
                         "wheels": [{"source": "cuda-nvcc", "sha256": "2" * 64}]}
    found = LockFile.from_json(json.loads(json.dumps(data)), "x")
    assert found.toolchain == ToolchainPin("wheels", nvcc_version="13.0, V13.0.88",
                                           wheels=(("cuda-nvcc", "2" * 64),), toolkit="1" * 64)
    assert found.to_json()["toolchain"] == data["toolchain"]  # no "headers" key: older locks keep their bytes
    data["toolchain"]["headers"] = [{"source": "cublas", "sha256": "3" * 64}]
    headed = LockFile.from_json(json.loads(json.dumps(data)), "x")
    assert headed.toolchain.headers == (("cublas", "3" * 64),)
    assert headed.to_json()["toolchain"] == data["toolchain"]


def test_gc_keeps_the_tree_a_lock_names_and_removes_the_others(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    kept = toolkit.tree(store, _pin(store, {"cuda-nvcc": NVCC}))
    gone = toolkit.tree(store, _pin(store, {"cuda-nvcc": NVCC, "cuda-runtime": RUNTIME}))
    spec = tmp_path / "project" / "demo.yaml"
    spec.parent.mkdir()
    spec.write_text("name: demo\n")
    lock = spec.with_name("demo.yaml.lock.json")
    lock.write_text(json.dumps({"toolchain": {"cuda": "wheels", "toolkit": kept.name}}))
    remember_root(store, spec, lock=lock, receipts=tmp_path / "receipts", keys=[])
    found = collect(store)
    assert kept.is_dir() and not gone.exists()
    assert found.to_json()["removed_toolkits"] == 1
