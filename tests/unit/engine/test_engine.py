"""The engine adapter against a fake docker client: an absent image is None, an engine that
does not answer is an EngineError (exit 3), one inspect call gives ID and labels, and
connect stays cheap (one version call, buildx only when needed, no python-on-whales)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparkimg.engine import connect as connect_mod
from sparkimg.engine import socket_api as engine_api
from sparkimg.engine.connect import connect as connect_engine
from sparkimg.engine.docker import DockerEngine
from sparkimg.engine.protocol import ImageInfo
from sparkimg.errors import EngineError
from tests.support import FakeEngineApi

REPO = Path(__file__).resolve().parents[3]
DOWN = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
IMAGE = {
    "Id": "sha256:" + "a" * 64,
    "RepoDigests": ["127.0.0.1:5000/demo@sha256:" + "b" * 64],
    "Config": {"Labels": {"dev.sparkimg.key": "k1", "org.opencontainers.image.base.digest": "sha256:" + "c" * 64}},
}
# What each docker prints for an image it does not have.
ABSENT = {
    "20.10": "Error: No such image: {ref}",
    "28.2": "Error response from daemon: no such image: {ref}: No such image: {ref}",
}


def fake_docker(tmp_path: Path, *, version: str = "28.2.2", state: str = "running", buildx: bool = True,
                absent: str = ABSENT["20.10"], name: str = "docker") -> Path:
    """A client script that answers like docker in ``state`` (running, stopped, broken, failing)
    and records each call, one line of arguments each, in ``<name>.calls``."""
    script = tmp_path / name
    calls = tmp_path / f"{name}.calls"
    present = json.dumps(IMAGE).replace("'", "'\\''")
    has_buildx = "echo 'github.com/docker/buildx v0.20.0'; exit 0"
    no_buildx = "echo 'docker: unknown command: docker buildx' >&2; exit 1"
    script.write_text(f"""#!/bin/sh
echo "$*" >> '{calls}'
state='{state}'
if [ "$state" = broken ]; then echo "{name}: error while loading shared libraries" >&2; exit 127; fi
case "$1" in
  version)
    if [ "$state" = stopped ]; then echo '{version}|'; echo '{DOWN}' >&2; exit 1; fi
    echo '{version}|{version}'; exit 0 ;;
  buildx)
    {has_buildx if buildx else no_buildx} ;;
  info)
    if [ "$state" = stopped ]; then echo '{DOWN}' >&2; exit 1; fi
    echo '{version}'; exit 0 ;;
  image)
    ref="$5"
    if [ "$state" = stopped ]; then echo '{DOWN}' >&2; exit 1; fi
    if [ "$state" = failing ]; then echo 'Error response from daemon: 500 Internal Server Error' >&2; exit 1; fi
    if [ "$ref" = present ]; then echo '{present}'; exit 0; fi
    echo "{absent.format(ref="$ref")}" >&2; exit 1 ;;
esac
echo "unexpected: $*" >&2; exit 2
""")
    script.chmod(0o755)
    return script


def calls(script: Path) -> list[str]:
    log = script.with_name(script.name + ".calls")
    return log.read_text().splitlines() if log.exists() else []


def engine_for(script: Path) -> DockerEngine:
    return DockerEngine(client=str(script), version="28.2.2", buildx=True)


@pytest.mark.parametrize("absent", sorted(ABSENT.values()))
def test_absent_image_is_none(tmp_path: Path, absent: str) -> None:
    engine = engine_for(fake_docker(tmp_path, absent=absent))
    assert engine.inspect("sparkimg/demo:nope") is None
    assert engine.image_id("sparkimg/demo:nope") is None


def test_image_labels_of_an_absent_image_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="no such image"):
        engine_for(fake_docker(tmp_path)).image_labels("sparkimg/demo:nope")


@pytest.mark.parametrize("method", ["inspect", "image_id", "image_labels"])
def test_stopped_engine_is_not_an_absent_image(tmp_path: Path, method: str) -> None:
    engine = engine_for(fake_docker(tmp_path, state="stopped"))
    with pytest.raises(EngineError) as info:
        getattr(engine, method)("present")
    assert info.value.exit_code == 3
    assert "not running" in info.value.message and info.value.hint and "start it" in info.value.hint


def test_failing_engine_is_an_error_that_says_so(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as info:
        engine_for(fake_docker(tmp_path, state="failing")).image_id("present")
    assert info.value.exit_code == 3
    assert "engine failed" in info.value.message and "500 Internal Server Error" in info.value.message
    assert info.value.hint


def test_missing_client_binary_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as info:
        DockerEngine(client=str(tmp_path / "gone"), version="28.2.2").image_id("present")
    assert info.value.exit_code == 3


def test_inspect_reads_id_labels_and_digests_in_one_call(tmp_path: Path) -> None:
    script = fake_docker(tmp_path)
    engine = engine_for(script)
    info = engine.inspect("present")
    assert info == ImageInfo(IMAGE["Id"], IMAGE["Config"]["Labels"], tuple(IMAGE["RepoDigests"]))  # type: ignore[index,arg-type]
    assert len(calls(script)) == 1 and calls(script)[0].startswith("image inspect --format {{json .}} ")
    assert engine.image_id("present") == IMAGE["Id"]
    assert engine.image_labels("present")["dev.sparkimg.key"] == "k1"


def test_image_without_labels(tmp_path: Path) -> None:
    script = fake_docker(tmp_path)
    script.write_text(script.read_text().replace('"Labels": {', '"Labels": null, "X": {'))
    info = engine_for(script).inspect("present")
    assert info is not None and info.labels == {}


def test_connect_checks_version_and_daemon_in_one_call(tmp_path: Path) -> None:
    script = fake_docker(tmp_path)
    engine = connect_engine(client=str(script))
    assert (engine.client, engine.version, engine.server_version()) == (str(script), "28.2.2", "28.2.2")
    assert calls(script) == ["version --format {{.Client.Version}}|{{.Server.Version}}"]
    assert isinstance(engine, DockerEngine) and engine.buildx and engine.buildx  # asked once, when first needed
    assert calls(script)[1:] == ["buildx version"]


def test_connect_to_a_stopped_engine(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as info:
        connect_engine(client=str(fake_docker(tmp_path, state="stopped")))
    assert info.value.exit_code == 3
    assert info.value.message.startswith("the Docker engine is not running (client ")


def test_connect_with_a_broken_client(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as info:
        connect_engine(client=str(fake_docker(tmp_path, state="broken")))
    assert info.value.message.startswith("no usable Docker client: ") and "shared libraries" in info.value.message


def test_connect_with_a_missing_client(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match=r"no usable Docker client: .*gone: not found"):
        connect_engine(client=str(tmp_path / "gone"))


@pytest.mark.parametrize("state", ["running", "stopped"])
def test_connect_skips_a_new_client_without_buildx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   state: str) -> None:
    """Client choice is unchanged: docker >= 23 without buildx cannot build; an older one has
    BuildKit built in. The same client is chosen whether or not the engine runs."""
    new = fake_docker(tmp_path, version="28.2.2", buildx=False, state=state, name="docker28")
    old = fake_docker(tmp_path, version="20.10.24", buildx=False, state=state, name="docker20")
    monkeypatch.setattr(connect_mod, "_candidates", lambda: [str(new), str(old)])
    if state == "stopped":
        with pytest.raises(EngineError, match=f"not running \\(client {old}\\)"):
            connect_engine()
        return
    engine = connect_engine()
    assert engine.client == str(old) and isinstance(engine, DockerEngine) and not engine.buildx
    assert calls(new)[1:] == ["buildx version"]


def test_connect_refuses_a_new_client_without_buildx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKIMG_DOCKER", str(fake_docker(tmp_path, buildx=False)))
    with pytest.raises(EngineError, match="no buildx plugin and no built-in BuildKit"):
        connect_engine()


def test_an_explicit_client_is_taken_without_asking_for_buildx(tmp_path: Path) -> None:
    script = fake_docker(tmp_path, buildx=False)
    engine = connect_engine(client=str(script))
    assert len(calls(script)) == 1 and isinstance(engine, DockerEngine) and engine.buildx is False


def test_connect_imports_no_container_library(tmp_path: Path) -> None:
    script = fake_docker(tmp_path)
    probe = (f"import sys; from sparkimg.engine.connect import connect; connect(client={str(script)!r}); "
             "print('python_on_whales' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "False"


def test_importing_the_library_loads_no_heavy_dependency() -> None:
    """requests, cryptography, python-on-whales and rich are imported where they are used, so that
    commands that do not download, sign, run a container or draw a table do not pay for them."""
    heavy = ("requests", "cryptography", "python_on_whales", "pydantic", "rich")
    probe = ("import sys, sparkimg.engine.connect, sparkimg.fetch.inputs, sparkimg.lock.resolve, "
             "sparkimg.signing.keys, sparkimg.api, sparkimg.cli.commands, sparkimg.image.build, "
             "sparkimg.receipts.emit; "
             f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


# -- the Engine API socket and the remembered client --------------------------------------------


def test_inspect_over_the_api_socket_answers_like_the_client(tmp_path: Path) -> None:
    socket_path = tmp_path / "docker.sock"
    api = FakeEngineApi(socket_path, IMAGE)
    try:
        engine = DockerEngine(client=str(fake_docker(tmp_path)), version="28.2.2", api_socket=str(socket_path))
        via_api = engine.inspect("present")
        assert via_api == DockerEngine(client=engine.client, version="28.2.2").inspect("present")
        assert engine.inspect("absent") is None
    finally:
        api.close()
    assert calls(Path(engine.client)) == ["image inspect --format {{json .}} present"]  # the client only once, above


def test_api_socket_gone_is_an_engine_that_is_not_running(tmp_path: Path) -> None:
    engine = DockerEngine(client="docker", version="28.2.2", api_socket=str(tmp_path / "gone.sock"))
    with pytest.raises(EngineError, match="not running") as caught:
        engine.inspect("present")
    assert caught.value.exit_code == 3


def test_api_socket_error_is_an_engine_failure(tmp_path: Path) -> None:
    socket_path = tmp_path / "docker.sock"
    api = FakeEngineApi(socket_path, IMAGE, status=500)
    try:
        with pytest.raises(EngineError, match="answered 500"):
            DockerEngine(client="docker", version="28.2.2", api_socket=str(socket_path)).inspect("present")
    finally:
        api.close()


def test_the_api_socket_is_used_only_where_the_client_would_use_it(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "d.sock"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "config"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'd.sock'}")
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    assert engine_api.api_socket("/usr/bin/docker") == str(tmp_path / "d.sock")
    assert engine_api.api_socket("/usr/bin/podman") is None
    monkeypatch.setenv("DOCKER_HOST", "ssh://node2")
    assert engine_api.api_socket("/usr/bin/docker") is None
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'missing.sock'}")
    assert engine_api.api_socket("/usr/bin/docker") is None
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'd.sock'}")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.json").write_text('{"currentContext": "node2"}')
    assert engine_api.api_socket("/usr/bin/docker") is None
    sock.close()


def test_a_remembered_client_is_not_probed_again_until_the_binary_changes(tmp_path: Path) -> None:
    script = fake_docker(tmp_path)
    remember = tmp_path / "engine.json"
    first = connect_engine(client=str(script), remember=remember)
    probes = len(calls(script))
    again = connect_engine(client=str(script), remember=remember)
    assert (again.client, again.version) == (first.client, first.version) and len(calls(script)) == probes
    script.write_text(script.read_text() + "\n")  # another binary at the same path
    connect_engine(client=str(script), remember=remember)
    assert len(calls(script)) > probes


@pytest.mark.parametrize(("reference", "split"), [
    ("sparkimg/demo:abc", ("sparkimg/demo", "abc")), ("sparkimg/demo", ("sparkimg/demo", "latest")),
    ("127.0.0.1:5000/x/y", ("127.0.0.1:5000/x/y", "latest")), ("127.0.0.1:5000/x/y:1", ("127.0.0.1:5000/x/y", "1")),
])
def test_a_tag_target_splits_as_the_api_takes_it(reference: str, split: tuple[str, str]) -> None:
    from sparkimg.engine.docker import split_tag

    assert split_tag(reference) == split
