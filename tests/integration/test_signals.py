"""Stopping a real build (issue 39): SIGTERM (what systemd sends the nightly service) and SIGINT
while the demo's compile container runs end the build within seconds with 143 or 130, and leave
no container, no lease folder, no work folder in the store and no receipt; a second signal ends
it at once. When the engine itself goes away mid-compile, the build ends with exit 3 and a
sentence, not a traceback."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from sparkimg.engine.ownership import OWNER_LABEL
from sparkimg.engine.protocol import Engine

from .helpers import cli, copy_demo
from .nodes import nodes

SPARKIMG = [sys.executable, "-c", "import sys; from sparkimg.cli import main; sys.exit(main())"]


def _leases() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("sparkimg-lease-*"))


def _abandoned(folders: set[Path]) -> set[Path]:
    """Those of ``folders`` still there whose lease no process holds (another build running beside
    this test holds its own)."""
    left = set()
    for folder in folders:
        try:
            with open(folder / "lease", "rb") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                left.add(folder)
        except (BlockingIOError, FileNotFoundError):
            continue
    return left


def _owned(client: str, pid: int, env: dict[str, str], *, running: bool = False) -> list[str]:
    """The containers this build's process (``pid``) owns, by the owner label (``running``: those
    whose process has started)."""
    state = ["--filter", "status=running"] if running else []
    listed = subprocess.run([client, "ps", "-a", *state, "--filter", f"label={OWNER_LABEL}", "--format",
                             f'{{{{.Names}}}} {{{{.Label "{OWNER_LABEL}"}}}}'], capture_output=True, text=True,
                            env=env, check=False)
    return [line.split()[0] for line in listed.stdout.splitlines() if f"/{pid}/" in line]


def _start(spec: Path, store: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """``sparkimg build SPEC`` as a process of its own, its stderr piped (read it with ``_Said``)."""
    return subprocess.Popen([*SPARKIMG, "--store", str(store), "build", str(spec)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _when_compiling(process: subprocess.Popen[str], client: str, env: dict[str, str]) -> None:
    deadline = time.monotonic() + 120
    while not _owned(client, process.pid, env, running=True):
        assert process.poll() is None, process.returncode
        assert time.monotonic() < deadline, "no compile container appeared"
        time.sleep(0.1)


class _Said:
    """The build's stderr, read line by line on a thread while it runs."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, args=(process,), daemon=True)
        self.reader.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self.lines.append(line)

    def wait_for(self, text: str, process: subprocess.Popen[str]) -> None:
        deadline = time.monotonic() + 120
        while not any(text in line for line in self.lines):
            assert process.poll() is None, "".join(self.lines)
            assert time.monotonic() < deadline, f"{text!r} never said: {''.join(self.lines)}"
            time.sleep(0.02)

    def text(self) -> str:
        self.reader.join(timeout=30)
        return "".join(self.lines)


# (the moment, the signals, the exit code): the moment is a line the build says, or "container"
# for its compile container running.
MOMENTS = [("compile demo-kernel:", (signal.SIGTERM,), 143), ("container", (signal.SIGTERM,), 143),
           ("container", (signal.SIGINT,), 130), ("assemble", (signal.SIGTERM,), 143),
           ("assemble", (signal.SIGINT,), 130), ("container", (signal.SIGTERM, signal.SIGTERM), 143)]


@pytest.mark.parametrize(("moment", "signals", "code"), MOMENTS)
def test_a_signal_at_any_moment_of_a_build_stops_it_and_leaves_nothing(
    tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str], moment: str,
    signals: tuple[signal.Signals, ...], code: int
) -> None:
    demo = copy_demo(tmp_path / "project")
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    leases = _leases()
    env = dict(os.environ)
    process = _start(demo, store, env)
    said = _Said(process)
    if moment == "container":
        _when_compiling(process, engine.client, env)
    else:
        said.wait_for(moment, process)
    sent = time.monotonic()
    for signum in signals:
        process.send_signal(signum)
    process.wait(timeout=60)
    took, err = time.monotonic() - sent, said.text()
    assert process.returncode == code, (process.returncode, err[-1500:])
    assert took < 15, took
    assert "Traceback" not in err, err
    assert not list((demo.parent.parent / "receipts").rglob("*.receipt.json"))
    if len(signals) > 1:  # the second signal skips cleanup; the next run or gc sweeps what it left
        return
    assert f"stopped by {signals[0].name}" in err, err
    time.sleep(2)  # a container outlives its sparkimg by about a second (the lease wrapper)
    assert _owned(engine.client, process.pid, env) == []
    assert _abandoned(_leases() - leases) == set()
    left = [p.name for p in (store / "tmp").iterdir() if not p.name.endswith(".lock") and p.name != "leases"]
    assert left == [] and list((store / "tmp" / "leases").iterdir()) == [], left


def test_the_engine_going_away_mid_compile_is_exit_3_and_a_sentence(
    tmp_path: Path, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    demo = copy_demo(tmp_path / "project")
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    client = shutil.which("docker") or "/usr/bin/docker"
    daemons = Path(tempfile.mkdtemp(prefix="sig"))  # short: a unix socket's path holds 107 bytes
    with nodes(1, daemons) as (node,):
        env = {**os.environ, "DOCKER_HOST": node.host}
        process = _start(demo, store, env)
        said = _Said(process)
        _when_compiling(process, client, env)
        os.kill(int((node.root / "dockerd.pid").read_text()), signal.SIGKILL)
        process.wait(timeout=120)
        err = said.text()
    shutil.rmtree(daemons, ignore_errors=True)
    assert process.returncode == 3, (process.returncode, err)
    assert "Traceback" not in err and "the engine went away" in err, err
