"""A one-file vLLM change against the cold build, with the compiler cache (issue: an object cache
in the bounded compile containers). layers/vllm-stable-gb10.yaml (the CI subset, or ``--whole``
for all 75 objects) is built from an empty store and an empty cache; then a source patch adds one
symbol to csrc/layernorm_kernels.cu, as a one-commit vLLM move would, the spec is locked again and
built in the same store. Prints both times, their ratio (the baseline is the cold build in the
same run), the cache's hits and misses, the compile time it saved and each build's steps;
``--baseline`` first builds the spec without its compiler cache in a store of its own (what a
build costs today, and what a cache miss adds); ``--check`` then runs ``build --check --recheck``
(a second compile in a scratch store, with an empty cache, compared byte for byte).

Needs scripts/dev-up; makes the vLLM build base (scripts/vllm-build-image, once) and unpacks
CUTLASS (scripts/vendor-cutlass). CI subset: a few minutes; whole target: about an hour on two cores.
``--also OBJECT`` adds a source to the CI subset (a Marlin kernel that vLLM's configure generates,
csrc/quantization/marlin/sm80_kernel_float16_fe2m1f_float16.cu, takes the path the whole target takes).
Usage: python bench/incremental.py [--whole | --also OBJECT ...] [--baseline] [--check] [--memory 14g]
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SPEC = REPO / "layers" / "vllm-stable-gb10.yaml"
CHANGED = "csrc/layernorm_kernels.cu"
PATCHES = "patches/vllm-gb10-archs"


def script(name: str) -> str:
    return subprocess.run(["bash", str(REPO / "scripts" / name)], capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]


def one_file_patch(sdist: Path) -> str:
    """A patch that appends one symbol to CHANGED in the pinned sdist."""
    with tarfile.open(sdist) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith("/" + CHANGED))
        handle = archive.extractfile(member)
        assert handle is not None
        old = handle.read().decode().splitlines(keepends=True)
    new = [*old, "int sparkimg_one_file_change = 1;\n"]
    return "One symbol more in one .cu file.\n\n" + "".join(
        difflib.unified_diff(old, new, f"a/{CHANGED}", f"b/{CHANGED}"))


class Project:
    """The spec in a folder of its own, with its store, built through the CLI."""

    def __init__(self, root: Path, whole: bool, memory: str | None, also: list[str]) -> None:
        base, cutlass = script("vllm-build-image"), REPO / script("vendor-cutlass")
        text = SPEC.read_text()
        text = re.sub(r"(?m)^  image: 127\.0\.0\.1:5000/sparkimg/vllm-build-base:\S+$", f"  image: {base}", text)
        text = re.sub(r"(?m)^image: sparkimg/(\S+)$", rf"image: sparkimg-bench/\1-{uuid.uuid4().hex[:8]}", text)
        if whole:
            text = text.replace("      --objects /inputs/vllm-ext-build/ci-subset.txt\n", "")
        self.text = text
        self.spec = root / "layers" / SPEC.name
        self.spec.parent.mkdir()
        self.spec.write_text(text)
        shutil.copytree(REPO / "build" / "vllm-ext", root / "build" / "vllm-ext")
        if also:
            with (root / "build" / "vllm-ext" / "ci-subset.txt").open("a") as subset:
                subset.write("".join(f"{name}\n" for name in also))
        shutil.copytree(REPO / PATCHES, root / PATCHES)
        shutil.copytree(cutlass, root / "build" / "vendor" / cutlass.name)
        self.root, self.store = root, root / "store"
        self.memory = memory

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "sparkimg.cli", "--store", str(self.store), *args],
                              capture_output=True, text=True, check=False, cwd=REPO)
        if done.returncode != 0:
            raise SystemExit(f"sparkimg {' '.join(args)} exited with {done.returncode}:\n{done.stderr[-3000:]}")
        return done

    def build(self, *extra: str) -> tuple[float, dict[str, Any]]:
        """(seconds, the compile layer's record with the build's steps) of one locked build."""
        self.cli("lock", str(self.spec))
        started = time.monotonic()
        done = self.cli("--json-logs", "build", str(self.spec), "--json",
                        *(["--memory", self.memory] if self.memory else []), *extra)
        took = time.monotonic() - started
        result = json.loads(done.stdout)
        key = next(layer["key"] for layer in result["layers"] if layer["kind"] == "compile")
        record = json.loads((self.store / "records" / "layers" / f"{key}.json").read_text())
        said = [json.loads(line).get("message", "") for line in done.stderr.splitlines() if line.startswith("{")]
        # build_ext's own steps: the source copy, CMake's configure (or the folder kept from before), ninja, the wheel
        script = [m.removeprefix("build_ext: ") for m in said if m.startswith("build_ext: ") and " in " in m]
        return took, {**record, "build_steps": result.get("steps", []), "script": script}

    def without_cache(self) -> None:
        """The spec as it was before the compiler cache (a store of its own)."""
        self.spec.write_text(re.sub(r"(?m)^    compiler_cache:\n(      .*\n)+", "", self.text))
        self.store = self.root / "store-no-cache"

    def with_cache(self) -> None:
        self.spec.write_text(self.text)
        self.store = self.root / "store"

    def change_one_file(self) -> None:
        sdist = next(p for p in (self.store / "blobs" / "sha256").iterdir()
                     if p.name == json.loads(self.spec.with_name(self.spec.name + ".lock.json").read_text())
                     ["sources"]["vllm"]["sha256"])
        (self.root / PATCHES / "one-file.patch").write_text(one_file_patch(sdist))
        listed = f"      - {PATCHES}/extension-only.patch\n"
        self.spec.write_text(self.text.replace(listed, f"{listed}      - {PATCHES}/one-file.patch\n"))


def steps_line(record: dict[str, Any]) -> str:
    return ", ".join(f"{s.get('step')}{'/' + s['layer'] if s.get('layer') else ''} {s.get('wall_s', 0):.1f}"
                     for s in record.get("build_steps", []) if s.get("wall_s", 0) >= 0.5)


def phases_line(record: dict[str, Any]) -> str:
    """Where the compile step's time went: the source, the inputs, the container, the normalisation..."""
    return ", ".join(f"{name} {took:.1f}" for name, took in (record.get("phases") or {}).items())


def cache_line(record: dict[str, Any]) -> str:
    cache = record.get("compiler_cache") or {}
    if not cache:
        return "no compiler cache"
    saved = cache.get("saved_s")
    return (f"{cache['tool']}: {cache['hits']} hit(s), {cache['misses']} miss(es), "
            f"{cache.get('errors', 0)} error(s), saved {'?' if saved is None else f'{saved:.0f}'} s, "
            f"cache {cache.get('bytes', 0) / (1 << 20):.0f} MiB")


def build_lines(label: str, took: float, record: dict[str, Any]) -> str:
    """One build: its time, the cache's figures, the build's steps, the compile step's phases
    and build_ext's own steps."""
    return (f"  {label} {took:.1f} s; layer {record['metrics']['wall_s']:.1f} s; {cache_line(record)}\n"
            f"    steps: {steps_line(record)}\n    compile: {phases_line(record)}\n"
            f"    build_ext: {'; '.join(record['script'])}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--whole", action="store_true", help="all 75 objects, not the CI subset")
    parser.add_argument("--also", action="append", default=[], metavar="OBJECT",
                        help="a source of the target to build beside the CI subset (repeatable)")
    parser.add_argument("--baseline", action="store_true", help="first build without the cache, cold")
    parser.add_argument("--check", action="store_true", help="then build --check the rebuilt image")
    parser.add_argument("--memory", help="the layer's memory bound (sparkimg build --memory)")
    parser.add_argument("--work", type=Path, default=Path("/var/tmp"), help="where the project and store go")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sparkimg-bench-incremental-", dir=args.work) as folder:
        project = Project(Path(folder), args.whole, args.memory, args.also)
        what = "whole target" if args.whole else "CI subset" + "".join(f" + {name}" for name in args.also)
        print(f"vLLM _C_stable_libtorch for 12.1a ({what}), one file changed ({CHANGED})", flush=True)
        plain: tuple[float, dict[str, Any]] | None = None
        if args.baseline:
            project.without_cache()
            plain = project.build()
            project.with_cache()
            print(f"  cold build without the cache:       {plain[0]:.1f} s; "
                  f"layer {plain[1]['metrics']['wall_s']:.1f} s\n    steps: {steps_line(plain[1])}", flush=True)
        cold, first = project.build()
        print(build_lines("cold build (empty store and cache):", cold, first), flush=True)
        project.change_one_file()
        again, second = project.build()
        print(build_lines("after the one-file change:         ", again, second), flush=True)
        objects = ", ".join(f"{s['object'].rsplit('/', 1)[-1]} {s['wall_s']:.0f}/{o['wall_s']:.0f}"
                            for s in second.get("steps", []) for o in first.get("steps", [])
                            if o["object"] == s["object"])
        print(f"    each object, rebuilt/cold s: {objects}")
        goal = 0.1 if args.whole else 0.2
        print(f"  ratio to the cold build: {again / cold:.2f}x (goal <= {goal}x)")
        if plain is not None:
            print(f"  ratio to the cold build without the cache: {again / plain[0]:.2f}x; "
                  f"a cold build with the cache: {cold / plain[0]:.2f}x", flush=True)
        if args.check:
            started = time.monotonic()
            done = project.cli("build", str(project.spec), "--check", "--recheck", "--json", "--quiet")
            verdict = json.loads(done.stdout).get("check", {})
            print(f"  build --check (an empty cache in a scratch store): {time.monotonic() - started:.1f} s, "
                  f"identical: {verdict.get('identical')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
