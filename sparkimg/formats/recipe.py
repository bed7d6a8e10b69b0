"""The recipe formats (``sparkimg-recipe/v1``, and the ``runtime`` block of
``sparkring-recipe/v1``): their schema ids and keys, the ``Recipe`` and ``Expectation``
models, and the checks on a recipe's own values. Pure: ``receipts.recipe`` reads the files
and generates expectations from the spec, lock and receipts a recipe names.
docs/receipt.md ("Recipes") lists every key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkimg._internal.suggest import closest
from sparkimg.errors import RecipeError
from sparkimg.formats.archs import dotted_arch

SCHEMA = "sparkimg-recipe/v1"
SPARKRING = "sparkring-recipe/v1"
RECIPE_KEYS = {"schema", "name", "description", "spec", "receipt", "expect"}
EXPECT_KEYS = {"base", "image", "platform", "cuda_architectures", "sources", "patches", "spec", "lock"}
SOURCE_FIELDS = {"commit", "tree", "sha256", "version", "ref", "filename"}
COMMIT_PIN = re.compile(r"^[0-9a-f]{7,40}$")



@dataclass(frozen=True)
class Expectation:
    """One field a receipt must carry. ``prefix`` accepts a short commit for a full one;
    a ``*`` in ``field`` matches any one patch set (recipes key patches by file name)."""

    field: str
    expected: Any
    origin: str
    prefix: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "expected": self.expected, "origin": self.origin, "prefix": self.prefix}

    def matches(self, found: Any) -> bool:
        if self.prefix and isinstance(found, str) and isinstance(self.expected, str):
            return found.startswith(self.expected)
        return bool(found == self.expected)


@dataclass(frozen=True)
class Recipe:
    """A recipe as sparkimg checks it: every expectation, whatever file or pin it came from."""

    path: Path
    schema: str
    name: str
    expectations: tuple[Expectation, ...]

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "schema": self.schema, "name": self.name,
                "expectations": [e.to_json() for e in self.expectations]}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Recipe:
        """A recipe as ``to_json`` wrote it; anything else is a RecipeError naming ``where``."""
        try:
            return cls(Path(data["path"]), str(data["schema"]), str(data["name"]), tuple(
                Expectation(str(e["field"]), e["expected"], str(e["origin"]), bool(e.get("prefix", False)))
                for e in data["expectations"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise RecipeError(f"{where}: not a resolved recipe ({exc.__class__.__name__}: {exc})") from None


def source_pins(source: str, fields: dict[str, Any], origin: str) -> list[Expectation]:
    """Expectations on one source; a commit shorter than 40 hex digits matches by prefix."""
    return [Expectation(f"sources.{source}.{field}", str(value), origin,
                        prefix=field == "commit" and len(str(value)) < 40) for field, value in fields.items()]


def archs(path: Path, value: Any) -> list[str]:
    """CUDA architectures as sparkimg writes them (12.1a), from 12.1a, sm_121a or 121a."""
    items = value if isinstance(value, list) else str(value).replace(",", " ").replace(";", " ").split()
    out = []
    for item in items:
        text = dotted_arch(str(item))
        if text is None:
            raise RecipeError(f"{path}: {str(item)!r} is not a CUDA architecture like 12.1a or sm_121a")
        out.append(text)
    return out


def mapping(path: Path, value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RecipeError(f"{path}: {where}: must be a mapping, not {type(value).__name__}")
    return value


def keys(path: Path, data: dict[str, Any], allowed: set[str], prefix: str) -> None:
    for key in data:
        if key not in allowed:
            close = closest(str(key), sorted(allowed))
            hint = f"did you mean '{close}'?" if close else f"allowed: {', '.join(sorted(allowed))}"
            raise RecipeError(f"{path}: {prefix}{key}: unknown key", hint=hint)
