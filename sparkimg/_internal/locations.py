"""Where sparkimg finds things by default (the store, the signing key); a leaf, so the no-op
answer can find them without loading the store's or the signing code."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

KEY_ENV = "SPARKIMG_KEY"
CERTS_D_ENV = "SPARKIMG_DOCKER_CERTS_D"
DOWNLOAD_CACHE_ENV = "SPARKIMG_DOWNLOAD_CACHE"


def download_cache() -> Path | None:
    """The folder of downloads every store on this machine shares (``store.downloads``):
    ``$SPARKIMG_DOWNLOAD_CACHE``, else none (each store downloads for itself)."""
    from pathlib import Path

    value = os.environ.get(DOWNLOAD_CACHE_ENV)
    return Path(value).expanduser().absolute() if value else None


def signing_key_path(path: Path | None) -> Path | None:
    """The key file a build or prewarm signs with: ``path``, else ``$SPARKIMG_KEY``, else none."""
    from pathlib import Path

    return path or (Path(os.environ[KEY_ENV]) if os.environ.get(KEY_ENV) else None)


def docker_config() -> Path:
    """The docker client's configuration file (credentials, its current context): in
    ``$DOCKER_CONFIG``, else ``~/.docker``, as the client itself looks."""
    from pathlib import Path

    return Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"


def docker_certs_dirs() -> list[Path]:
    """Where Docker keeps a CA per registry (``certs.d/HOST:PORT/ca.crt``): the daemon's folder, then
    the user's; ``$SPARKIMG_DOCKER_CERTS_D`` in their place (tests, or a copy of them elsewhere)."""
    from pathlib import Path

    if os.environ.get(CERTS_D_ENV):
        return [Path(os.environ[CERTS_D_ENV])]
    return [Path("/etc/docker/certs.d"), Path.home() / ".docker" / "certs.d"]


def default_store() -> Path:
    """``$SPARKIMG_STORE``, else ``$XDG_CACHE_HOME/sparkimg``, else ``~/.cache/sparkimg``."""
    from pathlib import Path

    return Path(default_store_text())


def default_store_text() -> str:
    """``default_store`` as a string, found with ``os`` alone (the no-op answer's)."""
    if os.environ.get("SPARKIMG_STORE"):
        return os.environ["SPARKIMG_STORE"]
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                        "sparkimg")
