"""One compile layer in its own bounded container: no network, inputs read-only.

The container runs from the pinned base (by image ID), with the source unpacked at
``/src`` (read-only), a host CUDA toolkit at its own path (read-only) when the spec says
so, and ``/out`` as the only writable mount; a layer with a compiler cache also gets its store
folder read-write and sccache read-only (``compile.cache``). A small wrapper records peak memory
and CPU time from the container's own cgroup before it exits; it starts the command at a fixed pid.
After the command, every output is normalised (nvcc's pids out of ELF files, each wheel's zip in
one form: ``elfnames``, ``wheelzip``) before the audit reads it and the store admits it.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkimg._internal import elf
from sparkimg._internal.fs.verified import VerifiedReader, rot_named
from sparkimg._internal.units import format_size
from sparkimg.compile import audit, elfnames, machines, toolkit, wheelzip
from sparkimg.compile import cache as compiler_cache
from sparkimg.compile.bounds import Budget
from sparkimg.engine.protocol import Engine, Mount, RunLimits
from sparkimg.errors import AuditError, BuildError, LockError, OOMError
from sparkimg.events import Event, Kind, Phase, Reporter, Steps
from sparkimg.formats.canonical import loads
from sparkimg.formats.lockfile import PypiPin
from sparkimg.formats.record import LayerRecord, Metrics, Output
from sparkimg.lock.resolve import Lock
from sparkimg.plan.keys import RECORDS, PlannedLayer, compile_epoch
from sparkimg.source import patching as _srcpatch
from sparkimg.source import sdist as _sdist
from sparkimg.spec import CompileLayer, Spec, substitute
from sparkimg.store import trees
from sparkimg.store.content import Store

# The first pid the layer's own processes get is PID_FLOOR + 1 (far above the handful a runtime uses).
PID_FLOOR = 100
# Peak memory and CPU time from cgroup v1 or v2, as seen from inside the container.
WRAPPER = r"""#!/bin/sh
# Written by sparkimg: runs the layer's command, then records cgroup metrics.
# Pids first: the runtime's own threads use a varying number of pids in this namespace before this
# script starts, so short-lived children use pids up to PID_FLOOR; the processes below then always
# get PID_FLOOR + 1, + 2, ..., and a command that starts its processes in order gets the same pids
# on every build (nvcc names its temp files, and so symbols, by pid: docs/reproducibility.md).
last=0
while [ "$last" -lt PID_FLOOR ]; do : & last=$!; wait "$last"; done
# A watchdog, one process started by one fork before the command (the watcher is chosen with
# builtins only), waits blocked (no polling) for the lease its sparkimg holds: it comes free only
# when that sparkimg is gone, and then every process here but this init is killed.
watchdog=
if [ -n "$SPARKIMG_LEASE" ] && [ -f "$SPARKIMG_LEASE" ]; then
  if command -v flock >/dev/null 2>&1; then
    flock "$SPARKIMG_LEASE" /bin/sh -c \
      'echo "sparkimg: the build that started this container is gone; stopping" >&2; kill -9 -1' 2>/dev/null &
    watchdog=$!
  elif command -v python3 >/dev/null 2>&1; then
    python3 -c 'import fcntl, os, sys; fcntl.flock(open(sys.argv[1]), fcntl.LOCK_EX); sys.stderr.write(
"sparkimg: the build that started this container is gone; stopping\n"); sys.stderr.flush(); os.kill(-1, 9)' \
      "$SPARKIMG_LEASE" 2>/dev/null &
    watchdog=$!
  fi
fi
/bin/sh -c "$SPARKIMG_COMMAND" &
child=$!
wait "$child"
rc=$?
[ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
# The compiler cache's figures for this build, and its server stopped (sparkimg sets the command).
if [ -n "$SPARKIMG_COMPILER_STATS" ]; then
  /bin/sh -c "$SPARKIMG_COMPILER_STATS" > /sparkimg/meta/compiler-cache.json 2>/dev/null
fi
g=/sys/fs/cgroup
peak=$(cat $g/memory/memory.max_usage_in_bytes 2>/dev/null || cat $g/memory.peak 2>/dev/null || echo null)
cpu_ns=$(cat $g/cpuacct/cpuacct.usage 2>/dev/null || cat $g/cpu,cpuacct/cpuacct.usage 2>/dev/null || echo null)
cpu_us=null
if [ -f $g/cpu.stat ]; then
  while read -r k v; do [ "$k" = usage_usec ] && cpu_us=$v; done < $g/cpu.stat
fi
printf '{"exit": %s, "peak_memory": %s, "cpu_ns": %s, "cpu_us": %s}\n' "$rc" "$peak" "$cpu_ns" "$cpu_us" \
  > /sparkimg/meta/metrics.json
exit $rc
"""
WRAPPER = WRAPPER.replace("PID_FLOOR", str(PID_FLOOR))
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def compile_layer(
    spec: Spec,
    lock: Lock,
    layer: CompileLayer,
    planned: PlannedLayer,
    source_blob: str,
    base_image: str,
    store: Store,
    engine: Engine,
    budget: Budget,
    report: Reporter,
    input_blobs: Mapping[str, str] | None = None,
) -> LayerRecord:
    """Build one layer, audit its outputs, admit them to the store; return its record. The
    layer's compiler cache is the store's (``build --check`` compiles in a scratch store: with an
    empty one)."""
    work = store.temp_dir(f"compile-{layer.name}.")
    cache = layer.compiler_cache
    tool = store.blob((input_blobs or {})[cache.source]) if cache is not None else None
    try:
        with (compiler_cache.attached(store, lock, layer, tool, work) if tool is not None
              else contextlib.nullcontext(None)) as attached:
            return _compile(spec, lock, layer, planned, source_blob, base_image, store, engine, budget, report,
                            input_blobs, work, attached)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _compile(spec: Spec, lock: Lock, layer: CompileLayer, planned: PlannedLayer, source_blob: str, base_image: str,
             store: Store, engine: Engine, budget: Budget, report: Reporter, input_blobs: Mapping[str, str] | None,
             work: Path, cache: compiler_cache.Attached | None) -> LayerRecord:
    src, out, meta, tools = (work / d for d in ("src", "out", "meta", "bin"))
    for folder in (src, out, meta, tools):
        folder.mkdir()
    out.chmod(0o777)
    meta.chmod(0o777)
    phases = Steps()
    with phases.timed("source"):
        prepare_source(spec, lock, layer, store, source_blob, src)
    (tools / "run.sh").write_text(WRAPPER)
    mounts = [Mount(src, "/src"), Mount(tools, "/sparkimg/bin"), Mount(out, "/out", writable=True),
              Mount(meta, "/sparkimg/meta", writable=True)]
    with phases.timed("inputs"):
        for name in layer.inputs:
            staged = _stage_input(lock, name, store, (input_blobs or {})[name], work)
            mounts.append(Mount(staged, f"/inputs/{name}"))
        toolkit = toolkit_mount(store, lock)
    if toolkit is not None:
        mounts.append(toolkit)
    env = container_env(spec, lock, layer, budget)
    if cache is not None:
        mounts += cache.mounts()
        env.update(cache.env())
    report(Event(Phase.COMPILE, f"compile {layer.name}: {budget.jobs} job(s), memory "
                 f"{format_size(budget.memory)}, pids {budget.pids}, network none"
                 + (f", {cache.tool} ({cache.folder.name})" if cache is not None else ""), layer.name,
                 figures={"jobs": budget.jobs, "memory": budget.memory, "pids": budget.pids}))
    tail: list[str] = []

    def keep(name: str, phase: str, line: str) -> None:
        tail.append(line)
        del tail[:-30]
        report(Event(Phase(phase), line, name, Kind.LOG))

    with phases.timed("container"):
        result = engine.run_bounded(
            base_image, ["/bin/sh", "/sparkimg/bin/run.sh"], workdir="/src",
            limits=RunLimits(budget.memory, budget.cpus, budget.cpuset, budget.pids, budget.cgroup_parent),
            mounts=mounts, env=env, log=keep, layer=layer.name, phase="compile",
        )
    metrics = _metrics(meta / "metrics.json", phases.took("container"))  # timed once
    if result.oom_killed:
        peak = metrics.peak_memory
        raise OOMError(
            f"layer {layer.name}: killed by the OOM killer at its memory bound "
            f"{format_size(budget.memory)} (peak {format_size(peak) if peak else 'at the bound'}, "
            f"{budget.jobs} job(s) of {format_size(budget.job_memory)} each)",
            hint="raise the layer's memory (or --memory), or raise job_memory so fewer jobs run at once",
        )
    if result.exit_code != 0:
        raise BuildError(f"layer {layer.name}: command exited with {result.exit_code}; last output:\n"
                         + "\n".join(f"    {line}" for line in tail[-15:]))
    produced = sorted(out.glob(layer.outputs))
    if not produced:
        raise BuildError(f"layer {layer.name}: the command wrote no {layer.outputs} to /out",
                         hint="make the command write its wheels into /out")
    with phases.timed("normalise"):
        for path in produced:
            _normalise(layer.name, path, compile_epoch(lock, layer))
    wanted = [a.sm for a in spec.cuda_architectures]
    with phases.timed("audit"):
        reports = [r for path in produced for r in audit.audit_output(path, wanted)]
    bad = audit.failures(reports)
    store.write_record("audits", planned.key, {"layer": layer.name, "wanted_sm": wanted, "reports": reports})
    report(Event(Phase.AUDIT, f"audit {layer.name}: {len(reports)} shared object(s), "
                 f"{len(bad)} lacking {', '.join(a.text for a in spec.cuda_architectures)}",
                 layer.name))
    for line in audit.helpers(reports):
        report(Event(Phase.AUDIT, f"audit {layer.name}: helper {line}", layer.name))
    machines.refuse(layer.name, lock.platform, [(r["file"], r["machine"]) for r in reports
                                                if elf.foreign(lock.platform, r.get("machine"))])
    if bad:
        lines = "\n".join(f"    {line}" for line in audit.failure_lines(bad))
        raise AuditError(
            f"layer {layer.name}: compiled code lacks requested CUDA architectures "
            f"({', '.join(a.text for a in spec.cuda_architectures)}):\n{lines}",
            hint="pass the spec's architectures to the build ({gencode}, {cuda_arch}); check "
            "TORCH_CUDA_ARCH_LIST and that CMake did not collapse 12.1a to 12.0",
        )
    with phases.timed("admit"):
        outputs = tuple(Output(p.name, store.put_file(p, what=f"{layer.name}/{p.name}"), p.stat().st_size)
                        for p in produced)
    steps = _steps(meta / "steps.json")
    hits = compiler_cache.summary(cache, meta, steps) if cache is not None else {}
    if hits:
        saved = f", {hits['saved_s']:.0f} s of compiling saved" if hits.get("saved_s") else ""
        report(Event(Phase.COMPILE, f"compile {layer.name}: {hits['tool']}: {hits.get('hits', 0)} hit(s), "
                     f"{hits.get('misses', 0)} miss(es){saved}", layer.name,
                     figures={k: v for k, v in hits.items() if isinstance(v, (int, float))}))
    record = LayerRecord(layer.name, planned.key, outputs, metrics, budget.to_json(), tuple(reports),
                         time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), steps, hits,
                         {step.name: step.wall_s for step in phases.done})
    store.write_record(RECORDS, planned.key, record.to_json())
    return record


def cuda_home(lock: Lock) -> str | None:
    """Where a layer's container sees the CUDA toolkit sparkimg mounts (read-only): the host's at
    its own path (``toolchain: cuda: host``), the toolkit wheels' tree at ``toolkit.MOUNT``; None
    when nvcc comes from the base. What it is (nvcc's digest, or every wheel's) is in every compile key."""
    toolchain = lock.toolchain
    if toolchain.cuda == "host" and toolchain.path and toolchain.resolved:
        return toolchain.path
    return toolkit.MOUNT if toolchain.cuda == "wheels" else None


def toolkit_mount(store: Store, lock: Lock) -> Mount | None:
    """The toolkit's read-only mount (``cuda_home``); the wheels' tree is unpacked into the store first."""
    toolchain, target = lock.toolchain, cuda_home(lock)
    if target is None:
        return None
    if toolchain.cuda == "wheels":
        return Mount(toolkit.tree(store, toolchain), target)
    return Mount(Path(str(toolchain.resolved)), target)


def container_env(spec: Spec, lock: Lock, layer: CompileLayer, budget: Budget) -> dict[str, str]:
    """What the layer's command finds in its environment. Every value comes from what the layer's
    key names (``plan.keys.layer_inputs``: command, env, architectures, toolchain, the layer's own
    epoch), except the parallelism knobs of ``budget``: a job count never changes an output, and
    ``build --check`` proves it. tests/unit/plan/test_one_key_one_output.py holds it so."""
    env = {"PATH": SYSTEM_PATH, "SOURCE_DATE_EPOCH": str(compile_epoch(lock, layer)), **budget.env()}
    cuda = cuda_home(lock)
    if cuda is not None:
        env.update({"CUDA_HOME": cuda, "PATH": f"{cuda}/bin:{SYSTEM_PATH}"})
    variables = spec.variables(budget.jobs)
    env.update({k: substitute(v, variables) for k, v in layer.env.items()})
    env["SPARKIMG_COMMAND"] = substitute(layer.command, variables)
    return env


def _normalise(layer: str, path: Path, epoch: int) -> None:
    """Make an output's bytes a function of its content: nvcc's pids out of ELF files (bare or
    in a wheel), and every wheel's zip rewritten in one fixed form (docs/reproducibility.md)."""
    if path.suffix == ".whl":
        try:
            wheelzip.normalise(path, epoch, rewrite=elfnames.member)
        except (zipfile.BadZipFile, ValueError, EOFError) as exc:
            raise BuildError(f"layer {layer}: {path.name} in /out is not a wheel sparkimg can read: {exc}",
                             hint="write a zip archive (a wheel) to /out") from None
    elif path.is_file():
        data = path.read_bytes()
        if (new := elfnames.neutralise(data)) != data:
            temp = path.with_name(f".{path.name}.tmp")
            temp.write_bytes(new)
            temp.replace(path)


def prepare_source(spec: Spec, lock: Lock, layer: CompileLayer, store: Store, blob: str, target: Path) -> None:
    """The layer's /src: its source unpacked once into the store (an sdist without its top
    folder; ``store.trees``), linked into ``target``, then its ``source_patches`` applied in
    order, each checked against the sha256 the lock pins; every file a patch names gets its own
    copy first, so the store's tree is never written."""
    pin = lock.sources[layer.source]
    sdist = isinstance(pin, PypiPin) and pin.dist == "sdist"
    what = f"sources.{layer.source}" + (f" ({pin.filename})" if isinstance(pin, PypiPin) else "")
    trees.linked(_tree(store, blob, sdist, what), target)
    for written in layer.source_patches:
        data = (spec.root / written).read_bytes()
        pinned = lock.source_patches.get(written)
        if pinned is None or hashlib.sha256(data).hexdigest() != pinned:
            raise LockError(f"layer {layer.name}: source patch {written} differs from the lock",
                            hint=f"run `sparkimg lock {spec.path.name}`")
        patch = f"layer {layer.name}: source patch {written}"
        for name in _srcpatch.touched(data, patch):
            trees.own(target / name)
        _srcpatch.apply(target, data, patch)


def _stage_input(lock: Lock, name: str, store: Store, digest: str, work: Path) -> Path:
    """One extra input as the command sees it: a wheel under its own name (copied), a tree or an
    sdist unpacked once into the store (``store.trees``), mounted read-only from there."""
    blob = store.blob(digest)
    pin = lock.sources[name]
    if isinstance(pin, PypiPin) and pin.dist != "sdist":
        folder = work / "inputs" / name
        folder.mkdir(parents=True)
        with VerifiedReader(blob, blob.name, f"sources.{name}") as source, open(folder / pin.filename, "wb") as copy:
            shutil.copyfileobj(source, copy)  # the copy is made anyway: rot in the store stops here
        return folder
    return _tree(store, digest, isinstance(pin, PypiPin), f"sources.{name}")


def _tree(store: Store, digest: str, strip: bool, what: str) -> Path:
    """The store's tree of a source archive (an sdist without its top folder when ``strip``),
    unpacked once from its blob; a blob that rotted is named as ``what``."""
    blob = store.blob(digest)

    def unpack(folder: Path) -> None:
        with rot_named({blob.name: blob}, what):
            _sdist.unpack(blob, folder, strip=strip, what=what)

    return trees.unpacked(store, digest, unpack)


def _steps(path: Path) -> tuple[dict[str, Any], ...]:
    """What the command reported per step (``steps.json``: a list of objects), kept as written;
    anything else there is ignored: the figures are for people, nothing depends on them."""
    try:
        raw = loads(path.read_text())
    except (OSError, ValueError):
        return ()
    return tuple(r for r in raw if isinstance(r, dict)) if isinstance(raw, list) else ()


def _metrics(path: Path, wall: float) -> Metrics:
    try:
        raw = loads(path.read_text())
    except (OSError, ValueError):
        raw = {}
    cpu = raw.get("cpu_ns")
    cpu_s = cpu / 1e9 if isinstance(cpu, (int, float)) else (
        raw["cpu_us"] / 1e6 if isinstance(raw.get("cpu_us"), (int, float)) else None)
    peak = raw.get("peak_memory")
    return Metrics(round(wall, 3), round(cpu_s, 3) if cpu_s is not None else None,
                   peak if isinstance(peak, int) else None)
