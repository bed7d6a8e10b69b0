"""Which CPU an ELF file is for, from its first 20 bytes: one reading for every audit that asks.

``e_machine`` sits at offset 18, in the file's own byte order (``EI_DATA``, byte 5). Device code
is not CPU code: a CUDA cubin (``EM_CUDA``) or another accelerator's object runs on no CPU, so it
is never foreign to a platform. ``compile.machines`` audits layers with it; ``lock`` refuses a
host toolkit of another CPU with it.
"""

from __future__ import annotations

import struct

from sparkimg._internal.wheeltags import ARCHS

HEAD = 20  # e_ident (16 bytes), e_type (2), e_machine (2)
MAGIC = b"\x7fELF"
CPU = {2: "sparc", 3: "i386", 8: "mips", 20: "ppc", 21: "ppc64", 22: "s390x", 40: "arm", 50: "ia64",
       62: "x86_64", 183: "aarch64", 243: "riscv64", 258: "loongarch64"}
DEVICE = {0: "none", 190: "cuda", 224: "amdgpu", 247: "bpf"}  # never foreign: no CPU runs them


def machine(head: bytes) -> str | None:
    """The machine an ELF header names (``x86_64``, ``aarch64``, ``cuda``, ``EM_N`` for one not
    known here); None for a file that is not ELF."""
    if len(head) < HEAD or not head.startswith(MAGIC) or head[5] not in (1, 2):
        return None
    number: int = struct.unpack_from("<H" if head[5] == 1 else ">H", head, 18)[0]
    return CPU.get(number) or DEVICE.get(number) or f"EM_{number}"


def wanted(platform: str) -> str:
    """The machine of ``platform`` (``linux/arm64`` -> ``aarch64``)."""
    return ARCHS[platform]


def foreign(platform: str, found: str | None) -> bool:
    """Whether a file of machine ``found`` (``machine``'s answer) cannot run on ``platform``."""
    return found is not None and found not in DEVICE.values() and found != wanted(platform)
