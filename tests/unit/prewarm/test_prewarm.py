"""Prewarm logic without FlashInfer: the spec's kernel set, job splitting, the image label,
worker events, and verification of a synthetic cache (real compiles are integration tests)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkimg.compile.bounds import Overrides, derive
from sparkimg.errors import CacheMismatchError, EnvelopeError, SpecError, UsageError
from sparkimg.events import Collected
from sparkimg.prewarm import manifest
from sparkimg.prewarm.catalogue import GENERATORS
from sparkimg.prewarm.serving import cache_args
from sparkimg.prewarm.targets import target_of_label, target_of_spec
from sparkimg.prewarm.verify import Expect, verify
from sparkimg.prewarm.warm import Events, split_jobs
from sparkimg.prewarm.worker import EVENT
from sparkimg.signing.keys import PrivateKey, generate
from sparkimg.spec import KernelModule, load_spec
from sparkimg.spec import kernel_label as kernels
from tests.formats import GOOD, entry, fatbin

PREWARM = """\
prewarm:
  memory: 4g
  job_memory: 1g
  env:
    FLASHINFER_NVCC_THREADS: "2"
  modules:
    - activation: silu
    - page:
    - decode: {dtype_q: torch.bfloat16, head_dim_qk: 128}
    - generator: flashinfer.jit.norm.gen_norm_module
      args: []
"""


def spec_with(tmp_path: Path, block: str) -> Any:
    (tmp_path / "kernel").mkdir(exist_ok=True)
    (tmp_path / "patches" / "demo").mkdir(parents=True, exist_ok=True)
    (tmp_path / "patches" / "demo" / "mounts.txt").write_text("")
    path = tmp_path / "spec.yaml"
    path.write_text(GOOD + block)
    return load_spec(path)


def problems(tmp_path: Path, block: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        spec_with(tmp_path, block)
    return caught.value.problems


def test_kernel_set_short_and_long_forms(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, PREWARM)
    assert spec.prewarm is not None
    assert spec.prewarm.modules == (
        KernelModule(GENERATORS["activation"], ("silu",)),
        KernelModule(GENERATORS["page"]),
        KernelModule(GENERATORS["decode"], (), {"dtype_q": "torch.bfloat16", "head_dim_qk": 128}),
        KernelModule("flashinfer.jit.norm.gen_norm_module"),
    )
    assert spec.prewarm.bounds.memory == 4 << 30 and spec.prewarm.bounds.job_memory == 1 << 30
    assert spec.prewarm.env == {"FLASHINFER_NVCC_THREADS": "2"}


@pytest.mark.parametrize(("block", "expected"), [
    ("prewarm:\n  modules: []\n", "spec.yaml:41: prewarm.modules: must be a non-empty list of JIT modules"),
    ("prewarm:\n  modules:\n    - activaton: silu\n",
     "spec.yaml:42: prewarm.modules[0]: names no known generator; did you mean 'activation'?"),
    ("prewarm:\n  modules:\n    - generator: os.system\n",
     "spec.yaml:42: prewarm.modules[0].generator: 'os.system' must be a dotted FlashInfer function"),
    ("prewarm:\n  modules:\n    - activation: [[1]]\n",
     "spec.yaml:42: prewarm.modules[0].activation: arguments must be strings, numbers, booleans or null, not list"),
    ("prewarm:\n  modules:\n    - activation: silu\n    - activation: silu\n",
     "spec.yaml:43: prewarm.modules[1]: is listed twice"),
    ("prewarm:\n  modules:\n    - page:\n  job_memory: 9g\n  memory: 1g\n",
     "spec.yaml:43: prewarm.job_memory: is larger than memory"),
    ("prewarm:\n  moduls: []\n", "spec.yaml:41: prewarm.moduls: unknown key; did you mean 'modules'?"),
    ("prewarm:\n  modules:\n    - silu\n", "spec.yaml:42: prewarm.modules[0]: must be a mapping (one JIT module"),
    ("prewarm:\n  modules:\n    -\n", "spec.yaml:42: prewarm.modules[0]: is empty"),
])
def test_kernel_set_errors_name_line_and_field(tmp_path: Path, block: str, expected: str) -> None:
    found = problems(tmp_path, block)
    assert any(p.rsplit("/", 1)[-1].startswith(expected) for p in found), found


def test_jobs_go_to_modules_first() -> None:
    from sparkimg.spec import Bounds

    budget = derive(Bounds(16 << 30, 8.0, None, 4096, 2 << 30), Overrides(), layer="prewarm")
    assert budget.jobs == 8
    assert split_jobs(budget, 2) == (2, 4)
    assert split_jobs(budget, 20) == (8, 1)
    one = derive(Bounds(1 << 30, 8.0, None, 4096, 1 << 30), Overrides(), layer="prewarm")
    assert split_jobs(one, 5) == (1, 1)


def test_the_image_label_round_trips(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, PREWARM)
    found = kernels.of_spec(spec)
    assert found is not None
    label = found.to_label()
    assert label is not None
    target = target_of_label(label, image_ref="x:1", image_id="sha256:" + "1" * 64)
    assert target == target_of_spec(spec, image_ref="x:1", image_id="sha256:" + "1" * 64)
    with pytest.raises(UsageError, match=r"carries no dev\.sparkimg\.prewarm label"):
        target_of_label(None, image_ref="x:1", image_id="sha256:1")
    with pytest.raises(UsageError, match="is not a kernel set"):
        target_of_label("{}", image_ref="x:1", image_id="sha256:1")


def test_events_parse_worker_lines_and_keep_the_rest() -> None:
    seen = Collected()
    events = Events(seen, total=1)
    for line in ["ninja: building", EVENT + json.dumps({"event": "env", "flashinfer": "0.7"}),
                 EVENT + json.dumps({"event": "module", "name": "page", "index": 0}),
                 EVENT + json.dumps({"event": "failed", "name": "page", "error": "nvcc: boom"}), EVENT + "{broken"]:
        events.line(line)
    assert events.env == {"flashinfer": "0.7"}
    assert events.status == {"page": "failed"}
    assert events.errors == ["page: nvcc: boom"]
    assert events.tail == ["ninja: building"]
    assert [(e.kind.value, e.layer) for e in seen.events] == [("log", None), ("status", None), ("done", "page")]
    assert seen.events[-1].figures["status"] == "failed" and seen.events[-1].message == "prewarm [1/1] page: failed"


# -- a synthetic cache: one module whose .so holds a cubin for sm_121 --------------------------

WS = ".cache/flashinfer/0.7.2/121a"


def make_cache(root: Path, key: PrivateKey, *, runner: str = "image", sm: int = 121) -> Path:
    cache = root / "cache"
    module = cache / WS / "cached_ops" / "page"
    module.mkdir(parents=True)
    (module / "page.so").write_bytes(b"\x7fELF" + fatbin(entry(2, sm)))
    (module / "build.ninja").write_text("rule x\n")
    (cache / WS / "cached_ops" / "tmp").mkdir()
    files = [{"path": p.relative_to(cache).as_posix(), "size": p.stat().st_size,
              "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in sorted(module.iterdir())]
    env = {"flashinfer": "0.7.2", "base": "/var/cache/sparkimg/flashinfer", "workspace": WS, "arch_dir": "121a",
           "build_env": {"CUDA_HOME": "/usr/local/cuda"}}
    records = [{"name": "page", "module": {"generator": GENERATORS["page"], "args": [], "kwargs": {}},
                "library": f"{WS}/cached_ops/page/page.so", "files": files, "seconds": 1.0}]
    data = manifest.statement(env=env, modules=records, archs=["12.1a"], runner=runner,
                              image={"id": "sha256:" + "a" * 64, "reference": "x:1"})
    manifest.write(cache, data, key)
    return cache


@pytest.fixture
def key(tmp_path: Path) -> PrivateKey:
    return generate(tmp_path / "k")


def test_a_synthetic_cache_verifies_and_each_damage_is_named(tmp_path: Path, key: PrivateKey) -> None:
    from sparkimg.spec import Arch

    cache = make_cache(tmp_path, key)
    expect = Expect((Arch("12.1a"),), "sha256:" + "a" * 64, None, "/var/cache/sparkimg/flashinfer")
    assert verify(cache, key.public, expect).ok
    so = cache / WS / "cached_ops" / "page" / "page.so"
    so.write_bytes(so.read_bytes()[:-1] + b"\x01")
    assert {p["check"] for p in verify(cache, key.public, expect).problems} == {"sha256"}
    assert verify(cache, key.public, expect, quick=True).ok  # same size: only the full check sees it
    other = generate(tmp_path / "other")
    assert [p["check"] for p in verify(cache, other.public, expect).problems] == ["signature"]


def test_code_without_the_architecture_fails(tmp_path: Path, key: PrivateKey) -> None:
    cache = make_cache(tmp_path, key, sm=120)
    report = verify(cache, key.public, Expect())
    assert [p["message"] for p in report.problems] == [
        f"page: {WS}/cached_ops/page/page.so holds code for sm_120, not sm_121"]
    assert {"flashinfer", "image", "architectures", "path"} <= set(report.not_checked)


def test_an_unchanged_manifest_is_kept(tmp_path: Path, key: PrivateKey) -> None:
    cache = make_cache(tmp_path, key)
    data = manifest.parse_manifest(json_payload(cache), "m")
    assert manifest.write(cache, data, key) == (manifest.path_of(cache), False)
    assert manifest.write(cache, data, None)[1] is False  # an unsigned run never drops the signature


def json_payload(cache: Path) -> bytes:
    from sparkimg.signing import dsse

    return dsse.read(manifest.path_of(cache)).payload


def test_a_receipt_is_not_a_manifest(tmp_path: Path) -> None:
    receipt = json.dumps({"_type": "https://in-toto.io/Statement/v1", "predicateType": "https://slsa.dev/provenance/v1"})
    with pytest.raises(EnvelopeError, match="a build receipt"):
        manifest.parse_manifest(receipt.encode(), "r.json")


def test_run_args_cache_mount_and_its_refusals(tmp_path: Path, key: PrivateKey) -> None:
    cache = make_cache(tmp_path, key)
    args = cache_args(cache, "sha256:" + "a" * 64, key.public)
    base = "/var/cache/sparkimg/flashinfer"
    assert args.args() == ["-v", f"{cache.resolve()}:{base}:ro", "--tmpfs", f"{base}/{WS}/cached_ops/tmp",
                           "-e", "CUDA_HOME=/usr/local/cuda"]
    with pytest.raises(CacheMismatchError, match="made for image sha256:a"):
        cache_args(cache, "sha256:" + "b" * 64, key.public)
    (cache / WS / "cached_ops" / "page" / "page.so").write_bytes(b"short")
    with pytest.raises(CacheMismatchError, match="quick verification failed"):
        cache_args(cache, "sha256:" + "a" * 64, key.public)
    host = make_cache(tmp_path / "h", key, runner="host")
    with pytest.raises(CacheMismatchError, match="host runner"):
        cache_args(host, "sha256:" + "a" * 64, None)


def test_a_missing_or_damaged_manifest_says_to_prewarm_again(tmp_path: Path, key: PrivateKey) -> None:
    with pytest.raises(EnvelopeError) as caught:
        verify(tmp_path, key.public, Expect())
    assert "sparkimg-prewarm.json: cannot read" in caught.value.message
    assert caught.value.hint == manifest.HINT
    manifest.path_of(tmp_path).write_text("{")
    with pytest.raises(EnvelopeError, match="not JSON") as caught:
        verify(tmp_path, key.public, Expect())
    assert caught.value.hint == manifest.HINT


def test_list_where_flashinfer_is_not_importable_gives_the_spec_s_modules_unresolved(tmp_path: Path) -> None:
    """A build host or a laptop without FlashInfer: ``prewarm --list`` says what the spec asks for
    (generator and arguments) with a warning, instead of failing."""
    from sparkimg.events import Collected, Kind, Phase
    from sparkimg.prewarm.runner import HostRunner
    from sparkimg.prewarm.warm import list_modules

    spec = spec_with(tmp_path, PREWARM)
    target = target_of_spec(spec, image_ref="x:1", image_id="sha256:" + "1" * 64)
    said = Collected()
    listed = list_modules(target, HostRunner(sys.executable), said)  # this venv has no flashinfer
    assert [m["generator"] for m in listed.modules] == [m.generator for m in target.kernels.modules]
    assert all(m["name"] is None and m["resolved"] is False for m in listed.modules)
    (warning,) = said.of(Phase.PREWARM, Kind.WARNING)
    assert "not importable" in warning.message and "--runner image" in warning.message
