"""Whether this kernel runs another platform's programs: the binfmt_misc handler a foreign build needs.

An arm64 image built on an x86_64 machine (or the reverse) runs its base's programs (the scheme
query, a compile container) through user-mode emulation: the kernel hands each aarch64 ELF file
to a registered interpreter, qemu-aarch64. Inside a container the interpreter's path does not
exist, so the handler must carry the F flag (the kernel opens the interpreter when it is
registered, not at each exec). Without it the first container fails with "exec format error" or
"no such file or directory" and a message about the base; here it is said before anything runs.
A handler is found by what it matches, not by its name (qemu-user-static, binfmt-support and
tonistiigi/binfmt name it differently): its magic and mask must match an ELF header of the
platform's machine.
"""

from __future__ import annotations

import platform as host
import struct
from dataclasses import dataclass
from pathlib import Path

from sparkimg._internal import elf
from sparkimg._internal.wheeltags import ARCHS
from sparkimg.errors import EmulationError

BINFMT = Path("/proc/sys/fs/binfmt_misc")
NATIVE = {"x86_64": "linux/amd64", "amd64": "linux/amd64", "aarch64": "linux/arm64", "arm64": "linux/arm64"}
SETUP = ("register qemu's user-mode emulation with the F flag, qemu 8 or newer (Debian 12's 7.2 segfaults importing "
         "torch): `docker run --privileged --rm tonistiigi/binfmt --install {arch}`, or qemu-user from "
         "bookworm-backports; scripts/dev-up does it here")


@dataclass(frozen=True)
class Verdict:
    """Whether ``platform``'s programs run here, and if not, why and what to do."""

    platform: str
    ok: bool
    detail: str
    fix: str | None = None


def native() -> str:
    """This machine's platform (``linux/amd64``)."""
    machine = host.machine().lower()
    return NATIVE.get(machine, f"linux/{machine}")


def refusal(held: object, platform: str | None, verb: str, otherwise: str) -> tuple[str, str] | None:
    """(message, hint) when an image of platform ``held`` is not the one asked for (``platform``,
    or this machine's when None): what ``pull``, ``load`` and ``run-args`` refuse, and how to ask
    for it anyway (``verb`` it here under emulation) or instead (``otherwise``); None when it is."""
    wanted = platform or native()
    if held == wanted:
        return None
    return (f"the image is for {held}, not {wanted}" + ("" if platform else " (this machine's)"),
            f"pass --platform {held} to {verb} it here anyway (it runs under emulation)" if platform is None
            else f"leave --platform out, or {otherwise}")


def header(platform: str) -> bytes:
    """The first 20 bytes of a 64-bit little-endian executable of ``platform``'s machine."""
    number = next(n for n, name in elf.CPU.items() if name == ARCHS[platform])
    return elf.MAGIC + b"\x02\x01\x01" + bytes(9) + struct.pack("<HH", 2, number)


def _fields(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        found[word.rstrip(":")] = rest.strip() if rest else word
    return found


def _matches(fields: dict[str, str], sample: bytes) -> bool:
    """Whether a handler's ``offset``/``magic``/``mask`` match ``sample`` (a magic handler only)."""
    try:
        magic = bytes.fromhex(fields["magic"])
        mask = bytes.fromhex(fields.get("mask", "ff" * len(magic)))
        offset = int(fields.get("offset", "0"))
    except (KeyError, ValueError):
        return False
    window = sample[offset:offset + len(magic)]
    return len(window) == len(magic) and all(w & m == g & m for w, g, m in zip(window, magic, mask, strict=False))


def verdict(platform: str, binfmt: Path = BINFMT) -> Verdict:
    """Whether this kernel runs ``platform``'s programs: natively, or through an enabled binfmt
    handler with the F flag whose magic matches the platform's ELF header."""
    if platform == native():
        return Verdict(platform, True, f"{platform} is this machine's own platform")
    arch = ARCHS[platform]
    fix = SETUP.format(arch=platform.split("/")[1])
    if not (binfmt / "status").exists():
        return Verdict(platform, False, f"{platform} needs emulation on this {native()} machine, and binfmt_misc "
                       f"is not mounted at {binfmt}",
                       f"`sudo mount -t binfmt_misc binfmt_misc {binfmt}`, then {fix}")
    if (binfmt / "status").read_text().strip() != "enabled":
        return Verdict(platform, False, f"binfmt_misc is disabled ({binfmt}/status)",
                       f"`echo 1 | sudo tee {binfmt}/status`")
    sample = header(platform)
    found = []
    for entry in sorted(binfmt.iterdir()):
        if entry.name in ("register", "status"):
            continue
        try:
            fields = _fields(entry.read_text())
        except OSError:
            continue
        if _matches(fields, sample):
            found.append((entry.name, fields))
    if not found:
        return Verdict(platform, False, f"{platform} needs emulation on this {native()} machine, and no binfmt "
                       f"handler runs {arch} programs", fix)
    name, fields = next(((n, f) for n, f in found if "enabled" in f), found[0])
    interpreter = fields.get("interpreter", "?")
    if "enabled" not in fields:
        return Verdict(platform, False, f"the {arch} handler {name} ({interpreter}) is disabled",
                       f"`echo 1 | sudo tee {binfmt}/{name}`")
    if "F" not in fields.get("flags", ""):
        return Verdict(platform, False, f"the {arch} handler {name} ({interpreter}) lacks the F flag, so no "
                       "container can reach its interpreter",
                       f"register it again with the F flag: `echo -1 | sudo tee {binfmt}/{name}`, then {fix}")
    return Verdict(platform, True, f"emulated: binfmt handler {name} ({interpreter}, flags {fields['flags']})")


def require(platform: str, binfmt: Path = BINFMT) -> None:
    """Refuse to go on (``EmulationError``, exit 3) when ``platform``'s programs cannot run here."""
    found = verdict(platform, binfmt)
    if not found.ok:
        raise EmulationError(f"cannot build for {platform} here: {found.detail}", hint=found.fix)
