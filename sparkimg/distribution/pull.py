"""``sparkimg pull``: verify, then pull. A node asks the registry for the image's digest and for
the receipt beside it, checks the receipt's signature with the trusted key (and the recipe,
when given) and that the receipt's ``image-manifest`` subject is that digest, and only then
lets the engine pull the image by digest. It then checks the engine's view (its image ID is the
config digest the receipt names, or the manifest digest on the containerd store; the diff_ids
are the config's) and tags it. A receipt that does not verify leaves the node's images as they
were: nothing was pulled, nothing tagged.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkimg._internal.emulation import native, refusal
from sparkimg._internal.net.reach import is_loopback, split_transport
from sparkimg._internal.net.registry import INDEX_TYPES, MANIFEST_TYPES, ImageRef, RegistryClient
from sparkimg.engine.protocol import Engine
from sparkimg.errors import EngineError, FetchError, PullRefused, ResolveError, SparkimgError, UsageError
from sparkimg.events import Event, Kind, Phase, Progress, Reporter, silent
from sparkimg.formats import oci
from sparkimg.formats.canonical import loads, sha256_prefixed
from sparkimg.signing.keys import PublicKey
from sparkimg.spec.model import split_reference


@dataclass(frozen=True)
class Pulled:
    reference: str  # what the node now has under this tag
    manifest_digest: str
    config_digest: str
    diff_ids: tuple[str, ...]
    receipt: str  # the digest of the receipt artifact that verified
    checks: tuple[str, ...] = field(default=())
    sbom: str | None = None  # the digest of the SBOM artifact that verified, when one is attached

    def to_json(self) -> dict[str, Any]:
        return {"reference": self.reference, "manifest": self.manifest_digest, "config": self.config_digest,
                "diff_ids": list(self.diff_ids), "receipt": self.receipt, "sbom": self.sbom,
                "checks": list(self.checks)}


def pull(reference: str, key: PublicKey, engine: Engine, *, recipe: Path | None = None,
         receipt_out: Path | None = None, client: RegistryClient | None = None, platform: str | None = None,
         report: Reporter = silent) -> Pulled:
    """Verify the receipt attached to ``reference`` (REGISTRY/REPO:TAG or @DIGEST), then pull it;
    ``receipt_out`` keeps the receipt that verified (for ``verify-node`` and ``run-args``), and the
    SBOM that verified beside it (``sbom.attest.sbom_path``). Where ``reference`` is an image index
    (``push --with``: one image per platform), ``platform``'s image is chosen (default: this
    machine's), and its own receipt is the one verified; a one-image tag of another platform is
    refused. ``client`` reaches the registry as the command's options say (``reach.py``); the
    engine pulls with its own configuration."""
    client = client or RegistryClient()
    ref, repository, tag, digest = _named(reference, client)
    manifest = client.send("GET", ref, f"{ref.base_url}/manifests/{digest or tag}",
                           headers={"Accept": ", ".join((*MANIFEST_TYPES, *INDEX_TYPES))}).content
    manifest_digest = sha256_prefixed(manifest)
    if digest and digest != manifest_digest:
        raise PullRefused(f"{reference}: the registry served a manifest hashing to {manifest_digest}")
    from_index = oci.BaseImage(manifest, b"{}").manifest_json.get("mediaType") in INDEX_TYPES
    wanted = platform or native()
    if from_index:
        chosen = oci.chosen_manifest(manifest, wanted, reference)
        report(Event(Phase.PULL, f"{reference} is an index; {wanted}: {chosen.digest}"))
        manifest = client.send("GET", ref, f"{ref.base_url}/manifests/{chosen.digest}",
                               headers={"Accept": ", ".join(MANIFEST_TYPES)}).content
        manifest_digest = sha256_prefixed(manifest)
        if manifest_digest != chosen.digest:
            raise PullRefused(f"{reference}: the registry served {wanted}'s manifest hashing to {manifest_digest}, "
                              f"not the index's {chosen.digest}")
    report(Event(Phase.PULL, f"{reference} is {manifest_digest}"))
    # The config a receipt names, asked of the registry once (a compressed push's receipt needs it too).
    config_of = functools.cache(lambda digest: _config(client, repository, manifest, digest))
    if not from_index:  # one image: it must be of that platform
        config = config_of(str((oci.BaseImage(manifest, b"{}").manifest_json.get("config") or {}).get("digest")))
        found = loads(config) if config is not None else {}
        held = f"{found.get('os', '?')}/{found.get('architecture', '?')}" if isinstance(found, dict) else "?/?"
        if refused := refusal(held, platform, "pull", "pull a tag that holds that platform"):
            raise PullRefused(f"{reference}: {refused[0]}", hint=refused[1])
    receipt_digest, facts, envelope = _verified_receipt(client, ref, manifest, config_of, key, recipe, report)
    sbom = _verified_sbom(client, ref, manifest_digest, envelope, key, report)
    config_digest = str(facts.get("image.id"))
    config = config_of(config_digest)
    if config is None:
        raise PullRefused(f"{reference}: the manifest's config is not the receipt's image {config_digest}")
    diff_ids = oci.BaseImage(manifest, config).diff_ids
    pinned = f"{repository}@{manifest_digest}"
    report(Event(Phase.PULL, f"pull {pinned}"))
    progress = Progress(report, Phase.PULL, f"pull {pinned}")
    try:
        engine.pull(pinned, progress.update)
        progress.finish()
    except EngineError as exc:
        raise PullRefused(f"{pinned}: the engine could not pull it: {exc.message}",
                          hint=_engine_hint(exc.message, ref, manifest)) from None
    info = engine.inspect(pinned)
    if info is None or info.id not in (config_digest, manifest_digest):
        raise PullRefused(f"{pinned}: the engine holds {info.id if info else 'nothing'} under it, not "
                          f"{config_digest}; it stays untagged")
    if info.layers and tuple(info.layers) != diff_ids:
        raise PullRefused(f"{pinned}: the engine's layers are not the config's diff_ids; it stays untagged")
    local = f"{repository}:{tag}" if tag else pinned
    if tag:
        engine.tag(pinned, local)
    if receipt_out is not None:
        keep_envelopes(receipt_out, envelope, sbom[1] if sbom else None)
    report(Event(Phase.PULL, f"{local}: {manifest_digest}, config {config_digest}, {len(diff_ids)} layers, "
                 f"receipt {receipt_digest[:19]}" + (f" and SBOM {sbom[0][:19]}" if sbom else "") + " verified",
                 kind=Kind.DONE))
    return Pulled(local, manifest_digest, config_digest, diff_ids, receipt_digest,
                  ("signature", "statement", *(["recipe"] if recipe else []), "subject", *(["sbom"] if sbom else []),
                   "engine"), sbom[0] if sbom else None)


def _named(reference: str, client: RegistryClient) -> tuple[ImageRef, str, str | None, str | None]:
    """REGISTRY/REPO:TAG or @DIGEST, a transport prefix allowed (``docker://``, ``https://``, and
    ``http://`` with ``--plain-http``): the registry as reached, REGISTRY/REPO, the tag, the digest."""
    _, bare = split_transport(reference, client.reach.plain_http)
    repository, tag, digest = split_reference(bare)
    if "/" not in repository or not (tag or digest):
        raise UsageError(f"{reference}: give REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:...",
                         hint="e.g. 127.0.0.1:5000/sparkimg/demo:latest")
    ref = client.ref(reference[: len(reference) - len(bare)] + repository)
    return ref, repository, tag, digest


def _engine_hint(said: str, ref: ImageRef, manifest: bytes) -> str | None:
    """What to do when the engine could not pull: the engine reaches the registry with its own
    configuration, not sparkimg's --plain-http or --ca-file."""
    if "HTTP response to HTTPS client" in said or (ref.scheme == "http" and not is_loopback(ref.registry)):
        return (f"the engine reaches {ref.registry} with its own configuration: for plain HTTP add it to "
                '"insecure-registries" in /etc/docker/daemon.json (then restart dockerd)')
    if "x509" in said or "certificate" in said:
        return (f"the engine verifies {ref.registry} with its own CAs: put the registry's CA at "
                f"/etc/docker/certs.d/{ref.registry}/ca.crt (no restart needed)")
    if oci.OCI_LAYER_ZSTD.encode() in manifest:
        return "its layers are zstd, which Docker reads from 23.0 on; push with `--compression gzip` for older engines"
    return None


def keep_envelopes(receipt_out: Path, receipt: bytes, sbom: bytes | None) -> None:
    """The receipt that verified at ``receipt_out``, and its SBOM beside it (where verify-node
    looks): the SBOM first, so that a receipt on disk never names an SBOM not yet written."""
    from sparkimg._internal.fs.atomic import write_atomic
    from sparkimg.sbom.attest import sbom_path

    if sbom is not None:
        write_atomic(sbom_path(receipt_out), sbom)
    write_atomic(receipt_out, receipt)


def _config(client: RegistryClient, repository: str, manifest: bytes, config_digest: str) -> bytes | None:
    """The config ``manifest`` names, when that is ``config_digest`` (the receipt's image)."""
    document = oci.BaseImage(manifest, b"{}").manifest_json
    if (document.get("config") or {}).get("digest") != config_digest or not oci.is_digest(config_digest):
        return None
    return client.blob_bytes(repository, config_digest)


def _names(facts: dict[str, Any], manifest: bytes, config_of: Callable[[str], bytes | None]) -> bool:
    """The receipt speaks of the served manifest: it is the signed one, or the signed one with its
    new layers compressed by ``sparkimg push --compression`` (``oci.built_manifest`` gives the
    signed bytes back; the engine then checks each layer it decompresses against the signed
    config's diff_ids)."""
    signed = facts.get("image.manifest_digest")
    if signed == sha256_prefixed(manifest):
        return True
    try:
        config = config_of(str(facts.get("image.id")))
        built = oci.built_manifest(manifest, oci.BaseImage(manifest, config).diff_ids) if config else None
    except (ResolveError, FetchError):
        return False
    return built is not None and sha256_prefixed(built) == signed


def _verified_receipt(client: RegistryClient, ref: ImageRef, manifest: bytes,
                      config_of: Callable[[str], bytes | None], key: PublicKey, recipe: Path | None,
                      report: Reporter) -> tuple[str, dict[str, Any], bytes]:
    """The newest attached receipt that verifies and names this manifest: its artifact digest
    and its facts. None verifying is a refusal listing why each failed."""
    from sparkimg.receipts.verify import Request, receipt_facts, verify

    manifest_digest = sha256_prefixed(manifest)
    candidates = _receipts(client, ref, manifest_digest)
    if not candidates:
        raise PullRefused(f"{ref.registry}/{ref.repository}@{manifest_digest}: no receipt is attached",
                          hint="push with `sparkimg push`, which attaches the build's receipt")
    why: list[str] = []
    with tempfile.TemporaryDirectory(prefix="sparkimg-pull-") as folder:
        for artifact in reversed(candidates):
            try:
                envelope = _receipt_blob(client, ref, artifact, manifest_digest)
            except (ResolveError, FetchError, UsageError) as exc:
                why.append(f"{artifact[:19]}: {exc.message}")
                continue
            path = Path(folder) / f"{artifact.split(':')[1]}.receipt.json"
            path.write_bytes(envelope)
            try:
                checked = verify(Request(path, key, recipe))
            except UsageError as exc:
                why.append(f"{artifact[:19]}: {exc.message}")
                continue
            if not checked.ok:
                why.append(f"{artifact[:19]}: {'; '.join(checked.reasons())}")
                continue
            facts = receipt_facts(path)
            if not _names(facts, manifest, config_of):
                why.append(f"{artifact[:19]}: names manifest {facts.get('image.manifest_digest')}, "
                           f"not {manifest_digest}")
                continue
            report(Event(Phase.PULL, f"receipt {artifact[:19]}: signature, statement"
                         + (", recipe" if recipe else "") + " and subject verified"))
            return artifact, facts, envelope
    raise PullRefused(f"{ref.registry}/{ref.repository}@{manifest_digest}: no attached receipt verifies:\n"
                      + "\n".join(f"    {w}" for w in why),
                      hint="the node keeps its current image; check the key and what was pushed")


def _verified_sbom(client: RegistryClient, ref: ImageRef, manifest_digest: str, receipt: bytes, key: PublicKey,
                   report: Reporter) -> tuple[str, bytes] | None:
    """The attached SBOM the verified ``receipt`` names, checked (``sbom.attest.verified``): its
    artifact digest and envelope. None when the receipt names none or none is attached (said);
    attached ones of which none verifies refuse the pull, naming why each failed."""
    from sparkimg.sbom.attest import named, receipt_statement, verified

    statement = receipt_statement(receipt, "the receipt")
    pinned = named(statement)
    candidates = _receipts(client, ref, manifest_digest, oci.SBOM_ARTIFACT) if pinned is not None else []
    if not candidates:
        report(Event(Phase.PULL, "no SBOM " + ("is attached" if pinned else "named by the receipt")
                     + "; nothing to check", kind=Kind.WARNING if pinned else Kind.STATUS))
        return None
    why: list[str] = []
    for artifact in reversed(candidates):
        try:
            envelope = _receipt_blob(client, ref, artifact, manifest_digest, oci.SBOM_ARTIFACT)
            verified(envelope, f"SBOM {artifact[:19]}", key, statement)
        except (ResolveError, FetchError, UsageError) as exc:
            why.append(exc.message)
            continue
        report(Event(Phase.PULL, f"SBOM {artifact[:19]}: signature, the statement the receipt names and its "
                     "subjects verified"))
        return artifact, envelope
    raise PullRefused(f"{ref.registry}/{ref.repository}@{manifest_digest}: no attached SBOM verifies:\n"
                      + "\n".join(f"    {w}" for w in why),
                      hint="the node keeps its current image; the registry serves an SBOM the signed receipt "
                      "does not name")


def attached_sbom(reference: str, key: PublicKey | None, client: RegistryClient | None = None) -> tuple[str, bytes]:
    """(artifact digest, envelope) of the newest SBOM attached to ``reference`` (REGISTRY/REPO:TAG
    or @DIGEST), for ``sparkimg sbom REF``; with ``key``, the newest whose signature it verifies."""
    from sparkimg.signing import dsse

    client = client or RegistryClient()
    ref, _, tag, digest = _named(reference, client)
    manifest = client.send("GET", ref, f"{ref.base_url}/manifests/{digest or tag}",
                           headers={"Accept": ", ".join(MANIFEST_TYPES)}).content
    manifest_digest = sha256_prefixed(manifest)
    why: list[str] = []
    for artifact in reversed(_receipts(client, ref, manifest_digest, oci.SBOM_ARTIFACT)):
        envelope = _receipt_blob(client, ref, artifact, manifest_digest, oci.SBOM_ARTIFACT)
        problem = dsse.parse(envelope, f"SBOM {artifact[:19]}").check_signature(key) if key is not None else None
        if problem is None:
            return artifact, envelope
        why.append(f"{artifact[:19]}: {problem}")
    raise FetchError(f"{reference} ({manifest_digest}): " + ("no attached SBOM is signed by the key: " + "; ".join(why)
                                                            if why else "no SBOM is attached"),
                     hint="push it with `sparkimg push`, which attaches the SBOM the build wrote beside the receipt")


def _receipts(client: RegistryClient, ref: ImageRef, manifest_digest: str,
              artifact_type: str = oci.RECEIPT_ARTIFACT) -> list[str]:
    """Receipt (or SBOM) artifacts that refer to the manifest: the referrers API, else the fallback tag."""
    url = f"{ref.base_url}/referrers/{manifest_digest}?artifactType={artifact_type}"
    found = client.send("GET", ref, url, ok=(200, 404), headers={"Accept": oci.OCI_INDEX})
    if found.status_code != 200 or not found.headers.get("Content-Type", "").startswith(oci.OCI_INDEX):
        found = client.send("GET", ref, f"{ref.base_url}/manifests/{oci.fallback_tag(manifest_digest)}",
                            ok=(200, 404), headers={"Accept": oci.OCI_INDEX})
        if found.status_code != 200:
            return []
    try:
        return oci.receipt_referrers(found.content, artifact_type)
    except SparkimgError:
        return []


def _receipt_blob(client: RegistryClient, ref: ImageRef, artifact: str, manifest_digest: str,
                  artifact_type: str = oci.RECEIPT_ARTIFACT) -> bytes:
    raw = client.manifest_bytes(f"{ref.registry}/{ref.repository}", artifact, accept=oci.OCI_MANIFEST)
    layer = oci.receipt_layer(raw, manifest_digest, artifact_type)
    return client.blob_bytes(f"{ref.registry}/{ref.repository}", layer.digest)

