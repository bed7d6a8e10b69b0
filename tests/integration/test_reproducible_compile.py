"""Compile layers rebuild byte for byte: the demo kernel's layer built from empty stores gives one
wheel sha256, and so does a command whose nvcc processes race for pids."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from sparkimg.compile import wheelzip
from sparkimg.compile.bounds import Overrides, derive
from sparkimg.compile.container import compile_layer
from sparkimg.engine.protocol import Engine
from sparkimg.fetch.inputs import fetch
from sparkimg.formats.record import LayerRecord
from sparkimg.lock import resolve as lock_mod
from sparkimg.plan.keys import compute
from sparkimg.spec import CompileLayer, Spec, load_spec
from sparkimg.store.content import Store

from .helpers import copy_demo

pytestmark = pytest.mark.integration


def _build(spec: Spec, store: Store, engine: Engine) -> tuple[LayerRecord, Path]:
    """Build the spec's compile layer alone into ``store`` (no image); its record and first wheel."""
    lock = lock_mod.load_lock(spec)
    layer = next(layer for layer in spec.layers if isinstance(layer, CompileLayer))
    fetched = fetch(spec, lock, store, engine)
    record = compile_layer(spec, lock, layer, compute(spec, lock, store).layer(layer.name),
                           fetched.blobs[layer.source], lock.base.config_digest, store, engine,
                           derive(layer.bounds, Overrides(), layer=layer.name), lambda event: None)
    return record, store.blob(record.outputs[0].sha256)


def _locked_demo(root: Path, command: str | None = None) -> Spec:
    path = copy_demo(root)
    if command is not None:
        text = path.read_text()
        path.write_text(text.replace("command: python3 /src/build_wheel.py --out /out", f"command: {command}"))
    spec = load_spec(path)
    lock_mod.write(spec, lock_mod.resolve(spec, Store(root / "lock-store")))
    return load_spec(path)


def test_demo_kernel_rebuilds_to_one_wheel(tmp_path: Path, engine: Engine, demo_base: str) -> None:
    spec = _locked_demo(tmp_path)
    built = [_build(spec, Store(tmp_path / f"store-{i}"), engine) for i in range(3)]
    assert len({record.outputs[0].sha256 for record, _ in built}) == 1
    record, wheel = built[0]
    assert record.audit[0]["cubin_sm"] == [121] and record.audit[0]["missing"] == []
    assert wheelzip.record_problems(wheel) == []
    with zipfile.ZipFile(wheel) as archive:
        library = archive.read("sparkimg_demo_kernel/libsparkimg_demo.so")
        assert [i.filename for i in archive.infolist()][-1].endswith(".dist-info/RECORD")
    assert b"tmpxft_00000000_00000000" in library


# Two nvcc runs at once (their pids race), each into its own library, then the demo's wheel.
RACE = ("sh -c 'mkdir -p /tmp/race && for n in a b; do nvcc $NVCC_GENCODE -O2 -shared -Xcompiler -fPIC "
        "-o /tmp/race/$n.so /src/kernel.cu & done; wait && python3 /src/build_wheel.py --out /out && "
        "cd /tmp/race && python3 -c \"import zipfile, glob; z = zipfile.ZipFile(glob.glob(\\\"/out/*.whl\\\")[0], "
        "\\\"a\\\"); [z.write(n, \\\"race/\\\" + n) for n in (\\\"a.so\\\", \\\"b.so\\\")]\"'")


def test_racing_nvcc_pids_do_not_reach_the_wheel(tmp_path: Path, engine: Engine, demo_base: str) -> None:
    spec = _locked_demo(tmp_path, RACE)
    built = [_build(spec, Store(tmp_path / f"store-{i}"), engine) for i in range(3)]
    assert len({record.outputs[0].sha256 for record, _ in built}) == 1
    with zipfile.ZipFile(built[0][1]) as archive:
        assert archive.read("race/a.so") == archive.read("race/b.so")  # same source, pid gone
