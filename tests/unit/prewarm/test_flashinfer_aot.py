"""FlashInfer AOT without FlashInfer: the packaging script's module vocabulary, a compile layer's
extra inputs, and prewarm's split between modules the image provides ahead of time and modules
it JIT-compiles (worker, events, manifest, verify, --list)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from sparkimg.cli.commands import provided_by
from sparkimg.errors import SpecError
from sparkimg.events import Collected
from sparkimg.plan.keys import layer_inputs
from sparkimg.prewarm import manifest, worker
from sparkimg.prewarm.catalogue import GENERATORS
from sparkimg.prewarm.verify import Expect, verify
from sparkimg.prewarm.warm import Events, aot_record
from sparkimg.signing.keys import PrivateKey, generate
from sparkimg.spec import Arch, load_spec
from tests.formats import entry, fatbin
from tests.support import REPO

SCRIPT = REPO / "build" / "flashinfer-aot" / "build_aot.py"


def build_aot() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_aot", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the packaging script ----------------------------------------------------------------------

def test_the_script_speaks_the_kernel_set_vocabulary() -> None:
    aot = build_aot()
    assert aot.GENERATORS == GENERATORS  # the script runs without sparkimg: its copy must not drift
    parsed = aot.parse_modules(json.dumps([
        {"activation": "silu"}, {"page": None}, {"mla": {"head_dim_ckv": 512}}, {"rope": [1, 2]},
        {"generator": "flashinfer.jit.norm.gen_norm_module", "args": []}]))
    assert parsed == [
        {"generator": GENERATORS["activation"], "args": ["silu"], "kwargs": {}},
        {"generator": GENERATORS["page"], "args": [], "kwargs": {}},
        {"generator": GENERATORS["mla"], "args": [], "kwargs": {"head_dim_ckv": 512}},
        {"generator": GENERATORS["rope"], "args": [1, 2], "kwargs": {}},
        {"generator": "flashinfer.jit.norm.gen_norm_module", "args": [], "kwargs": {}},
    ]
    for bad in ("", "{}", "[]", '[{"actvation": "silu"}]', '[{"activation": "silu", "page": null}]', "[1]"):
        with pytest.raises((SystemExit, ValueError)):
            aot.parse_modules(bad)
    assert aot.architecture_label("12.1a 9.0a 12.0f") == ["sm121a", "sm90a", "sm120f"]
    with pytest.raises(SystemExit):
        aot.architecture_label("sm_121a")


def test_the_wheel_registers_a_provider_flashinfer_accepts(tmp_path: Path) -> None:
    """The wheel's shim and provider, imported as FlashInfer 0.7.2 uses them: the shim's version
    equals the provider's and starts with FlashInfer's, the manifest names every packaged module."""
    aot = build_aot()
    cache = tmp_path / "jit_cache"
    for name in ("page", "silu_and_mul"):
        (cache / name).mkdir(parents=True)
        (cache / name / f"{name}.so").write_bytes(b"\x7fELF" + name.encode())
    made = [{"name": "silu_and_mul", "module": {"generator": GENERATORS["activation"], "args": ["silu"],
                                                "kwargs": {}}},
            {"name": "page", "module": {"generator": GENERATORS["page"], "args": [], "kwargs": {}}}]
    wheel = aot.write_wheel(tmp_path / "out", "0.7.2.post1+sm121a", "abc", ["sm121a"], made, cache, 1700000000)
    assert wheel.name.startswith("sparkimg_flashinfer_aot-0.7.2.post1+sm121a-py3-none-linux_")
    site = tmp_path / "site"
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(site)
        entry_points = archive.read("sparkimg_flashinfer_aot-0.7.2.post1+sm121a.dist-info/entry_points.txt").decode()
    assert "sparkimg_flashinfer_aot/jit_cache/page/page.so" in names
    assert entry_points == "[flashinfer.jit_cache.providers]\nsparkimg-sm121a = sparkimg_flashinfer_aot:get_provider\n"
    sys.path.insert(0, str(site))
    try:
        for stale in ("flashinfer_jit_cache", "sparkimg_flashinfer_aot"):
            sys.modules.pop(stale, None)
        import flashinfer_jit_cache  # type: ignore[import-not-found]
        import sparkimg_flashinfer_aot  # type: ignore[import-not-found]

        provided = sparkimg_flashinfer_aot.get_provider()
        assert provided["modules"] == ["page", "silu_and_mul"] and provided["schema_version"] == 1
        assert Path(provided["jit_cache_dir"]) == (site / "sparkimg_flashinfer_aot" / "jit_cache").resolve()
        assert flashinfer_jit_cache.__version__ == provided["version"] == "0.7.2.post1+sm121a"
        # The shim reads the entry-point group; the site folder is not installed, so it finds none here.
        assert flashinfer_jit_cache._architecture("12.1a") == "sm121a"
    finally:
        sys.path.remove(str(site))
        for stale in ("flashinfer_jit_cache", "sparkimg_flashinfer_aot"):
            sys.modules.pop(stale, None)


def test_the_shipped_spec_builds_the_default_set_in_bounds() -> None:
    text = (REPO / "layers" / "flashinfer-aot.yaml").read_text()
    assert "dist: sdist" in text and "inputs: [flashinfer-aot-build]" in text
    import yaml

    modules = json.loads(yaml.safe_load(text)["layers"][0]["env"]["SPARKIMG_AOT_MODULES"])
    assert modules == [{"activation": "silu"}, {"activation": "gelu_tanh"}, {"page": None}]


# -- a compile layer's extra inputs -------------------------------------------------------------

SPEC = """\
schema: sparkimg/v1
name: t
platform: native
cuda_architectures: ["12.1a"]
base:
  image: 127.0.0.1:5000/x/y@sha256:{digest}
toolchain:
  cuda: host
  path: /usr/local/cuda
sources:
  src:
    path: src
  script:
    path: script
layers:
  - name: k
    kind: compile
    source: src
    inputs: {inputs}
    command: python3 /inputs/script/x.py
"""


def spec_text(inputs: str) -> str:
    return SPEC.format(digest="ab" * 32, inputs=inputs)


def write(tmp_path: Path, inputs: str) -> Path:
    for folder in ("src", "script"):
        (tmp_path / folder).mkdir(exist_ok=True)
    path = tmp_path / "spec.yaml"
    path.write_text(spec_text(inputs))
    return path


def test_inputs_are_checked(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, "[script]"))
    assert spec.layers[0].inputs == ("script",)  # type: ignore[union-attr]
    for inputs, needle in (("[scrpit]", "unknown source 'scrpit'; did you mean 'script'?"),
                           ("[script, script]", "'script' is already an input"),
                           ("[src]", "'src' is already an input"),
                           ("script", "must be a list of source names")):
        with pytest.raises(SpecError) as caught:
            load_spec(write(tmp_path, inputs))
        assert any(needle in p for p in caught.value.problems), caught.value.problems


def test_an_input_is_part_of_the_layer_key(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, "[script]"))
    pins = {"src": SimpleNamespace(identity={"tree": "1"}), "script": SimpleNamespace(identity={"tree": "2"})}
    lock: Any = SimpleNamespace(sources=pins, base=SimpleNamespace(config_digest="c", manifest_digest="m"),
                                platform="linux/amd64", toolchain=SimpleNamespace(to_json=lambda: {}),
                                digest="d", source_date_epoch=1, patches={})
    first = layer_inputs(spec, lock)[0][2]
    pins["script"] = SimpleNamespace(identity={"tree": "3"})
    second = layer_inputs(spec, lock)[0][2]
    assert "input.script" in first and first["input.script"] != second["input.script"]
    assert {k: v for k, v in first.items() if k != "input.script"} == \
        {k: v for k, v in second.items() if k != "input.script"}


# -- prewarm: AOT-provided or JIT-compiled -------------------------------------------------------

class FakeSpec:
    def __init__(self, root: Path, name: str, aot_path: Path | None) -> None:
        self.name = name
        self.build_dir = root / "cached_ops" / name
        self.jit_library_path = self.build_dir / f"{name}.so"
        self.sources: list[Path] = []
        self.is_aot = aot_path is not None
        self.aot_artifacts = (SimpleNamespace(provider_id="sparkimg-sm121a", path=aot_path),) if aot_path else ()
        self.built = False

    def build(self, verbose: bool = False) -> None:
        self.build_dir.mkdir(parents=True, exist_ok=True)
        self.jit_library_path.write_bytes(b"\x7fELF")
        self.built = True


def test_the_worker_compiles_only_what_no_aot_build_provides(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    workspace: Any = SimpleNamespace(base=tmp_path, dir=tmp_path, env=SimpleNamespace(FLASHINFER_GEN_SRC_DIR=tmp_path),
                                     jit_dir=tmp_path / "cached_ops")
    workspace.journal = lambda name: tmp_path / worker.JOURNAL / f"{name}.json"
    workspace.rel = lambda p: Path(p).relative_to(tmp_path).as_posix()
    workspace.files = lambda spec: [spec.jit_library_path]
    provided = FakeSpec(tmp_path, "silu_and_mul", Path("/opt/venv/site/aot/silu_and_mul.so"))
    stale = provided.build_dir / "silu_and_mul.so"  # compiled by an earlier prewarm, before the image had AOT
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"old")
    jit = FakeSpec(tmp_path, "gelu_and_mul", None)
    entry_ = {"generator": GENERATORS["activation"], "args": ["x"], "kwargs": {}}
    described = worker.describe(workspace, provided, entry_, 0)
    assert described["aot"] and described["aot_provider"] == {"provider": "sparkimg-sm121a",
                                                               "path": "/opt/venv/site/aot/silu_and_mul.so"}
    assert worker.describe(workspace, jit, entry_, 1)["aot_provider"] is None
    worker.build(workspace, [(provided, entry_), (jit, entry_)], 1)
    assert jit.built and not provided.built and not stale.exists()
    events = [json.loads(line[len(worker.EVENT):]) for line in capsys.readouterr().out.splitlines()]
    assert ("aot", "silu_and_mul") in [(e["event"], e.get("name")) for e in events]
    assert ("compiled", "gelu_and_mul") in [(e["event"], e.get("name")) for e in events]


def test_events_count_aot_modules_as_done() -> None:
    seen = Collected()
    events = Events(seen, total=1)
    events.line(worker.EVENT + json.dumps({"event": "aot", "name": "page", "provider": "sparkimg-sm121a",
                                           "path": "/x/page.so"}))
    assert events.status == {"page": "aot"} and not events.errors
    assert seen.events[-1].message == ("prewarm [1/1] page: provided by the image's AOT build (sparkimg-sm121a), "
                                       "not compiled")
    listed = {"aot": True, "aot_provider": {"provider": "sparkimg-sm121a", "path": "/x/page.so"}}
    assert provided_by(listed) == "AOT: the image (sparkimg-sm121a)"
    assert provided_by({"aot": False}) == "JIT: prewarm compiles it"


WS = ".cache/flashinfer/0.7.2/121a"


def mixed_cache(root: Path, key: PrivateKey) -> Path:
    """A cache with one JIT-compiled module (files here) and one the image provides (no files)."""
    cache = root / "cache"
    module = cache / WS / "cached_ops" / "page"
    module.mkdir(parents=True)
    (module / "page.so").write_bytes(b"\x7fELF" + fatbin(entry(2, 121)))
    (cache / WS / "cached_ops" / "tmp").mkdir()
    files = [{"path": p.relative_to(cache).as_posix(), "size": p.stat().st_size,
              "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in sorted(module.iterdir())]
    env = {"flashinfer": "0.7.2", "base": "/var/cache/sparkimg/flashinfer", "workspace": WS, "arch_dir": "121a",
           "build_env": {}}
    listed = {"name": "silu_and_mul", "generator": GENERATORS["activation"], "args": ["silu"], "kwargs": {},
              "aot": True, "aot_provider": {"provider": "p", "path": "/opt/venv/aot/silu_and_mul.so"}}
    records = [{"name": "page", "module": {"generator": GENERATORS["page"], "args": [], "kwargs": {}},
                "library": f"{WS}/cached_ops/page/page.so", "files": files, "seconds": 1.0}, aot_record(listed)]
    data = manifest.statement(env=env, modules=records, archs=["12.1a"], runner="image",
                              image={"id": "sha256:" + "a" * 64, "reference": "x:1"})
    manifest.write(cache, data, key)
    return cache


def test_verify_accepts_aot_and_jit_modules_and_flags_a_stray_copy(tmp_path: Path) -> None:
    key = generate(tmp_path / "k")
    cache = mixed_cache(tmp_path, key)
    loaded = manifest.parse_manifest(manifest.read(cache).payload, "m")
    aot = next(m for m in loaded.modules if m.aot)
    assert aot.library == "/opt/venv/aot/silu_and_mul.so" and aot.files == ()
    assert [s["name"] for s in loaded.to_json()["subject"]] == [f"{WS}/cached_ops/page/page.so"]
    expect = Expect((Arch("12.1a"),), "sha256:" + "a" * 64, None, "/var/cache/sparkimg/flashinfer")
    assert verify(cache, key.public, expect).ok
    assert verify(cache, key.public, expect, quick=True).ok
    stray = cache / WS / "cached_ops" / "silu_and_mul"
    stray.mkdir()
    (stray / "silu_and_mul.so").write_bytes(b"x")
    assert {p["check"] for p in verify(cache, key.public, expect).problems} == {"stray"}


def test_the_source_tree_gets_its_data_links_in_a_writable_copy(tmp_path: Path) -> None:
    aot = build_aot()
    src = tmp_path / "src"
    for folder in ("flashinfer/jit", "3rdparty/cutlass", "3rdparty/spdlog", "3rdparty/cccl", "csrc", "include"):
        (src / folder).mkdir(parents=True)
    (src / "flashinfer" / "data").mkdir()
    (src / "flashinfer" / "data" / "csrc").symlink_to("../../csrc")  # a built checkout's relative link
    tree = aot.prepare_tree(src, tmp_path / "build")
    data = tree / "flashinfer" / "data"
    assert {p.name: p.resolve() for p in data.iterdir()} == {
        "cutlass": src / "3rdparty" / "cutlass", "spdlog": src / "3rdparty" / "spdlog",
        "cccl": src / "3rdparty" / "cccl", "csrc": src / "csrc", "include": src / "include"}
    shutil.rmtree(src / "include")
    with pytest.raises(SystemExit, match="no include/"):
        aot.prepare_tree(src, tmp_path / "build")


def gb10_aot_set() -> list[dict[str, Any]]:
    import yaml

    data = yaml.safe_load((REPO / "layers" / "dsv41-flash-gb10.yaml").read_text())
    parsed: list[dict[str, Any]] = build_aot().parse_modules(data["layers"][0]["env"]["SPARKIMG_AOT_MODULES"])
    return parsed


def test_the_gb10_spec_builds_its_kernel_set_but_mla_ahead_of_time() -> None:
    aot = {(m["generator"], tuple(m["args"])) for m in gb10_aot_set()}
    text = (REPO / "layers" / "dsv41-flash-gb10.yaml").read_text()
    prewarm = text.split("\nprewarm:\n", 1)[1]
    jit = [kind for kind in GENERATORS if f"- {kind}:" in prewarm]
    assert sorted(jit) == ["activation", "mla", "norm", "page", "rope", "sampling", "topk"]
    assert {g.rsplit(".", 1)[1] for g, _ in aot} == {
        "gen_sampling_module", "gen_topk_module", "gen_page_module", "gen_norm_module", "gen_rope_module",
        "gen_act_and_mul_module"}
    assert (GENERATORS["activation"], ("silu",)) in aot


def test_header_wheels_give_only_their_include_folders(tmp_path: Path) -> None:
    import zipfile

    aot = build_aot()
    wheels = tmp_path / "in"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "nvidia_curand-1-py3-none-any.whl", "w") as archive:
        archive.writestr("nvidia/cu13/include/curand.h", "/* curand */")
        archive.writestr("nvidia/cu13/lib/libcurand.so.10", "big")
        archive.writestr("nvidia_curand-1.dist-info/METADATA", "")
    folders = aot.header_wheels([wheels], tmp_path / "build")
    assert folders == [tmp_path / "build" / "cuda-headers" / "nvidia" / "cu13" / "include"]
    assert (folders[0] / "curand.h").read_text() == "/* curand */"
    assert not (tmp_path / "build" / "cuda-headers" / "nvidia" / "cu13" / "lib").exists()
    assert aot.header_wheels([], tmp_path / "build") == []
    with pytest.raises(SystemExit, match="no wheel"):
        aot.header_wheels([tmp_path / "build"], tmp_path / "b2")


def test_the_extended_spec_adds_norm_and_sampling_with_header_wheels() -> None:
    import yaml

    data = yaml.safe_load((REPO / "layers" / "flashinfer-aot-extended.yaml").read_text())
    layer = data["layers"][0]
    # The header wheels join the toolkit (their include/ only), not the layer's inputs.
    assert data["toolchain"]["headers"] == ["nvidia-cublas", "nvidia-curand"]
    assert layer["inputs"] == ["flashinfer-aot-build"] and "--headers" not in layer["command"]
    modules = json.loads(layer["env"]["SPARKIMG_AOT_MODULES"])
    assert {"norm": None} in modules and {"sampling": None} in modules
    default = yaml.safe_load((REPO / "layers" / "flashinfer-aot.yaml").read_text())
    assert data["sources"]["flashinfer"] == default["sources"]["flashinfer"]
