"""What a failed night records for a person to act on (``Failure`` in the entry and the report):
the stage, the first error line of a failed compile's log, the layer, and for a failed check the
files that differ.

A night's ``error`` is one line: a failed compile's says the command's exit code and its last
output line, which is often ``ninja: build stopped`` or ``1 error detected``. The cause is usually
the *first* line that says error, long scrolled out of the tail the error message keeps; the night
already collects every log line its build reported, so it is found there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sparkimg.events import Collected, Kind
from sparkimg.formats.nightly import FILES_KEPT, FIRST_ERROR_MAX, DifferingFile, Failure, LayerRun

if TYPE_CHECKING:
    from sparkimg.image.check import Difference

# A word that starts an error report in compiler, linker, ninja, CMake, pip and Python output:
# "x.cu(3): error: ...", "fatal error: ...", "CMake Error at ...", "FAILED: obj.o",
# "ModuleNotFoundError: ...". Not "-Werror" or "error.h": the word must start a token and not be a
# file name.
_ERROR_LINE = re.compile(r"(?:^|[\s:(\[])(?:fatal error|error|\w*Error|FAILED)(?::|\b(?![./\w-]))", re.IGNORECASE)


def first_error_line(lines: Sequence[str]) -> str | None:
    """The first line of ``lines`` that reads as an error, stripped and cut; ``None`` when none does."""
    for line in lines:
        if _ERROR_LINE.search(line):
            said = line.strip()
            return said if len(said) <= FIRST_ERROR_MAX else said[: FIRST_ERROR_MAX - 1] + "…"
    return None


def layer_log(said: Collected, layer: str) -> list[str]:
    """Every log line the build reported for ``layer``, in order."""
    return [e.message for e in said.events if e.kind is Kind.LOG and e.layer == layer]


def failure_of(stage: str, error: str, layers: Sequence[LayerRun], said: Collected,
               differences: Sequence[Difference] = ()) -> Failure:
    """The failure of a night that stopped at ``stage`` with the one-line ``error``: a failed layer's
    first error line from its log (else the error itself), and a failed check's differing files."""
    layer = next((row.name for row in layers if row.status == "failed"), None)
    found = first_error_line(layer_log(said, layer)) if layer is not None else None
    files = tuple(DifferingFile(d.layer, d.path, d.kind) for d in differences[:FILES_KEPT])
    return Failure(stage, found or error or None, layer, files, len(differences))
