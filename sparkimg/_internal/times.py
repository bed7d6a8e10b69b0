"""The one time format sparkimg writes (RFC 3339, UTC, whole seconds): receipts, manifests, locks,
nightly entries and commit dates."""

from __future__ import annotations

import time


def rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
