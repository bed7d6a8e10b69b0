"""Wheels staged as pip would install them into a base: files where the base's scheme puts
them, scripts that start the base's interpreter, an older installed version replaced with
nothing of it left visible, no path that names the staging folder, and hostile wheels refused.
The base is a fake ``BaseScheme``; the wheels are real, built here."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sparkimg.base import _scheme_query as query
from sparkimg.base.pyscheme import base_scheme
from sparkimg.base.schemes import RECORDS, record_name
from sparkimg.engine.protocol import RunResult
from sparkimg.errors import BuildError
from sparkimg.formats.scheme import BaseScheme, InstalledDist
from sparkimg.image import layer as layer_mod
from sparkimg.image.wheels import INSTALLER, Staged, install_wheels
from sparkimg.store.content import Store
from tests.formats import SITE, old_six
from tests.formats import base_scheme as fake_scheme
from tests.support import folder_entries, installed_bytes

SCRIPTS = "/usr/local/bin"


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, name: str, version: str, files: dict[str, bytes], *, entry_points: str | None = None,
               record: bool = True, compression: int = zipfile.ZIP_STORED) -> Path:
    """A wheel as a build backend writes it: the files, a dist-info with METADATA, WHEEL, RECORD."""
    info = f"{name}-{version}.dist-info"
    members = dict(files)
    members[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    members[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    if entry_points is not None:
        members[f"{info}/entry_points.txt"] = entry_points.encode()
    lines = [f"{path},{_hash(data)},{len(data)}" for path, data in members.items()] if record else []
    members[f"{info}/RECORD"] = ("\n".join([*lines, f"{info}/RECORD,,"]) + "\n").encode()
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in members.items():
            info_ = zipfile.ZipInfo(member, (2020, 1, 1, 0, 0, 0))
            mode = 0o755 if "/scripts/" in member else 0o644
            info_.external_attr = (stat.S_IFREG | mode) << 16
            archive.writestr(info_, data, compress_type=compression)
    return path


def mode(staged: Staged, image_path: str) -> int:
    return staged.files[image_path].mode


def six(folder: Path, version: str = "1.16.0") -> Path:
    return make_wheel(folder, "six", version, {"six.py": b"# six\n", f"six-{version}.dist-info/LICENSE": b"MIT\n",
                                                f"six-{version}.dist-info/top_level.txt": b"six\n"})


def test_a_wheel_is_installed_where_the_base_scheme_says(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo_pkg", "1.0", {"demo_pkg/__init__.py": b"X = 1\n",
                                                     "demo_pkg/data/table.txt": b"a b\n"})
    staged = install_wheels([wheel], fake_scheme())
    assert staged.installed == (("demo-pkg", "1.0"),)
    assert staged.removed == ()
    assert staged.roots == ("/usr/include/python3.11", "/usr/local", SCRIPTS, SITE)
    info = f"{SITE}/demo_pkg-1.0.dist-info"
    assert installed_bytes(staged, f"{SITE}/demo_pkg/__init__.py") == b"X = 1\n"
    assert installed_bytes(staged, f"{info}/INSTALLER") == b"sparkimg\n"
    assert installed_bytes(staged, f"{info}/REQUESTED") == b""
    assert f"{info}/direct_url.json" not in staged.files
    record = installed_bytes(staged, f"{info}/RECORD").decode().splitlines()
    assert sorted(line.split(",")[0] for line in record) == sorted([
        "demo_pkg/__init__.py", "demo_pkg/data/table.txt", *(f"demo_pkg-1.0.dist-info/{n}" for n in (
            "INSTALLER", "METADATA", "RECORD", "REQUESTED", "WHEEL"))])
    assert not [f for f in staged.files if f.endswith(".pyc") or "__pycache__" in f], "no bytecode at all"
    assert {oct(e.mode) for e in staged.files.values()} == {"0o644"}
    entries = staged.entries()
    assert {oct(e.mode) for e in entries if e.kind == "dir"} == {"0o755"}
    # A folder below the scheme folders gets an entry; none at or above one (the base's own stay).
    folders = {e.path for e in entries if e.kind == "dir"}
    assert folders == {f"{SITE}/demo_pkg".lstrip("/"), f"{SITE}/demo_pkg/data".lstrip("/"), info.lstrip("/")}


def test_scripts_start_the_base_interpreter(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "tool", "2.0", {
        "tool/__init__.py": b"def main():\n    return 0\n",
        "tool-2.0.data/scripts/legacy": b"#!python\nprint('legacy')\n",
        "tool-2.0.data/scripts/run.sh": b"#!/bin/sh\necho run\n",
    }, entry_points="[console_scripts]\ntool = tool:main\n[gui_scripts]\ntool-gui = tool:main\n")
    scheme = fake_scheme()
    staged = install_wheels([wheel], scheme)
    for name in ("tool", "tool-gui", "legacy"):
        assert installed_bytes(staged, f"{SCRIPTS}/{name}").startswith(b"#!/usr/bin/python3\n"), name
        assert mode(staged, f"{SCRIPTS}/{name}") == 0o755
    assert installed_bytes(staged, f"{SCRIPTS}/run.sh") == b"#!/bin/sh\necho run\n"
    assert b"from tool import main" in installed_bytes(staged, f"{SCRIPTS}/tool")
    record = installed_bytes(staged, f"{SITE}/tool-2.0.dist-info/RECORD").decode()
    assert "../../../bin/tool," in record and "../../../bin/legacy," in record


def test_an_interpreter_with_a_space_gets_the_sh_trampoline(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "tool", "2.0", {"tool/__init__.py": b""},
                       entry_points="[console_scripts]\nt = tool:m\n")
    scheme = BaseScheme.from_json({**fake_scheme().to_json(), "interpreter": "/opt/my python/bin/python3"}, "x")
    staged = install_wheels([wheel], scheme)
    assert installed_bytes(staged, f"{SCRIPTS}/t").startswith(b"#!/bin/sh\n'''exec' '/opt/my python/bin/")


def test_nothing_staged_names_the_staging_folder(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "tool", "2.0", {
        "tool/__init__.py": b"",
        "tool-2.0.data/scripts/legacy": b"#!python\n",
        "tool-2.0.data/data/share/tool/x.txt": b"x\n",
        "tool-2.0.data/headers/tool.h": b"int x;\n",
    }, entry_points="[console_scripts]\ntool = tool:main\n")
    staged = install_wheels([wheel, six(tmp_path)], fake_scheme(old_six()))
    assert "/usr/local/share/tool/x.txt" in staged.files
    assert "/usr/include/python3.11/tool/tool.h" in staged.files
    needles = [str(tmp_path).encode(), str(tmp_path.resolve()).encode()]
    for path in staged.files:
        data = installed_bytes(staged, path)
        assert not [n for n in needles if n in data], path
    assert not [str(p) for p in staged.removed if str(tmp_path) in p]


def test_an_older_installed_version_is_replaced_without_stale_files(tmp_path: Path) -> None:
    staged = install_wheels([six(tmp_path)], fake_scheme(old_six()))
    assert staged.installed == (("six", "1.16.0"),)
    # six.py is written again; the old bytecode folder (owned by six alone) and dist-info go.
    assert staged.removed == (f"{SITE}/__pycache__", f"{SITE}/six-1.15.0.dist-info")
    assert f"{SITE}/six-1.16.0.dist-info/METADATA" in staged.files


def test_files_only_the_old_version_had_are_removed_one_by_one_or_by_folder(tmp_path: Path) -> None:
    info = f"{SITE}/pkg-1.0.dist-info"
    old = InstalledDist("pkg", "1.0", info, tuple(sorted([
        f"{SITE}/pkg/__init__.py", f"{SITE}/pkg/gone.py", f"{SITE}/pkg/sub/a.py", f"{SITE}/pkg_extra.py",
        f"{SCRIPTS}/pkg-old", f"{info}/METADATA", f"{info}/RECORD"])), (f"{SITE}/pkg", f"{SITE}/pkg/sub", info))
    other = InstalledDist("other", "3", f"{SITE}/other-3.dist-info", (f"{SITE}/other.py",), ())
    wheel = make_wheel(tmp_path, "pkg", "2.0", {"pkg/__init__.py": b"", "pkg/new.py": b""})
    staged = install_wheels([wheel], fake_scheme(old, other))
    # pkg/ is written into, so only what is gone from it is listed; pkg/sub/ is gone whole.
    assert staged.removed == (f"{SCRIPTS}/pkg-old", info, f"{SITE}/pkg/gone.py", f"{SITE}/pkg/sub",
                              f"{SITE}/pkg_extra.py")


def test_reinstalling_the_same_version_never_removes_what_it_writes(tmp_path: Path) -> None:
    info = f"{SITE}/six-1.16.0.dist-info"
    old = InstalledDist("six", "1.16.0", info, tuple(sorted([
        f"{SITE}/six.py", f"{info}/METADATA", f"{info}/RECORD", f"{info}/direct_url.json"])), (info,))
    staged = install_wheels([six(tmp_path)], fake_scheme(old))
    assert staged.removed == (f"{info}/direct_url.json",)


def test_a_folder_at_or_above_a_scheme_folder_is_never_removed(tmp_path: Path) -> None:
    old = InstalledDist("six", "1.15.0", f"{SITE}/six-1.15.0.dist-info",
                        (f"{SITE}/six-1.15.0.dist-info/RECORD", f"{SITE}/six.py"),
                        (SITE, "/usr/local/lib", f"{SITE}/six-1.15.0.dist-info"))
    staged = install_wheels([six(tmp_path)], fake_scheme(old))
    assert staged.removed == (f"{SITE}/six-1.15.0.dist-info",)


def test_a_base_dist_with_no_file_list_cannot_be_replaced(tmp_path: Path) -> None:
    old = InstalledDist("six", "1.15.0", f"{SITE}/six-1.15.0.egg-info", (), ())
    with pytest.raises(BuildError, match="no list of its files"):
        install_wheels([six(tmp_path)], fake_scheme(old))


def test_two_wheels_of_one_distribution_are_an_error(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = six(tmp_path / "a", "1.16.0")
    second = make_wheel(tmp_path / "b", "Six", "1.17.0", {"six.py": b""})
    with pytest.raises(BuildError, match="both install six"):
        install_wheels([first, second], fake_scheme())


def _folder_layer(wheels: Sequence[Path], scheme: BaseScheme, root: Path, store: Store, removed: Sequence[str]) -> Any:
    """The reference: installer's own destination writes the wheels into a folder, as pip does;
    the folder's modes normalised and the folder tarred (how sparkimg made wheel layers before)."""
    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    for wheel in wheels:
        with WheelFile.open(wheel) as source:
            paths = {**scheme.paths, "headers": f"{scheme.paths['headers']}/{source.distribution}"}
            install(source, SchemeDictionaryDestination(
                paths, interpreter=scheme.interpreter, script_kind="posix", hash_algorithm="sha256",
                bytecode_optimization_levels=(), destdir=str(root), overwrite_existing=True),
                {"INSTALLER": INSTALLER, "REQUESTED": b""})
    roots = sorted({scheme.paths[key] for key in ("purelib", "platlib", "scripts", "data", "headers")})

    def directory(rel: str) -> bool:
        return not any(r == "/" + rel or r.startswith(f"/{rel}/") for r in roots)

    return layer_mod.write_layer(folder_entries(root, directory=directory) + layer_mod.whiteouts(removed),
                                 epoch=1_700_000_000, media_type="m", created_by="t", store=store)


def test_the_layer_is_the_one_installing_into_a_folder_and_tarring_it_gave(tmp_path: Path) -> None:
    """Byte for byte, over what installing can do: scripts rewritten or not, entry points, data and
    headers, a member read ahead by a thread, a wheel whose RECORD lists nothing, and an old
    version replaced."""
    big = os.urandom(layer_mod._AHEAD_BYTES + 12345)
    tool = make_wheel(tmp_path, "tool", "2.0", {
        "tool/__init__.py": b"def main():\n    return 0\n",
        "tool/lib/libbig.so": big,
        "tool-2.0.data/scripts/legacy": b"#!python\nprint('legacy')\n",
        "tool-2.0.data/scripts/run.sh": b"#!/bin/sh\necho run\n",
        "tool-2.0.data/data/share/tool/x.txt": b"x\n",
        "tool-2.0.data/headers/tool.h": b"int x;\n",
    }, entry_points="[console_scripts]\ntool = tool:main\n")
    bare = make_wheel(tmp_path, "bare", "1.0", {"bare/__init__.py": b"B = 2\n"}, record=False)
    wheels = [tool, bare, six(tmp_path)]
    scheme = fake_scheme(old_six())
    staged = install_wheels(wheels, scheme)
    entries = layer_mod.write_layer(staged.entries(), epoch=1_700_000_000, media_type="m", created_by="t",
                                    store=Store(tmp_path / "one"))
    folder = _folder_layer(wheels, scheme, tmp_path / "stage", Store(tmp_path / "two"), staged.removed)
    assert staged.removed and entries == folder
    assert installed_bytes(staged, f"{SITE}/tool/lib/libbig.so") == big


def test_a_path_two_wheels_write_as_a_file_and_as_a_folder_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    first = make_wheel(tmp_path / "a", "one", "1.0", {"shared/x": b"a file\n"})
    second = make_wheel(tmp_path, "two", "1.0", {"shared/x/y.py": b""})
    with pytest.raises(BuildError, match=f"write {SITE}/shared/x both as a file and as a folder"):
        install_wheels([first, second], fake_scheme()).entries()


@pytest.mark.parametrize("member", ["../../evil.py", "/tmp/evil.py", "pkg/../../../evil.py",
                                    "pkg-1.0.data/purelib/../../../evil.py", "pkg\\..\\evil.py"])
def test_hostile_member_paths_are_refused(tmp_path: Path, member: str) -> None:
    wheel = make_wheel(tmp_path, "pkg", "1.0", {"pkg/__init__.py": b"", member: b"owned\n"})
    with pytest.raises(BuildError, match="not a clean relative path"):
        install_wheels([wheel], fake_scheme())
    assert not [p for p in tmp_path.rglob("evil.py")]
    assert not Path("/tmp/evil.py").exists()


@pytest.mark.parametrize("name", ["../evil", "sub/evil", ".."])
def test_hostile_script_names_are_refused(tmp_path: Path, name: str) -> None:
    wheel = make_wheel(tmp_path, "pkg", "1.0", {"pkg/__init__.py": b""},
                       entry_points=f"[console_scripts]\n{name} = pkg:main\n")
    with pytest.raises(BuildError, match=r"pkg-1\.0-py3-none-any\.whl"):
        install_wheels([wheel], fake_scheme())
    assert not [p for p in tmp_path.rglob("evil")]


def test_an_unknown_data_scheme_is_refused(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "pkg", "1.0", {"pkg-1.0.data/etc/passwd": b"x\n"})
    with pytest.raises(BuildError, match="cannot install it"):
        install_wheels([wheel], fake_scheme())


def test_a_wheel_whose_record_misses_files_installs_as_with_pip(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "pkg", "1.0", {"pkg/__init__.py": b""}, record=False)
    staged = install_wheels([wheel], fake_scheme())
    record = installed_bytes(staged, f"{SITE}/pkg-1.0.dist-info/RECORD").decode()
    assert "pkg/__init__.py,sha256=" in record and "pkg-1.0.dist-info/METADATA,sha256=" in record


# -- the query the base runs, here against a folder laid out as a base's dist-packages ----------


def _dist(site: Path, name: str, version: str, files: Sequence[str]) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    rows = [*files, f"{info.name}/METADATA", f"{info.name}/RECORD"]
    for row in files:
        target = (site / row).resolve()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("x")
    (info / "RECORD").write_text("".join(f"{row},,\n" for row in rows))


def test_the_query_finds_files_and_owned_folders(tmp_path: Path) -> None:
    prefix = tmp_path / "usr" / "local"
    site = prefix / "lib" / "python3.11" / "dist-packages"
    _dist(site, "Foo_Bar", "1.0", ["foo/__init__.py", "foo/sub/a.py", "shared/one.py", "../../../bin/foo"])
    (site / "shared" / "other.py").write_text("not foo's")
    _dist(site, "lonely", "2", ["lonely.py"])
    roots = sorted({str(site), str(prefix / "bin"), str(prefix)})
    found = query._installed([str(site)], roots)
    assert [(d["name"], d["version"]) for d in found] == [("foo-bar", "1.0"), ("lonely", "2")]
    foo = found[0]
    info = f"{site}/Foo_Bar-1.0.dist-info"
    assert foo["files"] == sorted([f"{site}/foo/__init__.py", f"{site}/foo/sub/a.py", f"{site}/shared/one.py",
                                   f"{prefix}/bin/foo", f"{info}/METADATA", f"{info}/RECORD"])
    # shared/ holds another file, bin/ and dist-packages/ are scheme folders: none is owned.
    assert foo["owned_dirs"] == sorted([f"{site}/foo", info])
    scheme = {"schema": "sparkimg-scheme/v3", "interpreter": "/usr/bin/python3", "python_version": "3.11.2",
              "paths": {"purelib": str(site), "platlib": str(site), "scripts": str(prefix / "bin"),
                        "data": str(prefix), "headers": "/usr/include/python3.11"}, "installed": found,
              "links": {"/lib": "usr/lib"}, "glibc": "2.36"}
    assert BaseScheme.from_json(json.loads(json.dumps(scheme)), "x").named("foo-bar")[0].dist_info == info


class _HostEngine:
    """Runs the scheme query with this interpreter instead of a container, and counts the runs."""

    def __init__(self, image_id: str) -> None:
        self.id, self.runs = image_id, 0

    def image_id(self, reference: str) -> str | None:
        return self.id

    def run_bounded(self, image: str, command: Sequence[str], *, mounts: Sequence[Any], **kwargs: Any) -> RunResult:
        import subprocess

        self.runs += 1
        places = {m.target: str(m.source) for m in mounts}
        args = [sys.executable, *(next((c.replace(t, s) for t, s in places.items() if c.startswith(t)), c)
                                  for c in command[1:])]
        return RunResult(subprocess.run(args, check=False).returncode, False)


def test_the_scheme_is_asked_once_per_base_and_remembered(tmp_path: Path) -> None:
    store, digest = Store(tmp_path / "store"), "sha256:" + "c" * 64
    engine = _HostEngine(digest)
    first = base_scheme(engine, "base:1", digest, store)  # type: ignore[arg-type]
    assert first.interpreter == os.path.normcase(sys.executable)
    assert first.paths["purelib"] and first.python_version.startswith(f"{sys.version_info[0]}.{sys.version_info[1]}.")
    assert base_scheme(engine, "base:1", digest, store) == first  # type: ignore[arg-type]
    assert engine.runs == 1
    store.record_path(RECORDS, record_name(digest, query_bytes())).write_text('{"schema": "damaged"}')
    assert base_scheme(engine, "base:1", digest, store) == first  # type: ignore[arg-type]
    assert engine.runs == 2
    with pytest.raises(BuildError, match="not sha256:" + "d" * 8):
        base_scheme(_HostEngine(digest), "base:1", "sha256:" + "d" * 64, store)  # type: ignore[arg-type]


def query_bytes() -> bytes:
    return Path(query.__file__).read_bytes()


@pytest.mark.parametrize(("record", "entry_points", "said"), [
    ("foo/__init__.py,\x00,\n", None, "InvalidRecordEntry"),
    (None, "[console_scripts]\nfoo = \n[[bad\n", "ParsingError"),
])
def test_a_damaged_record_or_entry_points_file_is_a_build_error(
    tmp_path: Path, record: str | None, entry_points: str | None, said: str
) -> None:
    """Bad input from a wheel ends in a sparkimg error naming the wheel, never in a traceback."""
    wheel = tmp_path / "foo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("foo/__init__.py", "x = 1\n")
        archive.writestr("foo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: foo\nVersion: 1.0\n")
        archive.writestr("foo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        if entry_points is not None:
            archive.writestr("foo-1.0.dist-info/entry_points.txt", entry_points)
        archive.writestr("foo-1.0.dist-info/RECORD", record or "")
    with pytest.raises(BuildError, match=f"wheel {wheel.name}: cannot install it: {said}"):
        install_wheels([wheel], fake_scheme())


def test_a_member_named_twice_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "pkg", "1.0", {"pkg/__init__.py": b"first\n"})
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("pkg/__init__.py", b"second\n")  # the copy the image held before
    with pytest.raises(BuildError, match=r"member 'pkg/__init__.py' is in it 2 times .* nothing was installed"):
        install_wheels([wheel], fake_scheme())


def test_a_wheel_that_inflates_past_the_bound_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zip bomb with an honest RECORD: its headers declare what it inflates to, and that is bounded
    (8 GiB, as for sdists; here 1 MiB, so the bomb stays small)."""
    import sparkimg.image.wheels as wheels_mod

    monkeypatch.setattr(wheels_mod, "MAX_BYTES", 1 << 20)
    bomb = make_wheel(tmp_path, "bomb", "1.0", {"bomb/zeros.bin": bytes(2 << 20)}, compression=zipfile.ZIP_DEFLATED)
    assert bomb.stat().st_size < 64 << 10
    with pytest.raises(BuildError, match=r"wheel bomb-1.0-py3-none-any.whl: 4 members declaring 2.0 MiB unpacked, "
                                         r"more than 500000 members or 1.0 MiB"):
        install_wheels([bomb], fake_scheme())
