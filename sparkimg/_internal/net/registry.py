"""A small OCI distribution client over requests: resolve a tag to digests, with token auth.

Only what ``lock`` needs: GET a manifest (or index) by tag or digest, pick the entry for a
platform, read its config digest. Bearer-token auth follows the registry's
``WWW-Authenticate`` challenge as Docker does (anonymous, or with credentials from
the Docker config file).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sparkimg._internal.fs.files import read_input
from sparkimg._internal.locations import docker_config
from sparkimg._internal.net.http import (
    CONFIG_MAX,
    DOCUMENT_MAX,
    TOKEN_MAX,
    error_text,
    read_within,
    request,
    stream_within,
)
from sparkimg._internal.net.reach import (
    NO_REACH,
    Reach,
    Reached,
    ca_file,
    is_loopback,
    split_transport,
    tls_refusal,
)
from sparkimg.errors import ResolveError, UsageError
from sparkimg.formats.canonical import loads

if TYPE_CHECKING:
    import requests

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
CONFIG_FILE_BYTES = 4 << 20  # the docker client's config.json; a larger one is not read
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class ImageRef:
    registry: str
    repository: str
    scheme: str = ""  # "http" or "https"; none given: http for loopback, else https (as Docker)

    @classmethod
    def parse(cls, reference: str, reach: Reach = NO_REACH) -> ImageRef:
        """Split ``[docker://|https://|http://]host[:port]/path`` as Docker (no host means Docker
        Hub) and skopeo (``docker://``) do; the scheme is the prefix's, else ``reach``'s for the host
        (``reach.py``; ``http://`` only with ``--plain-http``)."""
        scheme, reference = split_transport(reference, reach.plain_http)
        first, _, rest = reference.partition("/")
        if rest and ("." in first or ":" in first or first == "localhost"):
            return cls(first, rest, scheme or reach.scheme(first))
        path = reference if "/" in reference else f"library/{reference}"
        return cls("registry-1.docker.io", path, scheme or "https")

    @property
    def base_url(self) -> str:
        scheme = self.scheme or ("http" if is_loopback(self.registry) else "https")
        return f"{scheme}://{self.registry}/v2/{self.repository}"


def reach_for(reference: str, *, plain_http: bool = False, ca: Path | None = None) -> Reach:
    """A command's ``--plain-http`` and ``--ca-file`` for the registry ``reference`` names."""
    if plain_http and ca is not None:
        raise UsageError("--plain-http and --ca-file contradict each other: a CA is for TLS",
                         hint="give --ca-file for a registry served over HTTPS, --plain-http for one over HTTP")
    registry = ImageRef.parse(reference, Reach(plain_http=plain_http)).registry
    return Reach(registry, plain_http, ca_file(ca, "--ca-file") if ca is not None else None)


@dataclass(frozen=True)
class Resolved:
    """What a tag points at for one platform: keep these three digests distinct."""

    index_digest: str | None
    manifest_digest: str
    config_digest: str
    media_type: str
    platform: str


class RegistryClient:
    def __init__(self, session: requests.Session | None = None, timeout: float = 30, reach: Reach = NO_REACH) -> None:
        # requests is imported by the client that uses it, so that importing lock costs little.
        import requests

        self.session = session or requests.Session()
        self.timeout = timeout
        self.reach = reach  # the command's --plain-http and --ca-file, for the registry it names
        self._tokens: dict[str, str] = {}
        self._verifies: dict[str, bool | str] = {}

    @classmethod
    def for_base(cls, repository: str, transport: str | None) -> RegistryClient:
        """The client that reads a locked base: over plain HTTP where the lock records that
        ``lock --plain-http`` asked for it (``BasePin.transport``), else as Docker would."""
        return cls(reach=reach_for(repository, plain_http=True) if transport == "http" else NO_REACH)

    def _verify(self, host: str) -> bool | str:
        """``requests``' ``verify`` for ``host``, found once per client (certs.d is read once)."""
        if host not in self._verifies:
            self._verifies[host] = self.reach.verify(host)
        return self._verifies[host]

    def ref(self, reference: str) -> ImageRef:
        """``reference`` (``host[:port]/repo``) reached as this client's ``reach`` says."""
        return ImageRef.parse(reference, self.reach)

    def reached(self, ref: ImageRef) -> Reached:
        """How ``ref``'s registry is reached: its transport and the CA file, for a push's record."""
        scheme = urlsplit(ref.base_url).scheme
        return Reached(ref.registry, scheme, self.reach.ca_for(ref.registry) if scheme == "https" else None)

    def resolve(self, reference: str, tag_or_digest: str, platform: str) -> Resolved:
        return self.inspect(reference, tag_or_digest, platform)[0]

    def inspect(self, reference: str, tag_or_digest: str, platform: str) -> tuple[Resolved, dict[str, Any]]:
        """The digests a tag points at for ``platform``, and the image's config (labels and all)."""
        ref = self.ref(reference)
        body, media_type, digest = self._manifest(ref, tag_or_digest)
        index_digest: str | None = None
        if media_type in INDEX_TYPES:
            index_digest = digest
            entry = _pick(body, platform, f"{reference}:{tag_or_digest}")
            body, media_type, digest = self._manifest(ref, entry)
        if media_type not in MANIFEST_TYPES:
            raise ResolveError(f"{reference}:{tag_or_digest}: unsupported manifest type {media_type!r}")
        config_digest = _config_digest(body, f"{reference}:{tag_or_digest}")
        config = self._blob_json(ref, config_digest)
        found = f"{config.get('os')}/{config.get('architecture')}"
        if found != platform:
            raise ResolveError(
                f"{reference}:{tag_or_digest} is a {found} image, but the spec asks for {platform}",
                hint="point base.image at an image (or index) for that platform",
            )
        return Resolved(index_digest, digest, config_digest, media_type, platform), config

    def tagged(self, reference: str, tag: str) -> str:
        """The digest of the manifest (or index) ``tag`` names now; ``ResolveError`` when none."""
        return self._manifest(self.ref(reference), tag)[2]

    def manifest_bytes(self, reference: str, digest: str, *, accept: str = ", ".join(MANIFEST_TYPES)) -> bytes:
        """An image manifest by digest, bytes as served (checked against the digest)."""
        ref = self.ref(reference)
        url = f"{ref.base_url}/manifests/{digest}"
        raw = self._get(ref, url, {"Accept": accept}).content
        if "sha256:" + hashlib.sha256(raw).hexdigest() != digest:
            raise ResolveError(f"{url}: the content does not hash to {digest}")
        return bytes(raw)

    def blob_bytes(self, reference: str, digest: str) -> bytes:
        """A (small) blob by digest, checked against the digest."""
        ref = self.ref(reference)
        raw = self._get(ref, f"{ref.base_url}/blobs/{digest}", {}, limit=CONFIG_MAX).content
        if "sha256:" + hashlib.sha256(raw).hexdigest() != digest:
            raise ResolveError(f"{ref.registry}/{ref.repository}: blob {digest} does not match its digest")
        return bytes(raw)

    def _manifest(self, ref: ImageRef, tag_or_digest: str) -> tuple[dict[str, Any], str, str]:
        url = f"{ref.base_url}/manifests/{tag_or_digest}"
        response = self._get(ref, url, {"Accept": ", ".join(INDEX_TYPES + MANIFEST_TYPES)})
        raw = response.content
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        header = response.headers.get("Docker-Content-Digest")
        if header and header != digest:
            raise ResolveError(f"{url}: registry says {header} but the manifest hashes to {digest}")
        if tag_or_digest.startswith("sha256:") and tag_or_digest != digest:
            raise ResolveError(f"{url}: asked for {tag_or_digest}, got content hashing to {digest}")
        body = _json_object(raw, url, "manifest")
        media_type = response.headers.get("Content-Type", "").split(";")[0] or body.get("mediaType", "")
        return body, str(body.get("mediaType") or media_type), digest

    def _blob_json(self, ref: ImageRef, digest: str) -> dict[str, Any]:
        response = self._get(ref, f"{ref.base_url}/blobs/{digest}", {}, limit=CONFIG_MAX)
        if "sha256:" + hashlib.sha256(response.content).hexdigest() != digest:
            raise ResolveError(f"{ref.registry}/{ref.repository}: blob {digest} does not match its digest")
        return _json_object(response.content, f"{ref.base_url}/blobs/{digest}", "image config")

    def _get(self, ref: ImageRef, url: str, headers: dict[str, str], *, limit: int = DOCUMENT_MAX) -> requests.Response:
        return self.send("GET", ref, url, headers=headers, limit=limit)

    def send(self, method: str, ref: ImageRef, url: str, *, headers: dict[str, str] | None = None,
             data: bytes | None = None, ok: tuple[int, ...] = (200,), scope: str = "pull",
             stream: bool = False, limit: int = DOCUMENT_MAX) -> requests.Response:
        """One request with the registry's auth: on a 401 the challenge is answered once (a bearer
        token for ``scope`` on this repository, or basic credentials) and the request sent again.
        Unless ``stream``, the body is read here, refused past ``limit`` bytes (``_http``)."""
        import requests

        key = f"{ref.registry}/{ref.repository}/{scope}"
        # Credentials stay with the host that asked for them: an upload Location (or any URL) on
        # another host gets none, as a redirect of a read gets none (``_http.request``).
        own = urlsplit(url).netloc == urlsplit(ref.base_url).netloc
        for attempt in range(2):
            sent = {k: v for k, v in (headers or {}).items() if own or k.lower() != "authorization"}
            if key in self._tokens and own:
                sent["Authorization"] = self._tokens[key]
            try:
                response = request(self.session, method, url, headers=sent, data=data, timeout=self.timeout,
                                   verify=self._verify(urlsplit(url).netloc))
            except requests.exceptions.SSLError as exc:
                raise tls_refusal(urlsplit(url).netloc, url, exc, self.reach) from None
            except requests.RequestException as exc:
                raise ResolveError(f"{url}: {exc.__class__.__name__}: {exc}",
                                   hint="check the registry address and that it is running") from None
            if response.status_code == 401 and not own:
                response.close()
                raise ResolveError(f"{method} {url}: asks for credentials, and they belong to {ref.registry}",
                                   hint=f"{ref.registry} sent this request to another host; sparkimg sends its "
                                   "credentials to no other host")
            if response.status_code == 401 and attempt == 0:
                response.close()
                self._tokens[key] = self._authorization(ref, response.headers.get("WWW-Authenticate", ""), scope)
                continue
            if response.status_code in ok:
                if method == "HEAD":
                    response.close()  # a HEAD's Content-Length is the blob's; there is no body
                elif not stream:
                    read_within(response, limit, response.url or url)  # where a redirect led
                return response
            if response.status_code == 404 and method == "GET":
                response.close()
                raise ResolveError(f"{url}: not found (404)", hint="check the repository and tag; "
                                   "a registry may stop serving an old digest")
            said = error_text(response)
            raise ResolveError(f"{method} {url}: HTTP {response.status_code}" + (f": {said}" if said else ""))
        raise ResolveError(f"{url}: still unauthorized after token auth",
                           hint="log in with `docker login` so the Docker config holds credentials")

    def _authorization(self, ref: ImageRef, challenge: str, scope: str) -> str:
        if challenge.lower().startswith("basic"):
            found = credentials(ref.registry)
            if found is None:
                raise ResolveError(f"{ref.registry}: asks for a login", hint="log in with `docker login`")
            return "Basic " + base64.b64encode(f"{found[0]}:{found[1]}".encode()).decode()
        return "Bearer " + self._token(ref, challenge, scope)

    def _token(self, ref: ImageRef, challenge: str, scope: str = "pull") -> str:
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() != "bearer":
            raise ResolveError(f"{ref.registry}: unsupported auth challenge {challenge!r}")
        fields = dict(_CHALLENGE.findall(params))
        realm = fields.pop("realm", None)
        if not realm:
            raise ResolveError(f"{ref.registry}: auth challenge without a realm")
        fields.setdefault("scope", f"repository:{ref.repository}:{scope}")
        import requests

        auth = credentials(ref.registry)
        try:
            response = request(self.session, "GET", realm, params=fields, auth=auth, timeout=self.timeout,
                               verify=self._verify(urlsplit(realm).netloc))
        except requests.exceptions.SSLError as exc:
            raise tls_refusal(urlsplit(realm).netloc, realm, exc, self.reach) from None
        except requests.RequestException as exc:
            raise ResolveError(f"{realm}: token request failed: {exc}") from None
        if response.status_code != 200:
            response.close()
            raise ResolveError(f"{realm}: token request returned HTTP {response.status_code}")
        try:
            data = loads(read_within(response, TOKEN_MAX, realm))
        except ValueError:
            raise ResolveError(f"{realm}: the token response is not JSON") from None
        token = data.get("token") or data.get("access_token") if isinstance(data, dict) else None
        if not token:
            raise ResolveError(f"{realm}: no token in the response")
        return str(token)


def _config_digest(manifest: dict[str, Any], what: str) -> str:
    """The config digest an image manifest names; a ``ResolveError`` when it names none."""
    config = manifest.get("config")
    digest = config.get("digest") if isinstance(config, dict) else None
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise ResolveError(f"{what}: the manifest names no valid config digest ({str(digest)[:80]!r})")
    return digest


def _pick(index: dict[str, Any], platform: str, what: str) -> str:
    """The digest an index lists for ``platform``; whatever else the registry put there is ignored,
    and an index without a usable entry is a ``ResolveError`` saying what it offers."""
    os_name, _, arch = platform.partition("/")
    found = index.get("manifests")
    entries = [m for m in found if isinstance(m, dict)] if isinstance(found, list) else []

    def where(entry: dict[str, Any]) -> tuple[Any, Any]:
        plat = entry.get("platform")
        return (plat.get("os"), plat.get("architecture")) if isinstance(plat, dict) else (None, None)

    for entry in entries:
        if where(entry) == (os_name, arch):
            digest = entry.get("digest")
            if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
                raise ResolveError(f"{what}: its {platform} entry has no valid digest ({str(digest)[:80]!r})")
            return digest
    offered = sorted(f"{o}/{a}" for o, a in map(where, entries))
    raise ResolveError(f"{what} has no {platform} image (offers {', '.join(offered) or 'nothing'})")


def credentials(registry: str) -> tuple[str, str] | None:
    """Basic credentials for ``registry`` from the Docker config, as the docker client finds them:
    its credential helper for that registry (``credHelpers``), else its store (``credsStore``),
    else the ``auths`` entry. A config or entry that cannot be read gives none (anonymous)."""
    try:
        config = loads(read_input(docker_config(), CONFIG_FILE_BYTES).decode())
    except (OSError, ValueError, UsageError):  # absent, a FIFO, huge, not JSON: anonymous
        return None
    if not isinstance(config, dict):
        return None
    names = [registry, f"https://{registry}"] + (["https://index.docker.io/v1/"] if "docker.io" in registry else [])
    helpers = config.get("credHelpers")
    helper = (helpers.get(registry) if isinstance(helpers, dict) else None) or config.get("credsStore")
    if isinstance(helper, str) and helper:
        for name in names:
            found = _from_helper(helper, name)
            if found is not None:
                return found
    auths = config.get("auths")
    for name in names:
        entry = auths.get(name) if isinstance(auths, dict) else None
        encoded = entry.get("auth") if isinstance(entry, dict) else None
        if isinstance(encoded, str) and encoded:
            try:
                user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
            except ValueError:  # not base64, or not UTF-8: as docker, no credentials from it
                return None
            return user, password
    return None


def _from_helper(helper: str, server: str) -> tuple[str, str] | None:
    """``docker-credential-HELPER get`` for ``server`` (the protocol every docker credential helper
    speaks: the server on stdin, ``{"Username", "Secret"}`` on stdout); None when it has none."""
    import shutil
    import subprocess

    program = shutil.which(f"docker-credential-{helper}") if re.fullmatch(r"[A-Za-z0-9_.-]+", helper) else None
    if program is None:
        return None
    try:
        answer = subprocess.run([program, "get"], input=server, capture_output=True, text=True, timeout=30,
                                check=False)
        found = loads(answer.stdout) if answer.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    if not isinstance(found, dict):
        return None
    user, secret = found.get("Username"), found.get("Secret")
    return (user, secret) if isinstance(user, str) and isinstance(secret, str) and secret else None


def _json_object(raw: bytes, url: str, what: str) -> dict[str, Any]:
    """A registry's JSON answer; anything else is a resolve failure naming the URL, never a traceback."""
    try:
        data = loads(raw)
    except ValueError as exc:
        raise ResolveError(f"{url}: the registry answered with something that is not a JSON {what} ({exc})") from None
    if not isinstance(data, dict):
        raise ResolveError(f"{url}: the registry answered with JSON that is not a {what} object")
    return data


BLOB_CHUNK = 1 << 20  # bytes per read of a streamed blob


def client_stream(client: RegistryClient, ref: ImageRef, digest: str, size: int) -> Iterator[bytes]:
    """A base layer from its registry, checked against its digest as it streams and cut off once
    it passes the ``size`` its descriptor gives (a server that never ends would fill the disk)."""
    response = client.send("GET", ref, f"{ref.base_url}/blobs/{digest}", stream=True)
    hashed = hashlib.sha256()
    received = 0
    for chunk in stream_within(response, f"{ref.registry}/{ref.repository}: blob {digest}", BLOB_CHUNK):
        received += len(chunk)
        if received > size:
            response.close()
            raise ResolveError(f"{ref.registry}/{ref.repository}: blob {digest} is longer than its "
                               f"descriptor's {size} bytes", hint="the registry serves other bytes; nothing was kept")
        hashed.update(chunk)
        yield chunk
    if "sha256:" + hashed.hexdigest() != digest:
        raise ResolveError(f"{ref.registry}/{ref.repository}: blob {digest} does not match its digest")

