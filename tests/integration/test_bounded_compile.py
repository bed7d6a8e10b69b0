"""Compile layers in real bounded containers: limits applied, OOM reported, no network,
architecture audit on real nvcc output, --reserve refusal."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from sparkimg.compile.bounds import Overrides
from sparkimg.engine.protocol import Engine
from sparkimg.events import Collected, Kind, Phase
from sparkimg.image.build import build
from sparkimg.lock import resolve as lock_mod
from sparkimg.spec import load_spec
from sparkimg.store.content import Store

from .helpers import WHEEL, cli, spec_text

Project = Callable[..., Path]


def _locked(project: Project, store: Store, text: str) -> Path:
    path = project(text)
    spec = load_spec(path)
    lock_mod.write(spec, lock_mod.resolve(spec, store))
    return path


def test_bounds_reach_the_container(project: Project, store: Store, engine: Engine, demo_base: str) -> None:
    probe = ("for f in memory/memory.limit_in_bytes memory/memory.memsw.limit_in_bytes pids/pids.max "
             "cpu/cpu.cfs_quota_us memory.max pids.max cpu.max; do [ -f /sys/fs/cgroup/$f ] && "
             "echo \"$f=$(cat /sys/fs/cgroup/$f)\"; done; echo MAX_JOBS=$MAX_JOBS; echo NINJAFLAGS=$NINJAFLAGS; "
             "ls /sys/class/net; " + WHEEL)
    text = spec_text(demo_base, probe, memory="1g", job_memory="256m").replace("    pids: 256",
                                                                                "    pids: 256\n    cpus: 1")
    path = _locked(project, store, text)
    events = Collected()
    result = build(load_spec(path), lock_mod.load_lock(load_spec(path)), store, engine, report=events)
    lines = [e.message for e in events.of(Phase.COMPILE, Kind.LOG)]
    seen = dict(line.split("=", 1) for line in lines if "=" in line)
    assert seen.get("memory/memory.limit_in_bytes", seen.get("memory.max")) == str(1 << 30)
    if "memory/memory.memsw.limit_in_bytes" in seen:
        assert seen["memory/memory.memsw.limit_in_bytes"] == str(1 << 30)  # memory-swap = memory
    assert seen.get("pids/pids.max", seen.get("pids.max")) == "256"
    assert seen.get("cpu/cpu.cfs_quota_us", seen.get("cpu.max", "").split(" ")[0]) == "100000"
    assert seen["MAX_JOBS"] == "1" and seen["NINJAFLAGS"] == "-j1"  # one CPU
    assert "lo" in lines and "eth0" not in lines
    record = result.records["kernel"]
    assert record.metrics.peak_memory and record.metrics.peak_memory > 0 and record.metrics.wall_s > 0
    assert record.metrics.cpu_s is not None
    done = events.of(Phase.COMPILE, Kind.DONE)
    assert len(done) == 1 and done[0].layer == "kernel" and done[0].figures["jobs"] == 1
    engine.remove_image(result.image_ref)


def test_no_network_in_compile(project: Project, store: Store, engine: Engine, demo_base: str) -> None:
    requests.get("http://127.0.0.1:5000/v2/", timeout=5).raise_for_status()  # reachable from the host
    probe = ("python3 -c \"import os, socket; assert os.listdir('/sys/class/net') == ['lo'], os.listdir("
             "'/sys/class/net'); s = socket.socket(); s.settimeout(3); assert s.connect_ex(('127.0.0.1', 5000)) != 0; "
             "print('isolated')\" && " + WHEEL)
    path = _locked(project, store, spec_text(demo_base, probe))
    events = Collected()
    result = build(load_spec(path), lock_mod.load_lock(load_spec(path)), store, engine, report=events)
    lines = [e.message for e in events.of(Phase.COMPILE, Kind.LOG)]
    assert "isolated" in lines
    engine.remove_image(result.image_ref)


def test_oom_is_reported_with_bound_and_peak(
    project: Project, store: Store, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    hog = "python3 -c \"x = bytearray(600 << 20); print(len(x))\" && " + WHEEL
    path = _locked(project, store, spec_text(demo_base, hog, memory="96m", job_memory="32m"))
    code, _, err = cli(capsys, store.root, "build", str(path), "--quiet")
    assert code == 5
    assert "layer kernel: killed by the OOM killer at its memory bound 96.0 MiB" in err
    assert "peak" in err and "raise the layer's memory" in err
    assert "Traceback" not in err


def test_kill_9_is_not_called_oom(project: Project, store: Store, engine: Engine, demo_base: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = _locked(project, store, spec_text(demo_base, "kill -9 $$"))
    code, _, err = cli(capsys, store.root, "build", str(path), "--quiet")
    assert code == 1 and "exited with 137" in err and "OOM" not in err


def test_audit_fails_a_layer_built_only_for_sm120(
    project: Project, store: Store, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    command = "python3 /src/build_wheel.py --out /out"
    text = spec_text(demo_base, command, memory="2g", job_memory="512m").replace(
        "    pids: 256", "    pids: 256\n    env:\n      NVCC_GENCODE: \"-gencode arch=compute_120,code=sm_120\"")
    path = _locked(project, store, text)
    code, _, err = cli(capsys, store.root, "build", str(path), "--quiet")
    assert code == 6
    assert "lacks requested CUDA architectures (12.1a)" in err
    assert "has sm [120], lacks [121]" in err
    audits = list((store.root / "records" / "audits").glob("*.json"))
    assert len(audits) == 1 and '"missing": [\n' in audits[0].read_text()


def test_audit_passes_real_sm121a_build(project: Project, store: Store, engine: Engine, demo_base: str) -> None:
    text = spec_text(demo_base, "python3 /src/build_wheel.py --out /out", memory="2g", job_memory="512m").replace(
        "    pids: 256", "    pids: 256\n    env:\n      NVCC_GENCODE: \"{gencode}\"")
    path = _locked(project, store, text)
    result = build(load_spec(path), lock_mod.load_lock(load_spec(path)), store, engine)
    reports = result.records["kernel"].audit
    assert reports and reports[0]["cubin_sm"] == [121] and reports[0]["missing"] == []
    engine.remove_image(result.image_ref)


def test_reserve_refuses_before_any_container(
    project: Project, store: Store, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _locked(project, store, spec_text(demo_base, WHEEL))
    code, _, err = cli(capsys, store.root, "build", str(path), "--reserve", "100000g", "--quiet")
    assert code == 4 and "MemAvailable" in err and "--reserve" in err
    assert list((store.root / "records").glob("layers/*.json")) == []


def test_reserve_shrinks_the_bound(project: Project, store: Store, engine: Engine, demo_base: str) -> None:
    from sparkimg.compile.bounds import mem_available

    path = _locked(project, store, spec_text(demo_base, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes "
                                             "2>/dev/null || cat /sys/fs/cgroup/memory.max; " + WHEEL,
                                             memory="8g", job_memory="64m"))
    reserve = mem_available() - (512 << 20)
    events = Collected()
    result = build(load_spec(path), lock_mod.load_lock(load_spec(path)), store, engine, Overrides(reserve=reserve),
                   report=events)
    lines = [e.message for e in events.of(Phase.COMPILE, Kind.LOG)]
    limit = int(next(line for line in lines if line.isdigit()))
    assert limit < 1 << 30  # shrunk from 8 GiB to what the reserve leaves (about 512 MiB)
    engine.remove_image(result.image_ref)


def test_kill_9_leaves_nothing_running(project: Project, store: Store, engine: Engine, demo_base: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A compile container stops within seconds of its sparkimg's death (the lease watchdog), and
    the next run (here `doctor --clean`) removes it and the run's work folder."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from sparkimg.engine.ownership import OWNER_LABEL

    path = _locked(project, store, spec_text(demo_base, "sleep 300; " + WHEEL))
    proc = subprocess.Popen([sys.executable, "-m", "sparkimg.cli", "--store", str(store.root), "build", str(path),
                             "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def containers() -> list[str]:
        listed = subprocess.run([engine.client, "ps", "-a", "--filter", f"label={OWNER_LABEL}", "--format",
                                 f'{{{{.Names}}}} {{{{.Label "{OWNER_LABEL}"}}}}'], capture_output=True, text=True,
                                check=True).stdout
        return [line.split()[0] for line in listed.splitlines() if f"/{proc.pid}/" in line]

    deadline = time.monotonic() + 60
    while not containers() and time.monotonic() < deadline:
        time.sleep(0.5)
    (name,) = containers()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 15
    running = "true"
    while running == "true" and time.monotonic() < deadline:
        time.sleep(0.5)
        running = subprocess.run([engine.client, "inspect", "-f", "{{.State.Running}}", name], capture_output=True,
                                 text=True, check=False).stdout.strip()
    assert running == "false", "the container outlived its sparkimg by more than 15 s"
    work = [p for p in (store.root / "tmp").iterdir() if p.name.startswith("compile-")]
    assert work  # the dead run's folder, still leased by nobody
    for folder in work:
        old = time.time() - 3600
        os.utime(folder / ".sparkimg-lease", (old, old))
    code, cleaned, _ = cli(capsys, store.root, "doctor", "--clean", "--json")
    assert code == 0 and name in cleaned["removed_containers"] and cleaned["removed_folders"] >= len(work)
    assert containers() == [] and not any(p.exists() for p in work)
