"""``sparkimg prewarm --verify``: is this cache exactly what the manifest says, for this image?

Checked in order: the signature (nothing else is trusted before it), then FlashInfer
version, architectures, image ID and cache path against what is about to serve, then
every file (size, and sha256 unless ``quick``), then that nothing FlashInfer would load
sits beside the listed modules, then that each module's shared object holds code for
every architecture asked for (the fatbin audit of compile layers). ``quick`` checks the
signature and file sizes only, for a check at every container start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkimg._internal.fs.hashing import hash_many
from sparkimg.compile import audit
from sparkimg.formats.prewarm_manifest import CachedFile, CachedModule, PrewarmManifest
from sparkimg.prewarm import manifest
from sparkimg.signing.keys import PublicKey
from sparkimg.spec import Arch


@dataclass(frozen=True)
class Expect:
    """What the serving side is: each field None when the caller cannot tell (then it is not checked)."""

    archs: tuple[Arch, ...] | None = None
    image_id: str | None = None
    flashinfer: str | None = None
    base: str | None = None


@dataclass
class Report:
    problems: list[dict[str, str]] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    files: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, check: str, message: str) -> None:
        self.problems.append({"check": check, "message": message})

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": self.problems, "checked": self.checked,
                "not_checked": self.not_checked, "files": self.files, "seconds": round(self.seconds, 4)}


def verify(cache: Path, key: PublicKey, expect: Expect, *, quick: bool = False) -> Report:
    started = time.monotonic()
    report = Report()
    where = manifest.path_of(cache)
    envelope = manifest.read(cache)
    why = envelope.check_signature(key)
    report.checked.append("signature")
    if why is not None:
        report.problem("signature", f"{where}: {why}")
        report.seconds = time.monotonic() - started
        return report
    data = manifest.parse_manifest(envelope.payload, str(where))
    files = [(module, item) for module in data.modules for item in module.files]
    report.files = len(files)
    if quick:
        _sizes(cache, files, report)
        report.not_checked += ["environment", "sha256", "stray", "architectures in code"]
    else:
        _environment(data, expect, report)
        _contents(cache, files, report)
        _stray(cache, data, report)
        _code(cache, data, expect, report)
    report.seconds = time.monotonic() - started
    return report


def _environment(data: PrewarmManifest, expect: Expect, report: Report) -> None:
    pairs = [
        ("flashinfer", expect.flashinfer, data.flashinfer,
         "the cache was compiled by FlashInfer {found}, the serving environment has {expected}"),
        ("architectures", [a.text for a in expect.archs] if expect.archs else None,
         list(data.cuda_architectures),
         "the cache was compiled for {found}, the image is to serve {expected}"),
        ("image", expect.image_id, data.image_id,
         "the cache was made for image {found}, the image about to serve is {expected}"),
        ("path", expect.base, data.workspace.base,
         "the cache was compiled under {found} but is used at {expected}: FlashInfer's ninja files name "
         "that path, so it would recompile (mount or keep it at the recorded path)"),
    ]
    for check, expected, found, message in pairs:
        if expected is None:
            report.not_checked.append(check)
            continue
        report.checked.append(check)
        if expected != found:
            report.problem(check, message.format(found=found, expected=expected))


def _sizes(cache: Path, files: list[tuple[CachedModule, CachedFile]], report: Report) -> None:
    report.checked.append("sizes")
    for module, item in files:
        path = cache / item.path
        try:
            size = path.stat().st_size
        except OSError:
            report.problem("missing", f"{module.name}: {item.path} is missing")
            continue
        if size != item.size:
            report.problem("size", f"{module.name}: {item.path} is {size} bytes, the manifest says {item.size}")


def _contents(cache: Path, files: list[tuple[CachedModule, CachedFile]], report: Report) -> None:
    report.checked += ["files", "sha256"]
    hashed = hash_many(cache / item.path for _, item in files)
    for module, item in files:
        digests = hashed[cache / item.path]
        if digests is None:
            report.problem("missing", f"{module.name}: {item.path} is missing")
        elif digests["sha256"] != item.sha256:
            report.problem("sha256", f"{module.name}: {item.path} has sha256 {digests['sha256'][:16]}…, "
                           f"the manifest says {item.sha256[:16]}… (changed or damaged after prewarm)")


def _stray(cache: Path, data: PrewarmManifest, report: Report) -> None:
    """Modules or files in FlashInfer's cached_ops that the manifest does not list."""
    report.checked.append("stray")
    jit_dir = cache / data.workspace.dir / "cached_ops"
    listed = {item.path for module in data.modules for item in module.files}
    # A module the image provides ahead of time has no folder here: one would be a stray copy.
    names = {module.name for module in data.modules if not module.aot}
    if not jit_dir.is_dir():
        report.problem("missing", f"{jit_dir} is missing: not a FlashInfer cache for this version and architecture")
        return
    for entry in sorted(jit_dir.iterdir()):
        if entry.name == "tmp":  # FlashInfer's lock folder; a tmpfs when serving
            continue
        if entry.name not in names:
            report.problem("stray", f"{entry.relative_to(cache)} is not in the manifest: FlashInfer would load "
                           "it as a cached module; remove it or prewarm it as part of the kernel set")
            continue
        for path in sorted(p for p in entry.rglob("*") if p.is_file() or p.is_symlink()):
            rel = path.relative_to(cache).as_posix()
            if rel not in listed:
                report.problem("stray", f"{rel} is not in the manifest (module {entry.name} holds an extra file)")


def _code(cache: Path, data: PrewarmManifest, expect: Expect, report: Report) -> None:
    """Each module's shared object must hold code for every architecture asked for."""
    report.checked.append("architectures in code")
    archs = expect.archs or tuple(Arch(a) for a in data.cuda_architectures)
    wanted = [a.sm for a in archs]
    for module in data.modules:
        if module.aot:
            continue  # in the image's AOT wheel, audited when its layer was built; the image ID binds it
        path = cache / module.library
        try:
            code = path.read_bytes()
        except OSError:
            continue  # reported as missing
        # A host-only module (no fatbin) passes, as in the compile layers' audit.
        for found in audit.failures([audit.audit_file(module.library, code, wanted)]):
            have = ", ".join(f"sm_{sm}" for sm in found["sm"])
            lacks = ", ".join(f"sm_{sm}" for sm in found["missing"])
            report.problem("code", f"{module.name}: {module.library} holds code for {have}, not {lacks}")
