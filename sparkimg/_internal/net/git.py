"""Git sources: a bare mirror per URL in the store, refs resolved to full commits there."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sparkimg._internal.times import rfc3339
from sparkimg.errors import FetchError, ResolveError


class Store(Protocol):
    """What a mirror needs of the store (``sparkimg.store.Store``): its folder and its named locks."""

    @property
    def root(self) -> Path: ...

    def lock(self, name: str) -> AbstractContextManager[None]: ...


@dataclass(frozen=True)
class GitPin:
    commit: str
    tree: str
    committed: int


def mirror_path(store: Store, url: str) -> Path:
    """Where the store keeps ``url``'s bare mirror (present once ``mirror`` fetched it)."""
    return store.root / "git" / (hashlib.sha256(url.encode()).hexdigest()[:32] + ".git")


def mirror(store: Store, url: str) -> Path:
    """Fetch ``url`` (remote or a local path) into its bare mirror and return the mirror."""
    path = mirror_path(store, url)
    with store.lock(f"git-{path.stem}"):
        if not (path / "HEAD").exists():
            _git(["init", "--bare", "-q", str(path)])
        try:
            _git(["-C", str(path), "fetch", "-q", "--prune", "--tags", "--force", url,
                  "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"])
        except ResolveError as exc:
            raise ResolveError(f"git fetch {url}: {exc.message}",
                               hint="check the URL and that this machine can reach it") from None
    return path


def resolve(repo: Path, url: str, ref: str | None, commit: str | None) -> GitPin:
    """Expand a short SHA, or resolve a branch/tag, to the full commit; check it exists."""
    if commit is not None:
        full = _rev_parse(repo, f"{commit}^{{commit}}")
        if full is None:
            raise ResolveError(f"{url}: commit {commit} not found (or ambiguous)",
                               hint="give more hex digits, or check the commit exists on the remote")
    else:
        assert ref is not None
        full = None
        for candidate in (f"refs/heads/{ref}", f"refs/tags/{ref}", ref):
            full = _rev_parse(repo, f"{candidate}^{{commit}}")
            if full:
                break
        if full is None:
            raise ResolveError(f"{url}: no branch or tag named {ref!r}", hint="check source.ref")
    tree = _git(["-C", str(repo), "rev-parse", f"{full}^{{tree}}"]).strip()
    committed = int(_git(["-C", str(repo), "show", "-s", "--format=%ct", full]).strip())
    return GitPin(full, tree, committed)


def describe(repo: Path, commit: str) -> dict[str, str]:
    """A commit's committer date (RFC 3339, UTC) and subject line; {} when the mirror lacks it
    (a branch force-pushed away from it)."""
    proc = subprocess.run(["git", "-C", str(repo), "show", "-s", "--format=%ct%x00%s", f"{commit}^{{commit}}"],
                          capture_output=True, text=True, check=False)
    stamp, sep, subject = proc.stdout.strip().partition("\0")
    if proc.returncode != 0 or not sep or not stamp.isdigit():
        return {}
    return {"date": rfc3339(int(stamp)), "subject": subject}


def archive(repo: Path, commit: str) -> Iterator[bytes]:
    """A tar of the commit's tree (deterministic for a given commit and git version)."""
    proc = subprocess.Popen(["git", "-C", str(repo), "archive", "--format=tar", commit],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    while chunk := proc.stdout.read(1 << 20):
        yield chunk
    if proc.wait() != 0:
        raise FetchError(f"git archive {commit} failed: {proc.stderr.read().decode().strip() if proc.stderr else ''}")


def _rev_parse(repo: Path, expr: str) -> str | None:
    proc = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", expr],
                          capture_output=True, text=True, check=False)
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def _git(args: list[str]) -> str:
    try:
        proc = subprocess.run(["git", *args], capture_output=True, text=True, check=False, timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ResolveError(f"git {args[0]}: {exc}") from None
    if proc.returncode != 0:
        raise ResolveError(proc.stderr.strip() or f"git {' '.join(args)} failed")
    return proc.stdout
