"""The whole serving path with the image runner: build an image on a FlashInfer base, prewarm
inside it (bounded container, no network, the image's own FlashInfer and torch, the host's
nvcc mounted), verify against the image, and serve from the cache read-only with the
arguments run-args prints: FlashInfer loads each module and compiles nothing."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkimg.engine.protocol import Engine

from .helpers import cli, copy_demo, flashinfer_base

pytestmark = pytest.mark.integration

SERVE = ("import flashinfer.jit.activation as a\n"
         "for act in ('silu', 'gelu_tanh'):\n"
         "    print('loaded', a.gen_act_and_mul_module(act).build_and_load())\n")


@dataclass(frozen=True)
class Warmed:
    spec: Path
    receipt: Path
    image: str
    cache: Path
    key: Path
    pub: Path
    store: Path
    result: dict[str, Any]


@pytest.fixture(scope="module")
def warmed(tmp_path_factory: pytest.TempPathFactory, engine: Engine, demo_base: str) -> Iterator[Warmed]:
    from sparkimg.cli import main
    from sparkimg.signing.keys import generate

    base = flashinfer_base()
    root = tmp_path_factory.mktemp("fi-image")
    spec = copy_demo(root)
    text = spec.read_text().replace("image: 127.0.0.1:5000/sparkimg/demo-base:bookworm", f"image: {base}")
    # The base's stub libcuda for the JIT's link step (a CUDA devel image ships lib64/stubs).
    text = text.replace("  job_memory: 1g\n  modules:", "  job_memory: 1g\n  env:\n    LIBRARY_PATH: /opt/cuda-stubs\n"
                        "  modules:")
    spec.write_text(text)
    generate(root / "k")
    store = root / "store"
    for args in (["lock", str(spec)], ["build", str(spec), "--key", str(root / "k.key"), "--quiet"]):
        assert main(["--store", str(store), *args]) == 0
    receipt = next((root / "receipts").rglob("*.receipt.json"))
    cache = root / "cache"
    sparkimg = [sys.executable, "-m", "sparkimg.cli", "--store", str(store)]
    run = subprocess.run([*sparkimg, "prewarm", "--receipt", str(receipt), "--cache", str(cache),
                          "--key", str(root / "k.key"), "--json", "--quiet"],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    shown = subprocess.run([*sparkimg, "show-receipt", str(receipt), "--json"], capture_output=True, text=True,
                           check=True)
    image = json.loads(shown.stdout)["facts"]["image.reference"]
    yield Warmed(spec, receipt, image, cache, root / "k.key", root / "k.pub", store, json.loads(run.stdout))
    shutil.rmtree(cache, ignore_errors=True)  # root-owned files written by the container


def test_prewarm_runs_in_the_image_and_records_it(warmed: Warmed, engine: Engine) -> None:
    from sparkimg.prewarm import manifest
    from sparkimg.signing import dsse

    assert [(m["name"], m["status"]) for m in warmed.result["modules"]] == [
        ("silu_and_mul", "compiled"), ("gelu_tanh_and_mul", "compiled")]
    data = manifest.parse_manifest(dsse.read(warmed.cache / "sparkimg-prewarm.json").payload, "m")
    assert data.runner == "image"
    assert data.image_id == engine.image_id(warmed.image)
    assert data.workspace.base == "/var/cache/sparkimg/flashinfer"
    assert data.environment["python"].startswith("3.11")  # the image's interpreter, not the host's
    assert data.serving_env["CUDA_HOME"] == "/usr/local/cuda"


def test_verify_against_the_image_by_receipt_image_and_spec(
        capsys: pytest.CaptureFixture[str], warmed: Warmed) -> None:
    for which in (["--receipt", str(warmed.receipt)], ["--image", warmed.image], ["--spec", str(warmed.spec)]):
        code, report, _ = cli(capsys, warmed.store, "prewarm", *which, "--cache", str(warmed.cache), "--verify",
                              "--key", str(warmed.pub), "--json")
        assert code == 0, report
        assert {"image", "architectures", "path", "sha256", "stray"} <= set(report["checked"])
    code, report, _ = cli(capsys, warmed.store, "prewarm", "--image", warmed.image, "--cache", str(warmed.cache),
                          "--verify", "--key", str(warmed.pub), "--arch", "12.0f", "--json")
    assert code == 1 and {p["check"] for p in report["problems"]} == {"architectures", "code"}


def test_a_rerun_in_the_image_compiles_nothing(capsys: pytest.CaptureFixture[str], warmed: Warmed) -> None:
    code, result, err = cli(capsys, warmed.store, "prewarm", "--image", warmed.image, "--cache", str(warmed.cache),
                            "--key", str(warmed.key), "--json", "--quiet")
    assert code == 0, err
    assert {m["status"] for m in result["modules"]} == {"cached"}


def test_serving_with_run_args_loads_the_read_only_cache(capsys: pytest.CaptureFixture[str], warmed: Warmed,
                                                         tmp_path: Path) -> None:
    code, out, err = cli(capsys, warmed.store, "run-args", str(warmed.receipt), "--root", str(warmed.spec.parents[1]),
                         "--cache", str(warmed.cache), "--key", str(warmed.pub), "--json")
    assert code == 0, err
    assert out["cache"]["container"] == "/var/cache/sparkimg/flashinfer" and out["cache"]["read_only"]
    assert f"{warmed.cache.resolve()}:/var/cache/sparkimg/flashinfer:ro" in out["args"]
    script = tmp_path / "serve.py"
    script.write_text(SERVE)
    # The loader must find the CUDA runtime the modules link, as a CUDA image's ld.so.conf provides.
    run = subprocess.run(["/usr/bin/docker", "run", "--rm", "--network", "none", *out["args"],
                          "-e", "LD_LIBRARY_PATH=/usr/local/cuda/lib64",
                          "-v", f"{script}:/serve.py:ro", warmed.image, "python3", "/serve.py"],
                         capture_output=True, text=True, check=False, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("loaded") == 2
    assert "Building JIT module" not in run.stderr
    code, report, _ = cli(capsys, warmed.store, "prewarm", "--receipt", str(warmed.receipt), "--cache",
                          str(warmed.cache), "--verify", "--key", str(warmed.pub), "--json")
    assert code == 0, report


def test_run_args_refuses_a_cache_made_for_another_image(capsys: pytest.CaptureFixture[str], warmed: Warmed,
                                                         tmp_path: Path) -> None:
    other = tmp_path / "other.receipt.json"
    envelope = json.loads(warmed.receipt.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["subject"][0]["digest"]["sha256"] = "c" * 64
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    envelope["signatures"] = []
    other.write_text(json.dumps(envelope))
    code, _, err = cli(capsys, warmed.store, "run-args", str(other), "--root", str(warmed.spec.parents[1]),
                       "--cache", str(warmed.cache))
    assert code == 1 and "made for image" in err


def test_build_with_prewarm_records_the_manifest_in_the_receipt(
        capsys: pytest.CaptureFixture[str], warmed: Warmed) -> None:
    manifest = warmed.cache / "sparkimg-prewarm.json"
    before = manifest.read_bytes()
    args = ("build", str(warmed.spec), "--key", str(warmed.key), "--prewarm", str(warmed.cache), "--quiet", "--json")
    code, result, err = cli(capsys, warmed.store, *args)
    assert code == 0, err
    assert {m["status"] for m in result["prewarm"]["modules"]} == {"cached"}
    assert manifest.read_bytes() == before  # the same cache for the same image: the manifest is kept
    envelope = json.loads(warmed.receipt.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    entry = next(b for b in statement["predicate"]["runDetails"]["byproducts"] if b["name"] == "prewarm")
    assert entry["digest"]["sha256"] == hashlib.sha256(manifest.read_bytes()).hexdigest()
    assert entry["annotations"]["modules"] == ["silu_and_mul", "gelu_tanh_and_mul"]
    receipt = warmed.receipt.read_bytes()
    code, _, err = cli(capsys, warmed.store, *args)
    assert code == 0, err
    assert warmed.receipt.read_bytes() == receipt  # nothing changed: nothing rewritten
    code, report, _ = cli(capsys, warmed.store, "verify-receipt", str(warmed.receipt), "--key", str(warmed.pub),
                          "--image", warmed.image, "--json")
    assert code == 0, report


def test_list_resolves_the_set_inside_the_image(capsys: pytest.CaptureFixture[str], warmed: Warmed) -> None:
    code, listed, err = cli(capsys, warmed.store, "prewarm", "--image", warmed.image, "--list", "--json")
    assert code == 0, err
    assert listed["flashinfer"] == "0.7.2.post1"
    assert [(m["name"], m["aot"]) for m in listed["modules"]] == [("silu_and_mul", False),
                                                                  ("gelu_tanh_and_mul", False)]
    library = ".cache/flashinfer/0.7.2.post1/121a/cached_ops/silu_and_mul/silu_and_mul.so"
    assert listed["modules"][0]["library"] == library


def test_a_prewarm_over_its_memory_bound_is_oom_killed_and_says_so(
        capsys: pytest.CaptureFixture[str], warmed: Warmed, tmp_path: Path) -> None:
    code, out, err = cli(capsys, warmed.store, "prewarm", "--image", warmed.image, "--cache", str(tmp_path / "c"),
                         "--memory", "48m", "--json", "--quiet")
    assert code == 5, err
    assert "killed by the OOM killer at its memory bound 48.0 MiB" in out["error"]
    assert not (tmp_path / "c" / "sparkimg-prewarm.json").exists()
