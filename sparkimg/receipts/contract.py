"""Recipes: the serving contract, as a list of fields a receipt must carry.

Two formats are read. ``sparkimg-recipe/v1`` names the spec (or a receipt) it needs and
adds explicit expectations; when it names a spec, the expectations are generated from
that spec and its lock, never copied. ``sparkring-recipe/v1`` (the serving repository's
format, field.md) contributes its ``runtime`` block and ``hardware.cuda_arch``: the image
lock's base and serving digests, a validated local image ID, source pins, patch md5s.
docs/receipt.md ("Recipes") lists every key. The models and the checks on a recipe's own
values are in ``formats.recipe``; this module reads the files a recipe names.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from sparkimg._internal.fs.files import read_input
from sparkimg.errors import RecipeError
from sparkimg.formats.recipe import (
    COMMIT_PIN,
    EXPECT_KEYS,
    RECIPE_KEYS,
    SCHEMA,
    SOURCE_FIELDS,
    SPARKRING,
    Expectation,
    Recipe,
    archs,
    keys,
    mapping,
    source_pins,
)
from sparkimg.formats.statement import dependency_facts, facts, parse_statement
from sparkimg.lock import resolve as lock_mod
from sparkimg.patches import sums as patches_mod
from sparkimg.receipts.compose import dependencies
from sparkimg.signing import dsse
from sparkimg.signing.keys import PublicKey
from sparkimg.spec import load_spec
from sparkimg.spec import yamlpos as _yamlpos


def load_recipe(path: Path, trusted: PublicKey) -> Recipe:
    """Read a recipe of either format; ``trusted`` checks a receipt the recipe names."""
    try:
        data = _yamlpos.parse_located(read_input(path, _yamlpos.MAX_BYTES).decode("utf-8")).data
    except OSError as exc:
        raise RecipeError(f"{path}: cannot read the recipe ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise RecipeError(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as exc:
        raise RecipeError(f"{path}: not YAML or JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe is a mapping with a 'schema' key")
    schema = data.get("schema")
    if schema == SCHEMA:
        return _sparkimg(path, data, trusted)
    if schema == SPARKRING:
        return _sparkring(path, data)
    raise RecipeError(f"{path}: schema: {schema!r} is not a recipe format sparkimg reads",
                      hint=f"use schema: {SCHEMA} (docs/receipt.md), or a {SPARKRING} file")


def _sparkimg(path: Path, data: dict[str, Any], trusted: PublicKey) -> Recipe:
    keys(path, data, RECIPE_KEYS, "")
    name = str(data.get("name") or path.stem)
    found: list[Expectation] = []
    if data.get("spec") is not None:
        found += _from_spec(path, path.parent / str(data["spec"]))
    if data.get("receipt") is not None:
        found += _from_receipt(path, path.parent / str(data["receipt"]), trusted)
    expect = data.get("expect") or {}
    if not isinstance(expect, dict):
        raise RecipeError(f"{path}: expect: must be a mapping of expected receipt fields")
    keys(path, expect, EXPECT_KEYS, "expect.")
    origin = f"{path.name} expect"
    for group in ("base", "image", "spec", "lock"):
        for field, value in mapping(path, expect.get(group), f"expect.{group}").items():
            found.append(Expectation(f"{group}.{field}", value, origin))
    if "platform" in expect:
        found.append(Expectation("platform", expect["platform"], origin))
    if "cuda_architectures" in expect:
        found.append(Expectation("cuda_architectures", archs(path, expect["cuda_architectures"]), origin))
    for source, pins in mapping(path, expect.get("sources"), "expect.sources").items():
        fields = mapping(path, pins, f"expect.sources.{source}")
        unknown = sorted(set(fields) - SOURCE_FIELDS)
        if unknown:
            raise RecipeError(f"{path}: expect.sources.{source}.{unknown[0]}: unknown field",
                              hint=f"use one of {', '.join(sorted(SOURCE_FIELDS))}")
        found += source_pins(source, fields, origin)
    found += _patch_md5s(path, expect.get("patches"), "expect.patches", origin)
    if not found:
        raise RecipeError(f"{path}: the recipe expects nothing",
                          hint="name the spec it serves (spec: ../layers/NAME.yaml) or add expect: fields")
    return Recipe(path, SCHEMA, name, tuple(found))


def _from_spec(recipe: Path, spec_path: Path) -> list[Expectation]:
    """Every pin of the spec and its lock, in receipt terms: generated, not copied."""
    spec = load_spec(spec_path)
    lock = lock_mod.load_checked(spec)
    origin = f"{spec_path.name} + lock"
    wanted: dict[str, Any] = {
        "spec.digest": spec.digest, "lock.digest": lock.digest, "platform": lock.platform,
        "cuda_architectures": [a.text for a in spec.cuda_architectures],
    }
    wanted.update({k: v for k, v in dependency_facts(dependencies(spec, lock)).items() if v is not None})
    return [Expectation(field, value, origin) for field, value in sorted(wanted.items())]


def _from_receipt(recipe: Path, receipt: Path, trusted: PublicKey) -> list[Expectation]:
    """The fields of a receipt the recipe pins (for instance the qualified one)."""
    envelope = dsse.read(receipt)
    why = envelope.check_signature(trusted)
    if why:
        raise RecipeError(f"{recipe}: receipt: {receipt}: {why}",
                          hint="a recipe may only name a receipt signed by the key you trust")
    data = parse_statement(envelope.payload, f"{recipe}: receipt: {receipt}")
    skip = {"image.reference", "image.key"}
    return [Expectation(k, v, receipt.name) for k, v in sorted(facts(data).items()) if k not in skip and v is not None]


def _sparkring(path: Path, data: dict[str, Any]) -> Recipe:
    name = str(data.get("recipe_id") or path.stem)
    origin = f"{path.name} ({SPARKRING})"
    found: list[Expectation] = []
    hardware = mapping(path, data.get("hardware"), "hardware")
    if "cuda_arch" in hardware:
        found.append(Expectation("cuda_architectures", archs(path, hardware["cuda_arch"]), origin))
    if "platform" in hardware:
        found.append(Expectation("platform", hardware["platform"], origin))
    runtime = mapping(path, data.get("runtime"), "runtime")
    if not runtime:
        raise RecipeError(f"{path}: runtime: missing; sparkimg checks a {SPARKRING} recipe's runtime block")
    image_lock = runtime.get("image_lock")
    if isinstance(image_lock, str):
        lock_file = path.parent / image_lock
        try:
            image_lock = _yamlpos.parse_located(read_input(lock_file, _yamlpos.MAX_BYTES).decode("utf-8")).data
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise RecipeError(f"{path}: runtime.image_lock: cannot read {lock_file} ({exc})") from None
    lock_data = mapping(path, image_lock, "runtime.image_lock")
    base = mapping(path, lock_data.get("base_image"), "runtime.image_lock.base_image")
    for field in ("manifest_digest", "config_digest"):
        if base.get(field):
            found.append(Expectation(f"base.{field}", base[field], origin))
    serving = mapping(path, lock_data.get("serving_image"), "runtime.image_lock.serving_image")
    if serving.get("manifest_digest"):
        found.append(Expectation("image.manifest_digest", serving["manifest_digest"], origin))
    if runtime.get("validated_local_image_id"):
        found.append(Expectation("image.id", runtime["validated_local_image_id"], origin))
    for source, pin in mapping(path, runtime.get("pins"), "runtime.pins").items():
        fields = pin if isinstance(pin, dict) else {"commit" if COMMIT_PIN.match(str(pin)) else "version": pin}
        found += source_pins(source, {k: v for k, v in fields.items() if k in SOURCE_FIELDS}, origin)
    found += _patch_md5s(path, runtime.get("patches"), "runtime.patches", origin)
    if not found:
        raise RecipeError(f"{path}: the runtime block names nothing sparkimg can check",
                          hint="see docs/receipt.md for the keys read from a sparkring recipe")
    return Recipe(path, SPARKRING, name, tuple(found))


def _patch_md5s(path: Path, value: Any, where: str, origin: str) -> list[Expectation]:
    """Patch md5s keyed by file name: a mapping, the path of an MD5SUMS file, or a list of those."""
    if value is None:
        return []
    if isinstance(value, list):
        return [e for item in value for e in _patch_md5s(path, item, where, origin)]
    if isinstance(value, str):
        sums = patches_mod.read_sums(path.parent / value)
        origin = value
    else:
        sums = {}
        for file, digest in mapping(path, value, where).items():
            md5 = digest.get("md5") if isinstance(digest, dict) else digest
            if not isinstance(md5, str) or not re.fullmatch(r"[0-9a-f]{32}", md5):
                raise RecipeError(f"{path}: {where}.{file}: {md5!r} is not an md5 (32 hex digits)")
            sums[file] = md5
    return [Expectation(f"patches.*/{file}.md5", md5, origin) for file, md5 in sorted(sums.items())]
