"""``verify-receipt``: does the image about to serve match its signed receipt and recipe?

The checks run in a fixed order and stop after the first class that fails: the
signature (over the exact payload bytes, before they are parsed), the statement's
schema, the recipe's expectations, the SBOM the receipt names (``sbom_checks``), the image
(local engine or registry), the patch files on disk, and with ``rehash`` the store's copies of
every input and output. Each check becomes a row of expected against found; bad input raises
(exit 2), a mismatch returns a report whose exit code is 1.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkimg._internal.fs.files import read_input, regular_file
from sparkimg._internal.fs.hashing import hash_many
from sparkimg._internal.net.registry import RegistryClient
from sparkimg.errors import EngineError, ResolveError, UsageError
from sparkimg.formats.canonical import hex_of, loads
from sparkimg.formats.recipe import Recipe
from sparkimg.formats.statement import Statement, facts, schema_problems
from sparkimg.patches import sums as patches_mod
from sparkimg.plan.keys import KEY_LABEL
from sparkimg.receipts import contract as recipe_mod
from sparkimg.signing import dsse
from sparkimg.signing.keys import PublicKey
from sparkimg.spec import split_reference
from sparkimg.store.content import Store

# Image labels that must agree with the receipt: label -> receipt field.
LABELS = {
    KEY_LABEL: "image.key",
    "dev.sparkimg.spec-digest": "spec.digest",
    "dev.sparkimg.lock-digest": "lock.digest",
    "org.opencontainers.image.base.digest": "base.manifest_digest",
}


@dataclass(frozen=True)
class Check:
    stage: str
    field: str
    expected: Any
    found: Any
    ok: bool
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "field": self.field, "expected": self.expected, "found": self.found,
                "ok": self.ok, "note": self.note}


@dataclass
class Report:
    receipt: str
    checks: list[Check] = field(default_factory=list)
    failed: str | None = None
    skipped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failed is None

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def reasons(self) -> list[str]:
        return [f"{c.stage}: {c.field}: expected {c.expected}, found {c.found}" + (f" ({c.note})" if c.note else "")
                for c in self.checks if not c.ok]

    def to_json(self) -> dict[str, Any]:
        return {"receipt": self.receipt, "ok": self.ok, "exit_code": self.exit_code, "failed_stage": self.failed,
                "skipped_stages": self.skipped, "checks": [c.to_json() for c in self.checks],
                "reasons": self.reasons()}


@dataclass(frozen=True)
class Request:
    receipt: Path
    key: PublicKey
    recipe: Path | None = None
    image: str | None = None
    patches: Path | None = None
    rehash: bool = False
    # verify-node: how this node's engine answers for an image ID (None: not a node check)
    node: Callable[[str], tuple[str, dict[str, str]] | None] | None = None
    sbom: Path | None = None  # the SBOM to check; None: the one beside the receipt, when there


def receipt_facts(path: Path) -> dict[str, Any]:
    """The dotted facts of the statement in the receipt at ``path``, its signature not checked
    (``verify`` checks it): what save, load and pull read of a receipt."""
    return facts(Statement.from_json(loads(dsse.read(path).payload), str(path)))


def verify(request: Request, *, store: Store | None = None,
           local_image: Callable[[str], tuple[str, dict[str, str]] | None] | None = None) -> Report:
    """Run every asked-for check; ``local_image`` maps a reference to (image ID, labels) when
    the engine has it (the CLI passes the engine's; None means registry only)."""
    envelope = dsse.read(request.receipt)
    recipe = recipe_mod.load_recipe(request.recipe, request.key) if request.recipe else None
    report = Report(str(request.receipt))
    stages: list[tuple[str, Callable[[], list[Check]]]] = []
    parsed: list[Statement] = []  # filled by the statement stage; later stages run only if it passed
    found: dict[str, Any] = {}

    def signature() -> list[Check]:
        why = envelope.check_signature(request.key)
        return [Check("signature", "DSSE signature", f"valid, keyid {request.key.keyid[:16]}",
                      "valid" if why is None else "invalid", why is None, why or "")]

    def schema() -> list[Check]:
        try:
            data = loads(envelope.payload)
        except (ValueError, UnicodeDecodeError) as exc:
            return [Check("statement", "payload", "in-toto statement (JSON)", "not JSON", False, str(exc))]
        problems = schema_problems(data)
        if not problems:
            parsed.append(Statement.from_json(data, str(request.receipt)))
            found.update(facts(parsed[0]))
        return [Check("statement", "schema", "in-toto Statement v1, SLSA provenance v1",
                      "ok" if not problems else "invalid", not problems, "; ".join(problems))]

    stages += [("signature", signature), ("statement", schema)]
    if recipe:
        stages.append(("recipe", lambda: recipe_checks(recipe, found)))
    stages.append(("sbom", lambda: sbom_checks(request, parsed[0])))
    if request.image:
        image = request.image
        stages.append(("image", lambda: _image(image, found, local_image)))
    if request.node is not None:
        inspect = request.node
        stages.append(("image", lambda: node_checks(found, inspect)))
    if request.patches:
        folder = request.patches
        stages.append(("patches", lambda: _patches(folder, parsed[0])))
    if request.rehash:
        stages.append(("store", lambda: store_checks(store or Store(), parsed[0])))
    for index, (stage, run) in enumerate(stages):
        checks = run()
        report.checks += checks
        if not all(c.ok for c in checks):
            report.failed = stage
            report.skipped = [name for name, _ in stages[index + 1:]]
            break
    return report


def sbom_checks(request: Request, statement: Statement) -> list[Check]:
    """The SBOM the receipt names (``--sbom FILE``, else the one beside the receipt): signed by
    the key, the very statement the receipt pins, about the receipt's image. A receipt that names
    none has nothing to check; an SBOM not kept beside the receipt is said, not failed (it tells
    what the image holds, and the image itself is checked by digest)."""
    from sparkimg.sbom.attest import SBOM_HINT, checks, named, sbom_path

    pinned = named(statement)
    path = request.sbom or sbom_path(request.receipt)
    if request.sbom is not None and not request.sbom.is_file():
        raise UsageError(f"--sbom {request.sbom}: no such file", hint=SBOM_HINT)
    if pinned is None:
        return [] if request.sbom is None else [
            Check("sbom", "SBOM", "named by the receipt", "not named", False,
                  "the receipt names no SBOM (built before sparkimg wrote SBOMs); build again to make one")]
    if not path.is_file():
        return [Check("sbom", "SBOM", str(path), "absent", True, "not kept beside the receipt; not checked")]
    raw = read_input(path, dsse.ENVELOPE_BYTES, hint=SBOM_HINT)
    found, _ = checks(raw, str(path), request.key, statement)
    return [Check("sbom", f.field, f.expected, f.found, f.ok, f.note) for f in found]


def node_checks(found: dict[str, Any], inspect: Callable[[str], tuple[str, dict[str, str]] | None]) -> list[Check]:
    """``verify-node``: the receipt's image is in this node's engine by digest (its config digest,
    or its manifest digest on the containerd store), never by a tag another image could take, and
    it carries the receipt's image key."""
    config, manifest = found.get("image.id"), found.get("image.manifest_digest")
    local = inspect(str(config)) if config else None
    if local is None and manifest:
        local = inspect(str(manifest))
    if local is None:
        return [Check("image", "image present by digest", config, "absent", False,
                      f"this node's engine has no image {config}; pull it (`sparkimg pull`) before serving")]
    image_id, labels = local
    return [Check("image", "image present by digest", config, image_id, image_id in (config, manifest)),
            Check("image", "label dev.sparkimg.key", found.get("image.key"), labels.get("dev.sparkimg.key"),
                  labels.get("dev.sparkimg.key") == found.get("image.key"))]


def _lookup(found: dict[str, Any], name: str) -> Any:
    if "*" not in name:
        return found.get(name)
    values = [v for k, v in sorted(found.items()) if fnmatch.fnmatchcase(k, name)]
    return values[0] if len(values) == 1 else (values or None)


def recipe_checks(recipe: Recipe, found: dict[str, Any]) -> list[Check]:
    checks = []
    for expectation in recipe.expectations:
        value = _lookup(found, expectation.field)
        note = "" if value is not None else "not in the receipt"
        checks.append(Check("recipe", expectation.field, expectation.expected, value,
                            expectation.matches(value), note or f"from {expectation.origin}"))
    return checks


def _image(reference: str, found: dict[str, Any],
           local_image: Callable[[str], tuple[str, dict[str, str]] | None] | None) -> list[Check]:
    local = local_image(reference) if local_image else None
    checks: list[Check] = []
    if local is not None:
        image_id, labels = local
        where = "local engine"
    else:
        try:
            repository, tag, digest = split_reference(reference)
            resolved, config = RegistryClient().inspect(repository, digest or tag or "latest",
                                                        found.get("platform") or "")
        except ResolveError as exc:
            return [Check("image", "image", reference, "not found", False, f"not in the local engine; registry: "
                          f"{exc.message}")]
        image_id, labels = resolved.config_digest, (config.get("config") or {}).get("Labels") or {}
        where = "registry"
        checks.append(_manifest_check(found, resolved.manifest_digest, image_id))
    # Docker's classic store names an image by its config digest, the containerd store by its
    # manifest digest: either is the image the receipt names, never a bare ID from elsewhere.
    manifest = found.get("image.manifest_digest")
    by_manifest = local is not None and manifest is not None and image_id == manifest
    checks.insert(0, Check("image", "image.id", found.get("image.id"), image_id,
                           image_id == found.get("image.id") or by_manifest,
                           f"{reference} in the {where}" + (" (by its manifest digest)" if by_manifest else "")))
    for label, fact in LABELS.items():
        checks.append(Check("image", f"label {label}", found.get(fact), labels.get(label),
                            labels.get(label) == found.get(fact)))
    return checks


def _manifest_check(found: dict[str, Any], manifest_digest: str, image_id: str) -> Check:
    """The registry's manifest against the one sparkimg wrote. Another manifest for the same config
    passes with a note: a pusher that compresses layers again (``docker push``) writes other blobs
    and so another manifest, but the config digest pins every layer's content by its diff_id."""
    expected = found.get("image.manifest_digest")
    if expected is None:
        return Check("image", "image.manifest_digest", "(not recorded)", manifest_digest, True,
                     "the receipt records no manifest digest")
    if expected == manifest_digest:
        return Check("image", "image.manifest_digest", expected, manifest_digest, True)
    same_config = image_id == found.get("image.id")
    return Check("image", "image.manifest_digest", expected, manifest_digest, same_config,
                 "another manifest for the same config: pushed by a tool that compressed the layers again "
                 "(their content is pinned by the config's diff_ids)" if same_config else "")


def _patches(folder: Path, statement: Statement) -> list[Check]:
    """The files in ``folder`` against the receipt's patch set of the same folder."""
    if not folder.is_dir():
        raise UsageError(f"--patches {folder}: no such folder", hint="pass the patch set folder, e.g. patches/demo")
    deps = [d for d in statement.dependencies if d.name.startswith("patch:")]
    sets = {str(d.notes.get("set")): (d.uri or "").removeprefix("file:").rsplit("/", 1)[0] for d in deps}
    resolved = folder.resolve().as_posix()
    chosen = [s for s, d in sets.items() if resolved.endswith("/" + d) or folder.name == Path(d).name]
    if len(sets) == 1 and not chosen:
        chosen = list(sets)
    if len(chosen) != 1:
        return [Check("patches", "patch set", ", ".join(f"{s} ({d})" for s, d in sets.items()) or "(none)",
                      str(folder), False, "the receipt has no patch set for this folder")]
    set_name = chosen[0]
    mine = {d.name.split("/", 1)[1]: d for d in deps if d.notes.get("set") == set_name}
    listed = patches_mod.read_mounts(folder) if (folder / patches_mod.MOUNTS).is_file() else {}
    on_disk = set(listed)
    files = sorted(set(mine) | on_disk)
    for file in files:  # what `build` and `patches check` refuse, refused here before any read
        if "/" in file or file.startswith(".") or not file:
            raise UsageError(f"{folder}: '{file}' is not a plain file name inside {folder.name}/",
                             hint="a patch set holds plain files, listed by name in mounts.txt")
        regular_file(folder / file, folder, within=f"the patch set {folder}")
    hashed = hash_many([folder / f for f in files], ("sha256", "md5"))
    checks = []
    for file in files:
        dep, digests = mine.get(file), hashed[folder / file]
        if dep is None:
            checks.append(Check("patches", f"{set_name}/{file}", "(not in the receipt)", "listed in mounts.txt",
                                False, "an extra patch file would be mounted"))
            continue
        for algorithm in ("sha256", "md5"):
            value = digests[algorithm] if digests else "missing"
            pinned = dep.digests.get(algorithm)
            checks.append(Check("patches", f"{set_name}/{file} {algorithm}", pinned, value, value == pinned))
    if listed:
        for file, dep in sorted(mine.items()):
            checks.append(Check("patches", f"{set_name}/{file} mount", dep.notes.get("mount"), listed.get(file),
                                listed.get(file) == dep.notes.get("mount")))
    problems = patches_mod.disagreements(folder, {f: dict(d.digests) for f, d in mine.items()}, required=False)
    for algorithm, name in patches_mod.SUMS.items():
        if (folder / name).is_file():
            agrees = not any(p.algorithm == algorithm for p in problems)
            checks.append(Check("patches", f"{set_name}/{name}", "agrees with the receipt",
                                "agrees" if agrees else "differs", agrees))
    return checks


def store_checks(store: Store, statement: Statement) -> list[Check]:
    """Re-hash, in parallel, the store's copy of every input and output the receipt names, and of
    the image it names (manifest, config, every layer sparkimg wrote)."""
    from sparkimg.image.assemble import image_record

    named = {d.notes.get("store_blob"): d.name for d in (*statement.dependencies, *statement.byproducts)}
    named.pop(None, None)
    key = facts(statement).get("image.key")
    record = image_record(store, str(key)) if key else None
    if record is not None:
        named.setdefault(hex_of(record.manifest_digest), "image manifest")
        named.setdefault(hex_of(record.config_digest), "image config")
        for number, layer in enumerate(record.layers):
            named.setdefault(hex_of(layer.descriptor.digest), f"image layer {number}: {layer.created_by}")
    present = {blob: name for blob, name in named.items() if store.has(str(blob))}
    hashed = hash_many([store.blob(str(b)) for b in present])
    checks = [Check("store", f"{name}", blob, (hashed[store.blob(str(blob))] or {}).get("sha256"),
                    (hashed[store.blob(str(blob))] or {}).get("sha256") == blob, "re-hashed from the store")
              for blob, name in sorted(present.items(), key=lambda kv: kv[1])]
    absent = sorted(n for b, n in named.items() if b not in present)
    if absent:
        checks.append(Check("store", "not in this store", "-", ", ".join(absent), True,
                            "fetched or built elsewhere; nothing to re-hash"))
    return checks


def local_image_of(reference: str) -> tuple[str, dict[str, str]] | None:
    """(image ID, labels) from the local engine, or None when it is absent or there is no engine
    to ask (then the registry answers); an engine that connects and then fails is an error."""
    from sparkimg.engine.connect import connect as connect_engine

    try:
        engine = connect_engine()
    except EngineError:
        return None
    info = engine.inspect(reference)
    return (info.id, info.labels) if info else None
