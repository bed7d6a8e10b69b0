"""Ask a base image, once, where pip would install and what is installed there already.

One small standard-library script (``_scheme_query.py``) runs with the base's ``python3`` in a
container with no network, 256 MiB of memory and 64 pids, the script mounted read-only and a
writable ``/sparkimg/out`` for its answer. The answer is a ``BaseScheme``
(``formats/scheme.py``), kept as a store record (``records/schemes/``) named by the base's
config digest, the query's version and the script's sha256 (``_schemes``, where ``lock`` reads
it too): it runs once per base.
"""

from __future__ import annotations

import re

from sparkimg.base.ask import ANSWERS, SCRIPTS, ask
from sparkimg.base.schemes import QUERY, RECORDS, record_name, remembered
from sparkimg.engine.protocol import Engine, RunLimits
from sparkimg.errors import BuildError, UsageError
from sparkimg.formats.canonical import loads
from sparkimg.formats.scheme import BaseScheme
from sparkimg.store.content import Store

LIMITS = RunLimits(memory=256 << 20, pids=64)
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def base_scheme(engine: Engine, base_image: str, config_digest: str, store: Store) -> BaseScheme:
    """The scheme of the base ``base_image`` (a local image whose ID is ``config_digest``).

    Remembered by the store; a damaged record is asked again. Raises ``BuildError`` when the
    engine's ``base_image`` is another image, or the base has no working ``python3``.
    """
    if not _DIGEST.match(config_digest):
        raise UsageError(f"base config digest {config_digest!r} is not sha256:HEX")
    known = remembered(store, config_digest)
    if known is not None:
        return known  # a damaged record counts as none: the base is asked again and it is written anew
    script = QUERY.read_bytes()
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
    store.write_record(RECORDS, record_name(config_digest, script), scheme.to_json())
    return scheme
