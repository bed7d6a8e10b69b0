"""The shipped demo, end to end on the real engine and registry: lock, build, no-op
rebuild, patch-only rebuild."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparkimg.engine.protocol import Engine

from .helpers import cached, cli, copy_demo


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


def test_demo_builds_then_rebuilds_nothing_then_only_the_image(
    demo: Path, tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    assert cli(capsys, store, "check", str(demo))[0] == 0
    assert cli(capsys, store, "lock", str(demo))[0] == 0

    code, first, _ = cli(capsys, store, "build", str(demo), "--json", "--quiet")
    assert code == 0
    assert cached(first) == {"demo-kernel": False, "six": False, "image": False}
    image = first["image"]["reference"]
    assert engine.image_id(image) == first["image"]["id"]
    labels = engine.image_labels(image)
    assert labels["dev.sparkimg.key"] == first["layers"][-1]["key"]
    assert labels["dev.sparkimg.layer.demo-kernel.key"] == first["layers"][0]["key"]
    assert labels["dev.sparkimg.spec-digest"].startswith("sha256:")
    assert labels["org.opencontainers.image.base.digest"].startswith("sha256:")
    assert labels["org.example.purpose"] == "sparkimg-demo"
    inside = subprocess.run(
        [engine.client, "run", "--rm", "--network", "none", image, "python3", "-c",
         "import sparkimg_demo_kernel, six, os; print(sparkimg_demo_kernel.LIBRARY.exists(), six.__version__, "
         "open('/etc/sparkimg/serve.env').read().count('VLLM'), os.environ['SPARKIMG_DEMO'])"],
        capture_output=True, text=True, check=True)
    assert inside.stdout.split() == ["True", "1.16.0", "1", "1"]

    code, second, _ = cli(capsys, store, "build", str(demo), "--json")
    assert code == 0
    assert all(cached(second).values())
    assert second["image"]["id"] == first["image"]["id"]
    assert first["schema"] == second["schema"] == "sparkimg-build-result/v1"  # the no-op answer's too
    code, said, _ = cli(capsys, store, "build", str(demo))
    assert code == 0 and "up to date, nothing built" in said
    code, text, _ = cli(capsys, store, "plan", str(demo), "--dockerfile")  # for a person: the same image, as text
    assert code == 0 and text.splitlines()[1].startswith("FROM sparkimg-base/demo:")
    assert '"/etc/sparkimg/serve.env"]' in text and f'"dev.sparkimg.key"="{first["layers"][-1]["key"]}"' in text

    patch = demo.parents[1] / "patches" / "demo" / "serve.env"
    patch.write_text(patch.read_text() + "VLLM_EXTRA=1\n")
    code, _, err = cli(capsys, store, "build", str(demo), "--json")
    assert code == 2 and "patches.demo" in err and "MD5SUMS disagrees" in err  # the sums pin the old bytes
    assert cli(capsys, store, "lock", str(demo))[0] == 2  # and the lock will not pin bytes the sums do not
    assert cli(capsys, store, "patches", "pin", str(patch.parent))[0] == 0
    code, _, err = cli(capsys, store, "build", str(demo))
    assert code == 2 and "differ from the lock" in err  # the lock still pins the old bytes: fail closed
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    code, plan, _ = cli(capsys, store, "plan", str(demo), "--json")
    assert cached(plan) == {"demo-kernel": True, "six": True, "image": False}
    assert plan["schema"] == "sparkimg-plan-result/v1"
    changed = {layer["name"]: layer["changed"] for layer in plan["layers"]}  # what the table's column says
    assert changed["demo-kernel"] == changed["six"] == [] and changed["image"]
    assert not any(layer["first_build"] for layer in plan["layers"])
    code, third, _ = cli(capsys, store, "build", str(demo), "--json", "--quiet")
    assert code == 0
    assert cached(third) == {"demo-kernel": True, "six": True, "image": False}
    assert third["layers"][0]["key"] == first["layers"][0]["key"]
    assert third["image"]["id"] != first["image"]["id"]
    for result in (first, third):
        engine.remove_image(result["image"]["reference"])


def test_stale_and_missing_lock_fail_closed(
    demo: Path, tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    code, _, err = cli(capsys, store, "build", str(demo))
    assert code == 2 and "no lock file" in err
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    demo.write_text(demo.read_text().replace('SPARKIMG_DEMO: "1"', 'SPARKIMG_DEMO: "2"'))
    code, _, err = cli(capsys, store, "build", str(demo))
    assert code == 2 and "stale" in err


def test_the_api_reports_typed_events_and_a_no_op_asks_the_engine_once(
    demo: Path, tmp_path: Path, engine: Engine, demo_base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparkimg import api
    from sparkimg.engine import docker as engine_mod
    from sparkimg.engine import socket_api as engine_api
    from sparkimg.events import Collected, Kind, Phase

    store = tmp_path / "store"
    api.lock(demo, store=store)
    events = Collected()
    built = api.build(demo, store=store, report=events)
    assert built.result.built == ("demo-kernel", "image")
    done = events.of(Phase.COMPILE, Kind.DONE)
    assert [e.layer for e in done] == ["demo-kernel"] and float(done[0].figures["wall_s"] or 0) > 0
    assert events.of(Phase.COMPILE, Kind.LOG)
    # sparkimg writes each layer itself and says so, one event per layer, then what it loads.
    written = [e for e in events.of(Phase.ASSEMBLE) if e.figures.get("size")]
    assert sorted(str(e.layer) for e in written) == ["demo-kernel", "patches.demo", "six"]  # written at once
    # The layers the engine lacked (one that an earlier build of the same inputs gave it is not sent).
    sent = [e.figures["sent"] for e in events.of(Phase.ASSEMBLE) if "sent" in e.figures]
    assert len(sent) == 1 and 0 <= int(sent[0] or 0) <= 3
    assert events.of(Phase.RECEIPT, Kind.WARNING)  # unsigned: said, not printed by the library

    asked: list[str] = []

    def counted(module: Any, name: str) -> Callable[..., Any]:
        real = getattr(module, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            asked.append(name)
            return real(*args, **kwargs)
        return call
    for module, name in ((engine_mod, "_call"), (engine_api, "http_get")):
        monkeypatch.setattr(module, name, counted(module, name))
    again = api.build(demo, store=store)
    assert again.result.built == () and again.result.image_id == built.result.image_id
    assert len(asked) == 1, asked  # the client choice is remembered; one question: is this image there?
    engine.remove_image(built.result.image_ref)


def test_json_logs_print_one_object_per_event(
    demo: Path, tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    code, result, err = cli(capsys, store, "--json-logs", "build", str(demo), "--json")
    assert code == 0
    events = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line is one JSON object
    assert {e["phase"] for e in events} >= {"fetch", "compile", "audit", "assemble", "receipt"}
    assert all(set(e) == {"time", "phase", "kind", "layer", "message", "figures"} for e in events)
    assert result["schema"] == "sparkimg-build-result/v1"
    engine.remove_image(result["image"]["reference"])


def test_the_api_socket_and_the_client_see_the_same_image(engine: Engine, demo_base: str) -> None:
    from sparkimg.engine.docker import DockerEngine as EngineClass

    assert engine.api_socket is not None  # the dev engine listens on its default socket
    via_client = EngineClass(engine.client, engine.version).inspect(demo_base)
    assert via_client is not None and engine.inspect(demo_base) == via_client
    assert engine.inspect("sparkimg-test/no-such-image:0") is None


def _counted_builds(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The specs ``api.build`` is called with from now on (a stamped no-op never calls it)."""
    from sparkimg import api

    real_build = api.build
    calls: list[Path] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return real_build(*args, **kwargs)
    monkeypatch.setattr(api, "build", counted)
    return calls


def test_a_stamped_no_op_answers_without_the_pipeline_and_any_change_goes_the_whole_way(
    demo: Path, tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    code, built, _ = cli(capsys, store, "build", str(demo), "--json")
    assert code == 0
    time.sleep(1.1)  # files written less than a second before a build are never stamped (they may be mid-change)
    _, first_noop, first_err = cli(capsys, store, "build", str(demo), "--json")  # the whole way; writes the stamp
    _, first_text, _ = cli(capsys, store, "build", str(demo))
    calls = _counted_builds(monkeypatch)
    code, stamped, stamped_err = cli(capsys, store, "build", str(demo), "--json")
    assert code == 0 and calls == [] and stamped == first_noop and stamped_err == first_err  # same answer, no pipeline
    assert cli(capsys, store, "build", str(demo))[1] == first_text

    patch = demo.parents[1] / "patches" / "demo" / "serve.env"
    patch.write_text(patch.read_text())  # the same bytes, written again: the stamp no longer holds
    code, again, _ = cli(capsys, store, "build", str(demo), "--json")
    assert code == 0 and len(calls) == 1 and all(cached(again).values())

    engine.remove_image(built["image"]["reference"])  # the image gone: the whole way, loaded again from the store
    code, rebuilt, _ = cli(capsys, store, "build", str(demo), "--json")
    assert code == 0 and len(calls) == 2 and rebuilt["loaded_from_store"] is True
    assert rebuilt["image"]["id"] == built["image"]["id"]
    engine.remove_image(rebuilt["image"]["reference"])


def test_the_first_no_op_after_a_build_is_answered_by_the_builds_own_stamp_as_the_whole_way_would(
    demo: Path, tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A build that built stamps what the next build, a no-op, says (issue 36: the first no-op after
    a night's build at real size went the whole way, 0.5 s against docker's 0.12 s)."""
    from sparkimg.image import stamp

    store = tmp_path / "store"
    key = tmp_path / "k"
    assert cli(capsys, store, "keygen", "--out", str(key))[0] == 0
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    time.sleep(1.1)  # the inputs were written before the build started: they may be stamped
    code, built, _ = cli(capsys, store, "build", str(demo), "--json", "--key", str(key.with_suffix(".key")))
    assert code == 0 and not all(cached(built).values())
    calls = _counted_builds(monkeypatch)
    code, stamped, stamped_err = cli(capsys, store, "build", str(demo), "--json", "--key", str(key.with_suffix(".key")))
    assert code == 0 and calls == [], "the first no-op went the whole way"
    Path(stamp.location(store.expanduser(), demo)).unlink()
    code, whole, whole_err = cli(capsys, store, "build", str(demo), "--json", "--key", str(key.with_suffix(".key")))
    assert code == 0 and len(calls) == 1

    def timeless(out: dict[str, Any]) -> dict[str, Any]:
        return {**out, "steps": [step["step"] for step in out["steps"]]}
    assert timeless(stamped) == timeless(whole) and stamped_err == whole_err and "(unchanged)" in whole_err
    engine.remove_image(built["image"]["reference"])


def test_the_daemon_pulls_the_image_from_a_loopback_registry_and_keeps_no_name_from_it(
    demo: Path, tmp_path: Path, engine: Engine, demo_base: str
) -> None:
    from sparkimg import api
    from sparkimg.events import Collected, Kind, Phase

    store = tmp_path / "store"
    api.lock(demo, store=store)
    events = Collected()
    built = api.build(demo, store=store, report=events)
    assert not [e for e in events.of(Phase.ASSEMBLE, Kind.LOG) if "archive" in e.message]  # no fallback
    record = built.result.oci
    assert record is not None and built.result.image_id in (record.config_digest, record.manifest_digest)
    info = engine.inspect(built.result.image_ref)
    assert info is not None and info.id == built.result.image_id
    assert not [name for name in info.repo_digests if "sparkimg-handoff" in name]  # the registry's name is dropped
    engine.remove_image(built.result.image_ref)


def test_a_pull_the_daemon_cannot_finish_falls_back_to_a_load(
    demo: Path, tmp_path: Path, engine: Engine, demo_base: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The loopback registry withholds the new layers (as a daemon that cannot reach it would
    fail): the real daemon's pull fails, and the image goes in by ``docker load`` all the same."""
    from contextlib import contextmanager

    from sparkimg import api
    from sparkimg.events import Collected, Kind, Phase
    from sparkimg.image import handoff

    real = handoff.registry

    @contextmanager
    def withholding(manifest: bytes, manifest_digest: str, media_type: str, config_digest: str,
                    blobs: dict[str, Path]) -> Any:
        with real(manifest, manifest_digest, media_type, config_digest, {config_digest: blobs[config_digest]}) as got:
            yield got
    monkeypatch.setattr(handoff, "registry", withholding)
    store = tmp_path / "store"
    # A patch layer of this run's own: the engine lacks it, whatever earlier builds of the demo gave it.
    patch = demo.parents[1] / "patches" / "demo" / "serve.env"
    patch.write_text(patch.read_text() + f"VLLM_FALLBACK_TEST={uuid.uuid4().hex}\n")
    assert cli(capsys, store, "patches", "pin", str(patch.parent))[0] == 0
    api.lock(demo, store=store)
    events = Collected()
    started = time.monotonic()
    built = api.build(demo, store=store, report=events)
    fallback = [e.message for e in events.of(Phase.ASSEMBLE, Kind.LOG) if "archive" in e.message]
    assert len(fallback) == 1 and "did not pull from loopback" in fallback[0], fallback
    sent = [e.figures["sent"] for e in events.of(Phase.ASSEMBLE) if "sent" in e.figures]
    assert len(sent) == 1 and 1 <= int(sent[0] or 0) <= 3  # those the engine lacked: the new patch layer at least
    info = engine.inspect(built.result.image_ref)
    assert info is not None and info.id == built.result.image_id
    assert time.monotonic() - started < 120  # the daemon gave up on the missing blob without long retries
    engine.remove_image(built.result.image_ref)
