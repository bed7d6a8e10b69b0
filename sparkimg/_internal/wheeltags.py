"""The wheel platform tags a base image can load, from its glibc: one rule for ``lock`` and ``build``.

pypa/packaging derives a machine's manylinux tags from the glibc *it runs on*
(``packaging._manylinux.platform_tags``); sparkimg needs them for the base image's glibc, which
the base's own interpreter reports once (``base._scheme_query``). The rule here is packaging's,
written for a given glibc (PEP 600): ``manylinux_2_N_ARCH`` for N from the base's minor down to
2.17 (2.5 on x86_64, where manylinux1 and manylinux2010 wheels exist), each legacy alias
(``manylinux2014`` = 2.17, ``manylinux2010`` = 2.12, ``manylinux1`` = 2.5) beside its glibc, and
``linux_ARCH``. ``tests/unit/internal/test_wheeltags.py`` holds it equal to packaging's own
answer for the machine the tests run on.
"""

from __future__ import annotations

import os

ARCHS = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
# PEP 513/571/599: the legacy manylinux names of three glibc versions.
_LEGACY = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}
# The oldest glibc a manylinux wheel may need, per architecture (packaging's too_old_glibc2 + 1).
_OLDEST_MINOR = {"x86_64": 5, "i686": 5}
_OLDEST_MINOR_OTHER = 17


def host_glibc() -> str | None:
    """This machine's glibc (``2.36``), the guess ``lock`` makes for a base not asked yet; None
    when the C library is not glibc."""
    try:
        name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
    except (ValueError, OSError):
        return None
    return ".".join(version.split(".")[:2]) if name == "glibc" and version else None


def platform_tags(platform: str, glibc: str | None) -> list[str]:
    """The platform tags of ``platform`` (``linux/amd64``) on a glibc of ``glibc``, newest first
    (pip's order of preference): every manylinux tag that glibc can load, then ``linux_ARCH``.
    Without glibc (musl, or a platform sparkimg does not know), only ``linux_ARCH``."""
    arch = ARCHS.get(platform)
    if arch is None:
        return []
    tags: list[str] = []
    if glibc is not None:
        major, newest = (int(part) for part in glibc.split(".")[:2])
        if major == 2:
            for minor in range(newest, _OLDEST_MINOR.get(arch, _OLDEST_MINOR_OTHER) - 1, -1):
                tags.append(f"manylinux_2_{minor}_{arch}")
                if (2, minor) in _LEGACY:
                    tags.append(f"{_LEGACY[(2, minor)]}_{arch}")
    tags.append(f"linux_{arch}")
    return tags
