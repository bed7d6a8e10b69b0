"""The schema name every ``--json`` result carries under ``"schema"``: a script checks it before
it reads the rest, and a change of a result's shape moves its version.

A document with a format key of its own (an SPDX or CycloneDX SBOM, a DSSE envelope) is printed
as it is, without one.
"""

from __future__ import annotations

ERROR = "sparkimg-error/v1"  # ``--json`` on a command that failed: error, hint, exit_code (and a spec's problems)


def result_schema(command: str) -> str:
    """``sparkimg COMMAND --json``'s schema: ``sparkimg-build-result/v1`` for ``build``."""
    return f"sparkimg-{command}-result/v1"
