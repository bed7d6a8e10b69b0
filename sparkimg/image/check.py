"""``sparkimg build --check``: build every layer again from scratch and compare, bit for bit.

The second build runs in a scratch store holding only the inputs (sources, patch files, the
base's manifest and config): every compile layer is compiled again in the same bounds, the
base's interpreter is asked again, every image layer is written again, and nothing comes from
a cache, with one exception that is said in the verdict and the receipt: an image layer whose
key an earlier check already rebuilt from scratch to the very bytes this build has (recorded
per key with the sparkimg and Python that checked it, ``checked-layers``) is not written a
third time, so a night that moved one wheel checks that wheel's layer, not 34 (``--recheck``
rebuilds them all). Then, from the top down: the manifest and config digests, the
config's fields, each new layer's diff_id and compressed digest and each compile layer's
wheels; where two differ, the files inside that differ (only in one build, other metadata,
other content), each named with the layer and the input that made it.
"""

from __future__ import annotations

import json
import shutil
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkimg._internal.fs.hashing import sha256_of
from sparkimg.compile.bounds import Overrides, derive
from sparkimg.engine.protocol import Engine
from sparkimg.events import Event, Phase, Reporter
from sparkimg.formats import oci
from sparkimg.formats.canonical import hex_of
from sparkimg.formats.record import LayerRecord
from sparkimg.image import layer as layer_mod
from sparkimg.plan.keys import Plan
from sparkimg.spec import CompileLayer
from sparkimg.store.content import Store

if TYPE_CHECKING:
    from sparkimg.image.build import BuildResult

CHECK = "sparkimg-check/1"
CHECKED = "checked-layers"  # store records: an image layer key an earlier check rebuilt to the same bytes


@dataclass(frozen=True)
class Compared:
    """One thing compared: what, where, and its value in each build."""

    what: str
    first: str
    second: str

    @property
    def same(self) -> bool:
        return self.first == self.second

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "first": self.first, "second": self.second, "same": self.same}


@dataclass(frozen=True)
class Difference:
    """A file that differs between the two builds, with the layer and input that made it."""

    layer: str
    source: str
    path: str
    kind: str  # "only in first", "only in second", "metadata", "content"
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"layer": self.layer, "input": self.source, "path": self.path, "kind": self.kind,
                "detail": self.detail}


@dataclass(frozen=True)
class CheckReport:
    compared: tuple[Compared, ...]
    differences: tuple[Difference, ...] = field(default=())
    wall_s: float = 0.0
    reused: tuple[str, ...] = ()  # image layers an earlier check of the same key showed identical: not rebuilt

    @property
    def identical(self) -> bool:
        return all(c.same for c in self.compared)

    def to_json(self) -> dict[str, Any]:
        return {"schema": CHECK, "identical": self.identical, "digests_compared": len(self.compared),
                "checked_before": list(self.reused), "compared": [c.to_json() for c in self.compared],
                "differences": [d.to_json() for d in self.differences], "wall_s": round(self.wall_s, 3)}

    def to_receipt(self) -> dict[str, Any]:
        """What the receipt records: the verdict, what was compared and what differed (no file lists)."""
        scratch = "empty store, no cache" + (f"; {len(self.reused)} image layer(s) an earlier check of the same "
                                             "key showed identical were not rebuilt" if self.reused else "")
        return {"result": "identical" if self.identical else "differs", "compared": len(self.compared),
                "differing": [c.what for c in self.compared if not c.same], "scratch": scratch,
                "checked_before": list(self.reused)}


def rebuild_and_compare(plan: Plan, records: Mapping[str, LayerRecord], first: oci.ImageRecord, store: Store,
                        engine: Engine, base_tag: str, overrides: Overrides, report: Reporter, *,
                        recheck: bool = False) -> CheckReport:
    """Build ``plan`` again in a scratch store and compare with ``first`` (and ``records``); image
    layers an earlier check showed identical are not rebuilt unless ``recheck``."""
    from sparkimg.base.pyscheme import base_scheme
    from sparkimg.compile.container import compile_layer
    from sparkimg.fetch.inputs import base_image, fetch
    from sparkimg.image.assemble import assemble, layer_keys

    started = time.monotonic()
    scratch_root = store.temp_dir("check.")
    try:
        scratch = Store(scratch_root / "store")
        fetched = fetch(plan.spec, plan.lock, store, None)
        named = layer_keys(plan, dict(records), store, base_image(plan.lock, store))
        first_keys = [key for _, key in named]
        reuse = {} if recheck else _checked_before(store, first_keys, first.layers)
        # A wheel layer's wheel is not copied (nor read) when its layer is not rebuilt; compile
        # layers are always compiled again, so their sources always are.
        rebuilt = {name for name, key in named if key not in reuse}
        read = {layer.source for layer in plan.spec.layers if isinstance(layer, CompileLayer) or layer.name in rebuilt}
        unread = {layer.source for layer in plan.spec.layers} - read
        _copy_inputs(plan, {source: blob for source, blob in fetched.blobs.items() if source not in unread},
                     fetched.patch_blobs, store, scratch)
        base = base_image(plan.lock, scratch)
        second_records: dict[str, LayerRecord] = {}
        for layer in plan.spec.layers:
            if not isinstance(layer, CompileLayer):
                continue
            report(Event(Phase.CHECK, f"check: compile {layer.name} again from scratch", layer.name))
            budget = derive(layer.bounds, overrides, layer=layer.name)
            second_records[layer.name] = compile_layer(plan.spec, plan.lock, layer, plan.layer(layer.name),
                                                       fetched.blobs[layer.source],
                                                       plan.lock.base.config_digest, scratch, engine, budget, report,
                                                       fetched.blobs)
        report(Event(Phase.CHECK, f"check: write {'every' if not reuse else 'each new'} image layer again", "image"))
        second = assemble(plan, second_records, scratch,
                          lambda: base_scheme(engine, base_tag, plan.lock.base.config_digest, scratch),
                          base, report, cache=False, reuse=reuse)
        second_keys = [key for _, key in layer_keys(plan, second_records, scratch, base)]
        reused = {i for i, key in enumerate(second_keys) if key in reuse}
        compared, differences = _compare(plan, records, second_records, first, second, store, scratch, reused)
        _remember(store, first_keys, second_keys, first.layers, second.layers, reused)
        labels = _layer_sources(plan)
        found = CheckReport(tuple(compared), tuple(differences), time.monotonic() - started,
                            tuple(labels[i] if i < len(labels) else f"layer {i}" for i in sorted(reused)))
    finally:
        shutil.rmtree(scratch_root, ignore_errors=True)
    verdict = "identical" if found.identical else f"{sum(not c.same for c in found.compared)} difference(s)"
    report(Event(Phase.CHECK, f"check: {verdict} ({len(found.compared)} compared)", "image"))
    return found


def _by() -> str:
    """What wrote an image layer in a check: a record of another sparkimg or Python is not trusted."""
    import platform

    from sparkimg import __version__

    return f"sparkimg {__version__}; Python {platform.python_version()}"


def _checked_before(store: Store, keys: Sequence[str], layers: Sequence[oci.Layer]) -> dict[str, oci.Layer]:
    """The first build's layers whose key an earlier check (by this sparkimg and Python) rebuilt
    from scratch to these very bytes."""
    found = {}
    for key, layer in zip(keys, layers, strict=False):
        record = store.read_record(CHECKED, key) or {}
        if record.get("digest") == layer.descriptor.digest and record.get("by") == _by():
            found[key] = layer
    return found


def _remember(store: Store, first_keys: Sequence[str], second_keys: Sequence[str], first: Sequence[oci.Layer],
              second: Sequence[oci.Layer], reused: set[int]) -> None:
    """Each image layer the check rebuilt from scratch to the first build's bytes, by its key."""
    from sparkimg._internal.times import rfc3339

    for index, (key, other, a, b) in enumerate(zip(first_keys, second_keys, first, second, strict=False)):
        if index not in reused and key == other and a == b:
            store.write_record(CHECKED, key, {"digest": a.descriptor.digest, "by": _by(),
                                              "checked": rfc3339(time.time())})


def _copy_inputs(plan: Plan, blobs: Mapping[str, str], patch_blobs: Mapping[str, Mapping[str, str]], store: Store,
                 scratch: Store) -> None:
    """The inputs only: every store entry a build reads, none it writes."""
    wanted = [*blobs.values(), *(h for files in patch_blobs.values() for h in files.values()),
              hex_of(plan.lock.base.manifest_digest), hex_of(plan.lock.base.config_digest)]
    for digest in wanted:
        if store.has(digest):
            scratch.put_file(store.blob(digest), expected=digest)


def _compare(plan: Plan, records: Mapping[str, LayerRecord], second_records: Mapping[str, LayerRecord],
             first: oci.ImageRecord, second: oci.ImageRecord, store: Store,
             scratch: Store, reused: set[int]) -> tuple[list[Compared], list[Difference]]:
    compared = [Compared("image manifest", first.manifest_digest, second.manifest_digest),
                Compared("image config", first.config_digest, second.config_digest)]
    differences: list[Difference] = []
    one, two = (_config(s, r) for s, r in ((store, first), (scratch, second)))
    flat_one, flat_two = _flat(one), _flat(two)
    for name in sorted(set(flat_one) | set(flat_two)):
        a, b = flat_one.get(name, "(absent)"), flat_two.get(name, "(absent)")
        if a != b:
            compared.append(Compared(f"config {name}", a, b))
    for name in sorted(set(records) | set(second_records)):
        record, other = records.get(name), second_records.get(name)
        ours = {o.filename: o.sha256 for o in record.outputs} if record else {}
        theirs = {o.filename: o.sha256 for o in other.outputs} if other else {}
        for filename in sorted(set(ours) | set(theirs)):
            a, b = ours.get(filename, "(absent)"), theirs.get(filename, "(absent)")
            compared.append(Compared(f"compile {name}: {filename}", a, b))
            if a != b and a in ours.values() and b in theirs.values():
                differences += _zip_differences(name, filename, store.blob(a), scratch.blob(b))
    sources = _layer_sources(plan)
    for index, (a_layer, b_layer) in enumerate(zip(first.layers, second.layers, strict=False)):
        if index in reused:
            continue  # not rebuilt: said in the report, not counted as compared
        label = sources[index] if index < len(sources) else f"layer {index}"
        compared.append(Compared(f"layer {label}: diff_id", a_layer.diff_id, b_layer.diff_id))
        compared.append(Compared(f"layer {label}: blob", a_layer.descriptor.digest, b_layer.descriptor.digest))
        if a_layer.diff_id != b_layer.diff_id:
            differences += _tar_differences(label, a_layer.created_by, store.blob(hex_of(a_layer.descriptor.digest)),
                                            scratch.blob(hex_of(b_layer.descriptor.digest)))
    if len(first.layers) != len(second.layers):
        compared.append(Compared("layer count", str(len(first.layers)), str(len(second.layers))))
    return compared, differences


def _layer_sources(plan: Plan) -> list[str]:
    names = [layer.name for layer in plan.spec.layers]
    names += [f"patches.{n}" for n, e in sorted(plan.lock.patches.items()) if e.mode == "bake"]
    return names


def _config(store: Store, record: oci.ImageRecord) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(store.blob(hex_of(record.config_digest)).read_bytes())
    return data


def _flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flat(value, name + "."))
        else:
            out[name] = json.dumps(value, sort_keys=True)
    return out


def _tar_differences(layer: str, source: str, a: Path, b: Path) -> list[Difference]:
    ours, theirs = layer_mod.read_members(a), layer_mod.read_members(b)
    found: list[Difference] = []
    for path in sorted(set(ours) | set(theirs)):
        if path not in theirs:
            found.append(Difference(layer, source, "/" + path, "only in first"))
        elif path not in ours:
            found.append(Difference(layer, source, "/" + path, "only in second"))
        else:
            (ia, da), (ib, db) = ours[path], theirs[path]
            meta_a, meta_b = _tar_meta(ia), _tar_meta(ib)
            if da != db:
                found.append(Difference(layer, source, "/" + path, "content", f"sha256 {da} != {db}"))
            elif meta_a != meta_b:
                found.append(Difference(layer, source, "/" + path, "metadata", f"{meta_a} != {meta_b}"))
    if not found:
        order = list(ours) != list(theirs)
        found.append(Difference(layer, source, "(the tar itself)", "archive",
                                "the same members in another order" if order else
                                "the same members and metadata: pax records or header bytes differ"))
    return found


def _tar_meta(info: Any) -> str:
    return (f"type={info.type.decode()} mode={info.mode:o} uid={info.uid} gid={info.gid} uname={info.uname!r} "
            f"gname={info.gname!r} mtime={info.mtime} link={info.linkname} pax={sorted(info.pax_headers.items())}")


def _zip_differences(layer: str, wheel: str, a: Path, b: Path) -> list[Difference]:
    found: list[Difference] = []
    with zipfile.ZipFile(a) as za, zipfile.ZipFile(b) as zb:
        ours = {i.filename: i for i in za.infolist()}
        theirs = {i.filename: i for i in zb.infolist()}
        for name in sorted(set(ours) | set(theirs)):
            where = f"{wheel}!/{name}"
            if name not in theirs:
                found.append(Difference(layer, f"compile {layer}", where, "only in first"))
            elif name not in ours:
                found.append(Difference(layer, f"compile {layer}", where, "only in second"))
            else:
                da, db = _zip_member_sha256(za, name), _zip_member_sha256(zb, name)
                if da != db:
                    found.append(Difference(layer, f"compile {layer}", where, "content", f"sha256 {da} != {db}"))
                elif _zip_meta(ours[name]) != _zip_meta(theirs[name]):
                    found.append(Difference(layer, f"compile {layer}", where, "metadata",
                                            f"{_zip_meta(ours[name])} != {_zip_meta(theirs[name])}"))
        if not found:
            order = [i.filename for i in za.infolist()] != [i.filename for i in zb.infolist()]
            found.append(Difference(layer, f"compile {layer}", wheel, "archive",
                                    "the same members in another order" if order else
                                    "the same members: compressed or zip headers written otherwise"))
    return found


def _zip_member_sha256(archive: zipfile.ZipFile, name: str) -> str:
    """A member's sha256, read in pieces: a wheel out of a compile container may hold a member
    that inflates to more than memory holds."""
    with archive.open(name) as member:
        return sha256_of(member)


def _zip_meta(info: zipfile.ZipInfo) -> str:
    return f"date={info.date_time} attr={info.external_attr:o} method={info.compress_type}"



def check_built(result: BuildResult, store: Store, engine: Engine, overrides: Overrides,
                report: Reporter, *, recheck: bool = False) -> CheckReport:
    """``build --check``: every layer of the build just done again from scratch (those an earlier
    check of the same key showed identical excepted, unless ``recheck``), compared with it."""
    from sparkimg.errors import BuildError
    from sparkimg.fetch.inputs import fetch_base

    plan = result.plan
    if result.oci is None:
        raise BuildError(f"{result.image_ref}: the store has no assembly record of this image to compare with",
                         hint=f"build it without --check first: sparkimg build {plan.spec.path}")
    base_tag = fetch_base(plan.spec, plan.lock, engine, report=report)
    return rebuild_and_compare(plan, result.records, result.oci, store, engine, base_tag, overrides, report,
                               recheck=recheck)
