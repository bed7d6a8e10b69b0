"""The nightly job without an engine: the state folder (atomic entries, kill -9, the lock), what
moves and what moved, which layers a move touches, and the report's fixed shape."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkimg.errors import BusyError, UsageError
from sparkimg.formats.nightly import REPORT_KEYS, REPORT_SCHEMA, Entry, ImageOut, LayerRun, Moved, report
from sparkimg.formats.steps import Step
from sparkimg.nightly.moving import layer_changes, moved, moving_inputs
from sparkimg.nightly.run import _plain_html, one_line
from sparkimg.nightly.state import State
from sparkimg.spec import load_spec
from sparkimg.store.content import Store
from tests.formats import GOOD, loaded, lock_file, lock_json

REPO = Path(__file__).resolve().parents[3]


def _entry(entry_id: str, status: str = "built", **kwargs: object) -> Entry:
    fields: dict[str, object] = {
        "moved": (Moved("vllm", "git", "a" * 40, "b" * 40, {"date": "2026-12-01T10:00:00Z", "subject": "one"},
                        {"date": "2026-12-02T11:00:00Z", "subject": "<script>two</script>"}),),
        "layers": (LayerRun("kernel", "rebuilt", "source kernel moved", "f" * 64, 12.3, 40.1, 734003200),
                   LayerRun("six", "reused", "unchanged", "e" * 64)),
        "image": ImageOut("sparkimg/demo:0123456789abcdef", "sha256:" + "1" * 64, "sha256:" + "2" * 64, 123,
                          ("sparkimg/demo:nightly",)),
        "lock_digest": "sha256:" + "9" * 64,
        "steps": (Step("resolve", 1.5), Step("fetch", 2.0), Step("compile", 12.3, "kernel"),
                  Step("assemble", 0.5, "six"), Step("assemble", 0.75), Step("load", 0.25), Step("sign", 0.1)),
    } if status == "built" else {}
    fields.update(kwargs)
    return Entry(entry_id, "demo.yaml", "2026-12-03T02:00:00Z", "2026-12-03T02:07:12Z", status,  # type: ignore[arg-type]
                 **fields)  # type: ignore[arg-type]


# -- the state folder --------------------------------------------------------------------------


def test_pruning_keeps_the_newest_the_one_in_service_and_every_known_good_night(tmp_path: Path) -> None:
    from sparkimg.nightly.run import _prune

    state = State(tmp_path / "state")
    ids = [f"2026120{d}T020000Z" for d in range(1, 8)]
    for n, entry_id in enumerate(ids):
        image = ImageOut(f"sparkimg/demo:{'k' * 15}{n % 5}", None, None, None)  # nights 0 and 5 share an image
        state.write(_entry(entry_id, known_good=entry_id == ids[1], image=image), {})
    state.set_current(ids[2])
    (state.entries_dir / "20261208T020000Z").mkdir()  # no entry.json: not a night, never touched
    untagged: list[str] = []
    engine = type("Engine", (), {"untag": lambda self, ref: untagged.append(ref)})()
    said: list[str] = []
    with state.locked():
        _prune(state, 3, lambda: engine,
               Store(tmp_path / "store"), tmp_path / "demo.yaml", lambda event: said.append(event.message))
    assert [e.entry for e in state.entries()] == [ids[1], ids[2], *ids[-3:]]
    assert (state.entries_dir / "20261208T020000Z").is_dir() and not list(state.root.glob(".tmp-*"))
    # night 0's image is night 5's too (kept); night 3's is named by no kept night
    assert untagged == ["sparkimg/demo:kkkkkkkkkkkkkkk3"]
    assert said[0] == f"pruned 2 night(s) past the newest 3 ({ids[0]} .. {ids[3]}); untagged 1 image(s) only they named"
    assert said[1].startswith("gc: removed 0 store entries")
    with state.locked():
        assert state.prune(3)[0] == []
    with pytest.raises(UsageError, match="keep at least"):
        state.prune(0)


def test_an_entry_or_file_that_resolves_outside_the_state_folder_is_refused(tmp_path: Path) -> None:
    elsewhere = State(tmp_path / "elsewhere")
    elsewhere.write(_entry("20261201T020000Z"), {"lock.json": b'{"forged": true}'})
    state = State(tmp_path / "state")
    state.write(_entry("20261202T020000Z"), {"lock.json": b"{}"})
    (state.entries_dir / "20261201T020000Z").symlink_to(elsewhere.folder("20261201T020000Z"))
    for read in (lambda: state.get("20261201T020000Z"), lambda: state.lock_bytes("20261201T020000Z"),
                 lambda: state.entries()):
        with pytest.raises(UsageError, match="outside the state folder"):
            read()
    assert [e.entry for e in state.entries(tolerant=True)] == ["20261202T020000Z"]
    lock = state.folder("20261202T020000Z") / "lock.json"
    lock.unlink()
    lock.symlink_to(elsewhere.folder("20261201T020000Z") / "lock.json")  # one file linked out
    with pytest.raises(UsageError, match="outside the state folder"):
        state.lock_bytes("20261202T020000Z")
    lock.unlink()
    os.mkfifo(lock)
    with pytest.raises(UsageError, match="not a regular file"):
        state.lock_bytes("20261202T020000Z")
    (state.root / "current.json").symlink_to("/dev/zero")
    with pytest.raises(UsageError):
        state.current()


def test_a_pruner_killed_mid_way_leaves_whole_entries_and_a_swept_remainder(tmp_path: Path) -> None:
    state = State(tmp_path / "state")
    state.write(_entry("20261201T020000Z"), {"report.json": b"{}"})
    state.write(_entry("20261202T020000Z"), {})
    # what a pruner killed between its rename and its rmtree leaves
    os.rename(state.folder("20261201T020000Z"), state.root / ".tmp-pruned-20261201T020000Z")
    assert [e.entry for e in state.entries()] == ["20261202T020000Z"]
    with state.locked():
        assert not list(state.root.glob(".tmp-*"))


def test_an_entry_is_written_whole_and_read_back(tmp_path: Path) -> None:
    state = State(tmp_path / "state")
    entry = _entry("20261203T020000Z")
    folder = state.write(entry, {"lock.json": b"{}", "report.json": b"{}"})
    assert sorted(p.name for p in folder.iterdir()) == ["entry.json", "lock.json", "report.json"]
    assert state.entries() == [entry] and state.get(entry.entry) == entry
    assert state.lock_bytes(entry.entry) == b"{}"
    assert not list(state.root.glob(".tmp-*"))
    with pytest.raises(UsageError, match="exists already"):
        state.write(entry, {})


def test_a_half_written_entry_is_never_read_and_is_swept_under_the_lock(tmp_path: Path) -> None:
    state = State(tmp_path / "state")
    state.write(_entry("20261203T020000Z"), {})
    # What a writer killed mid-entry leaves: a temp folder with part of an entry (never renamed),
    # and (by hand) an entries/ folder with no entry.json.
    temp = state.root / ".tmp-20261204T020000Z-abc"
    temp.mkdir()
    (temp / "entry.json").write_text('{"schema": "sparkimg-nightly-entry/v1", "entry": "2026')
    (state.entries_dir / "20261205T020000Z").mkdir()
    assert [e.entry for e in state.entries()] == ["20261203T020000Z"]
    with state.locked():
        assert not temp.exists()
    assert [e.entry for e in state.entries()] == ["20261203T020000Z"]


def test_kill_9_while_writing_leaves_no_entry_and_frees_the_lock(tmp_path: Path) -> None:
    root = tmp_path / "state"
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        import sparkimg.nightly.state as st
        state = st.State(Path({str(root)!r}))
        real = os.rename
        def killed(*args):
            os.kill(os.getpid(), signal.SIGKILL)  # between the last fsync and the rename
        st.os.rename = killed
        with state.locked():
            from tests.unit.nightly.test_nightly import _entry
            state.write(_entry("20261203T020000Z"), {{"lock.json": b"x" * 100000}})
    """)
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, check=False)
    assert run.returncode == -signal.SIGKILL, run.stderr
    state = State(root)
    assert list(root.glob(".tmp-*")) and state.entries() == []
    with state.locked():  # the kernel dropped the dead writer's flock
        assert not list(root.glob(".tmp-*"))
    assert state.new_id(0) == "19700101T000000Z"


def test_a_second_nightly_on_the_same_state_folder_is_refused(tmp_path: Path) -> None:
    state = State(tmp_path / "state")
    with state.locked():
        with pytest.raises(BusyError, match="another sparkimg nightly") as raised, State(tmp_path / "state").locked():
            pass
        assert raised.value.exit_code == 7
        # Another process is refused too (a flock per open file, not per process).
        probe = ("import sys; from pathlib import Path; from sparkimg.nightly.state import State\n"
                 f"try:\n  State(Path({str(state.root)!r})).locked().__enter__()\nexcept Exception as e:\n"
                 "  sys.exit(type(e).__name__)")
        run = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                             capture_output=True, text=True, check=False)
        assert run.stderr.strip() == "BusyError"
    with state.locked():
        pass


def test_entry_ids_sort_by_time_then_suffix_and_the_pointer_is_checked(tmp_path: Path) -> None:
    state = State(tmp_path / "state")
    for _ in range(11):
        entry_id = state.new_id(1764727200)
        state.write(_entry(entry_id, "unchanged"), {})
    ids = [e.entry for e in state.entries()]
    assert ids[0] == "20251203T020000Z" and ids[1] == "20251203T020000Z-2" and ids[-1] == "20251203T020000Z-11"
    assert state.current() is None
    state.set_current(ids[3])
    assert state.current() == ids[3]
    with pytest.raises(UsageError, match="not a nightly entry id"):
        state.get("../../etc")
    with pytest.raises(UsageError, match="no nightly entry 20991231T000000Z"):
        state.get("20991231T000000Z")


def test_promote_rewrites_only_the_mark(tmp_path: Path) -> None:
    from sparkimg.nightly.history import promote

    state = State(tmp_path / "state")
    state.write(_entry("20261203T020000Z"), {})
    state.write(_entry("20261204T020000Z", "failed", failed_stage="build", error="boom"), {})
    assert promote(state, "20261203T020000Z").known_good
    assert state.get("20261203T020000Z") == _entry("20261203T020000Z").marked(True)
    with pytest.raises(UsageError, match="is failed, not built"):
        promote(state, "20261204T020000Z")


def test_a_corrupt_entry_names_its_file_and_field(tmp_path: Path) -> None:
    state = State(tmp_path / "state")
    folder = state.write(_entry("20261203T020000Z"), {})
    data = json.loads((folder / "entry.json").read_text())
    data["status"] = "great"
    (folder / "entry.json").write_text(json.dumps(data))
    with pytest.raises(UsageError, match=r"entry\.json: status must be one of unchanged, built, failed"):
        state.entries()


# -- what moves, what moved, which layers --------------------------------------------------------


def test_moving_inputs(project: Callable[..., Path]) -> None:
    assert moving_inputs(load_spec(project(GOOD))) == ["base"]  # a tag, no digest; vllm has a commit
    moving = GOOD.replace("    commit: e47aa780\n", "").replace('version: "1.16.0"', "version: latest")
    assert moving_inputs(load_spec(project(moving, "moving.yaml"))) == ["base", "six", "vllm"]
    pinned = GOOD.replace("demo-base:bookworm\n", "demo-base:bookworm\n  digest: sha256:" + "1" * 64 + "\n")
    assert moving_inputs(load_spec(project(pinned, "pinned.yaml"))) == []


def test_moved_compares_what_each_pin_resolved_to() -> None:
    from dataclasses import replace

    from sparkimg.formats.lockfile import PypiPin

    current = lock_file()
    assert moved(current, current) == [] and moved(None, current) == []
    six = current.sources["six"]
    assert isinstance(six, PypiPin)
    candidate = replace(current, base=replace(current.base, manifest_digest="sha256:" + "7" * 64),
                        sources={**current.sources, "six": replace(six, version="1.17.0", sha256="8" * 64)})
    found = [c.plain() for c in moved(current, candidate)]
    assert [m.brief() for m in found] == [
        {"input": "base", "from": "sha256:" + "1" * 64, "to": "sha256:" + "7" * 64},
        {"input": "six", "from": "1.16.0", "to": "1.17.0"}]
    assert [m.kind for m in found] == ["image", "pypi"]


def test_layer_changes_say_which_layers_a_move_touches_and_why(project: Callable[[str], Path]) -> None:
    spec = load_spec(project(GOOD))
    current = lock_json()
    now = loaded(current)
    assert {name: why for name, (_, why) in layer_changes(spec, now, now).items()} == \
        {"kernel": None, "six": None, "image": None}
    assert {why for _, why in layer_changes(spec, None, now).values()} == {"first build"}
    moved_base = json.loads(json.dumps(current))
    moved_base["base"]["config_digest"] = "sha256:" + "7" * 64
    changes = layer_changes(spec, now, loaded(moved_base, "sha256:" + "8" * 64))
    assert changes["kernel"][1] == "base moved" and changes["six"][1] is None
    assert changes["image"][1] == "base moved, layer kernel changed"
    moved_six = json.loads(json.dumps(current))
    moved_six["sources"]["six"]["sha256"] = "8" * 64
    changes = layer_changes(spec, now, loaded(moved_six, "sha256:" + "8" * 64))
    assert changes["kernel"][1] is None and changes["six"][1] == "source six moved"
    assert changes["image"][1] == "layer six changed"


# -- the report ----------------------------------------------------------------------------------


def test_the_report_has_exactly_the_interface_notes_shape(tmp_path: Path) -> None:
    earlier = [_entry("20261201T020000Z").marked(True), _entry("20261202T020000Z", "unchanged")]
    night = _entry("20261203T020000Z", receipt="receipts/demo/KEY.receipt.json")
    out = report(night, [*earlier, night])
    assert tuple(out) == REPORT_KEYS and out["schema"] == REPORT_SCHEMA
    assert out["status"] == "built" and out["failed_stage"] is None and out["error"] is None
    assert set(out["moved"][0]) == {"input", "kind", "from", "to", "from_detail", "to_detail"}
    assert out["layers"][0] == {"name": "kernel", "status": "rebuilt", "reason": "source kernel moved",
                                "wall_s": 12.3, "cpu_s": 40.1, "peak_memory_bytes": 734003200}
    assert set(out["image"]) == {"reference", "manifest", "config", "size_bytes", "tags"}
    assert [h["entry"] for h in out["history"]] == ["20261201T020000Z", "20261202T020000Z"]  # this night excluded
    assert out["history"][0] == {"entry": "20261201T020000Z", "started": "2026-12-03T02:00:00Z", "status": "built",
                                 "known_good": True, "image_size_bytes": 123,
                                 "layers": {"kernel": {"wall_s": 12.3, "peak_memory_bytes": 734003200},
                                            "six": {"wall_s": None, "peak_memory_bytes": None}},
                                 # a layer's writing is inside the assembly's wall time, not added to it
                                 "steps": {"resolve": 1.5, "fetch": 2.0, "compile": 12.3, "assemble": 0.75,
                                           "load": 0.25, "sign": 0.1}}
    assert out["steps"][2] == {"step": "compile", "layer": "kernel", "wall_s": 12.3}
    failed = report(_entry("20261204T020000Z", "failed", failed_stage="build", error="layer kernel: exit 1"), [])
    assert failed["image"] is None and failed["moved"] == [] and failed["failed_stage"] == "build"
    json.dumps(out)  # plain JSON


def test_the_fallback_page_escapes_everything() -> None:
    page = _plain_html(report(_entry("20261203T020000Z", "failed", failed_stage="build",
                                     error="<img src=x onerror=alert(1)>"), []))
    assert "<img" not in page and "&lt;img" in page and page.startswith("<!DOCTYPE html>")
    moved_page = _plain_html(report(_entry("20261203T020000Z"), []))
    assert "<script>" not in moved_page


def test_one_line_keeps_the_tools_last_word() -> None:
    assert one_line("layer kernel: command exited with 1; last output:\n  a\n  this tip is broken\n") == \
        "layer kernel: command exited with 1; last output: this tip is broken"
    assert one_line("no such image\n  fix: pull it") == "no such image"
    assert len(one_line("x" * 2000)) == 500


# -- version: latest in the lock -------------------------------------------------------------------


def test_latest_is_pinned_to_the_version_pip_chose(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from sparkimg._internal.net import pypi as _pypi
    from sparkimg.errors import ResolveError
    from sparkimg.lock import resolve as lock_mod
    from sparkimg.spec import PypiSource
    from sparkimg.store.content import Store

    asked: list[str | None] = []

    def newest(package: str, version: str | None, platform: str, *, python: str | None = None,
               glibc: str | None = None) -> _pypi.WheelPin:
        asked.append(version)
        return _pypi.WheelPin("six-1.17.0-py2.py3-none-any.whl", "https://x/six-1.17.0-py2.py3-none-any.whl",
                              "4" * 64, "1.17.0")

    monkeypatch.setattr(_pypi, "resolve", newest)
    source = PypiSource("six", "six", "latest", None, None)
    entry = lock_mod._source_spec(source)
    pin = lock_mod._resolve_source(source, Store(tmp_path / "store"), "linux/arm64", entry)
    assert asked == [None] and entry["version"] == "latest"
    assert pin.kind == "pypi" and pin.version == "1.17.0" and pin.filename.startswith("six-1.17.0-")
    assert lock_mod._source_pins("six", source, pin) == []
    # A hand-edited lock cannot swap in another version's file under the version it resolved.
    swapped = replace(pin, filename="six-1.16.0-py2.py3-none-any.whl")
    assert any("not six 1.17.0" in p for p in lock_mod._source_pins("six", source, swapped))

    def mislabelled(package: str, version: str | None, platform: str, *, python: str | None = None,
                    glibc: str | None = None) -> _pypi.WheelPin:
        return _pypi.WheelPin("six-1.16.0-py2.py3-none-any.whl", "https://x/w.whl", "4" * 64, "1.17.0")

    monkeypatch.setattr(_pypi, "resolve", mislabelled)
    with pytest.raises(ResolveError, match=r"not a wheel of version '1\.17\.0'"):
        lock_mod._resolve_source(source, Store(tmp_path / "store"), "linux/arm64", entry)


def test_a_renderer_that_fails_costs_the_page_not_the_night(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkimg.events import Collected
    from sparkimg.nightly import html as page
    from sparkimg.nightly.run import render_html

    drift = report(_entry("20261203T020000Z"), [_entry("20261202T020000Z")])
    assert "sparkimg" in render_html(drift) and "<svg" in render_html(drift)  # the real page, plots inline

    def broken(report: object) -> str:
        raise RuntimeError("no fonts")

    monkeypatch.setattr(page, "render", broken)
    said = Collected()
    assert render_html(drift, said).startswith("<!DOCTYPE html>")
    assert "no fonts" in said.events[0].message


# -- review fixes: all-or-nothing tags, tolerant history, one night per spec, releases only ------


class _Tags:
    """A stand-in engine that holds tags only (a fake is fine for the logic of putting tags back)."""

    def __init__(self, tags: dict[str, str]) -> None:
        self.tags = tags

    def image_id(self, reference: str) -> str | None:
        return self.tags.get(reference)

    def tag(self, source: str, target: str) -> None:
        self.tags[target] = self.tags.get(source, source)

    def remove_image(self, reference: str) -> None:
        self.tags.pop(reference, None)


def test_a_failed_promotion_puts_the_moving_tag_back(project: Callable[[str], Path]) -> None:
    from sparkimg.nightly.tags import engine_tag, moved_back

    spec = load_spec(project(GOOD))
    engine = _Tags({"new:1": "sha256:new", engine_tag(spec): "sha256:old"})
    with pytest.raises(OSError, match="disk full"), moved_back(engine, spec, None) as move:  # type: ignore[arg-type]
        move.engine("new:1")
        assert engine.tags[engine_tag(spec)] == "sha256:new"
        raise OSError("disk full")  # the lock write, say
    assert engine.tags[engine_tag(spec)] == "sha256:old"
    fresh = _Tags({"new:1": "sha256:new"})
    with pytest.raises(RuntimeError), moved_back(fresh, spec, None) as move:  # type: ignore[arg-type]
        move.engine("new:1")
        raise RuntimeError
    assert engine_tag(spec) not in fresh.tags  # there was none before: none after
    with moved_back(engine, spec, None) as move:  # type: ignore[arg-type]
        move.engine("new:1")
    assert engine.tags[engine_tag(spec)] == "sha256:new"


def test_one_unreadable_entry_does_not_cost_a_nights_report(tmp_path: Path) -> None:
    from sparkimg.nightly.run import report_of

    state = State(tmp_path / "state")
    state.write(_entry("20261202T020000Z"), {})
    folder = state.write(_entry("20261201T020000Z"), {})
    (folder / "entry.json").write_text('{"schema": "sparkimg-nightly-entry/v9"}')
    with pytest.raises(UsageError):
        state.entries()
    assert [e.entry for e in state.entries(tolerant=True)] == ["20261202T020000Z"]
    drift = report_of(_entry("20261203T020000Z"), state)
    assert [h["entry"] for h in drift["history"]] == ["20261202T020000Z"]


def test_two_nightlies_of_one_spec_never_run_at_once(project: Callable[[str], Path]) -> None:
    """Whatever their state folders: the candidate lock and the lock are the spec's."""
    from sparkimg.nightly.run import _spec_locked

    spec = load_spec(project(GOOD))
    with _spec_locked(spec), pytest.raises(BusyError, match="another sparkimg nightly of this spec"), \
            _spec_locked(spec):
        pass
    with _spec_locked(spec):
        pass


def test_latest_takes_releases_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip falls back to a pre-release when a project has no release (or PIP_PRE says so): refused."""
    from sparkimg._internal.net import pypi as _pypi
    from sparkimg.errors import ResolveError

    seen: dict[str, str | None] = {}

    def pip(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        seen["PIP_PRE"] = kwargs["env"]["PIP_PRE"]  # type: ignore[index]
        answer = {"install": [{"download_info": {"url": "https://x/p-2.0.0rc1-py3-none-any.whl", "archive_info": {
            "hashes": {"sha256": "4" * 64}}}, "metadata": {"version": "2.0.0rc1"}}]}
        return subprocess.CompletedProcess(args, 0, json.dumps(answer), "")

    monkeypatch.setenv("PIP_PRE", "1")
    monkeypatch.setattr(subprocess, "run", pip)
    monkeypatch.setattr(_pypi, "file_size", lambda url: None)  # no HEAD to the made-up index
    with pytest.raises(ResolveError, match=r"2\.0\.0rc1, a pre-release"):
        _pypi.resolve("p", None, "linux/arm64")
    assert seen["PIP_PRE"] == "0"
    assert _pypi.resolve("p", "2.0.0rc1", "linux/arm64").version == "2.0.0rc1"  # an exact pin may name one


def test_a_rebuilt_layer_keeps_its_costliest_objects_and_reads_them_back() -> None:
    from sparkimg.formats.nightly import OBJECTS_KEPT, ObjectCost

    steps = [{"object": f"csrc/k{n:02d}.cu", "wall_s": float(n), "peak_memory": n << 20, "heavy": n == 20}
             for n in range(21)] + [{"object": 5, "wall_s": "x"}]  # a malformed step is skipped
    kept = ObjectCost.costliest(steps)
    assert [o.name for o in kept] == [f"csrc/k{n:02d}.cu" for n in range(20, 20 - OBJECTS_KEPT, -1)]
    assert kept[0].heavy and kept[0].peak_memory_bytes == 20 << 20
    row = LayerRun("vllm", "rebuilt", "x", "f" * 64, 30.0, 50.0, 1 << 30, kept)
    assert LayerRun.from_json(row.to_json(), "entry.json") == row
    assert "objects" not in LayerRun("six", "reused", "unchanged").to_json()
    with pytest.raises(UsageError, match="heavy must be true or false"):
        LayerRun.from_json({**row.to_json(), "objects": [{"name": "a", "wall_s": 1, "peak_memory_bytes": 1,
                                                          "heavy": "yes"}]}, "entry.json")


def test_an_entry_keeps_its_steps_and_an_entry_from_before_steps_reads_with_none() -> None:
    night = _entry("20261203T020000Z")
    assert Entry.from_json(night.to_json(), "entry.json") == night and night.steps
    older = night.to_json()
    del older["steps"]
    assert Entry.from_json(older, "entry.json").steps == ()
    with pytest.raises(UsageError, match="steps"):
        Entry.from_json({**night.to_json(), "steps": [{"step": "fetch"}]}, "entry.json")


def test_an_entry_keeps_how_its_registry_was_reached_and_an_older_one_reads_without() -> None:
    reached = {"registry": "192.0.2.2:5001", "transport": "https",
               "ca_file": {"path": "/etc/ca.pem", "sha256": "sha256:" + "c" * 64, "from": "--ca-file"}}
    image = ImageOut("sparkimg/demo:0123456789abcdef", "sha256:" + "1" * 64, "sha256:" + "2" * 64, 123,
                     ("192.0.2.2:5001/demo:nightly-x",), "192.0.2.2:5001/demo", reached)
    night = _entry("20261203T020000Z", image=image)
    assert Entry.from_json(night.to_json(), "entry.json") == night
    assert night.to_json()["image"]["registry"] == reached and "registry" not in image.report()
    older = night.to_json()
    del older["image"]["registry"]
    assert Entry.from_json(older, "entry.json").image == ImageOut(*(getattr(image, f) for f in
                                                                     ("reference", "manifest", "config", "size_bytes",
                                                                      "tags", "repository")))
    with pytest.raises(UsageError, match="registry"):
        Entry.from_json({**night.to_json(), "image": {**night.to_json()["image"], "registry": "https"}}, "entry.json")
