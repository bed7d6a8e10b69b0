"""The vLLM preflight against the real vLLM 0.34.0 sdist from PyPI: its own CUDA_SUPPORTED_ARCHS
selection collapses 12.1a to 12.0 with CUDA 13.x (vLLM #36835), the shipped patch fixes it, the
answer is cached in the store, and only plain CMake computation is ever run."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from sparkimg.errors import BuildError, PreflightError
from sparkimg.events import Collected, Kind
from sparkimg.formats.lockfile import GitPin, PathPin, PypiPin, ToolchainPin
from sparkimg.lock.resolve import Lock
from sparkimg.source import cmake as _cmake
from sparkimg.source import preflight
from sparkimg.spec import CompileLayer, Spec, load_spec
from sparkimg.store.content import Store
from tests.formats import loaded, lock_file, spec_header, vllm_sdist_body
from tests.support import REPO, VLLM_SDIST, unavailable

PATCH = "patches/vllm-gb10-archs/cuda13-sm121.patch"
SPEC = spec_header("vllm-preflight") + vllm_sdist_body(VLLM_SDIST["version"])
WITH_PATCH = SPEC + f"    source_patches: [{PATCH}]\n"


@pytest.fixture(autouse=True)
def _cmake_present() -> None:
    if shutil.which("cmake") is None:
        unavailable("cmake is not installed")


def setup(project: Callable[..., Path], sdist: Path, text: str = SPEC, *, cuda: str = "13.0, V13.0.88",
          archs: tuple[str, ...] = ("12.1a",)) -> tuple[Spec, Lock]:
    path = project(text)
    (path.parent / PATCH).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / PATCH, path.parent / PATCH)
    spec = load_spec(path)
    model = lock_file()
    pin = PypiPin({}, "vllm", VLLM_SDIST["version"], VLLM_SDIST["filename"], sdist.as_uri(), VLLM_SDIST["sha256"],
                  dist="sdist")
    patch_sha = __import__("hashlib").sha256((path.parent / PATCH).read_bytes()).hexdigest()
    model = replace(model, sources={"vllm": pin}, patches={}, cuda_architectures=archs,
                    toolchain=replace(model.toolchain, nvcc_version=cuda),
                    source_patches={PATCH: patch_sha} if PATCH in text else {})
    return spec, loaded(model.to_json())


def test_vllm_0340_collapses_121a_to_120_with_cuda_13(project: Callable[..., Path], vllm_034_sdist: Path,
                                                        store: Store) -> None:
    spec, lock = setup(project, vllm_034_sdist)
    with pytest.raises(PreflightError) as info:
        preflight.run(spec, lock, store)
    message = str(info.value)
    assert info.value.exit_code == 6
    assert "layer vllm: vLLM (sources.vllm) would not build for 12.1a with CUDA 13.0" in message
    assert "12.1a collapses to 12.0: CMakeLists.txt:129 sets CUDA_SUPPORTED_ARCHS to " \
           '"7.5;8.0;8.6;8.7;8.9;9.0;10.0;11.0;12.0" for CUDA 13.0' in message
    assert f"source_patches: [{PATCH}]" in message


def test_the_shipped_patch_makes_it_pass(project: Callable[..., Path], vllm_034_sdist: Path, store: Store) -> None:
    spec, lock = setup(project, vllm_034_sdist, WITH_PATCH)
    events = Collected()
    started = time.monotonic()
    [verdict] = preflight.run(spec, lock, store, report=events)
    first = time.monotonic() - started
    assert verdict.mapped == {"12.1a": "12.1a"} and verdict.selected == ("12.1a",)
    assert verdict.supported.endswith(";12.0;12.1") and verdict.supported_line == 129
    assert not verdict.cached
    started = time.monotonic()
    [again] = preflight.run(spec, lock, store)
    assert again.cached and again.mapped == verdict.mapped
    print(f"preflight: first {first:.2f} s (fetch + cmake -P), cached {time.monotonic() - started:.3f} s")
    assert first < 10


def test_a_patch_that_touches_no_cmake_file_asks_nothing_again(project: Callable[..., Path], vllm_034_sdist: Path,
                                                               store: Store) -> None:
    spec, lock = setup(project, vllm_034_sdist, WITH_PATCH)
    [first] = preflight.run(spec, lock, store)
    kernel = "one-file.patch"
    (spec.root / kernel).write_text("--- a/csrc/layernorm_kernels.cu\n+++ b/csrc/layernorm_kernels.cu\n"
                                    "@@ -1 +1,2 @@\n #include <x>\n+int one_more = 1;\n")
    [layer] = spec.layers
    assert isinstance(layer, CompileLayer)
    more = replace(spec, layers=(replace(layer, source_patches=(*layer.source_patches, kernel)),))
    [again] = preflight.run(more, lock, store)
    assert again.cached and again.mapped == first.mapped and again.patches == (PATCH, kernel)
    (spec.root / kernel).write_text("--- a/CMakeLists.txt\n+++ b/CMakeLists.txt\n@@ -1 +1,2 @@\n"
                                    " cmake_minimum_required(VERSION 3.26)\n+# one line more\n")
    assert not preflight.run(more, lock, store)[0].cached


@pytest.mark.parametrize(("cuda", "line", "collapses"), [("12.8, V12.8.93", 132, False), ("13.0, V13.0.88", 129, True),
                                                          ("13.4, V13.4.1", 123, True), ("12.4, V12.4.1", 134, True)])
def test_each_cuda_branch_of_the_pinned_cmakelists(project: Callable[..., Path], vllm_034_sdist: Path, store: Store,
                                                    cuda: str, line: int, collapses: bool) -> None:
    """The branch comes from the pinned file, not from sparkimg: 12.8 lists 12.1, 13.x does not, and
    before 12.8 nothing of major 12 is listed at all (12.1a is dropped)."""
    spec, lock = setup(project, vllm_034_sdist, cuda=cuda)
    verdict = preflight.evaluate(spec, lock, store, spec.layers[0])  # type: ignore[arg-type]
    assert verdict is not None and verdict.supported_line == line
    assert bool(verdict.collapsed) is collapses
    if cuda.startswith("12.4"):
        assert verdict.mapped == {"12.1a": ""}
    if cuda.startswith("13.4"):
        patched, lock = setup(project, vllm_034_sdist, WITH_PATCH, cuda=cuda)
        assert preflight.run(patched, lock, store)[0].mapped == {"12.1a": "12.1a"}


def test_several_architectures(project: Callable[..., Path], vllm_034_sdist: Path, store: Store) -> None:
    text = SPEC.replace('["12.1a"]', '["9.0a", "12.0a", "12.1a"]')
    spec, lock = setup(project, vllm_034_sdist, text, archs=("9.0a", "12.0a", "12.1a"))
    with pytest.raises(PreflightError) as info:
        preflight.run(spec, lock, store)
    assert "would not build for 12.1a with" in str(info.value)
    assert "9.0a" not in str(info.value).split("\n")[0].split("for ")[1]


def test_a_base_toolchain_without_an_nvcc_version_is_a_warning(project: Callable[..., Path], vllm_034_sdist: Path,
                                                                store: Store) -> None:
    spec, lock = setup(project, vllm_034_sdist)
    lock = replace(lock, model=replace(lock.model, toolchain=ToolchainPin("base")))
    events = Collected()
    assert preflight.run(spec, lock, store, report=events) == []
    assert any("CUDA version is unknown" in e.message for e in events.events if e.kind == Kind.WARNING)


def vllm_files(sdist: Path) -> dict[str, bytes]:
    from sparkimg.source import sdist as _sdist

    return _sdist.read_members(sdist, {preflight.CMAKE_LISTS, preflight.UTILS}, strip=True, what="vllm")


def test_a_path_source_is_recognised_by_its_content(project: Callable[..., Path], vllm_034_sdist: Path,
                                                    store: Store) -> None:
    path = project(SPEC.replace("    pypi: vllm\n    version: \"0.34.0\"\n    dist: sdist\n", "    path: kernel\n"))
    spec = load_spec(path)
    model = lock_file()
    lock = loaded(replace(model, sources={"vllm": PathPin("kernel", "3" * 64, {})}, patches={}).to_json())
    assert preflight.run(spec, lock, store) == []  # the demo kernel is not vLLM
    for name, data in vllm_files(vllm_034_sdist).items():
        (path.parent / "kernel" / name).parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "kernel" / name).write_bytes(data)
    with pytest.raises(PreflightError, match=r"12\.1a collapses to 12\.0"):
        preflight.run(spec, lock, store)


def test_only_plain_cmake_computation_is_run(vllm_034_sdist: Path) -> None:
    files = vllm_files(vllm_034_sdist)
    script = preflight.script(files, "13.0", "-gencode arch=compute_121a,code=sm_121a", "t")
    assert not _cmake.impure(_cmake.commands(script), _cmake.PURE | set(preflight.DEFINITIONS)
                             | {"cmake_minimum_required"})
    hostile = dict(files)
    hostile[preflight.UTILS] = files[preflight.UTILS].replace(
        b"  set(_SRC_CUDA_ARCHS \"${SRC_CUDA_ARCHS}\")",
        b"  execute_process(COMMAND touch /tmp/sparkimg-pwned)\n  set(_SRC_CUDA_ARCHS \"${SRC_CUDA_ARCHS}\")", 1)
    assert hostile[preflight.UTILS] != files[preflight.UTILS]
    with pytest.raises(BuildError, match=r"cuda_archs_loose_intersection calls execute_process\(\)"):
        preflight.script(hostile, "13.0", "", "t")
    chain = dict(files)
    chain[preflight.CMAKE_LISTS] = files[preflight.CMAKE_LISTS].replace(
        b'  set(CUDA_SUPPORTED_ARCHS "7.5;8.0;8.6;8.7;8.9;9.0;10.0;11.0;12.0")',
        b'  file(WRITE /tmp/x y)\n  set(CUDA_SUPPORTED_ARCHS "7.5;8.0;8.6;8.7;8.9;9.0;10.0;11.0;12.0")', 1)
    with pytest.raises(BuildError, match="does more than set it"):
        preflight.script(chain, "13.0", "", "t")


def test_sources_named_vllm() -> None:
    git = GitPin({}, "https://github.com/vllm-project/vllm.git", None, "a" * 40, "b" * 40, 0)
    assert preflight.named_vllm(git)
    assert preflight.named_vllm(replace(git, url="git@github.com:vllm-project/vllm"))
    assert not preflight.named_vllm(replace(git, url="https://github.com/flashinfer-ai/flashinfer.git"))
    pypi = PypiPin({}, "vLLM", "1", "vllm-1.tar.gz", "https://x/y", "c" * 64, dist="sdist")
    assert preflight.named_vllm(pypi)
    assert preflight.cuda_version("13.0, V13.0.88") == "13.0"
    assert preflight.cuda_version(None) is None


@pytest.mark.parametrize("text", [
    'set(x \\")\nexecute_process(COMMAND touch /tmp/x)\n# ")\n',  # an escape outside quotes
    'set(CUDA_SUPPORTED_ARCHS [[ " ]])\nfile(WRITE /tmp/x "x")\nset(CUDA_SUPPORTED_ARCHS [[ " ]])\n',  # brackets
    '#[[ set(x)\n]] file(WRITE /tmp/x "x")\n',  # a bracket comment
    'set(x # ")\nfile(WRITE /tmp/x "x")\n)\n',  # a comment inside an argument list
])
def test_the_strict_reader_refuses_syntax_a_lenient_reader_could_misread(text: str) -> None:
    """Each text makes a lenient reader see harmless set() calls where CMake runs file() or
    execute_process(): the preflight runs nothing the strict reader does not read one way."""
    with pytest.raises(ValueError, match="CMake syntax the preflight does not read"):
        _cmake.strict(text)


def test_the_strict_reader_reads_plain_cmake() -> None:
    text = ('function(f OUT)\n  # a comment\n  set(${OUT} "a;b" PARENT_SCOPE)\n  if(X AND (Y OR "z"))\n  endif()\n'
            'endfunction()\n')
    assert _cmake.strict(text) == ["function", "set", "if", "endif", "endfunction"]
