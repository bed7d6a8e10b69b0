"""How a registry is reached: the scheme of its URLs and the CA its certificate must verify with.

As Docker does: loopback is plain HTTP, everything else HTTPS verified with the system's CAs, or
with the CA an operator put in Docker's per-registry folder (``/etc/docker/certs.d/HOST:PORT/ca.crt``
or ``~/.docker/certs.d/...``). Beyond that only what the command is told, and only for the one
registry it names (``Reach``): ``--plain-http`` (the name oras and helm give it) and ``--ca-file``.
Verification is never turned off; a certificate that does not verify is an error naming the
registry, the reason and where a CA goes (``tls_refusal``).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sparkimg._internal.fs.files import read_input
from sparkimg._internal.locations import docker_certs_dirs
from sparkimg.errors import ResolveError, UsageError

CA_FILE_BYTES = 1 << 20  # a PEM bundle; a larger file is not a CA file
CA_NAME = "ca.crt"  # the file Docker reads in certs.d/HOST:PORT/
LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?$")
_VERIFY_FAILED = re.compile(r"certificate verify failed: ([^(')]+)")
_SSL_REASON = re.compile(r"\[SSL: [A-Z_]+\] ([^(')]+)")
_NOT_TLS = ("wrong version number", "record layer failure", "packet length too long", "http request")


def is_loopback(registry: str) -> bool:
    return bool(LOOPBACK.match(registry))


def split_transport(reference: str, plain_http: bool = False) -> tuple[str | None, str]:
    """``reference`` without its transport prefix, and the scheme that prefix fixes (None: the
    default). ``docker://`` (skopeo's) fixes none; ``https://`` fixes https; ``http://`` is plain
    HTTP, taken only with ``plain_http`` (``--plain-http``); any other prefix is refused."""
    if "://" not in reference:
        return None, reference
    scheme, _, rest = reference.partition("://")
    if scheme == "docker":
        return None, rest
    if scheme == "https":
        if plain_http:
            raise UsageError(f"{reference}: https:// and --plain-http contradict each other",
                             hint=f"give one: {reference} alone, or --plain-http with http://{rest}")
        return "https", rest
    if scheme == "http":
        if not plain_http and not is_loopback(rest.split("/", 1)[0]):
            raise UsageError(f"{reference}: plain HTTP to {rest.split('/', 1)[0]} is refused unless asked for",
                             hint="add --plain-http to talk to this registry without TLS (a registry on a "
                             "trusted LAN), or serve it over HTTPS")
        return "http", rest
    raise UsageError(f"{reference}: {scheme}:// is not a registry transport",
                     hint=f"give REGISTRY/REPO, docker://REGISTRY/REPO or https://REGISTRY/REPO: {rest}")


@dataclass(frozen=True)
class CaFile:
    """A CA file a registry's certificate is verified with, and where it came from."""

    path: Path
    sha256: str
    source: Literal["--ca-file", "certs.d"]

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "sha256": self.sha256, "from": self.source}


def ca_file(path: Path, source: Literal["--ca-file", "certs.d"]) -> CaFile:
    """``path`` as a CA file: a readable PEM file, or bad input naming it and the option."""
    hint = "give a PEM file with the registry's CA certificate (--ca-file PATH)"
    try:
        raw = read_input(path, CA_FILE_BYTES, hint=hint)
    except FileNotFoundError:
        raise UsageError(f"{source} {path}: no such file", hint=hint) from None
    if b"-----BEGIN CERTIFICATE-----" not in raw:
        raise UsageError(f"{source} {path}: not a PEM certificate (no BEGIN CERTIFICATE line)", hint=hint)
    return CaFile(path.absolute(), "sha256:" + hashlib.sha256(raw).hexdigest(), source)


def certs_d(registry: str) -> CaFile | None:
    """The CA Docker's own configuration gives ``registry``: ``ca.crt`` in its certs.d folder
    (``docker_certs_dirs``), the first found; None when there is none."""
    for root in docker_certs_dirs():
        path = root / registry / CA_NAME
        if path.is_file():
            return ca_file(path, "certs.d")
    return None


@dataclass(frozen=True)
class Reach:
    """The options of a command for the registry it names (``registry``, HOST[:PORT]): plain HTTP,
    a CA file. Other registries it talks to (a base's, a token service) are reached as Docker
    would."""

    registry: str = ""
    plain_http: bool = False
    ca: CaFile | None = None

    def scheme(self, registry: str) -> str:
        return "http" if is_loopback(registry) or (self.plain_http and registry == self.registry) else "https"

    def ca_for(self, registry: str) -> CaFile | None:
        """The CA ``registry``'s certificate is verified with, when not the system's."""
        return self.ca if self.ca is not None and registry == self.registry else certs_d(registry)

    def verify(self, registry: str) -> bool | str:
        """``requests``' ``verify``: the CA file's path, else True (the system's CAs)."""
        found = self.ca_for(registry)
        return str(found.path) if found is not None else True


NO_REACH = Reach()


@dataclass(frozen=True)
class Reached:
    """How a registry was reached, for a push's record: the transport, and the CA file used."""

    registry: str
    transport: str  # "https" or "http"
    ca: CaFile | None

    def to_json(self) -> dict[str, Any]:
        return {"registry": self.registry, "transport": self.transport,
                "ca_file": self.ca.to_json() if self.ca is not None else None}


def recorded(record: Mapping[str, Any] | None) -> Reach:
    """The ``Reach`` a push's record (``Reached.to_json``) says was used: a rollback moves the tag on
    the registry a night pushed to as that night reached it (the CA a --ca-file named, read again;
    gone or changed into something else, the registry's certs.d or the system's CAs instead, and a
    certificate that then fails says so)."""
    if not record or not isinstance(record.get("registry"), str):
        return NO_REACH
    ca = record.get("ca_file")
    path = ca.get("path") if isinstance(ca, dict) and ca.get("from") == "--ca-file" else None
    found = None
    if isinstance(path, str):
        with contextlib.suppress(UsageError):
            found = ca_file(Path(path), "--ca-file")
    return Reach(record["registry"], record.get("transport") == "http", found)


def tls_refusal(registry: str, url: str, exc: Exception, reach: Reach) -> ResolveError:
    """The error for a TLS connection to ``registry`` that failed: why, and the fix."""
    text = str(exc)
    ca = reach.ca_for(registry)
    where = f"{docker_certs_dirs()[0] / registry / CA_NAME}"
    if (verify_failed := _VERIFY_FAILED.search(text)) is not None:
        reason = verify_failed.group(1).strip()
        used = f"the CA in {ca.path} ({ca.source})" if ca is not None else "the system's CAs"
        return ResolveError(f"{registry}: its TLS certificate does not verify with {used}: {reason} ({url})",
                            hint=f"give the registry's CA with --ca-file PATH, or put it at {where} (where "
                            "docker reads it too); sparkimg never skips verification")
    said = _SSL_REASON.search(text)
    reason = said.group(1).strip() if said else text[:200]
    if any(marker in reason.lower() for marker in _NOT_TLS):
        if is_loopback(registry):
            return ResolveError(f"{registry}: does not speak TLS ({reason}); a loopback registry serves plain "
                                f"HTTP ({url})", hint="name it without https:// (sparkimg reaches loopback over "
                                "plain HTTP, as Docker does)")
        return ResolveError(f"{registry}: does not speak TLS ({reason}); it may serve plain HTTP ({url})",
                            hint="sparkimg uses plain HTTP only to loopback or when asked: add --plain-http "
                            "for a registry on a trusted LAN, or serve it over HTTPS")
    return ResolveError(f"{registry}: the TLS connection failed: {reason} ({url})",
                        hint=f"check the registry's certificate; its CA goes in --ca-file PATH or {where}")
