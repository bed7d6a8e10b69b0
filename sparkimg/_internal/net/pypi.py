"""Resolve a pinned PyPI wheel to its URL and sha256 with pip itself (``--dry-run --report``).

Using pip keeps the machine's own index configuration (mirrors, find-links, certificates).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass

from sparkimg._internal.net.http import declared_length, read_within, request
from sparkimg._internal.wheeltags import platform_tags
from sparkimg.errors import ResolveError
from sparkimg.formats.canonical import loads

# PEP 440's normalised pre-release and development markers: 2.0.0a1, 2.0.0b2, 2.0.0rc1, 1.0.dev3.
_PRERELEASE = re.compile(r"\d(a|b|rc)\d+|\.dev\d+")


@dataclass(frozen=True)
class WheelPin:
    filename: str
    url: str
    sha256: str
    version: str = ""  # the version pip chose (what ``latest`` resolved to)
    size: int | None = None  # bytes, as the index gives them; None when it does not say


def resolve(package: str, version: str | None, platform: str, *, python: str | None = None,
            glibc: str | None = None) -> WheelPin:
    """The wheel pip would install for ``package==version`` on ``platform``; with ``version`` None,
    for the newest version on the index (pip's own choice: no pre-releases, yanked files skipped).
    ``python`` (3.12.3) is the base's CPython; without it pip picks for the Python running it.
    ``glibc`` (2.36) is the base's: pip is given every platform tag it can load
    (``wheeltags.platform_tags``, the set ``build`` checks each wheel against), literally, as pip
    takes ``--platform`` (no older glibc implied)."""
    args = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
            "--only-binary=:all:", "--quiet", "--report", "-", "--disable-pip-version-check"]
    tags = platform_tags(platform, glibc)
    for tag in tags:
        args += ["--platform", tag]
    if python is not None:
        args += ["--python-version", ".".join(python.split(".")[:2]), "--implementation", "cp"]
    if tags or python is not None:
        args += ["--target", "/nonexistent-sparkimg-target"]
    wanted = package if version is None else f"{package}=={version}"
    args.append(wanted)
    try:
        # No pre-release, whatever PIP_PRE or a pip.conf says (``latest`` means the newest release).
        env = {**os.environ, "PIP_PRE": "0"}
        proc = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ResolveError(f"pip could not resolve {wanted}: {exc}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise ResolveError(f"no {platform} wheel for {wanted}: {last}",
                           hint="check the name and version; pin `filename` if several wheels fit")
    report = json.loads(proc.stdout)
    item = report["install"][0]
    info = item["download_info"]
    sha256 = info.get("archive_info", {}).get("hashes", {}).get("sha256")
    url = str(info["url"])
    if not sha256:
        raise ResolveError(f"{wanted}: the index gave no sha256 for {url}")
    chosen = str((item.get("metadata") or {}).get("version") or version or "")
    if version is None and _PRERELEASE.search(chosen):
        # pip falls back to a pre-release when a project has no release at all.
        raise ResolveError(f"{package}: the newest version on the index is {chosen}, a pre-release; "
                           "`version: latest` takes releases only", hint=f'pin it: version: "{chosen}"')
    return WheelPin(url.rsplit("/", 1)[-1], url, str(sha256), chosen, file_size(url))


def file_size(url: str) -> int | None:
    """The size of the file at ``url``: a HEAD's Content-Length, or the file's for ``file://``;
    None when the index does not say. pip's report names the file and its hash, not its size."""
    if url.startswith("file://"):
        from urllib.parse import unquote, urlparse

        try:
            return os.stat(unquote(urlparse(url).path)).st_size
        except OSError:
            return None
    import requests

    try:
        response = request(None, "HEAD", url, timeout=30, auth=index_credentials(url))
    except requests.RequestException:
        return None
    response.close()
    return declared_length(response) if response.status_code == 200 else None


SIMPLE_INDEX = "https://pypi.org/simple/"
PROJECT_PAGE_MAX = 64 << 20  # a PEP 691 project page; torch's, with every file of every release, is a few MiB
_SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


def index_url() -> str:
    """The index sdists are looked up in: ``SPARKIMG_PYPI_INDEX``, else pip's ``PIP_INDEX_URL``, else PyPI."""
    url = os.environ.get("SPARKIMG_PYPI_INDEX") or os.environ.get("PIP_INDEX_URL") or SIMPLE_INDEX
    return url if url.endswith("/") else url + "/"


def normalise(name: str) -> str:
    """PEP 503: runs of ``-_.`` become ``-``, lower case."""
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def sdist_filename_matches(filename: str, package: str, version: str) -> bool:
    """True when ``filename`` is the sdist of ``package`` ``version`` (``NAME-VERSION.tar.gz``, the
    name normalised either way PEP 625 or older tools write it)."""
    if not filename.endswith(".tar.gz") or "/" in filename:
        return False
    stem = filename[: -len(".tar.gz")]
    name, sep, found = stem.rpartition("-")
    return bool(sep) and found == version and normalise(name) == normalise(package)


def resolve_sdist(package: str, version: str) -> WheelPin:
    """The sdist (``.tar.gz``) of ``package==version`` on the index: file name, URL and sha256,
    from the index's JSON simple API (PEP 691). pip cannot be asked: resolving an sdist with pip
    runs its build backend."""
    import requests  # only a lock that resolves an sdist pays for importing it

    full = f"{index_url()}{normalise(package)}/"
    url, auth = _without_credentials(full)  # a token in PIP_INDEX_URL goes in a header, never a lock or message
    try:
        response = request(None, "GET", url, headers={"Accept": _SIMPLE_JSON}, timeout=60, auth=auth)
    except requests.RequestException as exc:
        raise ResolveError(f"{url}: {exc.__class__.__name__}") from None
    if response.status_code == 200 and _SIMPLE_JSON in response.headers.get("Content-Type", ""):
        read_within(response, PROJECT_PAGE_MAX, url)
    else:
        response.close()  # an answer that is not the page asked for is not read
    if response.status_code == 404:
        raise ResolveError(f"no project {package!r} on {_without_credentials(index_url())[0]}",
                           hint="check the package name")
    if response.status_code != 200 or _SIMPLE_JSON not in response.headers.get("Content-Type", ""):
        raise ResolveError(f"{url}: HTTP {response.status_code} ({response.headers.get('Content-Type')}); "
                           "the index must serve the JSON simple API (PEP 691)")
    try:
        files = loads(response.content)["files"]
    except (ValueError, KeyError, TypeError):
        raise ResolveError(f"{url}: not a PEP 691 project page") from None
    found = [f for f in files if isinstance(f, dict) and isinstance(f.get("filename"), str)
             and sdist_filename_matches(f["filename"], package, version) and not f.get("yanked")]
    if not found:
        raise ResolveError(f"{package}=={version}: the index has no sdist (.tar.gz) for this version",
                           hint="check the version, or use a wheel (drop 'dist: sdist')")
    item = found[0]
    sha256 = (item.get("hashes") or {}).get("sha256")
    if not isinstance(sha256, str) or len(sha256) != 64:
        raise ResolveError(f"{package}=={version}: the index gave no sha256 for {item['filename']}")
    from urllib.parse import urljoin

    file_url = _without_credentials(urljoin(url, str(item["url"])).split("#", 1)[0])[0]
    size = item.get("size")  # PEP 700
    return WheelPin(str(item["filename"]), file_url, sha256.lower(),
                    size=size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None)


def upload_time(package: str, filename: str) -> str | None:
    """When ``filename`` was uploaded, from the index's JSON simple API (PEP 691/700
    ``upload-time``); None when the index does not say (or cannot be asked)."""
    import requests

    url, auth = _without_credentials(f"{index_url()}{normalise(package)}/")
    try:
        response = request(None, "GET", url, headers={"Accept": _SIMPLE_JSON}, timeout=30, auth=auth)
        files = loads(read_within(response, PROJECT_PAGE_MAX, url))["files"] if response.status_code == 200 else []
        response.close()
    except (requests.RequestException, ResolveError, ValueError, KeyError, TypeError):
        return None
    for item in files if isinstance(files, list) else []:
        if isinstance(item, dict) and item.get("filename") == filename:
            found = item.get("upload-time")
            return found if isinstance(found, str) else None
    return None


def index_credentials(url: str) -> tuple[str, str] | None:
    """The index's credentials (from its URL in the environment) for a download from its host:
    a lock records file URLs without them."""
    from urllib.parse import urlsplit

    index, auth = _without_credentials(index_url())
    return auth if auth and urlsplit(url).netloc == urlsplit(index).netloc else None


def _without_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without ``user:password@``, and those credentials for ``requests``' auth."""
    from urllib.parse import unquote, urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return (urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)),
            (unquote(parts.username or ""), unquote(parts.password or "")))
