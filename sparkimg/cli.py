"""The ``sparkimg`` command line: one subcommand per user task.

Handlers turn arguments into one library call and render its result. ``main`` is the only
place that turns errors into exit codes; tracebacks appear only with ``--debug``.
"""

from __future__ import annotations

import argparse
import json
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from . import __version__
from ._units import format_size, parse_size
from .errors import SparkimgError

EXAMPLES = {
    "check": "sparkimg check layers/demo.yaml",
    "lock": "sparkimg lock layers/demo.yaml            # or: --update six --update base",
    "fetch": "sparkimg fetch layers/demo.yaml",
    "plan": "sparkimg plan layers/demo.yaml --json",
    "build": "sparkimg build layers/demo.yaml --reserve 16g --cgroup-parent sparkimg.slice",
    "doctor": "sparkimg doctor --json",
}

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparkimg",
        description="Reproducible, signed, cgroup-bounded vLLM image builds for DGX Spark (GB10).",
        epilog="examples:\n" + "\n".join(f"  {e}" for e in EXAMPLES.values()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"sparkimg {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    parser.add_argument("--store", type=Path, help="content-addressed store (default: $SPARKIMG_STORE or "
                        "~/.cache/sparkimg)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str, *, spec: bool = True, json_flag: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text,
                           epilog=f"example:\n  {EXAMPLES[name]}", formatter_class=argparse.RawDescriptionHelpFormatter)
        if spec:
            p.add_argument("spec", type=Path, metavar="SPEC", help="the layer spec (YAML)")
        if json_flag:
            p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        return p

    command("check", "validate a spec (and its lock, if present) without running anything")
    p = command("lock", "resolve every mutable reference and write SPEC.lock.json")
    p.add_argument("--update", action="append", default=[], metavar="NAME",
                   help="re-resolve this input (a source, 'base', 'toolchain' or 'all'); repeatable")
    command("fetch", "fetch every locked input into the store and pull the base by digest")
    command("plan", "show each layer's cache key, whether it is built, and what changed")
    p = command("build", "build the image: fetch, bounded compiles, assembly")
    p.add_argument("--memory", type=_size, help="memory bound per compile container (overrides the spec)")
    p.add_argument("--cpus", type=float, help="CPU bound per compile container")
    p.add_argument("--cpuset", help="CPUs the compile containers may use, e.g. 0-7")
    p.add_argument("--pids", type=int, help="pid limit per compile container")
    p.add_argument("--reserve", type=_size, help="host MemAvailable to keep free for serving, e.g. 16g")
    p.add_argument("--cgroup-parent", help="parent cgroup (e.g. a systemd slice) for every build container")
    p.add_argument("--quiet", action="store_true", help="do not stream compile output")
    command("doctor", "check this machine: engine, BuildKit/buildx, registry, nvcc, store", spec=False)
    return parser


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; write e.g. 16g or 512m") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _HANDLERS[args.command](args)
    except SparkimgError as exc:
        if args.debug:
            traceback.print_exc()
        if getattr(args, "json", False):
            print(json.dumps({"error": exc.message, "hint": exc.hint, "exit_code": exc.exit_code}))
        err.print(f"[bold red]error:[/] {exc}", markup=True, highlight=False, soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("interrupted; nothing half-written was kept")
        return 130


def _store(args: argparse.Namespace) -> Any:
    from .store import Store

    return Store(args.store)


def _status(args: argparse.Namespace) -> Callable[[str], None]:
    def show(message: str) -> None:
        err.print(f"[cyan]sparkimg[/] {message}", highlight=False)
    return show


def _log(args: argparse.Namespace) -> Callable[[str, str, str], None]:
    def show(layer: str, phase: str, line: str) -> None:
        if not getattr(args, "quiet", False):
            err.print(f"[dim]\\[{layer}:{phase}][/] {line}", highlight=False, markup=True, soft_wrap=True)
    return show


def _emit(args: argparse.Namespace, data: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))


def _load(args: argparse.Namespace) -> Any:
    from .spec import load_spec

    return load_spec(args.spec)


def cmd_check(args: argparse.Namespace) -> int:
    from . import lock as lock_mod

    spec = _load(args)
    lock_state = "absent"
    if lock_mod.lock_path(spec).exists():
        lock_mod.check(spec, lock_mod.load(spec))
        lock_state = "current"
    _emit(args, {"ok": True, "spec": str(args.spec), "name": spec.name, "lock": lock_state})
    if not args.json:
        out.print(f"{args.spec}: ok ({len(spec.layers)} layers; lock {lock_state})")
    return 0


def cmd_lock(args: argparse.Namespace) -> int:
    from . import lock as lock_mod

    spec = _load(args)
    previous = lock_mod.load(spec) if lock_mod.lock_path(spec).exists() else None
    data = lock_mod.resolve(spec, _store(args), previous=previous, update=args.update, log=_status(args))
    written = lock_mod.write(spec, data)
    _emit(args, {"lock": str(written.path), "digest": written.digest, "base": data["base"],
                 "sources": {k: {f: v[f] for f in ("kind", "commit", "sha256") if f in v}
                             for k, v in data["sources"].items()}})
    if not args.json:
        out.print(f"wrote {written.path} ({written.digest[:19]})")
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from . import lock as lock_mod
    from .engine import Engine
    from .fetch import fetch

    spec = _load(args)
    lock = lock_mod.load(spec)
    lock_mod.check(spec, lock)
    fetched = fetch(spec, lock, _store(args), Engine.connect(), log=_status(args))
    _emit(args, {"blobs": fetched.blobs, "patches": fetched.patch_blobs, "base": fetched.base_tag})
    if not args.json:
        out.print(f"fetched {len(fetched.blobs)} sources and {len(fetched.patch_blobs)} patch sets; "
                  f"base {fetched.base_tag}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from . import lock as lock_mod
    from .engine import Engine
    from .errors import EngineError
    from .plan import compute

    spec = _load(args)
    lock = lock_mod.load(spec)
    lock_mod.check(spec, lock)
    try:
        engine: Engine | None = Engine.connect()
    except EngineError as exc:
        _status(args)(f"no engine ({exc.message}); the image layer shows as to build")
        engine = None
    plan = compute(spec, lock, _store(args), engine)
    image_id = engine.image_id(plan.image_ref) if engine and plan.image.cached else None
    _emit(args, {"image": {"reference": plan.image_ref, "id": image_id}, "receipt": None,
                 "layers": [layer.to_json() for layer in plan.layers]})
    if not args.json:
        table = Table(title=f"{spec.name}: {plan.image_ref}")
        for column in ("layer", "kind", "key", "state", "changed since last build"):
            table.add_column(column)
        for layer in plan.layers:
            state = "[green]cached[/]" if layer.cached else "[yellow]to build[/]"
            table.add_row(layer.name, layer.kind, layer.key[:16], state, ", ".join(layer.changed) or "-")
        out.print(table)
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from . import lock as lock_mod
    from .build import build
    from .build.bounds import Overrides
    from .engine import Engine

    spec = _load(args)
    lock = lock_mod.load(spec)
    overrides = Overrides(args.memory, args.cpus, args.cpuset, args.pids, args.reserve, args.cgroup_parent)
    result = build(spec, lock, _store(args), Engine.connect(), overrides, status=_status(args), log=_log(args))
    _emit(args, result.to_json())
    if not args.json:
        if not result.built:
            out.print(f"{result.image_ref}: up to date, nothing built ({result.image_id})")
        else:
            out.print(f"built {result.image_ref} ({result.image_id}); rebuilt: {', '.join(result.built)}")
            for name, record in result.records.items():
                if name in result.built:
                    m = record["metrics"]
                    peak = format_size(m["peak_memory"]) if m.get("peak_memory") else "?"
                    out.print(f"  {name}: wall {m['wall_s']:.1f} s, cpu {m.get('cpu_s') or 0:.1f} s, "
                              f"peak {peak}, jobs {record['budget']['jobs']}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import diagnose

    checks = diagnose()
    ok = all(c["ok"] or not c["required"] for c in checks)
    _emit(args, {"ok": ok, "checks": checks})
    if not args.json:
        table = Table(title="sparkimg doctor")
        for column in ("check", "state", "detail"):
            table.add_column(column)
        for c in checks:
            state = "[green]ok[/]" if c["ok"] else ("[red]missing[/]" if c["required"] else "[yellow]warn[/]")
            table.add_row(c["name"], state, c["detail"])
        out.print(table)
    return 0 if ok else 1


_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "check": cmd_check,
    "lock": cmd_lock,
    "fetch": cmd_fetch,
    "plan": cmd_plan,
    "build": cmd_build,
    "doctor": cmd_doctor,
}


if __name__ == "__main__":
    raise SystemExit(main())
