"""A real base's install scheme, asked once in a no-network container, and a newer wheel staged
over the older one the base's own pip installed: the old dist-info and every old file the new
install does not write are removed, and the result behaves as pip's upgrade would."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from sparkimg.base.pyscheme import base_scheme
from sparkimg.engine.protocol import Engine
from sparkimg.image.wheels import install_wheels
from sparkimg.store.content import Store
from tests.support import image_build, write_installed

pytestmark = pytest.mark.integration

SITE = "/usr/local/lib/python3.11/dist-packages"


def _covered(path: str, removed: set[str]) -> bool:
    return path in removed or any(path.startswith(r + "/") for r in removed)


def test_the_base_scheme_finds_the_old_six_and_the_new_one_replaces_it(
    engine: Engine, oldsix_base: str, six_wheels: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "store")
    config = engine.image_id(oldsix_base)
    assert config is not None
    started = time.monotonic()
    scheme = base_scheme(engine, oldsix_base, config, store)
    asked = time.monotonic() - started
    # Debian bookworm's python3 as root: posix_local, where its pip --break-system-packages installs.
    assert scheme.interpreter == "/usr/bin/python3"
    assert scheme.python_version.startswith("3.11.")
    assert scheme.paths == {"purelib": SITE, "platlib": SITE, "scripts": "/usr/local/bin", "data": "/usr/local",
                            "headers": "/usr/include/python3.11"}
    (old,) = scheme.named("six")
    info = f"{SITE}/six-1.15.0.dist-info"
    assert (old.version, old.dist_info) == ("1.15.0", info)
    assert {f"{SITE}/six.py", f"{info}/RECORD", f"{info}/METADATA", f"{info}/INSTALLER"} <= set(old.files)
    assert f"{SITE}/__pycache__/six.cpython-311.pyc" in old.files  # Debian's pip compiles bytecode
    assert info in old.owned_dirs

    def no_container(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the scheme is remembered: no second container")

    monkeypatch.setattr(engine, "run_bounded", no_container)
    started = time.monotonic()
    assert base_scheme(engine, oldsix_base, config, store) == scheme
    remembered = time.monotonic() - started
    print(f"scheme query: {asked:.2f} s in a container, {remembered * 1000:.1f} ms remembered")
    monkeypatch.undo()

    staged = install_wheels([six_wheels["1.16.0"]], scheme)
    assert staged.installed == (("six", "1.16.0"),)
    written = set(staged.files)
    removed = set(staged.removed)
    assert info in removed
    assert f"{SITE}/six.py" in written and f"{SITE}/six.py" not in removed
    assert [f for f in old.files if f not in written and not _covered(f, removed)] == []
    assert not [p for p in removed if _covered(p, written) or any(w.startswith(p + "/") for w in written)]

    # Apply it as a layer would (delete what is removed, add what is staged) and ask the image.
    context = tmp_path / "applied"
    context.mkdir()
    write_installed(staged, context / "stage")
    (context / "Dockerfile").write_text(
        f"FROM {oldsix_base}\nRUN rm -rf {' '.join(sorted(removed))}\nCOPY stage/ /\n")
    tag = f"sparkimg-test/six-staged:{uuid.uuid4().hex[:12]}"
    image_build(engine, context, tags=[tag])
    try:
        probe = ("import importlib.metadata as m, six; "
                 "print(six.__version__, sorted(d.version for d in m.distributions() if d.metadata['Name'] == 'six'), "
                 "m.distribution('six').read_text('INSTALLER').strip())")
        run = subprocess.run([engine.client, "run", "--rm", "--network", "none", tag, "python3", "-c", probe],
                             capture_output=True, text=True, check=True)
        assert run.stdout.strip() == "1.16.0 ['1.16.0'] sparkimg"
        # The RECORD is right: the base's own pip uninstalls it without a trace.
        script = (f"python3 -m pip uninstall -y --break-system-packages six >/dev/null && "
                  f"ls -A {SITE} {SITE}/__pycache__ 2>/dev/null | grep -i six || echo clean")
        run = subprocess.run([engine.client, "run", "--rm", "--network", "none", tag, "sh", "-c", script],
                             capture_output=True, text=True, check=True)
        assert run.stdout.strip().splitlines()[-1] == "clean", run.stdout
    finally:
        engine.remove_image(tag)
