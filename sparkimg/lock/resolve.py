"""The lock (``sparkimg-lock/v1``): every mutable reference of a spec resolved once.

``resolve`` turns a spec into a lock (tag -> digests, branch -> commit, version -> wheel
URL and sha256, local files -> sha256 and md5, toolchain identity). ``load`` reads one
back, and ``check`` fails closed when it is stale or disagrees with the spec or the disk.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sparkimg import __version__
from sparkimg._internal import elf, emulation
from sparkimg._internal.fs import tree as _tree
from sparkimg._internal.fs.atomic import write_atomic
from sparkimg._internal.fs.files import MiB, read_input
from sparkimg._internal.times import rfc3339
from sparkimg._internal.wheeltags import host_glibc
from sparkimg.errors import LockError, ResolveError, UsageError
from sparkimg.events import Event, Kind, Phase, Reporter, silent
from sparkimg.formats.canonical import loads, pretty, sha256_prefixed
from sparkimg.formats.lockfile import (
    PLAIN_HTTP,
    BasePin,
    GitPin,
    LockFile,
    PatchFilePin,
    PatchSetPin,
    PathPin,
    PypiPin,
    SourcePin,
    ToolchainPin,
    TreeFile,
)
from sparkimg.formats.scheme import canonical_name
from sparkimg.formats.toolkit import identity as toolkit_identity
from sparkimg.formats.toolkit import release as toolkit_release
from sparkimg.patches import sums as patches_mod
from sparkimg.spec import TOOLKIT_NVCC, CompileLayer, GitSource, PatchSet, PathSource, PypiSource, Spec
from sparkimg.store.content import Store, sha256_file

if TYPE_CHECKING:
    from sparkimg._internal.net.registry import RegistryClient
    from sparkimg.formats.scheme import BaseScheme


def lock_path(spec: Spec) -> Path:
    """``SPEC.lock.json`` beside the spec."""
    return spec.path.with_name(spec.path.name + ".lock.json")


@dataclass(frozen=True)
class Lock:
    """A loaded lock: the model, the sha256 of the bytes it was read from, and where."""

    model: LockFile
    digest: str
    path: Path

    @property
    def platform(self) -> str:
        return self.model.platform

    @property
    def base(self) -> BasePin:
        return self.model.base

    @property
    def sources(self) -> Mapping[str, SourcePin]:
        return self.model.sources

    @property
    def patches(self) -> Mapping[str, PatchSetPin]:
        return self.model.patches

    @property
    def toolchain(self) -> ToolchainPin:
        return self.model.toolchain

    @property
    def source_patches(self) -> Mapping[str, str]:
        return self.model.source_patches

    @property
    def source_date_epoch(self) -> int:
        return self.model.source_date_epoch


def spec_platform(spec: Spec) -> str:
    """The platform ``spec`` builds for: its own, or this machine's for ``native``."""
    return spec.platform if spec.platform != "native" else emulation.native()


def resolve(
    spec: Spec,
    store: Store,
    *,
    previous: Lock | None = None,
    update: Iterable[str] = (),
    registry: RegistryClient | None = None,
    report: Reporter = silent,
) -> LockFile:
    """Resolve every input of ``spec``; keep ``previous`` pins unless named in ``update``."""
    update = set(update)
    known = {"base", "toolchain", "all", *spec.sources, *(p.name for p in spec.patches)}
    unknown = sorted(update - known)
    if unknown:
        raise LockError(f"--update {', '.join(unknown)}: no such input in {spec.path.name}",
                        hint=f"name one of: {', '.join(sorted(known - {'all'}))}")
    everything = "all" in update
    old = previous.model if previous else None
    platform = spec_platform(spec)
    check_toolkit(spec, platform)  # local and cheap: before any network
    if not (emulated := emulation.verdict(platform)).ok:  # a lock runs nothing of the platform; a build will
        report(Event(Phase.RESOLVE, f"{platform}: {emulated.detail}; a build here will fail until then: "
                     f"{emulated.fix}", kind=Kind.WARNING))

    def keeps(name: str, pin: BasePin | SourcePin | None, entry_spec: dict[str, Any]) -> bool:
        """The previous pin stands if it was made for the same spec entry and not asked to update."""
        if everything or name in update or old is None or old.platform != platform:
            return False
        return pin is not None and not isinstance(pin, PathPin) and dict(pin.spec) == entry_spec

    base_spec = {"image": spec.base.reference, "digest": spec.base.digest}
    base = old.base if old is not None and keeps("base", old.base, base_spec) else None
    if base is None:
        report(Event(Phase.RESOLVE, f"resolving base {spec.base.reference}"))
        client = registry or base_client(spec, old.base if old else None)  # the nightly's: as the last lock
        resolved = client.resolve(spec.base.repository, spec.base.digest or spec.base.tag or "", platform)
        if spec.base.digest and spec.base.digest not in (resolved.manifest_digest, resolved.index_digest):
            raise ResolveError(f"base {spec.base.reference}: registry returned {resolved.manifest_digest}, "
                               f"the spec pins {spec.base.digest}")
        base = BasePin(base_spec, spec.base.repository, spec.base.tag, resolved.index_digest,
                       resolved.manifest_digest, resolved.config_digest, resolved.media_type, platform,
                       _transport(client, spec.base.repository))

    sources: dict[str, SourcePin] = {}
    # The base's Python and glibc as a build asked them; for a base that moved since, the previous
    # base's (a base tag moves to a patched image of the same Python; the build checks every wheel
    # anyway); for a base never asked, this machine's glibc, and pip's own Python.
    asked = base_asked(store, base.config_digest) or (
        base_asked(store, old.base.config_digest) if old is not None else None)
    python = asked.python_version if asked is not None else None
    glibc = asked.glibc if asked is not None else host_glibc()
    asking: dict[str, Callable[[], SourcePin]] = {}
    for name, source in spec.sources.items():
        if isinstance(source, PathSource):
            sources[name] = _path_entry(spec, source)
            continue
        entry_spec = _source_spec(source)
        before = old.sources.get(name) if old is not None else None
        if before is not None and keeps(name, before, entry_spec):
            sources[name] = before
            continue
        report(Event(Phase.RESOLVE, f"resolving source {name}"))
        if isinstance(source, PypiSource) and source.dist == "wheel" and asked is None:
            report(Event(Phase.RESOLVE, f"sources.{name}: the base's Python and glibc are not known yet (a build "
                         f"asks them); resolving for this machine's Python {sys.version.split()[0]} and glibc "
                         f"{glibc or '(none)'}, and the build checks the wheel against the base's", kind=Kind.LOG))
        ask = functools.partial(_resolve_source, source, store, platform, entry_spec, python=python, glibc=glibc)
        if isinstance(source, GitSource):  # one at a time: two may share a mirror in the store
            sources[name] = ask()
        else:
            asking[name] = ask
    sources.update(_all_at_once(asking))
    sources = {name: sources[name] for name in spec.sources}  # the spec's order, as before

    patches = {p.name: _patch_entry(spec, p) for p in spec.patches}
    commit_times = [pin.committed for pin in sources.values() if isinstance(pin, GitPin)]
    epoch = max(commit_times) if commit_times else (old.source_date_epoch if old else int(time.time()))
    return LockFile(
        generator=f"sparkimg {__version__}",
        spec_file=spec.path.name,
        spec_digest=spec.digest,
        created=old.created if old is not None and old.spec_digest == spec.digest
        else rfc3339(time.time()),
        platform=platform,
        cuda_architectures=tuple(a.text for a in spec.cuda_architectures),
        source_date_epoch=epoch,
        base=base,
        sources=sources,
        patches=patches,
        toolchain=_toolchain(spec, platform, sources, store),
        source_patches=source_patch_pins(spec),
    )


def write(spec: Spec, model: LockFile) -> Lock:
    path = lock_path(spec)
    raw = pretty(model.to_json())
    write_atomic(path, raw)
    return Lock(model, sha256_prefixed(raw), path)


def load_lock(spec: Spec, path: Path | None = None) -> Lock:
    path = path or lock_path(spec)
    try:
        raw = read_input(path, 64 * MiB, hint="re-create it with `sparkimg lock`")
    except FileNotFoundError:
        raise LockError(f"{path}: no lock file; the build refuses unpinned inputs",
                        hint=f"run `sparkimg lock {_rel(spec.path)}`") from None
    try:
        data = loads(raw)
    except ValueError as exc:
        raise LockError(f"{path}: not valid JSON ({exc})", hint="re-create it with `sparkimg lock`") from None
    return Lock(LockFile.from_json(data, str(path)), sha256_prefixed(raw), path)


def candidate_path(spec: Spec) -> Path:
    """``SPEC.lock.candidate.json`` beside the spec: a lock resolved again (``sparkimg nightly``),
    built and checked before it replaces ``SPEC.lock.json``."""
    return spec.path.with_name(spec.path.name + ".lock.candidate.json")


def load_candidate(spec: Spec, path: Path) -> Lock:
    """The lock at ``path``, named as the spec's own lock (``lock_path``), which it becomes, byte for
    byte, when promoted: a receipt names the lock file by that name and by the digest of these bytes."""
    loaded = load_lock(spec, path)
    return Lock(loaded.model, loaded.digest, lock_path(spec))


def load_checked(spec: Spec, store: Store | None = None) -> Lock:
    """The spec's lock, loaded and checked against the spec and the disk (``check``)."""
    lock = load_lock(spec)
    check(spec, lock, store)
    return lock


def check(spec: Spec, lock: Lock, store: Store | None = None) -> None:
    """Fail closed unless the lock matches the spec and the local files on disk (``store``, when
    given, remembers the toolkit's identity while nvcc is the same file)."""
    relock = f"run `sparkimg lock {_rel(spec.path)}`"
    problems: list[str] = []
    model = lock.model
    if model.spec_digest != spec.digest:
        raise LockError(f"{lock.path}: stale: {spec.path.name} changed since it was locked", hint=relock)
    if spec.platform != "native" and model.platform != spec.platform:
        problems.append(f"platform: lock has {model.platform}, spec asks for {spec.platform}")
    if list(model.cuda_architectures) != [a.text for a in spec.cuda_architectures]:
        problems.append("cuda_architectures differ")
    if dict(model.base.spec) != {"image": spec.base.reference, "digest": spec.base.digest}:
        problems.append(f"base: lock pins {dict(model.base.spec)}, spec has {spec.base.reference}")
    problems += _base_pins(spec, model.base, model.platform)
    if set(model.sources) != set(spec.sources):
        problems.append(f"sources: lock has {sorted(model.sources)}, spec has {sorted(spec.sources)}")
    for name, source in spec.sources.items():
        pin = model.sources.get(name)
        if pin is None:
            continue
        if isinstance(source, PathSource):
            found = _tree.describe(source.path)["sha256"]
            if not isinstance(pin, PathPin) or pin.path != source.path.relative_to(spec.root).as_posix():
                problems.append(f"sources.{name}: lock names another folder than {source.written}")
            elif pin.sha256 != found:
                problems.append(f"sources.{name}: {source.written} changed since the lock "
                                f"(`sparkimg lock --update {name}` pins the new content)")
        elif isinstance(pin, PathPin) or dict(pin.spec) != _source_spec(source):
            written = dict(pin.spec) if not isinstance(pin, PathPin) else {"path": pin.path}
            problems.append(f"sources.{name}: lock pins {written}, spec has {_source_spec(source)}")
        else:
            problems += _source_pins(name, source, pin)
    if set(model.patches) != {p.name for p in spec.patches}:
        problems.append(f"patches: lock has {sorted(model.patches)}, spec has {sorted(p.name for p in spec.patches)}")
    for patch_set in spec.patches:
        if model.patches.get(patch_set.name) != _patch_entry(spec, patch_set):
            problems.append(f"patches.{patch_set.name}: files in {patch_set.written} differ from the lock")
    if model.toolchain != _toolchain(spec, model.platform, model.sources, store):
        problems.append("toolchain: the CUDA toolkit differs from the one locked")
    found_patches = source_patch_pins(spec)
    for listed in sorted(set(found_patches) | set(model.source_patches)):
        if found_patches.get(listed) != model.source_patches.get(listed):
            state = ("is not in the lock" if listed not in model.source_patches else
                     "is no longer listed" if listed not in found_patches else "changed since the lock")
            problems.append(f"source_patches: {listed} {state}")
    if problems:
        raise LockError(f"{lock.path} disagrees with {spec.path.name}:\n" +
                        "\n".join(f"  {p}" for p in problems), hint=relock)


def _base_pins(spec: Spec, pin: BasePin, platform: str) -> list[str]:
    """What the spec pins of the base, against what the lock resolved: the spec always wins."""
    problems = []
    if (pin.repository, pin.tag) != (spec.base.repository, spec.base.tag):
        problems.append(f"base: lock resolved {pin.reference}, spec names {spec.base.reference}")
    if spec.base.digest and spec.base.digest not in (pin.manifest_digest, pin.index_digest):
        problems.append(f"base: lock resolved {pin.manifest_digest}, spec pins {spec.base.digest}")
    if pin.platform != platform:
        problems.append(f"base: lock resolved it for {pin.platform}, the lock is for {platform}")
    return problems


def _source_pins(name: str, source: GitSource | PypiSource, pin: SourcePin) -> list[str]:
    """Every value the spec pins of a source, against the lock's resolved value: a hand-edited
    lock cannot swap a wheel or a commit the spec pinned (docs/lock.md, "The spec wins")."""
    where = f"sources.{name}"
    if isinstance(source, GitSource):
        if not isinstance(pin, GitPin):
            return [f"{where}: lock holds a {pin.kind} source, spec has git"]
        wrong = [f"url {pin.url} (spec: {source.url})" if pin.url != source.url else "",
                 f"ref {pin.ref} (spec: {source.ref})" if source.ref and pin.ref != source.ref else "",
                 f"commit {pin.commit} (spec: {source.commit})"
                 if source.commit and not pin.commit.startswith(source.commit.lower()) else ""]
    else:
        if not isinstance(pin, PypiPin):
            return [f"{where}: lock holds a {pin.kind} source, spec has pypi"]
        # ``version: latest`` pins whichever version the lock found: the file must be that version's.
        version = pin.version if source.moving else source.version
        if source.dist == "sdist":
            from sparkimg._internal.net.pypi import sdist_filename_matches

            matches = sdist_filename_matches(pin.filename, source.package, version)
        else:
            matches = wheel_name_version(pin.filename) == (_norm(source.package), version)
        wrong = [f"package {pin.package} (spec: {source.package})"
                 if _norm(pin.package) != _norm(source.package) else "",
                 f"version {pin.version} (spec: {source.version})" if pin.version != version else "",
                 f"dist {pin.dist} (spec: {source.dist})" if pin.dist != source.dist else "",
                 f"{source.dist} {pin.filename} (not {source.package} {version})" if not matches else "",
                 f"sha256 {pin.sha256} (spec: {source.sha256})"
                 if source.sha256 and pin.sha256 != source.sha256 else "",
                 f"filename {pin.filename} (spec: {source.filename})"
                 if source.filename and pin.filename != source.filename else ""]
    return [f"{where}: lock resolved {w}" for w in wrong if w]


def _norm(name: str) -> str:
    """A distribution name as wheel file names write it (PEP 427/503: runs of -_. become _)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_name_version(filename: str) -> tuple[str, str] | None:
    """(normalised name, version) from a wheel file name, or None when it is not one."""
    parts = filename.removesuffix(".whl").split("-")
    return (_norm(parts[0]), parts[1]) if filename.endswith(".whl") and len(parts) >= 5 else None


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _source_spec(source: GitSource | PypiSource) -> dict[str, Any]:
    if isinstance(source, GitSource):
        return {"git": source.url, "ref": source.ref, "commit": source.commit}
    entry = {"pypi": source.package, "version": source.version, "sha256": source.sha256,
             "filename": source.filename}
    if source.dist != "wheel":  # a wheel's entry stays as older locks recorded it
        entry["dist"] = source.dist
    return entry


def base_asked(store: Store, config_digest: str) -> BaseScheme | None:
    """What the base's interpreter said when a build asked it (``pyscheme``, remembered by the
    store): its Python version and glibc decide which wheels fit; None when no build has asked
    this base yet."""
    from sparkimg.base.schemes import remembered

    return remembered(store, config_digest)


T = TypeVar("T")
RESOLVERS = 8  # pip processes at once: each is ~0.6 s of CPU and a few index round trips


def _all_at_once(asking: Mapping[str, Callable[[], T]]) -> dict[str, T]:
    """Each PyPI source's pin, asked of the index side by side: a lock of the vLLM environment (34
    wheels, one pip process each) took 33 s one after another. The first failure in the spec's
    order is raised, as one after another would have raised it, and what was not started is not."""
    from concurrent.futures import ThreadPoolExecutor  # only a lock that resolves pays its import

    if len(asking) < 2:
        return {name: ask() for name, ask in asking.items()}
    with ThreadPoolExecutor(max_workers=min(RESOLVERS, len(asking)), thread_name_prefix="resolve") as pool:
        futures = {name: pool.submit(ask) for name, ask in asking.items()}
        try:
            return {name: future.result() for name, future in futures.items()}
        finally:
            for future in futures.values():
                future.cancel()


def _resolve_source(source: GitSource | PypiSource, store: Store, platform: str,
                    entry_spec: dict[str, Any], *, python: str | None = None,
                    glibc: str | None = None) -> SourcePin:
    from sparkimg._internal.net import git as _git
    from sparkimg._internal.net import pypi as _pypi  # resolving only: a build reads the lock

    if isinstance(source, GitSource):
        repo = _git.mirror(store, source.url)
        pin = _git.resolve(repo, source.url, source.ref, source.commit)
        return GitPin(entry_spec, source.url, source.ref, pin.commit, pin.tree, pin.committed)
    if source.dist == "sdist":
        pin_ = _pypi.resolve_sdist(source.package, source.version)
    else:
        pin_ = _pypi.resolve(source.package, None if source.moving else source.version, platform, python=python,
                             glibc=glibc)
    version = pin_.version if source.moving else source.version
    if source.moving and wheel_name_version(pin_.filename) != (_norm(source.package), version):
        raise ResolveError(f"sources.{source.name}: the newest {source.package} on the index is {pin_.filename}, "
                           f"not a wheel of version {version!r}")
    if source.sha256 and pin_.sha256 != source.sha256:
        raise ResolveError(f"sources.{source.name}: the index serves {pin_.filename} with sha256 "
                           f"{pin_.sha256}, the spec pins {source.sha256}")
    if source.filename and pin_.filename != source.filename:
        raise ResolveError(f"sources.{source.name}: the index gives {pin_.filename}, the spec pins {source.filename}")
    return PypiPin(entry_spec, source.package, version, pin_.filename, pin_.url, pin_.sha256, dist=source.dist,
                   size=pin_.size)


def source_patch_pins(spec: Spec) -> dict[str, str]:
    """Every compile layer's ``source_patches``: path under the root -> sha256 of the file now."""
    pins: dict[str, str] = {}
    for layer in spec.layers:
        if not isinstance(layer, CompileLayer):
            continue
        for written in layer.source_patches:
            data = read_input(spec.root / written, 64 * MiB,
                              hint="source_patches name patch files under the spec's root")
            pins[written] = patches_mod.digests(data)["sha256"]
    return pins


def _path_entry(spec: Spec, source: PathSource) -> PathPin:
    described = _tree.describe(source.path)
    files = {name: TreeFile(f["sha256"], f["md5"], f["executable"]) for name, f in described["files"].items()}
    return PathPin(source.path.relative_to(spec.root).as_posix(), described["sha256"], files)


def _patch_entry(spec: Spec, patch_set: PatchSet) -> PatchSetPin:
    """The set's files with both digests. Where the set carries MD5SUMS/SHA256SUMS, they must
    agree with the files: a patch does not change without its pin changing too."""
    files: list[PatchFilePin] = []
    for item in patch_set.files:
        data = (patch_set.dir / item.file).read_bytes()
        digests = patches_mod.digests(data)
        files.append(PatchFilePin(item.file, item.mount, len(data), digests["md5"], digests["sha256"]))
    problems = patches_mod.disagreements(patch_set.dir, {f.file: f.to_json() for f in files}, required=False)
    for algorithm, name in patches_mod.SUMS.items():
        wrong = sorted({p.file for p in problems if p.algorithm == algorithm})
        if wrong:
            raise LockError(f"patches.{patch_set.name}: {patch_set.written}/{name} disagrees with the files: "
                            f"{', '.join(wrong)}",
                            hint=f"if the change is intended, re-pin with `sparkimg patches pin {patch_set.written}`")
    return PatchSetPin(patch_set.dir.relative_to(spec.root).as_posix(), patch_set.mode, tuple(files))


def _toolchain(spec: Spec, platform: str, sources: Mapping[str, SourcePin],
               store: Store | None = None) -> ToolchainPin:
    """The CUDA toolkit's identity: nvcc's version and sha256 (remembered by the store while the
    binary is the same file, so checking a lock does not re-hash 30 MB on every build); for
    toolkit wheels, the wheels the sources pin and the identity of the tree they make."""
    if spec.toolchain.cuda == "base":
        return ToolchainPin("base")
    if spec.toolchain.cuda == "wheels":
        return _toolkit_wheels(spec, sources)
    nvcc = check_toolkit(spec, platform)
    assert nvcc is not None
    root = Path(str(spec.toolchain.path))
    found = store.memo("nvcc", nvcc, _nvcc_identity) if store is not None else _nvcc_identity(nvcc)
    return ToolchainPin("host", str(root), str(root.resolve()), found["release"], found["build"], found["sha256"])


def _toolkit_wheels(spec: Spec, sources: Mapping[str, SourcePin]) -> ToolchainPin:
    pins = [sources.get(name) for name in spec.toolchain.wheels]
    wheels = tuple((name, pin.sha256) for name, pin in zip(spec.toolchain.wheels, pins, strict=True)
                   if isinstance(pin, PypiPin))
    headers = tuple((name, pin.sha256) for name in spec.toolchain.headers
                    if isinstance(pin := sources.get(name), PypiPin))
    nvcc = next((pin for pin in pins if isinstance(pin, PypiPin) and canonical_name(pin.package) == TOOLKIT_NVCC),
                None)
    if len(wheels) != len(pins) or len(headers) != len(spec.toolchain.headers) or nvcc is None:
        # the spec checks all three; a lock that disagrees is stale
        raise LockError(f"{spec.path.name}: toolchain.wheels: the lock does not pin every toolkit wheel",
                        hint=f"run `sparkimg lock {_rel(spec.path)}`")
    return ToolchainPin("wheels", nvcc_version=toolkit_release(nvcc.version), wheels=wheels,
                        toolkit=toolkit_identity((sha256 for _, sha256 in wheels), (sha256 for _, sha256 in headers)),
                        headers=headers)


def check_toolkit(spec: Spec, platform: str | None = None) -> Path | None:
    """The host toolkit's nvcc (``cuda: host``), refused when it is missing or a program of another
    CPU than ``platform``'s (the spec's): the compile containers run the platform's programs, so
    an x86 toolkit mounted into an arm64 container fails hours later with "No such file". None
    for ``cuda: base``. Reads 20 bytes; ``check`` runs it with or without a lock."""
    if spec.toolchain.cuda != "host" or spec.toolchain.path is None:
        return None
    platform = platform or spec_platform(spec)
    nvcc = (Path(spec.toolchain.path) / "bin" / "nvcc").resolve()
    if not nvcc.is_file():
        raise ResolveError(f"{spec.path.name}: toolchain.path: {nvcc} not found",
                           hint="point toolchain.path at a CUDA toolkit (the folder holding bin/nvcc)")
    with nvcc.open("rb") as handle:
        found = elf.machine(handle.read(elf.HEAD))
    if found is not None and elf.foreign(platform, found):
        want = elf.wanted(platform)
        raise UsageError(
            f"{spec.path.name}: toolchain.path: {nvcc} is a program for {found}, but the spec's platform "
            f"{platform} compiles in {want} containers, which cannot run it",
            hint=f"use NVIDIA's toolkit wheels, which the lock pins for {platform}: `toolchain: {{cuda: wheels, "
            "wheels: [...]}}` (layers/demo-arm64.yaml, docs/spec.md); or point toolchain.path at a toolkit for "
            f"{want}, or use `toolchain: {{cuda: base}}` with nvcc in a {platform} base")
    return nvcc


def _nvcc_identity(nvcc: Path) -> dict[str, str]:
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ResolveError(f"{nvcc} --version failed: {exc}") from None
    release = next((line.split("release", 1)[1].strip() for line in out.splitlines() if "release" in line), "")
    build = next((line.split(":", 1)[-1].strip() for line in out.splitlines() if line.startswith("Build")), "")
    return {"release": release, "build": build, "sha256": sha256_file(nvcc)}


def base_client(spec: Spec, previous: BasePin | None, *, plain_http: bool = False,
                ca_file: Path | None = None) -> RegistryClient:
    """The client that resolves the spec's base: ``--plain-http`` or ``--ca-file`` as given, and the
    plain HTTP the last lock recorded (asked once) kept for that very repository, unless a CA now
    says TLS. ``lock`` and the nightly's re-resolution both ask here."""
    from sparkimg._internal.net.registry import RegistryClient, reach_for

    kept = previous is not None and previous.transport == PLAIN_HTTP \
        and previous.repository == spec.base.repository and ca_file is None
    return RegistryClient(reach=reach_for(spec.base.repository, plain_http=plain_http or kept, ca=ca_file))


def _transport(client: RegistryClient, repository: str) -> str | None:
    """What the lock records of how the base's registry was reached: plain HTTP to a registry that
    is not loopback only where ``--plain-http`` asked for it (then every reader of the base does
    the same); else nothing, and the readers go as Docker would."""
    from sparkimg._internal.net.reach import is_loopback

    ref = client.ref(repository)
    asked = client.reach.plain_http and client.reach.registry == ref.registry and not is_loopback(ref.registry)
    return PLAIN_HTTP if asked else None

