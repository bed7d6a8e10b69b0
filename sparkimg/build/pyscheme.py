"""Ask a base image, once, where pip would install and what is installed there already.

One small standard-library script (``_scheme_query.py``) runs with the base's ``python3`` in a
container with no network, 256 MiB of memory and 64 pids, the script mounted read-only and a
writable ``/sparkimg/out`` for its answer. The answer is a ``BaseScheme``
(``formats/scheme.py``), kept as a store record (``records/schemes/``) named by the base's
config digest, the query's version and the script's sha256: it runs once per base.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from .._baseask import ANSWERS, SCRIPTS, ask
from ..engine import Engine, RunLimits
from ..errors import BuildError, UsageError
from ..formats.canonical import loads
from ..formats.scheme import BaseScheme
from ..store import Store

QUERY = Path(__file__).with_name("_scheme_query.py")
QUERY_VERSION = 2  # bump when what the answer means changes (the script's sha256 is in the key too)
RECORDS = "schemes"
LIMITS = RunLimits(memory=256 << 20, pids=64)
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def record_name(config_digest: str, script: bytes) -> str:
    """The store record that holds a base's scheme: config digest, query version, script digest."""
    return f"{config_digest.split(':', 1)[1]}-q{QUERY_VERSION}-{hashlib.sha256(script).hexdigest()[:16]}"


def base_scheme(engine: Engine, base_image: str, config_digest: str, store: Store) -> BaseScheme:
    """The scheme of the base ``base_image`` (a local image whose ID is ``config_digest``).

    Remembered by the store; a damaged record is asked again. Raises ``BuildError`` when the
    engine's ``base_image`` is another image, or the base has no working ``python3``.
    """
    if not _DIGEST.match(config_digest):
        raise UsageError(f"base config digest {config_digest!r} is not sha256:HEX")
    script = QUERY.read_bytes()
    name = record_name(config_digest, script)
    where = str(store.record_path(RECORDS, name))
    known = store.read_record(RECORDS, name)
    if known is not None:
        try:
            return BaseScheme.from_json(known, where)
        except UsageError:
            pass  # damaged: ask the base again and write it anew
    found = engine.image_id(base_image)
    if found != config_digest:
        raise BuildError(f"base {base_image}: the engine has {found or 'no such image'}, not {config_digest}",
                         hint="run `sparkimg fetch SPEC` to pull the pinned base")
    asked = ask(engine, base_image, script=("scheme.py", script),
                command=["python3", f"{SCRIPTS}/scheme.py", f"{ANSWERS}/scheme.json"], answer="scheme.json",
                limits=LIMITS, store=store, layer="pyscheme", phase="assemble",
                env={"PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1"})
    output = "".join(f"\n    {line}" for line in asked.tail[-10:])
    if asked.oom_killed or asked.exit_code != 0:
        raise BuildError(f"base {base_image}: asking its python3 for the install scheme failed "
                         f"(exit {asked.exit_code}{', OOM-killed' if asked.oom_killed else ''}){output}",
                         hint="the base needs a python3 on its PATH to install wheels into")
    try:
        data = loads(asked.answer)
    except ValueError as exc:
        raise BuildError(f"base {base_image}: the scheme query wrote no JSON ({exc}){output}") from None
    scheme = BaseScheme.from_json(data, f"the scheme of {base_image}")
    store.write_record(RECORDS, name, scheme.to_json())
    return scheme
