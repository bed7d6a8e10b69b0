#!/usr/bin/env python3
"""Rebuild one of vLLM's CUDA extensions (``_C_stable_libtorch`` by default) for the
requested architectures and package it as a wheel that overlays vLLM's own copy.

Runs inside sparkimg's compile container (no network): ``/src`` is the pinned vLLM source with
the layer's ``source_patches`` applied, the build environment (torch of the version vLLM pins,
with its CUDA wheels, cmake >= 3.26, ninja) is the Python running this script, CUTLASS is an
input, nvcc is ``$CUDA_HOME``. Steps:

1. a CUDA toolkit folder at a fixed path: ``$CUDA_HOME`` as links, plus the headers and
   libraries of torch's nvidia-* wheels a minimal toolkit lacks (cuBLAS, NVRTC, ...) and a
   stub ``libcuda.so`` (soname ``libcuda.so.1``) to link against;
2. vLLM's own CMake configure (its flags, its architecture selection) in fixed folders, so
   nothing random reaches the objects; with a compiler cache, a folder configured before with the
   same arguments, environment, compilers and CMake input files is taken from the cache instead
   (``restore_configured``);
3. ninja builds the target with ``$SPARKIMG_JOBS`` jobs; objects that match a heavy rule go
   through a ninja pool whose depth comes from the memory budget, so two of them never run
   together where the budget cannot hold both;
4. each compile goes through the layer's compiler cache when sparkimg mounts one
   (``$SPARKIMG_COMPILER_LAUNCHER``: sccache, its store folder and settings in the environment);
   every object's wall time and peak memory (the largest process of its compile: nvcc runs
   its stages one after another; unknown through the cache, whose server runs them) is
   written to ``$SPARKIMG_META/steps.json``; sparkimg keeps it in the layer record;
5. one wheel, ``sparkimg_vllm_ext-VERSION+ARCHS-cp38-abi3-linux_MACHINE.whl``, holding
   ``vllm/TARGET.abi3.so``: installed after vLLM, it replaces vLLM's library at the path vLLM
   imports it from.

``--objects FILE`` builds a named subset (one source path per line, ``#`` comments): only those
objects are compiled and linked, which gives a library for the audit and reproducibility
checks but not one vLLM can load (the other objects' symbols are missing); the wheel's local
version says ``subset``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fnmatch
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

WORK = Path("/tmp/sparkimg-vllm-ext")  # fixed: paths reach debug strings and __FILE__
SOURCE, BUILD, CUDA, EMPTY = WORK / "src", WORK / "build", WORK / "cuda", WORK / "empty"
STEPS = WORK / "steps.jsonl"
CUDA_RULES = Path(__file__).resolve().with_name("cuda-rules.cmake")  # nvcc without depfiles: why there
EPOCH_DATE = (1980, 1, 1, 0, 0, 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cutlass", type=Path, required=True, help="CUTLASS source tree")
    parser.add_argument("--target", default="_C_stable_libtorch")
    parser.add_argument("--objects", type=Path, help="build only these sources (a named subset)")
    parser.add_argument("--heavy", action="append", default=[],
                        help="glob of sources that need --heavy-memory each (repeatable)")
    parser.add_argument("--heavy-memory", default="9g", help="peak memory of one heavy object")
    parser.add_argument("--tool-wheel", type=Path, action="append", default=[],
                        help="a folder holding a pinned cmake or ninja wheel, for a base without them")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    STEPS.unlink(missing_ok=True)
    started = time.monotonic()
    shutil.rmtree(SOURCE, ignore_errors=True)
    # cp (links kept as links, modes and times kept): copytree's Python loop took twice as long
    # over vLLM's 10,000 files.
    run(["cp", "-R", "--no-dereference", "--preserve=mode,timestamps", f"{args.src}/.", str(SOURCE)])
    copied = time.monotonic()
    tools(args.tool_wheel)
    unpacked = time.monotonic()
    toolkit = merged_toolkit(Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")))
    ready = time.monotonic()
    log(f"source, tools and toolkit ready in {ready - started:.1f} s (source copied in {copied - started:.1f} s, "
        f"tools in {unpacked - copied:.1f} s, toolkit in {ready - unpacked:.1f} s)")
    configure(args.cutlass, toolkit)
    objects = target_objects(args.target)
    chosen = subset(objects, args.objects) if args.objects else objects
    heavy = [o for o in chosen if any(fnmatch.fnmatch(o, g) for g in args.heavy)]
    jobs, depth = schedule(int(os.environ.get("MAX_JOBS") or "1"), parse_size(args.heavy_memory), bool(heavy))
    rewrite_ninja(args.target, chosen, heavy, depth, partial=len(chosen) < len(objects))
    log(f"building {args.target}: {len(chosen)} of {len(objects)} object(s), {jobs} job(s); "
        f"{len(heavy)} heavy object(s) share {depth} slot(s) of {args.heavy_memory}")
    started = time.monotonic()
    run(["ninja", "-C", str(BUILD), f"-j{jobs}", library_name(args.target)])
    log(f"built {args.target} in {time.monotonic() - started:.0f} s")
    write_steps(heavy)
    started = time.monotonic()
    wheel = package(args.out, args.target, partial=len(chosen) < len(objects))
    log(f"wrote {wheel.name} in {time.monotonic() - started:.1f} s")
    return 0


def log(message: str) -> None:
    print(f"build_ext: {message}", flush=True)


def run(argv: list[str], env: dict[str, str] | None = None, output: Path | None = None) -> None:
    """Run a step; with ``output``, what it prints goes there and only its tail is shown on failure."""
    if output is None:
        code = subprocess.run(argv, env=env).returncode
    else:
        with output.open("w") as out:
            code = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if code != 0:
        tail = output.read_text(errors="replace").splitlines()[-40:] if output else []
        raise SystemExit(f"build_ext: {argv[0]} exited with {code}:\n" + "\n".join(tail))


def parse_size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = text.strip().lower()
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def tools(folders: list[Path]) -> None:
    """cmake and ninja from their PyPI wheels (cmake's binary is under ``cmake/data/bin``,
    ninja's under ``ninja-VERSION.data/scripts``), unpacked and put first on PATH: a vLLM runtime
    image has torch but may have no build tools."""
    for wheel in sorted(w for folder in folders for w in folder.glob("*.whl")):
        target = WORK / "tools" / wheel.name.split("-")[0]
        shutil.rmtree(target, ignore_errors=True)
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(target)
        for bin_dir in sorted([*target.glob("*/data/bin"), *target.glob("*.data/scripts")]):
            for program in bin_dir.iterdir():
                program.chmod(0o755)
            os.environ["PATH"] = f"{bin_dir}:{os.environ['PATH']}"
            log(f"tools: {', '.join(sorted(p.name for p in bin_dir.iterdir()))} from {wheel.name}")


def merged_toolkit(cuda_home: Path) -> Path:
    """``$CUDA_HOME`` as a tree of links, with the CUDA wheels' headers and libraries beside it."""
    shutil.rmtree(CUDA, ignore_errors=True)
    link_tree(cuda_home, CUDA, cuda_home.resolve())
    wheels = site_packages() / "nvidia"
    lib64 = (CUDA / "lib64").resolve()  # lib64 -> lib: a link inside the new tree
    includes = sorted({(CUDA / "include").resolve(), *(p.resolve() for p in CUDA.glob("targets/*/include"))})
    # nvidia/cu13 (cuda-toolkit's wheels: cuBLAS, NVRTC, cuRAND, ...); cuDNN, NCCL and the rest
    # of torch's wheels stay where torch finds them.
    for folder in sorted(p for p in wheels.iterdir() if re.fullmatch(r"cu\d+", p.name)):
        for header in sorted((folder / "include").glob("*")):
            for include in includes:
                if not os.path.lexists(include / header.name):
                    (include / header.name).symlink_to(header)
        for library in sorted((folder / "lib").glob("*.so*")):
            for name in sorted({library.name, library.name.split(".so")[0] + ".so"}):
                if not os.path.lexists(lib64 / name):
                    (lib64 / name).symlink_to(library)
    stubs = lib64 / "stubs"
    stubs.mkdir(exist_ok=True)
    if not os.path.lexists(stubs / "libcuda.so"):
        stub = WORK / "libcuda-stub.c"
        stub.write_text("void cuInit(void) {}\n")
        run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(stubs / "libcuda.so"), str(stub)])
    return CUDA


def link_tree(source: Path, target: Path, top: Path) -> None:
    """A copy of ``source`` made of new folders and links to its files, so that what is added
    to the copy never reaches the toolkit (``cp -as`` keeps a link to a folder as a link into
    the original). A relative link that stays inside the toolkit (``lib64 -> lib``) is kept
    relative, so it points into the copy."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in sorted(source.iterdir()):
        made = target / entry.name
        if entry.is_symlink():
            pointed = os.readlink(entry)
            inside = (entry.parent / pointed).resolve()
            if not os.path.isabs(pointed) and inside.is_relative_to(top):
                made.symlink_to(pointed)
                continue
        if entry.is_dir():
            link_tree(entry, made, top)
        elif entry.exists():
            made.symlink_to(entry.resolve())


def configure(cutlass: Path, toolkit: Path) -> None:
    """vLLM's CMake, as its setup.py would call it for one target; no network. With a compiler
    cache, a build folder configured before from the same inputs is taken from it instead."""
    shutil.rmtree(BUILD, ignore_errors=True)
    EMPTY.mkdir(exist_ok=True)
    launcher = f"{sys.executable};{Path(__file__).resolve()};--measure"
    env = {**os.environ, "CUDA_HOME": str(toolkit), "PATH": f"{toolkit}/bin:{os.environ['PATH']}",
           # Included by CMakeLists.txt for an SM100-only kernel; nothing of it is used for 12.x.
           "DEEPGEMM_SRC_DIR": str(EMPTY)}
    argv = ["cmake", "-S", str(SOURCE), "-B", str(BUILD), "-G", "Ninja",
            "-DCMAKE_BUILD_TYPE=Release", "-DVLLM_TARGET_DEVICE=cuda",
            f"-DVLLM_PYTHON_EXECUTABLE={sys.executable}", f"-DVLLM_CUTLASS_SRC_DIR={cutlass}",
            f"-DCMAKE_CUDA_COMPILER={toolkit}/bin/nvcc",
            f"-DCMAKE_CUDA_COMPILER_LAUNCHER={launcher}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}",
            f"-DCMAKE_USER_MAKE_RULES_OVERRIDE_CUDA={CUDA_RULES}",
            "-DFETCHCONTENT_FULLY_DISCONNECTED=ON"]
    os.environ.update({"CUDA_HOME": str(toolkit), "PATH": env["PATH"]})
    cache = configured_cache()
    asked = configure_question(argv, env, toolkit)
    if cache is not None and restore_configured(cache, asked):
        return
    started = time.monotonic()
    before = listing(SOURCE)
    run(argv, env=env, output=WORK / "configure.log")
    log(f"configured in {time.monotonic() - started:.1f} s")
    if cache is not None:
        after = listing(SOURCE)
        keep_configured(cache, asked, sorted(p for p, seen in after.items() if before.get(p) != seen))


# -- the configured build folder, kept beside the compiler cache's objects ------------------------
#
# CMake's configure (torch's package config, the CUDA compiler's probes) takes a fixed share of
# every rebuild, however few objects changed. Its result is a function of its arguments, its
# environment, the compilers, and the files CMake read, which it lists itself: the inputs of
# build.ninja's RERUN_CMAKE edge (ninja re-runs CMake when one of them changes). A configured
# folder is kept under the question (arguments, environment, compilers) with that list and the
# digest of the listed files' contents; a later build that asks the same question and finds the
# same contents takes the folder instead of configuring. Anything that does not check out (no
# entry, another digest, a damaged archive) is a miss: CMake runs. `build --check` compiles with
# no cache at all, so it configures, and compares the outputs.
#
# vLLM's configure also writes sources into the source tree: its generators (the Marlin kernels'
# generate_kernels.py, run by execute_process) write .cu files beside themselves, and build.ninja
# compiles them. Those files are kept in the same archive and written back into the fresh source.
# CMake does not list a generator among the files it read, so the entry also holds the digest of
# what a generator reads: every other file of each folder a generated file went into, and of that
# folder's parent (the generator sits there when it writes into a `generated/` folder), and the
# Python distributions installed beside the interpreter (the generators import jinja2). A change to
# any of them is a miss. Not covered: the CUTLASS Python the Machete generator imports (Machete is
# built for 9.0a only, never for 12.x).

CONFIGURED = "sparkimg-configured"  # in the compiler cache's folder, beside its objects
KEPT_CONFIGURED = 4  # configured folders kept per cache: the newest
NOT_ASKED = {"HOSTNAME", "PWD", "OLDPWD", "SHLVL", "_"}  # a container's own, never read by CMake


def configured_cache() -> Path | None:
    """Where configured folders are kept: in the layer's compiler cache, when sparkimg mounts one."""
    folder = os.environ.get("SCCACHE_DIR")
    if not os.environ.get("SPARKIMG_COMPILER_LAUNCHER") or not folder:
        return None
    return Path(folder) / CONFIGURED


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return "absent"
    return digest.hexdigest()


def configure_question(argv: list[str], env: dict[str, str], toolkit: Path) -> str:
    """The arguments, the environment and the compilers (by their bytes) a configure runs with."""
    compilers = {name: file_sha256(Path(found).resolve()) for name in ("cc", "c++", "gcc", "g++")
                 if (found := shutil.which(name, path=env["PATH"]))}
    compilers["nvcc"] = file_sha256((toolkit / "bin" / "nvcc").resolve())
    asked = {"layout": "sparkimg-configured/2", "argv": argv, "compilers": compilers,
             "env": {k: v for k, v in sorted(env.items()) if k not in NOT_ASKED}}
    return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()


def cmake_inputs(build_ninja: Path) -> list[str]:
    """The files CMake read, as build.ninja's RERUN_CMAKE edge lists them (ninja's ``$`` escapes
    undone), but those CMake wrote itself in the build folder (its cache, its probes' results):
    they follow from the rest."""
    text = build_ninja.read_text().replace("$\n", "")
    for line in text.splitlines():
        if line.startswith("build ") and "RERUN_CMAKE" in line and " | " in line:
            listed = line.split(" | ", 1)[1].split(" || ", 1)[0]
            found = {p.replace("\0", " ").replace("$:", ":").replace("$$", "$")
                     for p in listed.replace("$ ", "\0").split()}
            return sorted(p for p in found if os.path.isabs(p) and not Path(p).is_relative_to(BUILD))
    raise SystemExit("build_ext: build.ninja has no RERUN_CMAKE edge")


def inputs_digest(inputs: list[str]) -> str:
    contents = {name: file_sha256(Path(name)) for name in inputs}
    return hashlib.sha256(json.dumps(contents, sort_keys=True).encode()).hexdigest()


def listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` by its relative path: (size, mtime in ns), to see what a step wrote."""
    found: dict[str, tuple[int, int]] = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            with contextlib.suppress(OSError):
                seen = path.lstat()
                found[str(path.relative_to(root))] = (seen.st_size, seen.st_mtime_ns)
    return found


def generators_digest(generated: list[str]) -> str:
    """What the files configure wrote into the source tree were made from: every other file of
    their folders and of those folders' parents, and the interpreter's installed distributions."""
    written = set(generated)
    folders = {Path(p).parent for p in generated} | {Path(p).parent.parent for p in generated}
    read = {str(Path(f, e.name)): file_sha256(SOURCE / f / e.name) for f in sorted(folders)
            if (SOURCE / f).is_dir() for e in sorted((SOURCE / f).iterdir(), key=lambda e: e.name)
            if e.is_file() and str(Path(f, e.name)) not in written}
    installed = sorted(p.name for p in site_packages().glob("*.dist-info"))
    return hashlib.sha256(json.dumps({"read": read, "installed": installed}, sort_keys=True).encode()).hexdigest()


def restore_configured(cache: Path, asked: str) -> bool:
    """The build folder configured before for ``asked`` from the same files; False on any miss."""
    import tarfile

    started = time.monotonic()
    try:
        entry = json.loads((cache / f"{asked}.json").read_text())
        archive = cache / f"{entry['archive']}.tar"
        if entry["digest"] != inputs_digest(entry["inputs"]) or file_sha256(archive) != entry["archive"] \
                or entry["generators"] != generators_digest(entry["generated"]):
            return False
        with tarfile.open(archive) as tar:
            # an archive this script wrote, checked by its sha256 above: the build folder, and the
            # sources configure generated (under src/)
            tar.extractall(BUILD.parent)
    except (OSError, ValueError, KeyError, TypeError, tarfile.TarError) as exc:
        log(f"configure: the kept build folder is not usable ({exc.__class__.__name__}): configuring")
        shutil.rmtree(BUILD, ignore_errors=True)
        return False
    now = time.time()
    for path in [BUILD, *BUILD.rglob("*")]:  # newer than every input: ninja does not run CMake again
        os.utime(path, (now, now), follow_symlinks=False)
    log(f"configure: the build folder configured before from the same {len(entry['inputs'])} files "
        f"({len(entry['generated'])} generated source(s) restored), in {time.monotonic() - started:.1f} s")
    return True


def keep_configured(cache: Path, asked: str, generated: list[str]) -> None:
    """The configured build folder, and the sources configure wrote into the source tree
    (``generated``, relative paths), into the cache (temp file and rename: whole or absent); a
    cache that cannot take it only costs the next build its configure."""
    import tarfile
    import tempfile

    inputs = cmake_inputs(BUILD / "build.ninja")
    digest = inputs_digest(inputs)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cache, prefix=".tmp-", delete=False) as handle, \
                tarfile.open(fileobj=handle, mode="w") as tar:
            tar.add(BUILD, arcname=BUILD.name)
            for name in generated:
                tar.add(SOURCE / name, arcname=f"{SOURCE.name}/{name}", recursive=False)
        sha256 = file_sha256(Path(handle.name))
        archive = cache / f"{sha256}.tar"
        os.replace(handle.name, archive)
        entry = {"digest": digest, "inputs": inputs, "archive": sha256, "generated": generated,
                 "generators": generators_digest(generated)}
        with tempfile.NamedTemporaryFile("w", dir=cache, prefix=".tmp-", delete=False) as note:
            json.dump(entry, note)
        os.replace(note.name, cache / f"{asked}.json")
        prune_configured(cache)
    except OSError as exc:
        log(f"configure: the build folder was not kept ({exc})")
        return
    log(f"configure: kept the build folder for the next build ({len(inputs)} files read by CMake, "
        f"{len(generated)} source(s) it generated)")


def prune_configured(cache: Path, keep: int = KEPT_CONFIGURED) -> None:
    """The ``keep`` newest entries and their archives; older ones (and archives no entry names)
    removed, so configured folders do not grow without end beside the size-capped objects."""
    entries = sorted(cache.glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    named: set[str] = set()
    for old in entries[keep:]:
        old.unlink(missing_ok=True)
    for entry in entries[:keep]:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            named.add(f"{json.loads(entry.read_text())['archive']}.tar")
    for archive in cache.glob("*.tar"):
        if archive.name not in named:
            archive.unlink(missing_ok=True)


def library_name(target: str) -> str:
    return f"{target}.abi3.so"


def target_objects(target: str) -> list[str]:
    """The target's sources, in CMake's order, as paths relative to the source folder."""
    commands = subprocess.run(["ninja", "-C", str(BUILD), "-t", "commands", library_name(target)],
                              check=True, capture_output=True, text=True).stdout
    pattern = re.compile(rf"-o CMakeFiles/{re.escape(target)}\.dir/(\S+)\.o\b")
    found = [m.group(1) for line in commands.splitlines() if (m := pattern.search(line))]
    if not found:
        raise SystemExit(f"build_ext: CMake defines no objects for {target}")
    return found


def subset(objects: list[str], listing: Path) -> list[str]:
    wanted = [line.split("#")[0].strip() for line in listing.read_text().splitlines()]
    wanted = [w for w in wanted if w]
    missing = [w for w in wanted if w not in objects]
    if missing:
        raise SystemExit(f"build_ext: {listing}: not sources of this target: {', '.join(missing)}")
    return [o for o in objects if o in wanted]


def schedule(jobs: int, heavy_memory: int, heavy: bool) -> tuple[int, int]:
    """(jobs, heavy slots): as many heavy objects at once as the memory budget holds beside the
    other jobs' share, and fewer jobs where even one heavy object and the rest would not fit
    (``SPARKIMG_MEMORY`` and ``SPARKIMG_JOB_MEMORY`` are the layer's bound and per-job share).
    A heavy object above the whole bound still gets one slot, alone: the OOM report says why."""
    memory = int(os.environ.get("SPARKIMG_MEMORY") or 0)
    job_memory = int(os.environ.get("SPARKIMG_JOB_MEMORY") or 0)
    if not heavy or not memory:
        return jobs, 1
    if heavy_memory >= memory:
        return 1, 1
    if job_memory:
        jobs = max(1, min(jobs, 1 + (memory - heavy_memory) // job_memory))
    slots = jobs
    while slots > 1 and slots * heavy_memory + (jobs - slots) * job_memory > memory:
        slots -= 1
    return jobs, slots


def rewrite_ninja(target: str, chosen: list[str], heavy: list[str], depth: int, partial: bool) -> None:
    """Heavy objects into their own pool; for a subset, the link step's inputs cut to it."""
    build_ninja = BUILD / "build.ninja"
    lines = build_ninja.read_text().splitlines()
    prefix = f"CMakeFiles/{target}.dir/"
    heavy_outputs = {f"{prefix}{o}.o" for o in heavy}
    chosen_outputs = {f"{prefix}{o}.o" for o in chosen}
    out = [f"pool sparkimg_heavy\n  depth = {depth}\n"]
    for line in lines:
        outputs = line[len("build "):].split(":", 1)[0].split() if line.startswith("build ") else []
        if partial and library_name(target) in outputs:
            explicit, _, rest = line.partition(" | ")
            head, _, inputs = explicit.partition(": ")
            rule, *objs = inputs.split(" ")
            kept = [o for o in objs if not (o.startswith(prefix) and o.endswith(".o")) or o in chosen_outputs]
            line = f"{head}: {rule} {' '.join(kept)}" + (f" | {rest}" if rest else "")
        out.append(line)
        if heavy_outputs.intersection(outputs):
            out.append("  pool = sparkimg_heavy")
    build_ninja.write_text("\n".join(out) + "\n")


def measure(argv: list[str]) -> int:
    """The compiler launcher: run one compile (through the layer's compiler cache when sparkimg
    gives it one: ``$SPARKIMG_COMPILER_LAUNCHER``), append its wall time and peak memory."""
    cache = os.environ.get("SPARKIMG_COMPILER_LAUNCHER")
    started = time.monotonic()
    code = subprocess.run([cache, *argv] if cache else argv).returncode
    wall = time.monotonic() - started
    # Through the cache the compile runs in sccache's server, not under this process: its peak is unknown.
    peak = None if cache else resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    output = argv[argv.index("-o") + 1] if "-o" in argv else "?"
    with STEPS.open("a") as steps:
        steps.write(json.dumps({"object": output, "wall_s": round(wall, 1), "peak_memory": peak}) + "\n")
    return code


def write_steps(heavy: list[str]) -> None:
    meta = Path(os.environ.get("SPARKIMG_META", "/sparkimg/meta"))
    rows = [json.loads(line) for line in STEPS.read_text().splitlines()] if STEPS.exists() else []
    for row in rows:
        name = re.sub(r"^CMakeFiles/[^/]+\.dir/", "", row["object"]).removesuffix(".o")
        row["object"] = name
        row["heavy"] = name in heavy
    rows.sort(key=lambda r: r["object"])
    if meta.is_dir():
        (meta / "steps.json").write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")


def package(out: Path, target: str, partial: bool) -> Path:
    """One wheel whose only library is ``vllm/TARGET.abi3.so``, zipped in a fixed order."""
    version = next(line.split(":", 1)[1].strip() for line in (SOURCE / "PKG-INFO").read_text().splitlines()
                   if line.startswith("Version:"))
    requested = os.environ.get("TORCH_CUDA_ARCH_LIST", "")
    archs = "".join("sm" + a.replace(".", "") for a in re.split(r"[;\s]+", requested) if a)
    local = ".".join(p for p in (archs or "cuda", "subset" if partial else "") if p)
    name = "sparkimg_vllm_ext"
    full = f"{version}+{local}"
    tag = f"cp38-abi3-linux_{os.uname().machine}"
    dist_info = f"{name}-{full}.dist-info"
    library = (BUILD / library_name(target)).read_bytes()
    files = {
        f"vllm/{library_name(target)}": library,
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {full}\n"
            f"Summary: vLLM {version}'s {target} rebuilt for {requested}"
            f"{' (a subset of its objects: not loadable)' if partial else ''};"
            f" overlays vllm/{library_name(target)}\n"
        ).encode(),
        f"{dist_info}/WHEEL": (f"Wheel-Version: 1.0\nGenerator: sparkimg build_ext\nRoot-Is-Purelib: false\n"
                               f"Tag: {tag}\n").encode(),
    }
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in files.items()) + f"{dist_info}/RECORD,,\n"
    files[f"{dist_info}/RECORD"] = record.encode()
    wheel = out / f"{name}-{full}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, EPOCH_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return wheel


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--measure":
        sys.exit(measure(sys.argv[2:]))
    sys.exit(main())
