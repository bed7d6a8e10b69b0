"""The CPU architecture audit: every ELF file sparkimg writes into a layer runs on the spec's platform.

A wheel tagged ``py3-none-any`` can still carry an x86-64 shared object, a vendored binary can be
of another machine, a patch set can bake a prebuilt helper: nothing else stops these before a
GB10 fails to load them. The audit reads each file's first bytes as its layer is written (no
second read): an ELF file's machine (``_internal.elf``) must be the platform's, x86_64 on
linux/amd64 and aarch64 on linux/arm64; device code (a CUDA cubin) passes. The counts per machine
go into the layer's store record, a compile layer's audit and the SBOM.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sparkimg._internal.elf import foreign, machine, wanted
from sparkimg.errors import AuditError

SHOWN = 10  # foreign files named in the error; the rest are counted


@dataclass
class Census:
    """The ELF files of one layer as it is written: how many of each machine, and which are foreign."""

    platform: str
    counts: dict[str, int] = field(default_factory=dict)
    strays: list[tuple[str, str]] = field(default_factory=list)  # (path, machine) of each foreign file

    def see(self, path: str, head: bytes) -> None:
        """Take one file's first bytes (``tar_into``'s ``seen``)."""
        found = machine(head)
        if found is None:
            return
        self.counts[found] = self.counts.get(found, 0) + 1
        if foreign(self.platform, found):
            self.strays.append((path, found))

    def check(self, layer: str) -> None:
        """Refuse the layer (exit 6) when it holds a file another CPU runs."""
        refuse(layer, self.platform, self.strays)


def refuse(layer: str, platform: str, strays: Iterable[tuple[str, str]]) -> None:
    """An ``AuditError`` naming the layer and each foreign file with its machine, when there are any."""
    strays = sorted(strays)
    if not strays:
        return
    lines = [f"    {path}: {found}" for path, found in strays[:SHOWN]]
    if len(strays) > SHOWN:
        lines.append(f"    ... and {len(strays) - SHOWN} more")
    raise AuditError(f"layer {layer}: {len(strays)} ELF file(s) built for another CPU than {platform}'s "
                     f"{wanted(platform)}:\n" + "\n".join(lines),
                     hint=f"pin the wheel built for {platform} (a py3-none-any wheel must hold no compiled code), "
                     f"build the layer for {platform}, or remove the file from the patch set")


def summary(counts: Mapping[str, int]) -> str:
    """``812 x86_64, 3 cuda`` (or ``no ELF files``): a census in words, most first."""
    if not counts:
        return "no ELF files"
    return ", ".join(f"{n} {m}" for m, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
