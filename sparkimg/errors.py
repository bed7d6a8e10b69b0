"""The error hierarchy: every failure a user can act on, each with its exit code.

Only ``cli.run`` turns these into exit codes; library code raises them.
"""

from __future__ import annotations

import re
from typing import Any


class SparkimgError(Exception):
    """Base error. ``exit_code`` is what the CLI exits with; the message says what to do."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  fix: {self.hint}"

    def to_json(self) -> dict[str, Any]:
        """What ``--json`` and ``--json-logs`` say of the error (the keys a script reads)."""
        return {"error": self.message, "hint": self.hint, "exit_code": self.exit_code}


class UsageError(SparkimgError):
    """Bad input: a file, an option or a value the user must correct."""

    exit_code = 2


class SpecError(UsageError):
    """The layer spec is invalid. Carries every problem found, each with file, line and field."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        count = sum(1 for p in problems if not p.startswith(" "))
        noun = "problem" if count == 1 else "problems"
        super().__init__(f"{path}: {count} {noun}:\n{lines}")

    def to_json(self) -> dict[str, Any]:
        """Each problem apart, with its file, line and field: a script (an editor, CI annotations)
        points at each one without parsing the message."""
        listed: list[dict[str, Any]] = []
        for problem in self.problems:
            if problem.startswith(" ") and listed:  # a line that goes on the problem above
                listed[-1]["message"] += "\n" + problem.strip()
                continue
            found = _PROBLEM.match(problem)
            listed.append({"file": found["file"], "line": int(found["line"]), "field": found["field"],
                           "message": found["message"]} if found else
                          {"file": self.path, "line": None, "field": None, "message": problem})
        return {**super().to_json(), "file": self.path, "problems": listed}


# How the spec checker words a problem (``spec.checker.Checker.problem``): FILE:LINE: FIELD: MESSAGE.
_PROBLEM = re.compile(r"^(?P<file>.+?):(?P<line>\d+): (?P<field>[^:]+?): (?P<message>.*)$", re.DOTALL)


class EnvelopeError(UsageError):
    """A signed file is not a DSSE envelope, or not the statement it should hold (exit 2: bad
    input, not a mismatch)."""


class LockError(UsageError):
    """The lock file is missing, stale or disagrees with the spec; the build fails closed."""


class ResolveError(SparkimgError):
    """A mutable reference (tag, branch, version) could not be resolved."""


class FetchError(SparkimgError):
    """An input could not be fetched into the store."""


class HashMismatchError(FetchError):
    """Downloaded or on-disk content does not match its pinned digest; nothing was admitted."""


class DamagedBlobError(SparkimgError):
    """A blob of the store does not hash to its name (rot on disk, a cut tail): nothing was made
    from it; ``sparkimg store verify --repair`` removes it so the next build fetches or rebuilds it."""


class EngineError(SparkimgError):
    """The container engine is missing, not running or failed a command."""

    exit_code = 3


class EmulationError(EngineError):
    """The spec's platform is not this machine's and the kernel cannot run its programs (no
    binfmt handler with the F flag): nothing of the build ran (exit 3)."""


class BudgetError(SparkimgError):
    """The resource budget cannot be met (e.g. --reserve leaves too little memory)."""

    exit_code = 4


class BuildError(SparkimgError):
    """A build step failed."""


class OOMError(BuildError):
    """A compile layer was killed by the kernel's OOM killer inside its memory bound."""

    exit_code = 5


class AuditError(BuildError):
    """A compiled shared object lacks code for a requested CUDA architecture, or a layer holds an
    ELF file for another CPU than the spec's platform (``compile.machines``)."""

    exit_code = 6


class PreflightError(AuditError):
    """A requested CUDA architecture would be dropped or collapsed by the source's own build logic
    (vLLM's ``CUDA_SUPPORTED_ARCHS`` selection): the audit's failure, predicted before any compile."""


class BusyError(SparkimgError):
    """Another process holds what this one needs alone (a nightly's state folder); try again later."""

    exit_code = 7


class KeyFileError(UsageError):
    """A key file is missing, unreadable, of the wrong type or too open."""


class RecipeError(UsageError):
    """The recipe file is unreadable or malformed (exit 2)."""


class DowngradeError(SparkimgError):
    """Writing would drop a signature (exit 1)."""


class VerificationError(SparkimgError):
    """What a node has or is handed is not what a trusted, signed record names (exit 1); nothing
    was changed on the node. The family of every refusal after a signature or digest check."""


class PullRefused(VerificationError):
    """The registry's image is not the one a trusted receipt names: nothing was pulled (exit 1)."""


class LoadRefused(VerificationError):
    """The archive is not the image a trusted receipt names: nothing was loaded (exit 1)."""


class CacheMismatchError(VerificationError):
    """The cache is not for this image, or fails its quick verification (exit 1)."""


class RunArgsError(VerificationError):
    """A patch file to mount is missing or differs from the receipt (exit 1)."""


def exit_codes() -> dict[int, str]:
    """Each exit code an error ends the CLI with, and what it means: the first sentence of the
    class that sets it (the manual page's EXIT STATUS, written from the hierarchy itself)."""
    found = {SparkimgError.exit_code: "A failure: resolve, fetch, a hash or receipt mismatch, a build, a damaged "
                                      "store blob"}
    todo = list(SparkimgError.__subclasses__())
    while todo:
        cls = todo.pop(0)
        todo += cls.__subclasses__()
        if "exit_code" in cls.__dict__ and cls.exit_code not in found:
            first = re.split(r"\.\s+(?=[A-Z])", " ".join((cls.__doc__ or "").split()))[0].rstrip(".")
            found[cls.exit_code] = re.sub(r" \(``[^`]*``\)", "", first)
    return dict(sorted(found.items()))

