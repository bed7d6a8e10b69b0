"""Preflight: vLLM's own CUDA architecture selection, evaluated before a multi-hour build.

vLLM's ``CMakeLists.txt`` picks ``CUDA_SUPPORTED_ARCHS`` by the CUDA compiler's version, and
``cmake/utils.cmake``'s ``cuda_archs_loose_intersection`` maps each requested architecture onto
that list. When the list lacks the requested one, the fallback silently takes a lower one of the
same major: in vLLM 0.34.0 with CUDA 13.x, 12.1a becomes 12.0 and no sm_121 code is built
(vLLM #36835). The preflight takes vLLM's own definitions and ``if`` chain out of the pinned
source (after the layer's ``source_patches``), checks that they only compute, and runs them with
``cmake -P`` for the spec's architectures and the toolchain's CUDA version: no CUDA, no GPU, about
a tenth of a second. The answer is kept in the store by (source, the parts of the patches that touch
those two files, architectures, CUDA version): a patch to a kernel asks nothing again.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkimg.errors import BuildError, PreflightError
from sparkimg.events import Event, Kind, Phase, Reporter, silent
from sparkimg.formats.canonical import digest_of
from sparkimg.formats.lockfile import GitPin, PathPin, PypiPin, SourcePin
from sparkimg.lock.resolve import Lock
from sparkimg.source import cmake as _cmake
from sparkimg.source import patching as _srcpatch
from sparkimg.source import sdist as _sdist
from sparkimg.spec import CompileLayer, Spec
from sparkimg.store.content import Store

VERSION = "sparkimg-preflight/2"
RECORDS = "preflight"
CMAKE_LISTS = "CMakeLists.txt"
UTILS = "cmake/utils.cmake"
# What the preflight takes out of cmake/utils.cmake: the path from torch's -gencode flags to the
# architectures vLLM compiles for (CMakeLists.txt: clear_cuda_gencode_flags,
# extract_unique_cuda_archs_ascending, cuda_archs_loose_intersection).
DEFINITIONS = ("string_to_ver", "clear_cuda_gencode_flags", "extract_unique_cuda_archs_ascending",
               "cuda_archs_loose_intersection")
SHIPPED_PATCH = "patches/vllm-gb10-archs/cuda13-sm121.patch"
_VLLM_GIT = re.compile(r"(^|[/:])vllm-project/vllm(\.git)?/?$")


@dataclass(frozen=True)
class Verdict:
    """vLLM's selection for one compile layer: what was asked, what vLLM would build, and why."""

    layer: str
    source: str
    cuda_version: str
    requested: tuple[str, ...]
    supported: str
    supported_line: int | None
    selected: tuple[str, ...]
    mapped: dict[str, str]  # each requested architecture -> what vLLM builds for it ('' when dropped)
    patches: tuple[str, ...]
    cached: bool = False
    seconds: float = 0.0

    @property
    def collapsed(self) -> dict[str, str]:
        return {arch: got for arch, got in self.mapped.items() if got != arch}

    def to_json(self) -> dict[str, Any]:
        return {"layer": self.layer, "source": self.source, "cuda_version": self.cuda_version,
                "requested": list(self.requested), "supported": self.supported,
                "supported_line": self.supported_line, "selected": list(self.selected),
                "mapped": dict(self.mapped), "patches": list(self.patches)}

    @classmethod
    def from_json(cls, data: dict[str, Any], *, cached: bool) -> Verdict:
        return cls(str(data["layer"]), str(data["source"]), str(data["cuda_version"]),
                   tuple(data["requested"]), str(data["supported"]), data.get("supported_line"),
                   tuple(data["selected"]), {str(k): str(v) for k, v in data["mapped"].items()},
                   tuple(data["patches"]), cached=cached)


def named_vllm(pin: SourcePin) -> bool:
    """A source whose name says vLLM: the PyPI project ``vllm`` or the vllm-project/vllm repository."""
    if isinstance(pin, PypiPin):
        return re.sub(r"[-_.]+", "-", pin.package).lower() == "vllm"
    if isinstance(pin, GitPin):
        return bool(_VLLM_GIT.search(pin.url.rstrip("/")))
    return False


def looks_like_vllm(files: dict[str, bytes]) -> bool:
    """vLLM's build files: ``cmake/utils.cmake`` defines ``cuda_archs_loose_intersection`` and
    ``CMakeLists.txt`` sets ``CUDA_SUPPORTED_ARCHS``."""
    return (b"cuda_archs_loose_intersection" in files.get(UTILS, b"")
            and b"CUDA_SUPPORTED_ARCHS" in files.get(CMAKE_LISTS, b""))


def cuda_version(release: str | None) -> str | None:
    """``13.0`` from nvcc's release (``13.0, V13.0.88``); None when it is not known."""
    found = re.match(r"\s*(\d+)\.(\d+)", release or "")
    return f"{found.group(1)}.{found.group(2)}" if found else None


def run(spec: Spec, lock: Lock, store: Store, *, report: Reporter = silent) -> list[Verdict]:
    """Evaluate every compile layer whose source is vLLM; raise PreflightError when a requested
    architecture would be dropped or collapsed. A source that is not vLLM is left alone."""
    verdicts: list[Verdict] = []
    failed: list[Verdict] = []
    for layer in spec.layers:
        if not isinstance(layer, CompileLayer):
            continue
        verdict = evaluate(spec, lock, store, layer, report=report)
        if verdict is None:
            continue
        verdicts.append(verdict)
        if verdict.collapsed:
            failed.append(verdict)
    if failed:
        raise PreflightError("\n".join(_explain(v) for v in failed), hint=_fix(spec, failed))
    return verdicts


def evaluate(spec: Spec, lock: Lock, store: Store, layer: CompileLayer, *,
             report: Reporter = silent) -> Verdict | None:
    """vLLM's selection for ``layer``, from the store when this question was answered before;
    None when the layer's source is not vLLM (or cannot be evaluated: a warning says why)."""
    pin = lock.sources[layer.source]
    named = named_vllm(pin)
    if isinstance(pin, PypiPin) and pin.dist != "sdist":
        return None
    if not named and not isinstance(pin, PathPin):
        return None  # a git or sdist source not called vLLM: not fetched just to look

    def warn(message: str) -> None:
        report(Event(Phase.PREFLIGHT, f"preflight {layer.name}: {message}", layer.name, Kind.WARNING))

    started = time.monotonic()
    release = lock.toolchain.nvcc_version
    if release is None and lock.toolchain.cuda == "base":
        from sparkimg.base.cuda import remembered

        asked = remembered(store, lock.base.config_digest)  # nvcc inside the base, asked by fetch
        release = asked.release if asked else None
    version = cuda_version(release)
    parts = _read_parts(spec, layer)
    key = digest_of({"v": VERSION, "source": pin.identity, "patches": [touching for _, touching in parts if touching],
                     "archs": [a.text for a in spec.cuda_architectures], "cuda": version})
    # Only vLLM sources are ever recorded, so a recorded answer needs neither the source nor cmake.
    known = store.read_record(RECORDS, key) if version is not None else None
    if known is not None:
        verdict = Verdict.from_json({**known, "layer": layer.name, "source": layer.source,
                                     "patches": list(layer.source_patches)}, cached=True)
        report(Event(Phase.PREFLIGHT, _summary(verdict), layer.name))
        return verdict
    files = _build_files(spec, lock, store, layer, pin, report)
    if not looks_like_vllm(files):
        if named:
            warn(f"sources.{layer.source} is named vLLM but has no {UTILS} defining "
                 "cuda_archs_loose_intersection; its architecture selection is not checked")
        return None
    if version is None:
        warn("the CUDA version is unknown: with toolchain cuda: base it is read from the base's nvcc, which "
             "`sparkimg fetch` (or build) asks once; vLLM's architecture selection is not checked until then")
        return None
    files = _patched(parts, files)
    requested, supported, selected, mapped = _select(files, version, spec, what=f"layer {layer.name}")
    line = _supported_line(files[CMAKE_LISTS].decode(errors="replace"), supported)
    verdict = Verdict(layer.name, layer.source, version, requested, supported, line, selected, mapped,
                      tuple(layer.source_patches), seconds=round(time.monotonic() - started, 3))
    store.write_record(RECORDS, key, verdict.to_json())
    report(Event(Phase.PREFLIGHT, _summary(verdict), layer.name, figures={"wall_s": verdict.seconds}))
    return verdict


def _build_files(spec: Spec, lock: Lock, store: Store, layer: CompileLayer, pin: SourcePin,
                 report: Reporter) -> dict[str, bytes]:
    """CMakeLists.txt and cmake/utils.cmake of the layer's pinned source (fetched into the store
    when it is not there yet, verified by its pin)."""
    wanted = {CMAKE_LISTS, UTILS}
    if isinstance(pin, PathPin):
        folder = spec.root / pin.path
        return {name: (folder / name).read_bytes() for name in wanted
                if (folder / name).is_file() and not (folder / name).is_symlink()}
    from sparkimg.source.retrieve import fetch_source

    digest = fetch_source(spec, layer.source, pin, store, report)
    sdist = isinstance(pin, PypiPin) and pin.dist == "sdist"
    return _sdist.read_members(store.blob(digest), wanted, strip=sdist, what=f"sources.{layer.source}")


def _read_parts(spec: Spec, layer: CompileLayer) -> list[tuple[str, list[tuple[str, str]]]]:
    """Each of the layer's source patches by its path, with its parts that touch the files the
    preflight reads (``CMakeLists.txt``, ``cmake/utils.cmake``) by the file they touch."""
    read: list[tuple[str, list[tuple[str, str]]]] = []
    for written in layer.source_patches:
        what = f"layer {layer.name}: source patch {written}"
        try:
            text = (spec.root / written).read_bytes().decode()
        except (OSError, UnicodeDecodeError) as exc:
            raise BuildError(f"{what}: cannot read it as a text patch: {exc}") from None
        read.append((what, [(name, part) for name, part in _srcpatch.sections(text, what)
                            if name in (CMAKE_LISTS, UTILS)]))
    return read


def _patched(parts: list[tuple[str, list[tuple[str, str]]]], files: dict[str, bytes]) -> dict[str, bytes]:
    """The build files with the parts of the layer's source patches that touch them applied."""
    if not any(touching for _, touching in parts):
        return files
    with tempfile.TemporaryDirectory(prefix="sparkimg-preflight-") as temp:
        folder = Path(temp)
        for name, data in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(data)
        for what, touching in parts:
            relevant = "".join(text for name, text in touching if name in files)
            if relevant:
                _srcpatch.apply(folder, relevant.encode(), what)
        return {name: (folder / name).read_bytes() for name in files}


def _same_commands(text: str, cmds: list[_cmake.Command], what: str) -> None:
    """Run only what a strict reader finds to be exactly these commands: the lenient reader that
    cut the text out must not be the only judge of what ``cmake -P`` will run."""
    try:
        names = _cmake.strict(text)
    except ValueError as exc:
        raise BuildError(f"{what}: {exc}", hint="the preflight runs only plain CMake; check the source by hand") \
            from None
    if names != [c.name for c in cmds]:
        raise BuildError(f"{what}: two readings of it disagree on its commands ({len(names)} against "
                         f"{len(cmds)}); the preflight runs nothing it cannot read one way",
                         hint="check the source by hand")


def script(files: dict[str, bytes], version: str, gencode: str, what: str) -> str:
    """The ``cmake -P`` script: vLLM's own definitions and its CUDA_SUPPORTED_ARCHS ``if`` chain,
    checked to be plain computation, then the calls CMakeLists.txt makes on torch's -gencode flags."""
    utils = files[UTILS].decode(errors="replace")
    lists = files[CMAKE_LISTS].decode(errors="replace")
    parts: list[str] = []
    for name in DEFINITIONS:
        try:
            found = _cmake.definition(utils, name)
        except ValueError as exc:
            raise BuildError(f"{what}: {UTILS}: {exc}") from None
        if found is None:
            raise BuildError(f"{what}: {UTILS} does not define {name}; vLLM's build logic changed",
                             hint="the preflight knows vLLM's CUDA selection as of 0.34.0; report this")
        text, cmds = found
        _same_commands(text, cmds, f"{what}: {UTILS}: {name}")
        bad = _cmake.impure(cmds, _cmake.PURE | set(DEFINITIONS))
        if bad:
            raise BuildError(f"{what}: {UTILS}: {name} calls {bad[0].name}() (line {bad[0].line} of it), "
                             "which the preflight does not run", hint="check the source by hand")
        parts.append(text)
    try:
        chain = _cmake.if_chain(lists, "CUDA_SUPPORTED_ARCHS")
        calls = [c for c in _cmake.commands(lists) if c.name == "cuda_archs_loose_intersection"]
    except ValueError as exc:
        raise BuildError(f"{what}: {CMAKE_LISTS}: {exc}") from None
    if chain is None:
        raise BuildError(f"{what}: {CMAKE_LISTS} sets CUDA_SUPPORTED_ARCHS outside an if() chain; "
                         "vLLM's build logic changed", hint="check the source by hand")
    text, cmds = chain
    _same_commands(text, cmds, f"{what}: {CMAKE_LISTS}: the CUDA_SUPPORTED_ARCHS chain")
    bad = _cmake.impure(cmds, frozenset({"if", "elseif", "else", "endif", "set"}))
    if bad or any(c.name == "set" and c.args.split()[:1] != ["CUDA_SUPPORTED_ARCHS"] for c in cmds):
        raise BuildError(f"{what}: {CMAKE_LISTS}: the CUDA_SUPPORTED_ARCHS chain does more than set it",
                         hint="check the source by hand")
    if not any(re.match(r'\s*CUDA_ARCHS\s+"\$\{CUDA_SUPPORTED_ARCHS\}"\s+"\$\{CUDA_ARCHS\}"\s*$', c.args)
               for c in calls):
        raise BuildError(f"{what}: {CMAKE_LISTS} no longer filters CUDA_ARCHS through CUDA_SUPPORTED_ARCHS",
                         hint="the preflight knows vLLM's CUDA selection as of 0.34.0; check the source by hand")
    return "\n".join([
        "# Written by sparkimg's preflight: vLLM's own CUDA architecture selection, without CUDA.",
        "cmake_minimum_required(VERSION 3.20)  # if(IN_LIST), as vLLM's own project sets it",
        *parts,
        f'set(CMAKE_CUDA_COMPILER_VERSION "{version}")',
        text,
        f'set(CMAKE_CUDA_FLAGS "{gencode}")',
        "clear_cuda_gencode_flags(CUDA_ARCH_FLAGS)",
        'extract_unique_cuda_archs_ascending(CUDA_ARCHS "${CUDA_ARCH_FLAGS}")',
        'set(SPARKIMG_REQUESTED "${CUDA_ARCHS}")',
        'cuda_archs_loose_intersection(CUDA_ARCHS "${CUDA_SUPPORTED_ARCHS}" "${CUDA_ARCHS}")',
        'message("sparkimg supported=${CUDA_SUPPORTED_ARCHS}")',
        'message("sparkimg requested=${SPARKIMG_REQUESTED}")',
        'message("sparkimg selected=${CUDA_ARCHS}")',
        "foreach(_one ${SPARKIMG_REQUESTED})",
        '  cuda_archs_loose_intersection(_got "${CUDA_SUPPORTED_ARCHS}" "${_one}")',
        '  message("sparkimg map ${_one}=${_got}")',
        "endforeach()",
        "",
    ])


def cmake_tool() -> str:
    tool = os.environ.get("SPARKIMG_CMAKE") or shutil.which("cmake")
    if tool is None:
        raise BuildError("cmake is not installed; the vLLM preflight runs vLLM's own CMake logic with it",
                         hint="install cmake (apt-get install cmake), or set SPARKIMG_CMAKE to its path")
    return tool


def _select(files: dict[str, bytes], version: str, spec: Spec,
            what: str) -> tuple[tuple[str, ...], str, tuple[str, ...], dict[str, str]]:
    text = script(files, version, spec.variables()["gencode"], what)
    with tempfile.TemporaryDirectory(prefix="sparkimg-preflight-") as temp:
        path = Path(temp) / "select.cmake"
        path.write_text(text)
        try:
            run_ = subprocess.run([cmake_tool(), "-P", str(path)], capture_output=True, text=True, timeout=60,
                                  cwd=temp, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BuildError(f"{what}: cmake -P failed: {exc}") from None
    said = run_.stdout + run_.stderr
    if run_.returncode != 0:
        raise BuildError(f"{what}: cmake -P on vLLM's selection failed:\n" +
                         "\n".join(f"    {line}" for line in said.strip().splitlines()[-10:]))
    values: dict[str, str] = {}
    mapped: dict[str, str] = {}
    for line in said.splitlines():
        if line.startswith("sparkimg map "):
            arch, _, got = line.removeprefix("sparkimg map ").partition("=")
            mapped[arch] = got
        elif line.startswith("sparkimg "):
            name, _, value = line.removeprefix("sparkimg ").partition("=")
            values[name] = value
    return (_split(values.get("requested", "")), values.get("supported", ""), _split(values.get("selected", "")),
            mapped)


def _split(listed: str) -> tuple[str, ...]:
    """A CMake list (``a;b``) as a tuple."""
    return tuple(x for x in listed.split(";") if x)


def _supported_line(lists: str, supported: str) -> int | None:
    """The line of CMakeLists.txt whose set() gave the list that applied."""
    for cmd in _cmake.commands(lists):
        if cmd.name == "set" and cmd.args.split()[:1] == ["CUDA_SUPPORTED_ARCHS"] and f'"{supported}"' in cmd.args:
            return cmd.line
    return None


def _summary(v: Verdict) -> str:
    shown = ", ".join(f"{a} -> {g or 'nothing'}" for a, g in v.mapped.items())
    state = "ok" if not v.collapsed else "COLLAPSES"
    return (f"preflight {v.layer}: vLLM's CUDA {v.cuda_version} selection: {shown} ({state})"
            + (" (cached)" if v.cached else ""))


def _explain(v: Verdict) -> str:
    where = f"{CMAKE_LISTS}:{v.supported_line}" if v.supported_line else CMAKE_LISTS
    lines = [f"layer {v.layer}: vLLM (sources.{v.source}) would not build for "
             f"{', '.join(v.collapsed)} with CUDA {v.cuda_version}:"]
    for arch, got in v.collapsed.items():
        if got:
            lines.append(f"  {arch} collapses to {got}: {where} sets CUDA_SUPPORTED_ARCHS to \"{v.supported}\" "
                         f"for CUDA {v.cuda_version}, which lacks {arch.rstrip('af')}, and "
                         f"cmake/utils.cmake's cuda_archs_loose_intersection falls back to the highest listed "
                         f"architecture of the same major ({got}); no sm_{arch.replace('.', '')} code would be built "
                         "(vLLM issue #36835)")
        else:
            lines.append(f"  {arch} is dropped: no architecture in \"{v.supported}\" ({where}) matches it")
    if v.patches:
        lines.append(f"  (with source_patches {', '.join(v.patches)} applied)")
    return "\n".join(lines)


def _fix(spec: Spec, failed: list[Verdict]) -> str:
    shipped = (spec.root / SHIPPED_PATCH).is_file()
    archs = sorted({a.rstrip("af") for v in failed for a in v.collapsed})
    layers = ", ".join(v.layer for v in failed)
    patch = (f"add 'source_patches: [{SHIPPED_PATCH}]' to layer {layers} (it adds 12.1 to the CUDA 13.x list "
             "of vLLM 0.34.0)" if shipped and archs == ["12.1"] else
             f"add a patch that puts {';'.join(archs)} into that CUDA_SUPPORTED_ARCHS list to layer {layers}'s "
             "source_patches")
    try:
        shown = spec.path.relative_to(Path.cwd())
    except ValueError:
        shown = spec.path
    return f"{patch}, then run `sparkimg lock {shown}` and check again"
