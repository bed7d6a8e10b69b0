"""Build FlashInfer AOT kernels for a chosen module set into a wheel FlashInfer finds at run time.

Runs as a compile layer's command, in a ``--network none`` container from a base that has
torch (CPU is enough), FlashInfer's Python dependencies (tvm-ffi, ninja, ...), nvcc at
``CUDA_HOME`` and a ``libcuda.so`` to link against (``LIBRARY_PATH``). Nothing of sparkimg is
imported: this file is an input of the layer (``/inputs/...``).

What it does, in order:

1. Takes the FlashInfer source tree (the unpacked ``flashinfer-python`` sdist, read-only, at
   ``--src``) and makes a writable copy of its Python package under a fixed build folder, with
   the ``flashinfer/data/{cutlass,spdlog,cccl,csrc,include}`` links the sdist's build backend
   would make. The build folder's path is fixed (not ``mkdtemp``), so every path nvcc and the
   compiler see (``__FILE__``, include paths) is the same on every build.
2. Turns the module set (``SPARKIMG_AOT_MODULES``: a JSON list in the vocabulary of a spec's
   ``prewarm.modules``: ``{"activation": "silu"}``, ``{"page": null}``, or ``{"generator":
   "flashinfer.jit.X.gen_Y", "args": [...], "kwargs": {...}}``) into FlashInfer ``JitSpec``s by
   calling FlashInfer's own generators, and compiles them with FlashInfer's own
   ``flashinfer.aot.compile_and_package_modules`` (its module inventory replaced by this set),
   so the ninja files, flags and output names are FlashInfer's. ``FLASHINFER_CUDA_ARCH_LIST``
   gives the architectures.
3. Writes one wheel into ``--out``:
   - ``sparkimg_flashinfer_aot/jit_cache/NAME/NAME.so`` for every module, with
     ``sparkimg_flashinfer_aot/aot.json`` (the provider manifest: FlashInfer's provider fields,
     plus each module's generator and arguments, which ``sparkimg prewarm`` reads);
   - the entry point ``flashinfer.jit_cache.providers`` -> ``sparkimg_flashinfer_aot:get_provider``;
   - ``flashinfer_jit_cache``: the small module FlashInfer 0.7.2 imports to enumerate
     providers (it reads ``__version__`` and calls ``get_jit_cache_providers()``). Ours reads
     the same entry-point group. Do not install upstream's ``flashinfer-jit-cache`` beside it.
   The wheel's version is FlashInfer's with the architectures as a local label
   (``0.7.2.post1+sm121a``): FlashInfer accepts a provider only for its own version.

Usage: ``python3 build_aot.py --src /src --out /out [--build /tmp/sparkimg-flashinfer-aot]
[--headers WHEEL_OR_FOLDER ...]`` (``--headers``: the ``include/`` folders of NVIDIA's header
wheels, for modules that need cuBLASLt or cuRAND headers a minimal toolkit lacks).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib
import json
import os
import platform
import re
import shutil
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

DIST = "sparkimg_flashinfer_aot"
PROVIDER_PACKAGE = "sparkimg_flashinfer_aot"
SHIM_PACKAGE = "flashinfer_jit_cache"
ENTRY_POINT_GROUP = "flashinfer.jit_cache.providers"
MANIFEST = "aot.json"
# The short forms a spec's kernel set uses (sparkimg/prewarm/catalogue.py GENERATORS; a unit
# test keeps the two equal: this file cannot import sparkimg).
GENERATORS = {
    "activation": "flashinfer.jit.activation.gen_act_and_mul_module",
    "norm": "flashinfer.jit.norm.gen_norm_module",
    "page": "flashinfer.jit.page.gen_page_module",
    "sampling": "flashinfer.jit.sampling.gen_sampling_module",
    "rope": "flashinfer.jit.rope.gen_rope_module",
    "topk": "flashinfer.jit.topk.gen_topk_module",
    "cascade": "flashinfer.jit.cascade.gen_cascade_module",
    "decode": "flashinfer.jit.attention.gen_batch_decode_module",
    "prefill": "flashinfer.jit.attention.gen_batch_prefill_module",
    "mla": "flashinfer.jit.attention.gen_batch_mla_module",
}
DATA_LINKS = {  # flashinfer/data/NAME -> the sdist's folder (what its build backend links)
    "cutlass": "3rdparty/cutlass",
    "spdlog": "3rdparty/spdlog",
    "cccl": "3rdparty/cccl",
    "csrc": "csrc",
    "include": "include",
}

PROVIDER_INIT = '''"""FlashInfer AOT kernels built by sparkimg (build/flashinfer-aot/build_aot.py).

``get_provider`` is the ``flashinfer.jit_cache.providers`` entry point: it returns this
package's manifest with the folder of the compiled modules filled in.
"""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def get_provider():
    manifest = json.loads((HERE / "aot.json").read_text())
    manifest["jit_cache_dir"] = str(HERE / "jit_cache")
    return manifest
'''

SHIM_INIT = '''"""Enumerates FlashInfer AOT providers (written by sparkimg, build/flashinfer-aot/build_aot.py).

FlashInfer imports this module when it is installed, checks ``__version__`` against its own
and calls ``get_jit_cache_providers()``. Every installed distribution that registers the
``flashinfer.jit_cache.providers`` entry-point group is asked for its manifest.
"""

import importlib.metadata
import logging
from pathlib import Path
from types import SimpleNamespace

__version__ = "@VERSION@"
__git_version__ = "@COMMIT@"
GROUP = "flashinfer.jit_cache.providers"
_log = logging.getLogger(__name__)


def _architecture(text):
    name = str(text).strip().lower().replace("sm_", "").replace("compute_", "").replace(".", "")
    return name if name.startswith("sm") else "sm" + name


def get_jit_cache_providers():
    found = []
    for point in importlib.metadata.entry_points(group=GROUP):
        try:
            manifest = point.load()()
            if manifest.get("schema_version") != 1:
                raise ValueError(f"manifest schema {manifest.get('schema_version')!r} is not 1")
            found.append(SimpleNamespace(
                provider_id=point.name,
                distribution=str(manifest["distribution"]),
                version=str(manifest["version"]),
                jit_cache_dir=Path(manifest["jit_cache_dir"]),
                cuda_architectures=frozenset(_architecture(a) for a in manifest["cuda_architectures"]),
                modules=frozenset(str(m) for m in manifest["modules"]),
            ))
        except Exception as exc:  # one broken provider must not hide the others
            _log.warning("ignoring FlashInfer AOT provider %s: %s", point.name, exc)
    return tuple(sorted(found, key=lambda p: p.provider_id))


def get_jit_cache_dir():
    providers = get_jit_cache_providers()
    return str(providers[0].jit_cache_dir) if providers else ""
'''


def log(message: str) -> None:
    print(f"build_aot: {message}", flush=True)


def parse_modules(text: str) -> list[dict[str, Any]]:
    """The module set in the kernel-set vocabulary, as ``{"generator", "args", "kwargs"}`` entries."""
    raw = json.loads(text)
    if not isinstance(raw, list) or not raw:
        raise SystemExit("SPARKIMG_AOT_MODULES must be a non-empty JSON list")
    modules = []
    for item in raw:
        if not isinstance(item, dict):
            raise SystemExit(f"module {item!r}: write a mapping, e.g. {{\"activation\": \"silu\"}}")
        if "generator" in item:
            extra = set(item) - {"generator", "args", "kwargs"}
            if extra:
                raise SystemExit(f"module {item!r}: unknown keys {sorted(extra)}")
            modules.append({"generator": str(item["generator"]), "args": list(item.get("args") or []),
                            "kwargs": dict(item.get("kwargs") or {})})
            continue
        if len(item) != 1:
            raise SystemExit(f"module {item!r}: one short form per entry (KIND: ARGUMENT)")
        ((kind, value),) = item.items()
        if kind not in GENERATORS:
            raise SystemExit(f"module {item!r}: unknown kind {kind!r}; known: {', '.join(sorted(GENERATORS))}")
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        if isinstance(value, list):
            args = value
        elif isinstance(value, dict):
            kwargs = value
        elif value is not None:
            args = [value]
        modules.append({"generator": GENERATORS[kind], "args": args, "kwargs": kwargs})
    return modules


def argument(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("torch."):
        import torch

        return getattr(torch, value.split(".", 1)[1])
    return value


def architecture_label(arch_list: str) -> list[str]:
    """``12.1a 9.0a`` -> ``["sm121a", "sm90a"]`` (FlashInfer's provider spelling)."""
    labels = []
    for arch in arch_list.split():
        match = re.fullmatch(r"(\d+)\.(\d+)([af]?)", arch)
        if not match:
            raise SystemExit(f"FLASHINFER_CUDA_ARCH_LIST: cannot read {arch!r} (write e.g. 12.1a)")
        labels.append(f"sm{match[1]}{match[2]}{match[3]}")
    return labels


def prepare_tree(src: Path, build: Path) -> Path:
    """A writable copy of the sdist's Python package with its data links; returns its parent."""
    tree = build / "python"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    shutil.copytree(src / "flashinfer", tree / "flashinfer", symlinks=True)
    data = tree / "flashinfer" / "data"
    data.mkdir(exist_ok=True)
    for name, target in DATA_LINKS.items():
        link = data / name
        if link.is_dir():
            continue  # a real folder, or a link that still leads to one
        if link.is_symlink():
            link.unlink()  # a relative link of a built checkout, broken by the copy
        if not (src / target).is_dir():
            raise SystemExit(f"the source tree has no {target}/: is {src} an unpacked flashinfer-python sdist?")
        link.symlink_to(src / target)
    return tree


def header_wheels(paths: list[Path], build: Path) -> list[Path]:
    """The ``include`` folders of header wheels (NVIDIA's ``nvidia-cublas``, ``nvidia-curand``: a
    minimal toolkit lacks ``cublasLt.h`` and ``curand.h``), unpacked under the build folder. Only
    members under an ``include/`` folder are unpacked (the libraries beside them are hundreds of MB)."""
    target = build / "cuda-headers"
    folders: set[Path] = set()
    wheels = sorted(w for p in paths for w in ([p] if p.is_file() else p.glob("*.whl")))
    if paths and not wheels:
        raise SystemExit(f"--headers: no wheel in {', '.join(map(str, paths))}")
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.infolist():
                parts = Path(member.filename).parts
                if "include" not in parts or member.is_dir() or ".." in parts:
                    continue
                cut = parts.index("include") + 1
                folders.add(target.joinpath(*parts[:cut]))
                destination = target.joinpath(*parts)
                destination.parent.mkdir(parents=True, exist_ok=True)
                destination.write_bytes(archive.read(member))
        log(f"headers from {wheel.name}")
    return sorted(folders)


def compile_modules(src: Path, build: Path, modules: list[dict[str, Any]], jit_cache: Path) -> list[dict[str, Any]]:
    """Compile the set with FlashInfer's own AOT path; returns each module's name and entry."""
    import flashinfer.aot as aot

    made: list[dict[str, Any]] = []

    def selected(*_args: Any, **_kwargs: Any) -> list[Any]:
        # Called by compile_and_package_modules after it has pointed FlashInfer's folders at the
        # source tree and the build folder, so generated sources land in the build folder.
        specs = []
        for entry in modules:
            dotted, _, function = entry["generator"].rpartition(".")
            generator = getattr(importlib.import_module(dotted), function)
            spec = generator(*[argument(a) for a in entry["args"]],
                             **{k: argument(v) for k, v in entry["kwargs"].items()})
            if not hasattr(spec, "ninja_path"):
                raise SystemExit(f"{entry['generator']}: {spec.name} is not an nvcc module; AOT builds those")
            if any(m["name"] == spec.name for m in made):
                raise SystemExit(f"module {spec.name} appears twice in the set")
            made.append({"name": spec.name, "module": entry})
            specs.append(spec)
        log("modules: " + ", ".join(m["name"] for m in made))
        return specs

    aot.gen_all_modules = selected  # the set is ours; the build path is FlashInfer's
    aot.compile_and_package_modules(out_dir=jit_cache, build_dir=build / "work", project_root=src,
                                    verbose=True, skip_prebuilt=False)
    return made


def record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def write_wheel(out: Path, version: str, commit: str, archs: list[str], made: list[dict[str, Any]],
                jit_cache: Path, epoch: int) -> Path:
    provider_id = "sparkimg-" + "-".join(archs)
    manifest = {
        "schema_version": 1,
        "provider_id": provider_id,
        "distribution": DIST.replace("_", "-"),
        "version": version,
        "cuda_architectures": archs,
        "modules": sorted(m["name"] for m in made),
        "sparkimg": {"modules": sorted(made, key=lambda m: str(m["name"]))},
    }
    files: dict[str, bytes] = {
        f"{SHIM_PACKAGE}/__init__.py": SHIM_INIT.replace("@VERSION@", version).replace("@COMMIT@", commit).encode(),
        f"{PROVIDER_PACKAGE}/__init__.py": PROVIDER_INIT.encode(),
        f"{PROVIDER_PACKAGE}/{MANIFEST}": (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode(),
    }
    for item in sorted(made, key=lambda m: str(m["name"])):
        name = item["name"]
        files[f"{PROVIDER_PACKAGE}/jit_cache/{name}/{name}.so"] = (jit_cache / name / f"{name}.so").read_bytes()
    tag = f"py3-none-linux_{platform.machine()}"
    dist_info = f"{DIST}-{version}.dist-info"
    files[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {DIST.replace('_', '-')}\nVersion: {version}\n"
        f"Summary: FlashInfer AOT kernels for {' '.join(archs)}, built by sparkimg\n"
        f"Requires-Dist: flashinfer-python=={version.split('+')[0]}\n").encode()
    files[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: sparkimg-flashinfer-aot\nRoot-Is-Purelib: false\nTag: {tag}\n").encode()
    files[f"{dist_info}/entry_points.txt"] = (
        f"[{ENTRY_POINT_GROUP}]\n{provider_id} = {PROVIDER_PACKAGE}:get_provider\n").encode()
    files[f"{dist_info}/top_level.txt"] = f"{PROVIDER_PACKAGE}\n{SHIM_PACKAGE}\n".encode()
    record = [record_line(path, data) for path, data in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    date_time = time.gmtime(max(epoch, 315532800))[:6]
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{DIST}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, date_time)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return wheel


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=Path("/src"), help="the unpacked flashinfer-python sdist")
    parser.add_argument("--out", type=Path, default=Path("/out"), help="where the wheel goes")
    parser.add_argument("--build", type=Path, default=Path("/tmp/sparkimg-flashinfer-aot"),
                        help="a fixed build folder (its path reaches the objects: keep it the same)")
    parser.add_argument("--headers", type=Path, action="append", default=[],
                        help="a header wheel, or a folder of them, whose include/ folders nvcc and the "
                        "compiler search (-isystem); repeat for several")
    args = parser.parse_args(argv)
    modules = parse_modules(os.environ.get("SPARKIMG_AOT_MODULES", ""))
    arch_list = os.environ.get("FLASHINFER_CUDA_ARCH_LIST", "").strip()
    if not arch_list:
        raise SystemExit("set FLASHINFER_CUDA_ARCH_LIST (the spec's {cuda_arch_space})")
    archs = architecture_label(arch_list)
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    src, build = args.src.resolve(), args.build
    started = time.monotonic()
    shutil.rmtree(build, ignore_errors=True)
    tree = prepare_tree(src, build)
    for folder in header_wheels(args.headers, build):
        for variable in ("FLASHINFER_EXTRA_CUDAFLAGS", "FLASHINFER_EXTRA_CFLAGS"):
            os.environ[variable] = f"{os.environ.get(variable, '')} -isystem {folder}".strip()
    sys.path.insert(0, str(tree))
    # FlashInfer's own workspace (its JIT log, caches) stays inside the build folder.
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", str(build / "workspace"))
    # ninja comes with FlashInfer's Python dependencies, beside this interpreter (a compile
    # layer's PATH is the system's).
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    # The layer's compiler cache, when sparkimg mounts one: FlashInfer's ninja files put
    # $FLASHINFER_{NVCC,CXX}_LAUNCHER in front of nvcc and the host compiler.
    if launcher := os.environ.get("SPARKIMG_COMPILER_LAUNCHER"):
        os.environ["FLASHINFER_NVCC_LAUNCHER"] = os.environ["FLASHINFER_CXX_LAUNCHER"] = launcher
    import flashinfer.version as fv

    version, commit = fv.__version__, getattr(fv, "__git_commit__", "unknown")
    if version == "0.0.0+unknown" and (src / "version.txt").is_file():
        # A git checkout has no _build_meta.py (its build backend writes one): its version.txt says it.
        version = (src / "version.txt").read_text().strip()
    if "+" in version:
        raise SystemExit(f"FlashInfer's version {version!r} has a local label already; the wheel's label is the "
                         "architectures (build from an sdist, or a tree whose _build_meta.py or version.txt is plain)")
    if not Path(fv.__file__).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"imported FlashInfer from {fv.__file__}, not from the source tree")
    log(f"FlashInfer {version} ({commit}) from {src}, architectures {arch_list}, MAX_JOBS={os.environ.get('MAX_JOBS')}")
    jit_cache = build / "jit_cache"
    made = compile_modules(src, build, modules, jit_cache)
    wheel = write_wheel(args.out, f"{version}+{'.'.join(archs)}", commit, archs, made, jit_cache, epoch)
    log(f"wrote {wheel.name} ({wheel.stat().st_size} bytes, {len(made)} modules) in "
        f"{time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
