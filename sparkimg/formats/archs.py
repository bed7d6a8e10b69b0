"""CUDA architectures as text: the ``12.1a`` a spec, a recipe and a lock write, and the SM forms
(``sm_121a``, ``compute_121a``, ``121a``) people also write. A leaf of the format layer, so that
the spec and the recipe read architectures alike without one importing the other."""

from __future__ import annotations

import re

# A CUDA architecture as a spec writes it: ``12.1a``.
ARCH_TEXT = re.compile(r"^(\d+)\.(\d)([af]?)$")
_SM_FORMS = re.compile(r"^(?:sm_|compute_)?(\d+?)(\d)([af]?)$")


def dotted_arch(text: str) -> str | None:
    """``12.1a`` from ``12.1a``, ``sm_121a``, ``compute_121a`` or ``121a``; None for anything else."""
    if ARCH_TEXT.match(text):
        return text
    forms = _SM_FORMS.match(text)
    return f"{forms.group(1)}.{forms.group(2)}{forms.group(3)}" if forms else None
