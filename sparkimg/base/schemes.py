"""The store's record of a base's install scheme: its name and reading it back.

``build.pyscheme`` asks the base's interpreter once per base config digest and writes the
record; ``lock`` reads it to resolve wheels for the base's Python. Here, not in ``build``, so
that ``lock`` does not import the build stage (which imports ``lock``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from sparkimg.errors import UsageError
from sparkimg.formats.scheme import BaseScheme
from sparkimg.store.content import Store

QUERY = Path(__file__).with_name("_scheme_query.py")  # the script the base's python3 runs
QUERY_VERSION = 3  # bump when what the answer means changes (the script's sha256 is in the key too)
RECORDS = "schemes"


def record_name(config_digest: str, script: bytes) -> str:
    """The store record that holds a base's scheme: config digest, query version, script digest."""
    return f"{config_digest.split(':', 1)[1]}-q{QUERY_VERSION}-{hashlib.sha256(script).hexdigest()[:16]}"


def remembered(store: Store, config_digest: str) -> BaseScheme | None:
    """The scheme the store holds for the base, or None: never asked, or damaged (asked again)."""
    name = record_name(config_digest, QUERY.read_bytes())
    known = store.read_record(RECORDS, name)
    if known is None:
        return None
    try:
        return BaseScheme.from_json(known, str(store.record_path(RECORDS, name)))
    except UsageError:
        return None
