"""``sparkimg verify-node``: what a rank's launcher checks before ``docker run``: the receipt by
this key (signature, statement, recipe), the image in this node's engine by digest, the patch
files, and the prewarmed cache (its quick check: signature, image, sizes)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkimg._internal.emulation import native
from sparkimg.engine.protocol import Engine
from sparkimg.prewarm.request import PrewarmRequest, verified
from sparkimg.receipts.verify import Check, Report, Request, receipt_facts, verify
from sparkimg.signing.keys import load_public


@dataclass(frozen=True)
class NodeRequest:
    """What a rank's launcher checks before ``docker run``: this receipt, by this key, and what the
    node has (the image by digest, the patch files, the prewarmed cache)."""

    receipt: Path
    key: Path
    recipe: Path | None = None
    patches: Path | None = None
    cache: Path | None = None
    sbom: Path | None = None  # default: the SBOM beside the receipt, when there
    platform: str | None = None  # the platform the receipt must be for; None: this machine's


def verify_node(request: NodeRequest, engine: Engine) -> Report:
    """Every check, stage by stage; the cache's only when the rest passed."""

    def inspect(reference: str) -> tuple[str, dict[str, str]] | None:
        info = engine.inspect(reference)
        return (info.id, info.labels) if info else None

    report = verify(Request(request.receipt, load_public(request.key), request.recipe, None, request.patches,
                            node=inspect, sbom=request.sbom))
    if report.ok:  # the receipt verified: its platform is the one the node runs (or the one asked for)
        wanted = request.platform or native()
        found = receipt_facts(request.receipt).get("platform")
        note = "--platform" if request.platform else "this machine's; --platform names another (emulated)"
        report.checks.append(Check("platform", "platform", wanted, found, found == wanted, note))
        if found != wanted:
            report.failed = "platform"
    if report.ok and request.cache is not None:
        cached = verified(PrewarmRequest(request.cache, receipt=request.receipt), request.key, quick=True)
        said = "; ".join(f"{p['check']}: {p['message']}" for p in cached.problems[:3])
        report.checks.append(Check("cache", "prewarmed cache (signature, image, sizes)", "ok",
                                   "ok" if cached.ok else f"{len(cached.problems)} problem(s)", cached.ok, said))
        if not cached.ok:
            report.failed = "cache"
    return report
