"""The specs shipped in layers/: the demo is valid; the GB10 spec lists what the operator
must supply, and passes once a copy is filled in."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from sparkimg.errors import SpecError
from sparkimg.spec import CompileLayer, load_spec

REPO = Path(__file__).resolve().parents[3]
GB10 = REPO / "layers" / "dsv41-flash-gb10.yaml"


def test_demo_spec_is_valid() -> None:
    spec = load_spec(REPO / "layers" / "demo.yaml")
    assert [layer.kind for layer in spec.layers] == ["compile", "wheel"]
    assert spec.patches[0].mode == "bake"
    assert spec.prewarm is not None and [m.args for m in spec.prewarm.modules] == [("silu",), ("gelu_tanh",)]


def test_gb10_spec_lists_every_operator_value() -> None:
    with pytest.raises(SpecError) as info:
        load_spec(GB10)
    message = str(info.value)
    assert "13 value(s) must be supplied by the operator" in message
    for needle in ("base.image", "base.digest", "sources.vllm.commit: full 40-hex commit of dsv41-feat that starts "
                   "e47aa780", "sources.flashinfer.commit", "sources.cutlass.commit", "patch 7 of 7"):
        assert needle in message


def test_gb10_spec_filled_in_passes(tmp_path: Path) -> None:
    (tmp_path / "layers").mkdir()
    text = GB10.read_text()
    text = text.replace('"<operator: the vLLM nightly image built at commit 8a728663, as REGISTRY/REPOSITORY:TAG>"',
                        "registry.example/vllm/vllm-openai:nightly-8a728663")
    text = text.replace('"<operator: that image\'s manifest digest (sha256:...), as pulled on the Spark>"',
                        "sha256:" + "ab" * 32)
    text = re.sub(r'"<operator: full 40-hex commit of dsv41-feat[^"]*"', "e47aa780" + "0" * 32, text)
    text = re.sub(r'"<operator: full 40-hex commit of the v0.7.0rc1 tag>"', "f1" * 20, text)
    text = re.sub(r'"<operator: the CUTLASS tag[^"]*"', "v4.7.1", text)
    text = re.sub(r'"<operator: that tag\'s full 40-hex commit>"', "c7" * 20, text)
    assert '"<operator' not in text
    (tmp_path / "layers" / GB10.name).write_text(text)
    (tmp_path / "build" / "flashinfer-aot").mkdir(parents=True)
    (tmp_path / "build" / "vllm-ext").mkdir(parents=True)
    shutil.copytree(REPO / "patches" / "vllm-gb10-archs", tmp_path / "patches" / "vllm-gb10-archs")
    patches = tmp_path / "patches" / "dsv41-flash-gb10"
    patches.mkdir(parents=True)
    names = ["engram.py", "engram_prestage.py", "engram_disk.py", "sm12x_page_attn.py", "sm12x_page_kv.py",
             "sm12x_topk_sampler.py", "sm12x_topk_dispatch.py"]
    for name in names:
        (patches / name).write_text(f"# {name}\n")
    (patches / "mounts.txt").write_text(
        "".join(f"{n} /usr/local/lib/python3.12/dist-packages/vllm/patched/{n}\n" for n in names))
    spec = load_spec(tmp_path / "layers" / GB10.name)
    assert spec.platform == "linux/arm64"
    assert [a.text for a in spec.cuda_architectures] == ["12.1a"]
    assert len(spec.patches[0].files) == 7 and spec.patches[0].mode == "mount"
    assert spec.base.digest == "sha256:" + "ab" * 32
    assert spec.prewarm is not None and len(spec.prewarm.modules) == 7
    assert spec.prewarm.modules[-1].kwargs["head_dim_ckv"] == 512
    flashinfer, vllm = spec.layers
    assert flashinfer.kind == "compile" and flashinfer.inputs == ("flashinfer-aot-build",)
    # vLLM's extension the way layers/vllm-stable-gb10.yaml builds it: the same script, patches and rules.
    ci = load_spec(REPO / "layers" / "vllm-stable-gb10.yaml").layers[0]
    assert isinstance(vllm, CompileLayer) and isinstance(ci, CompileLayer)
    assert vllm.kind == "compile" and vllm.inputs == ci.inputs and vllm.source_patches == ci.source_patches
    assert vllm.command.replace("python3 ", "/opt/venv/bin/python3 ", 1) == \
        ci.command.replace(" --objects /inputs/vllm-ext-build/ci-subset.txt", "")


@pytest.mark.parametrize("name", ["flashinfer-aot.yaml", "flashinfer-aot-extended.yaml"])
def test_the_flashinfer_aot_specs_build_from_the_pinned_sdist(name: str) -> None:
    spec = load_spec(REPO / "layers" / name)
    source = spec.sources["flashinfer"]
    assert getattr(source, "dist", None) == "sdist" and getattr(source, "sha256", None)
    assert spec.layers[0].kind == "compile" and spec.layers[0].source == "flashinfer"


def test_the_vllm_environment_spec_is_what_its_generator_writes_from_the_requirements() -> None:
    """layers/vllm-env.yaml is generated from scripts/vllm-build-requirements.txt (one truth for
    every pin): a wheel layer per pinned wheel, vLLM's last, each by version and sha256."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(REPO / "scripts" / "vllm-env-spec"), "--check"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    spec = load_spec(REPO / "layers" / "vllm-env.yaml")
    requirements = (REPO / "scripts" / "vllm-build-requirements.txt").read_text().splitlines()
    pinned = [line.split("==")[0] for line in requirements if line and not line.startswith("#")]
    assert len(spec.layers) == len(pinned) == 34
    assert [layer.kind for layer in spec.layers] == ["wheel"] * 34 and spec.layers[-1].name == "vllm"
    # The GB10's: the same versions, for linux/arm64, each wheel pinned by the lock for aarch64.
    arm64 = load_spec(REPO / "layers" / "vllm-env-arm64.yaml")
    assert arm64.platform == "linux/arm64" and [layer.name for layer in arm64.layers] == [
        layer.name for layer in spec.layers]
    assert all(getattr(arm64.sources[n], "version", None) == getattr(s, "version", None)
               and getattr(arm64.sources[n], "sha256", "x") is None for n, s in spec.sources.items())
