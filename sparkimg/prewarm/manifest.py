"""The prewarm manifest: what a warmed FlashInfer cache holds and what it was made for.

``DIR/sparkimg-prewarm.json`` is a DSSE envelope around an in-toto Statement v1 with
sparkimg's own predicate type. Its subjects are the modules' shared objects; the
predicate records the FlashInfer version, the architectures, the image ID, the path the
cache was compiled under, and every file of every module with size and sha256.
docs/prewarm.md is the reference for every field.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .. import __version__
from ..engine import Mount
from ..errors import EnvelopeError
from ..formats.canonical import canonical
from ..formats.intoto import STATEMENT_TYPE, parse_payload, rfc3339
from ..signing import dsse
from ..signing.keys import PrivateKey
from ..store import write_atomic

NAME = "sparkimg-prewarm.json"
PREDICATE_TYPE = "https://sparkimg.dev/prewarm/v1"


HINT = "prewarm the cache (again) with `sparkimg prewarm ... --cache DIR --key KEY` to write its manifest"


def path_of(cache: Path) -> Path:
    return cache / NAME


def read(cache: Path) -> dsse.Envelope:
    """The cache's manifest envelope; a missing or damaged one is bad input (exit 2)."""
    return dsse.read(path_of(cache), hint=HINT)


def statement(*, env: dict[str, Any], modules: list[dict[str, Any]], archs: list[str],
              image: dict[str, Any] | None, runner: str, toolchain: Mount | None = None) -> dict[str, Any]:
    """The manifest statement from the worker's env event and its journal records."""
    subjects = []
    for module in modules:
        library = next(f for f in module["files"] if f["path"] == module["library"])
        subjects.append({"name": module["library"], "digest": {"sha256": library["sha256"]}})
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "flashinfer": {"version": env["flashinfer"]},
            "cuda_architectures": archs,
            "image": image,
            "runner": runner,
            "workspace": {"base": env["base"], "dir": env["workspace"], "arch_dir": env["arch_dir"]},
            "serving_env": env["build_env"],
            "toolchain_mount": None if toolchain is None else {"host": str(toolchain.source),
                                                               "container": toolchain.target},
            "environment": {k: env.get(k) for k in ("python", "torch", "nvcc", "machine", "cuda_home")},
            "modules": [{"name": m["name"], "module": m["module"], "library": m["library"], "aot": m.get("aot", False),
                         "seconds": m.get("seconds"), "files": m["files"]} for m in modules],
            "created": rfc3339(time.time()),
            "sparkimg": __version__,
        },
    }


def write(cache: Path, data: dict[str, Any], key: PrivateKey | None) -> tuple[Path, bool]:
    """Write the manifest, signed when ``key`` is given; an existing one that says the same
    (apart from its creation time) under the same signer is kept. Returns (path, written)."""
    target = path_of(cache)
    if _same(target, data, key):
        return target, False
    envelope = dsse.Envelope(canonical(data))
    if key is not None:
        envelope = envelope.signed(key)
    write_atomic(target, envelope.dumps())
    return target, True


def _same(path: Path, data: dict[str, Any], key: PrivateKey | None) -> bool:
    try:
        existing = dsse.read(path, hint=HINT)
        old = load(existing.payload, str(path))
    except (EnvelopeError, OSError):
        return False
    if not existing.same_signer(key):
        return False

    def timeless(statement: dict[str, Any]) -> dict[str, Any]:
        return {**statement, "predicate": {k: v for k, v in statement["predicate"].items() if k != "created"}}
    return timeless(old) == timeless(data)


def load(payload: bytes, where: str) -> dict[str, Any]:
    """A manifest statement from an envelope payload; every shape problem names ``where``."""
    data = parse_payload(payload, where)
    problems = []
    if not isinstance(data, dict) or data.get("_type") != STATEMENT_TYPE:
        problems.append(f"_type is not {STATEMENT_TYPE!r}")
    elif data.get("predicateType") != PREDICATE_TYPE:
        problems.append(f"predicateType is {data.get('predicateType')!r}, not {PREDICATE_TYPE!r} "
                        "(a build receipt? pass the cache's sparkimg-prewarm.json)")
    else:
        predicate = data.get("predicate")
        fields = ("flashinfer", "cuda_architectures", "workspace", "modules", "runner")
        if not isinstance(predicate, dict) or any(f not in predicate for f in fields):
            problems.append(f"predicate must hold {', '.join(fields)}")
        elif not all(isinstance(m, dict) and isinstance(m.get("files"), list) for m in predicate["modules"]):
            problems.append("predicate.modules must list objects with files")
    if problems:
        raise EnvelopeError(f"{where}: not a sparkimg prewarm manifest: {'; '.join(problems)}")
    checked: dict[str, Any] = data
    return checked
