"""build/vllm-ext/build_ext.py's logic (the real build is tests/integration/test_vllm_ext.py): the
heavy-object schedule, the ninja rewrite for heavy pools and subsets, and a toolkit copy that never
writes into the toolkit."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support import REPO

GIB = 1 << 30


@pytest.fixture()
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_ext", REPO / "build" / "vllm-ext" / "build_ext.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "build_ext", module)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "WORK", tmp_path / "work")
    monkeypatch.setattr(module, "BUILD", tmp_path / "work" / "build")
    monkeypatch.setattr(module, "SOURCE", tmp_path / "work" / "src")
    monkeypatch.setattr(module, "CUDA", tmp_path / "work" / "cuda")
    monkeypatch.setattr(module, "EMPTY", tmp_path / "work" / "empty")
    return module


@pytest.mark.parametrize(("memory", "job_memory", "jobs", "expected"), [
    (14, 2, 2, (2, 1)),     # CI: one 9 GiB GEMM beside one light job
    (48, 4, 12, (10, 1)),   # a GB10 beside a serving rank: fewer jobs so that one GEMM fits with them
    (40, 1, 4, (4, 4)),     # room for four at once
    (8, 1, 2, (1, 1)),      # a GEMM above the whole bound: alone (the OOM report says why)
])
def test_heavy_objects_get_the_slots_the_memory_bound_holds(
        script: ModuleType, monkeypatch: pytest.MonkeyPatch, memory: int, job_memory: int, jobs: int,
        expected: tuple[int, int]) -> None:
    monkeypatch.setenv("SPARKIMG_MEMORY", str(memory * GIB))
    monkeypatch.setenv("SPARKIMG_JOB_MEMORY", str(job_memory * GIB))
    assert script.schedule(jobs, 9 * GIB, True) == expected
    assert script.schedule(jobs, 9 * GIB, False) == (jobs, 1)


def test_ninja_rewrite_pools_heavy_objects_and_links_only_the_subset(script: ModuleType) -> None:
    build = script.BUILD
    build.mkdir(parents=True)
    prefix = "CMakeFiles/_C.dir/csrc"
    (build / "build.ninja").write_text(
        f"build {prefix}/a.cu.o: CUDA_COMPILER /src/csrc/a.cu || order\n  FLAGS = -x\n"
        f"build {prefix}/gemm_sm120.cu.o: CUDA_COMPILER /src/csrc/gemm_sm120.cu || order\n  FLAGS = -x\n"
        f"build {prefix}/b.cu.o: CUDA_COMPILER /src/csrc/b.cu || order\n"
        f"build _C.abi3.so: LINKER {prefix}/a.cu.o {prefix}/gemm_sm120.cu.o {prefix}/b.cu.o /lib/libtorch.so"
        f" | /lib/libtorch.so || order\n  LINK_FLAGS = -shared\n")
    script.rewrite_ninja("_C", ["csrc/a.cu", "csrc/gemm_sm120.cu"], ["csrc/gemm_sm120.cu"], 1, partial=True)
    lines = (build / "build.ninja").read_text().splitlines()
    assert lines[:2] == ["pool sparkimg_heavy", "  depth = 1"]
    heavy = lines.index(f"build {prefix}/gemm_sm120.cu.o: CUDA_COMPILER /src/csrc/gemm_sm120.cu || order")
    assert lines[heavy + 1] == "  pool = sparkimg_heavy"
    assert sum(line == "  pool = sparkimg_heavy" for line in lines) == 1
    link = next(line for line in lines if line.startswith("build _C.abi3.so"))
    assert link == (f"build _C.abi3.so: LINKER {prefix}/a.cu.o {prefix}/gemm_sm120.cu.o /lib/libtorch.so"
                    " | /lib/libtorch.so || order")


def test_the_toolkit_copy_never_writes_into_the_toolkit(script: ModuleType, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # A toolkit laid out like CUDA 13's: lib64 -> lib, targets/ARCH/{include,lib} -> ../../{include,lib}.
    toolkit = tmp_path / "cuda-13.0"
    (toolkit / "include").mkdir(parents=True)
    (toolkit / "include" / "cuda.h").write_text("// cuda.h\n")
    (toolkit / "lib").mkdir()
    (toolkit / "lib" / "libcudart.so.13").write_text("elf")
    (toolkit / "lib64").symlink_to("lib")
    (toolkit / "targets" / "x86_64-linux").mkdir(parents=True)
    (toolkit / "targets" / "x86_64-linux" / "include").symlink_to("../../include")
    (toolkit / "bin").mkdir()
    (toolkit / "bin" / "nvcc").write_text("#!/bin/sh\n")
    home = tmp_path / "cuda"
    home.symlink_to(toolkit)  # /usr/local/cuda -> cuda-13.0
    wheels = tmp_path / "site" / "nvidia" / "cu13"
    (wheels / "include").mkdir(parents=True)
    (wheels / "include" / "cublas_v2.h").write_text("// cublas\n")
    (wheels / "lib").mkdir()
    (wheels / "lib" / "libcublas.so.13").write_text("elf")
    (tmp_path / "site" / "nvidia" / "cudnn" / "include").mkdir(parents=True)
    (tmp_path / "site" / "nvidia" / "cudnn" / "include" / "cudnn.h").write_text("// cudnn\n")
    monkeypatch.setattr(script, "site_packages", lambda: tmp_path / "site")
    before = sorted(str(p) for p in toolkit.rglob("*"))
    made = script.merged_toolkit(home)
    assert sorted(str(p) for p in toolkit.rglob("*")) == before
    assert (made / "include" / "cublas_v2.h").read_text() == "// cublas\n"
    assert (made / "targets" / "x86_64-linux" / "include" / "cublas_v2.h").is_file()
    assert os.readlink(made / "lib64") == "lib" and (made / "lib" / "libcublas.so").is_file()
    assert (made / "lib" / "stubs" / "libcuda.so").is_file()
    assert not (made / "include" / "cudnn.h").exists()  # only cuda-toolkit's wheels join the toolkit


def configured(script: ModuleType, inputs: list[Path]) -> None:
    """What a configure leaves: build.ninja, whose RERUN_CMAKE edge lists the files CMake read
    (one with a space, escaped as ninja escapes it, and its own cache, which is not an input)."""
    build = script.BUILD
    (build / "CMakeFiles").mkdir(parents=True)
    (build / "CMakeCache.txt").write_text("CMAKE_BUILD_TYPE:STRING=Release\n")
    listed = " ".join(str(p).replace(" ", "$ ") for p in inputs)
    (build / "build.ninja").write_text(
        f"build build.ninja {build}/build.ninja: RERUN_CMAKE | {listed} $\n    CMakeCache.txt"
        f" {build}/CMakeFiles/probe.cmake\n  pool = console\nbuild x.o: CXX_COMPILER /src/x.cc\n")


def test_a_configured_folder_is_taken_again_only_for_the_same_question_and_the_same_files(
        script: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "src dir"
    source.mkdir()
    cmakelists, helper = source / "CMakeLists.txt", source / "utils.cmake"
    cmakelists.write_text("project(vllm)\n")
    helper.write_text("# helper\n")
    cache = tmp_path / "sccache" / script.CONFIGURED
    configured(script, [cmakelists, helper])
    assert script.cmake_inputs(script.BUILD / "build.ninja") == [str(cmakelists), str(helper)]
    script.keep_configured(cache, "question", [])
    import shutil

    shutil.rmtree(script.BUILD)
    assert script.restore_configured(cache, "question")
    assert (script.BUILD / "CMakeCache.txt").read_text() == "CMAKE_BUILD_TYPE:STRING=Release\n"
    assert (script.BUILD / "build.ninja").stat().st_mtime >= cmakelists.stat().st_mtime  # ninja runs no CMake

    shutil.rmtree(script.BUILD)
    assert not script.restore_configured(cache, "another question")  # other arguments, env or compilers
    helper.write_text("# helper, changed\n")
    assert not script.restore_configured(cache, "question")  # a file CMake read changed
    helper.write_text("# helper\n")
    entry = next(cache.glob("*.tar"))
    entry.write_bytes(entry.read_bytes()[:-10])
    assert not script.restore_configured(cache, "question")  # a damaged archive is a miss
    assert not script.BUILD.exists()


def test_sources_configure_generated_come_back_with_the_folder_until_their_generator_changes(
        script: ModuleType, tmp_path: Path) -> None:
    import shutil

    source = script.SOURCE
    marlin = source / "csrc" / "quantization" / "marlin"
    marlin.mkdir(parents=True)
    (source / "CMakeLists.txt").write_text("project(vllm)\n")
    (marlin / "generate_kernels.py").write_text("# writes sm80_kernel_*.cu\n")
    (marlin / "marlin_template.h").write_text("// template\n")
    (source / "csrc" / "layernorm_kernels.cu").write_text("// layernorm\n")
    before = script.listing(source)
    (marlin / "sm80_kernel_float16_fe2m1f_float16.cu").write_text("// generated\n")  # what configure wrote
    generated = sorted(p for p, seen in script.listing(source).items() if before.get(p) != seen)
    assert generated == ["csrc/quantization/marlin/sm80_kernel_float16_fe2m1f_float16.cu"]
    cache = tmp_path / "sccache" / script.CONFIGURED
    configured(script, [source / "CMakeLists.txt"])
    script.keep_configured(cache, "question", generated)

    fresh = tmp_path / "fresh"  # the next build's source: the same files, none generated
    shutil.copytree(source, fresh)
    (fresh / generated[0]).unlink()
    (fresh / "csrc" / "layernorm_kernels.cu").write_text("// layernorm, one symbol more\n")  # not a generator's
    shutil.rmtree(source)
    shutil.rmtree(script.BUILD)
    fresh.rename(source)
    assert script.restore_configured(cache, "question")
    assert (source / generated[0]).read_text() == "// generated\n"

    (source / generated[0]).unlink()
    shutil.rmtree(script.BUILD)
    (marlin / "generate_kernels.py").write_text("# writes other kernels\n")
    assert not script.restore_configured(cache, "question")  # the generator changed: configure again
    (marlin / "generate_kernels.py").write_text("# writes sm80_kernel_*.cu\n")
    (marlin / "marlin_template.h").write_text("// another template\n")
    assert not script.restore_configured(cache, "question")  # what it reads beside it changed


def test_the_question_holds_arguments_environment_and_compilers_but_not_the_hostname(
        script: ModuleType, tmp_path: Path) -> None:
    toolkit = tmp_path / "cuda"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "bin" / "nvcc").write_bytes(b"nvcc 13.0")
    env = {"PATH": os.environ["PATH"], "HOSTNAME": "a1b2c3", "TORCH_CUDA_ARCH_LIST": "12.1a"}
    asked = script.configure_question(["cmake", "-S", "/src"], env, toolkit)
    assert script.configure_question(["cmake", "-S", "/src"], {**env, "HOSTNAME": "d4e5f6"}, toolkit) == asked
    assert script.configure_question(["cmake", "-S", "/src"], {**env, "TORCH_CUDA_ARCH_LIST": "12.0"}, toolkit) != asked
    assert script.configure_question(["cmake", "-S", "/other"], env, toolkit) != asked
    (toolkit / "bin" / "nvcc").write_bytes(b"nvcc 13.1")
    assert script.configure_question(["cmake", "-S", "/src"], env, toolkit) != asked


def test_without_a_compiler_cache_nothing_is_kept(script: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARKIMG_COMPILER_LAUNCHER", raising=False)
    monkeypatch.setenv("SCCACHE_DIR", "/cache")
    assert script.configured_cache() is None
    monkeypatch.setenv("SPARKIMG_COMPILER_LAUNCHER", "/tools/sccache")
    assert script.configured_cache() == Path("/cache") / script.CONFIGURED


def test_only_the_newest_configured_folders_are_kept(script: ModuleType, tmp_path: Path) -> None:
    import shutil

    cache = tmp_path / "sccache" / script.CONFIGURED
    (script.SOURCE).mkdir(parents=True)
    for number in range(script.KEPT_CONFIGURED + 2):
        lists = script.SOURCE / "CMakeLists.txt"
        lists.write_text(f"project(vllm) # {number}\n")
        configured(script, [lists])
        (script.BUILD / "CMakeCache.txt").write_text(f"# {number}\n")
        script.keep_configured(cache, f"question {number}", [])
        os.utime(cache / f"question {number}.json", ns=(number * 10**9, number * 10**9))
        shutil.rmtree(script.BUILD)
    script.prune_configured(cache)
    assert sorted(p.name for p in cache.glob("*.json")) == [f"question {n}.json" for n in range(2, 6)]
    assert len(list(cache.glob("*.tar"))) == script.KEPT_CONFIGURED
    assert script.restore_configured(cache, "question 5")


def test_nvcc_compiles_without_a_dependency_file(script: ModuleType, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """CMake gets the rules file that empties nvcc's depfile flags: a build folder is compiled once,
    and sccache would run nvcc's preprocessor once more per object (a hit too) to write one."""
    monkeypatch.delenv("SPARKIMG_COMPILER_LAUNCHER", raising=False)
    script.SOURCE.mkdir(parents=True)
    asked: list[list[str]] = []
    monkeypatch.setattr(script, "run", lambda argv, **_: asked.append(argv))
    script.configure(tmp_path / "cutlass", tmp_path / "cuda")
    [argv] = asked
    rules = next(a for a in argv if a.startswith("-DCMAKE_USER_MAKE_RULES_OVERRIDE_CUDA="))
    text = Path(rules.split("=", 1)[1]).read_text()
    assert 'set(CMAKE_DEPFILE_FLAGS_CUDA "")' in text
