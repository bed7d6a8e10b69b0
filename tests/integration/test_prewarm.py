"""sparkimg prewarm with real FlashInfer JIT compiles for 12.1a (flashinfer-python from PyPI,
nvcc from this machine), a real signed manifest and a real verification; then each way a
cache can go wrong, an interrupted prewarm, and FlashInfer loading the cache read-only."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO, flashinfer_env

from .helpers import cli, copy_demo

pytestmark = pytest.mark.integration

IMAGE_A = "sha256:" + "a" * 64
IMAGE_B = "sha256:" + "b" * 64


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from sparkimg.signing.keys import generate

    prefix = tmp_path_factory.mktemp("keys") / "prewarm"
    generate(prefix)
    return prefix.with_suffix(".key"), prefix.with_suffix(".pub")


@dataclass(frozen=True)
class Host:
    """Where the host runner prewarms: FlashInfer's Python, and a locked copy of the demo, whose
    toolchain is NVIDIA's toolkit wheels (fetched and unpacked into the store each prewarm names)."""

    python: str
    spec: Path
    store: Path  # one for the module: the toolkit's path is CUDA_HOME, which a module's build records


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, demo_base: str) -> Host:
    spec = copy_demo(tmp_path_factory.mktemp("demo"))
    store = spec.parent.parent / "store"
    run = subprocess.run([sys.executable, "-m", "sparkimg.cli", "--store", str(store), "lock", str(spec)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    return Host(flashinfer_env(), spec, store)


def prewarm_args(host: Host, cache: Path, *extra: str) -> list[str]:
    return ["prewarm", "--spec", str(host.spec), "--runner", "host", "--python", host.python, "--cache", str(cache),
            *extra]


def subprocess_prewarm(store: Path, host: Host, cache: Path, *extra: str) -> list[str]:
    """``prewarm_args`` as a command of its own, on ``store``."""
    return [sys.executable, "-m", "sparkimg.cli", "--store", str(store), *prewarm_args(host, cache, *extra)]


def verify(capsys: pytest.CaptureFixture[str], store: Path, host: Host, cache: Path, pub: Path,
           *extra: str) -> tuple[int, dict[str, Any]]:
    code, report, _ = cli(capsys, store, *prewarm_args(host, cache, "--verify", "--key", str(pub), "--json",
                                                       *extra))
    return code, report


def checks(report: dict[str, Any]) -> set[str]:
    return {p["check"] for p in report["problems"]}


@pytest.fixture(scope="module")
def warmed(tmp_path_factory: pytest.TempPathFactory, host: Host, keys: tuple[Path, Path]) -> Iterator[Path]:
    """The demo kernel set compiled once for the module, by the CLI in a subprocess (each test
    restores what it changes)."""
    cache = tmp_path_factory.mktemp("warm") / "cache"
    run = subprocess.run(subprocess_prewarm(host.store, host, cache, "--image-id", IMAGE_A,
                                            "--key", str(keys[0]), "--json", "--quiet"),
                         capture_output=True, text=True, check=False, cwd=REPO)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    assert result["manifest"] == str(cache / "sparkimg-prewarm.json")
    assert result["signed"] is True
    assert [(m["name"], m["status"]) for m in result["modules"]] == [
        ("silu_and_mul", "compiled"), ("gelu_tanh_and_mul", "compiled")]
    yield cache


def library(cache: Path, name: str) -> Path:
    return next(cache.glob(f".cache/flashinfer/*/121a/cached_ops/{name}/{name}.so"))


def test_manifest_records_the_cache(warmed: Path, keys: tuple[Path, Path]) -> None:
    from sparkimg.prewarm import manifest
    from sparkimg.signing import dsse
    from sparkimg.signing.keys import load_public

    envelope = dsse.read(warmed / "sparkimg-prewarm.json")
    assert envelope.check_signature(load_public(keys[1])) is None
    data = manifest.parse_manifest(envelope.payload, "manifest")
    assert data.flashinfer == "0.7.2.post1"
    assert data.cuda_architectures == ("12.1a",)
    assert data.image == {"id": IMAGE_A, "reference": None}
    assert data.workspace.to_json() == {"base": str(warmed.resolve()), "dir": ".cache/flashinfer/0.7.2.post1/121a",
                                        "arch_dir": "121a"}
    subjects = data.to_json()["subject"]
    assert [s["name"].rsplit("/", 1)[-1] for s in subjects] == ["silu_and_mul.so", "gelu_tanh_and_mul.so"]
    for module in data.modules:
        paths = {f.path.rsplit("/", 1)[-1] for f in module.files}
        assert {f"{module.name}.so", "build.ninja", f"{module.name}.cu"} <= paths
    # What a read-only mount needs: FlashInfer's lock folder exists, its log points to /tmp.
    workspace = warmed / data.workspace.dir
    assert (workspace / "cached_ops" / "tmp").is_dir()
    assert os.readlink(workspace / "flashinfer_jit.log") == "/tmp/flashinfer_jit.log"


def test_verify_passes_and_a_rerun_compiles_nothing(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, host: Host, warmed: Path, keys: tuple[Path, Path]) -> None:
    store = host.store
    code, report = verify(capsys, store, host, warmed, keys[1], "--image-id", IMAGE_A)
    assert code == 0, report
    assert {"signature", "flashinfer", "architectures", "image", "path", "sha256", "stray",
            "architectures in code"} <= set(report["checked"])
    code, quick = verify(capsys, store, host, warmed, keys[1], "--quick")
    assert code == 0 and quick["checked"] == ["signature", "sizes"]
    code, result, _ = cli(capsys, store, *prewarm_args(host, warmed, "--image-id", IMAGE_A, "--key", str(keys[0]),
                                                       "--json", "--quiet"))
    assert code == 0
    assert {m["status"] for m in result["modules"]} == {"cached"}


def test_each_damage_fails_with_its_reason(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, host: Host, warmed: Path, keys: tuple[Path, Path]) -> None:
    store = host.store
    so = library(warmed, "silu_and_mul")
    original = so.read_bytes()

    # A corrupted shared object (same size): full verify catches it, by sha256.
    so.write_bytes(original[:-100] + bytes(b ^ 0xFF for b in original[-100:]))
    code, report = verify(capsys, store, host, warmed, keys[1])
    assert code == 1 and checks(report) == {"sha256"}, report
    assert "silu_and_mul.so" in report["problems"][0]["message"]
    so.write_bytes(original[:4096])  # truncated: the quick check sees the size
    code, report = verify(capsys, store, host, warmed, keys[1], "--quick")
    assert code == 1 and checks(report) == {"size"}, report
    so.write_bytes(original)

    # A deleted shared object.
    so.rename(so.with_suffix(".gone"))
    code, report = verify(capsys, store, host, warmed, keys[1])
    assert code == 1 and "missing" in checks(report), report
    so.with_suffix(".gone").rename(so)

    # A stray module FlashInfer would load, and an extra file inside a listed module.
    stray = so.parent.parent / "rmsnorm"
    stray.mkdir()
    (stray / "rmsnorm.so").write_bytes(b"\x7fELF")
    extra = so.parent / "extra.so"
    extra.write_bytes(b"\x7fELF")
    code, report = verify(capsys, store, host, warmed, keys[1])
    assert code == 1 and checks(report) == {"stray"}, report
    assert len(report["problems"]) == 2
    shutil.rmtree(stray)
    extra.unlink()

    # Another architecture: the manifest says 12.1a, and the code holds sm_121 only.
    code, report = verify(capsys, store, host, warmed, keys[1], "--arch", "12.0a")
    assert code == 1 and checks(report) == {"architectures", "code"}, report
    assert "sm_121, not sm_120" in " ".join(p["message"] for p in report["problems"])

    # Another image.
    code, report = verify(capsys, store, host, warmed, keys[1], "--image-id", IMAGE_B)
    assert code == 1 and checks(report) == {"image"}, report
    assert IMAGE_A in report["problems"][0]["message"]

    # Restored, it verifies again.
    code, report = verify(capsys, store, host, warmed, keys[1], "--image-id", IMAGE_A)
    assert code == 0, report


def test_signature_and_path_are_checked(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, host: Host, warmed: Path, keys: tuple[Path, Path]) -> None:
    from sparkimg.signing.keys import generate

    store = host.store
    other = generate(tmp_path / "other")
    code, report = verify(capsys, store, host, warmed, tmp_path / "other.pub")
    assert code == 1 and checks(report) == {"signature"}, report
    assert other.keyid[:16] in report["problems"][0]["message"]

    # A cache copied elsewhere: FlashInfer's ninja files name the old path, so it would rebuild.
    moved = tmp_path / "moved"
    shutil.copytree(warmed, moved, symlinks=True)
    code, report = verify(capsys, store, host, moved, keys[1])
    assert code == 1 and checks(report) == {"path"}, report

    # An edited manifest fails its signature; a truncated one is bad input (exit 2).
    manifest = moved / "sparkimg-prewarm.json"
    envelope = json.loads(manifest.read_text())
    envelope["payload"] = envelope["payload"][:-8] + "AAAAAAA="
    manifest.write_text(json.dumps(envelope))
    code, report = verify(capsys, store, host, moved, keys[1])
    assert code == 1 and checks(report) == {"signature"}, report
    manifest.write_text(manifest.read_text()[:50])
    code, report = verify(capsys, store, host, moved, keys[1])
    assert code == 2 and report["exit_code"] == 2 and "not JSON" in report["error"]


def test_killed_prewarm_resumes_and_distrusts_half_written_files(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, host: Host, keys: tuple[Path, Path]) -> None:
    cache = tmp_path / "cache"
    # --memory 1g with the demo's job_memory 1g: one job, so modules compile one after another.
    command = subprocess_prewarm(host.store, host, cache, "--memory", "1g", "--key", str(keys[0]), "--quiet")
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True)
    assert proc.stderr is not None
    seen = []
    deadline = time.monotonic() + 300
    for line in proc.stderr:
        seen.append(line)
        if "gelu_tanh_and_mul: compiling" in line:
            break
        assert time.monotonic() < deadline, "".join(seen)
    assert any("silu_and_mul: compiled" in line for line in seen), "".join(seen)
    time.sleep(3)  # nvcc is running on the second module
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (cache / "sparkimg-prewarm.json").exists()
    # What an interrupted link leaves: a .so that looks present but is not the module.
    half = next(cache.glob(".cache/flashinfer/*/121a/cached_ops/gelu_tanh_and_mul"))
    (half / "gelu_tanh_and_mul.so").write_bytes(b"\x7fELF half-written")

    store = host.store
    code, result, err = cli(capsys, store, *prewarm_args(host, cache, "--key", str(keys[0]), "--json", "--quiet"))
    assert code == 0, err
    assert [(m["name"], m["status"]) for m in result["modules"]] == [
        ("silu_and_mul", "cached"), ("gelu_tanh_and_mul", "compiled")]
    code, report = verify(capsys, store, host, cache, keys[1])
    assert code == 0, report


def test_flashinfer_loads_the_cache_read_only_without_compiling(host: Host, warmed: Path, tmp_path: Path) -> None:
    """What run-args sets up for a serving container: the cache mounted read-only at the path it
    was compiled under, a tmpfs on FlashInfer's lock folder, the manifest's serving_env.
    FlashInfer must load each module, not rebuild it."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private read-only bind mount")
    from sparkimg.prewarm import manifest
    from sparkimg.signing import dsse

    before = {p: p.stat().st_mtime_ns for p in warmed.rglob("*") if p.is_file()}
    workspace = next(warmed.glob(".cache/flashinfer/*/121a"))
    serving_env = manifest.parse_manifest(dsse.read(warmed / "sparkimg-prewarm.json").payload, "m").serving_env
    # The toolkit the prewarm compiled with: the lock's toolkit wheels, unpacked in the prewarm's store.
    toolkit = json.loads((host.spec.with_name("demo.yaml.lock.json")).read_text())["toolchain"]["toolkit"]
    assert serving_env == {"FLASHINFER_WORKSPACE_BASE": str(warmed.resolve()), "FLASHINFER_CUDA_ARCH_LIST": "12.1a",
                           "CUDA_HOME": str(host.store / "toolkits" / toolkit)}
    script = tmp_path / "serve.py"
    script.write_text(
        "import flashinfer.jit.activation as a\n"
        "for act in ('silu', 'gelu_tanh'):\n"
        "    print('loaded', a.gen_act_and_mul_module(act).build_and_load())\n")
    mount = (f"mount --bind {warmed} {warmed} && mount -o remount,ro,bind {warmed} && "
             f"mount -t tmpfs tmpfs {workspace}/cached_ops/tmp && "
             f"{' '.join(f'{k}={v}' for k, v in serving_env.items())} {host.python} {script}")
    run = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", mount],
                         capture_output=True, text=True, check=False, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("loaded") == 2
    assert "Building JIT module" not in run.stderr
    assert {p: p.stat().st_mtime_ns for p in warmed.rglob("*") if p.is_file()} == before


def test_two_prewarms_of_one_cache_compile_each_module_once(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, host: Host, keys: tuple[Path, Path]) -> None:
    cache = tmp_path / "cache"
    command = subprocess_prewarm(host.store, host, cache, "--key", str(keys[0]), "--json", "--quiet")
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
             for _ in range(2)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
        results.append({m["status"] for m in json.loads(out)["modules"]})
    assert sorted(results, key=sorted) == [{"cached"}, {"compiled"}]
    code, report = verify(capsys, host.store, host, cache, keys[1])
    assert code == 0, report
