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
    "keygen": "sparkimg keygen --out ~/.config/sparkimg/node1      # writes node1.key (0600) and node1.pub",
    "patches": "sparkimg patches pin patches/demo && sparkimg patches check patches/demo",
    "verify-receipt": "sparkimg verify-receipt receipts/demo/KEY.receipt.json --key demo.pub "
                      "--recipe layers/demo.recipe.yaml --image sparkimg/demo:KEY --patches patches/demo",
    "show-receipt": "sparkimg show-receipt receipts/demo/KEY.receipt.json --key demo.pub",
    "run-args": "docker run --rm $(sparkimg run-args receipts/demo/KEY.receipt.json) sparkimg/demo:KEY",
    "prewarm": "sparkimg prewarm --spec layers/demo.yaml --cache /var/cache/sparkimg/demo --key demo.key && "
               "sparkimg prewarm --spec layers/demo.yaml --cache /var/cache/sparkimg/demo --verify --key demo.pub",
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
    p.add_argument("--key", type=Path, help="sign the receipt with this private key (default: $SPARKIMG_KEY); "
                   "without one the receipt is written unsigned and says so")
    p.add_argument("--receipt", type=Path, help="where to write the receipt "
                   "(default: receipts/NAME/KEY.receipt.json under the spec's root)")
    p.add_argument("--record-host", action="store_true", help="record this machine's host name in the receipt")
    p.add_argument("--prewarm", type=Path, metavar="DIR", help="then prewarm the spec's FlashInfer kernel set "
                   "into DIR inside the new image, and record its manifest in the receipt")
    p = command("keygen", "write an ECDSA P-256 signing key pair: PREFIX.key (0600) and PREFIX.pub", spec=False)
    p.add_argument("--out", type=Path, required=True, metavar="PREFIX", help="path prefix of the two files")
    p.add_argument("--force", action="store_true", help="replace existing files")
    p = command("patches", "pin a patch set (write MD5SUMS and SHA256SUMS) or check it against them", spec=False)
    p.add_argument("action", choices=("pin", "check"))
    p.add_argument("dir", type=Path, metavar="DIR", help="the patch set folder (holding mounts.txt)")
    p = command("verify-receipt", "check a signed receipt against the key, a recipe, the image and the patch "
                "files; exit 0 ok, 1 mismatch, 2 bad input", spec=False)
    p.add_argument("receipt", type=Path, metavar="RECEIPT")
    p.add_argument("--key", type=Path, required=True, metavar="PUB", help="the trusted public key (PEM)")
    p.add_argument("--recipe", type=Path, help="a sparkimg-recipe/v1 or sparkring-recipe/v1 file")
    p.add_argument("--image", metavar="REF", help="an image in the local engine, or in a registry")
    p.add_argument("--patches", type=Path, metavar="DIR", help="a patch set folder to check file by file")
    p.add_argument("--rehash", action="store_true",
                   help="also re-hash, in parallel, the store's copy of every input and output the receipt names")
    p = command("show-receipt", "render a receipt for a person", spec=False)
    p.add_argument("receipt", type=Path, metavar="RECEIPT")
    p.add_argument("--key", type=Path, metavar="PUB", help="check the signature with this public key")
    p = command("run-args", "print the docker run arguments a receipt implies (read-only patch mounts, and a "
                "prewarmed cache)", spec=False)
    p.add_argument("receipt", type=Path, metavar="RECEIPT")
    p.add_argument("--root", type=Path, default=Path("."), help="folder the receipt's patch paths are under "
                   "(default: the current folder)")
    p.add_argument("--key", type=Path, metavar="PUB", help="refuse unless the receipt is signed by this key")
    p.add_argument("--cache", type=Path, metavar="DIR", help="a prewarmed FlashInfer cache for this image: "
                   "mount it read-only and set the environment it was compiled with")
    p = command("prewarm", "compile the FlashInfer JIT modules an image needs into a cache folder, with a signed "
                "manifest; or --list them, or --verify a cache (exit 0 ok, 1 mismatch, 2 bad input)", spec=False)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--spec", type=Path, metavar="SPEC", help="the spec's kernel set, for the image it builds")
    which.add_argument("--image", metavar="REF", help="an image built by sparkimg (its kernel set is in a label)")
    which.add_argument("--receipt", type=Path, metavar="R", help="the image a receipt names")
    p.add_argument("--cache", type=Path, metavar="DIR", help="the cache folder (FLASHINFER_WORKSPACE_BASE)")
    p.add_argument("--runner", choices=("image", "host"), default="image",
                   help="compile inside the image (default) or in a Python environment on this machine")
    p.add_argument("--python", default=None, metavar="PY",
                   help="with --runner host: the serving environment's interpreter (default: this one)")
    p.add_argument("--image-id", metavar="ID", help="with --runner host: the image this environment is, "
                   "recorded in (or checked against) the manifest")
    p.add_argument("--key", type=Path, help="sign the manifest with this private key (default: $SPARKIMG_KEY); "
                   "with --verify: the trusted public key")
    p.add_argument("--list", action="store_true", help="resolve and show the kernel set; compile nothing")
    p.add_argument("--verify", action="store_true", help="check the cache against its manifest and the image")
    p.add_argument("--quick", action="store_true", help="with --verify: the signature and file sizes only")
    p.add_argument("--arch", action="append", metavar="ARCH",
                   help="with --verify: the architecture the cache must serve (default: the spec's or image's)")
    p.add_argument("--memory", type=_size, help="memory bound of the prewarm container (overrides the spec)")
    p.add_argument("--cpus", type=float, help="CPU bound of the prewarm container")
    p.add_argument("--pids", type=int, help="pid limit of the prewarm container")
    p.add_argument("--reserve", type=_size, help="host MemAvailable to keep free for serving, e.g. 16g")
    p.add_argument("--cgroup-parent", help="parent cgroup (e.g. a systemd slice) for the prewarm container")
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


def _signing_key(args: argparse.Namespace) -> Any:
    import os

    from .signing.keys import KEY_ENV, load_private

    path = args.key or (Path(os.environ[KEY_ENV]) if os.environ.get(KEY_ENV) else None)
    return load_private(path) if path else None


def cmd_build(args: argparse.Namespace) -> int:
    from . import lock as lock_mod
    from .build.bounds import Overrides
    from .build.image import build
    from .engine import Engine
    from .receipts.emit import emit as emit_receipt

    spec = _load(args)
    lock = lock_mod.load(spec)
    overrides = Overrides(args.memory, args.cpus, args.cpuset, args.pids, args.reserve, args.cgroup_parent)
    key = _signing_key(args)
    store = _store(args)
    engine = Engine.connect()
    result = build(spec, lock, store, engine, overrides, status=_status(args), log=_log(args))
    warmed = None
    if args.prewarm is not None:
        from .build.bounds import derive
        from .prewarm.runner import runner_for
        from .prewarm.targets import target_of_spec
        from .prewarm.warm import prewarm, receipt_entry

        target = target_of_spec(spec, image_ref=result.image_ref, image_id=result.image_id)
        budget = derive(target.kernels.bounds, overrides, layer="prewarm")
        runner = runner_for("image", target, engine=engine, budget=budget)
        warmed = prewarm(target, runner, args.prewarm, budget, key, _progress(args, len(target.kernels.modules)))
    emitted = emit_receipt(result, store, key, path=args.receipt, record_host=args.record_host,
                            prewarm=receipt_entry(warmed) if warmed else None)
    result.receipt = str(emitted.path)
    if emitted.signed:
        _status(args)(f"receipt {emitted.path} signed by {emitted.keyid and emitted.keyid[:16]}"
                      + ("" if emitted.written else " (unchanged)"))
    else:
        err.print(f"[bold yellow]warning:[/] receipt {emitted.path} is NOT signed; pass --key or set "
                  f"SPARKIMG_KEY (create one with `sparkimg keygen`)", markup=True, highlight=False)
    _emit(args, {**result.to_json(), "signed": emitted.signed,
                 "prewarm": warmed.to_json() if warmed else None})
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


def cmd_keygen(args: argparse.Namespace) -> int:
    from .signing.keys import generate

    key = generate(args.out, force=args.force)
    files = {"private": f"{args.out}.key", "public": f"{args.out}.pub"}
    _emit(args, {"keyid": key.keyid, **files})
    if not args.json:
        out.print(f"wrote {files['private']} (mode 0600) and {files['public']}; keyid {key.keyid}")
    return 0


def cmd_patches(args: argparse.Namespace) -> int:
    from . import patches

    if args.action == "pin":
        files = patches.pin(args.dir)
        _emit(args, {"dir": str(args.dir), "files": files})
        if not args.json:
            noun = "file" if len(files) == 1 else "files"
            out.print(f"wrote {args.dir}/MD5SUMS and {args.dir}/SHA256SUMS ({len(files)} {noun})")
        return 0
    files, problems = patches.check(args.dir)
    _emit(args, {"dir": str(args.dir), "ok": not problems, "files": files,
                 "problems": [p.to_json() for p in problems]})
    if not args.json:
        for problem in problems:
            err.print(f"[red]mismatch:[/] {args.dir}/{problem}", markup=True, highlight=False)
        noun = "file" if len(files) == 1 else "files"
        out.print(f"{args.dir}: {len(files)} {noun} " + ("match MD5SUMS and SHA256SUMS" if not problems
                                                         else f"with {len(problems)} mismatches"))
    return 0 if not problems else 1


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 40 else text[:23] + "…" + text[-8:]


def cmd_verify_receipt(args: argparse.Namespace) -> int:
    from .receipts.verify import Request, local_image_of, verify
    from .signing.keys import load_public

    request = Request(args.receipt, load_public(args.key), args.recipe, args.image, args.patches, args.rehash)
    report = verify(request, store=_store(args), local_image=local_image_of)
    _emit(args, report.to_json())
    if not args.json:
        table = Table(title=f"verify-receipt {args.receipt}")
        for column in ("stage", "field", "expected", "found", ""):
            table.add_column(column, overflow="fold")
        for c in report.checks:
            table.add_row(c.stage, c.field, _short(c.expected), _short(c.found), "[green]ok[/]" if c.ok else
                          "[red]MISMATCH[/]")
        out.print(table)
        if report.ok:
            out.print(f"[green]ok[/]: {len(report.checks)} checks passed")
        else:
            for reason in report.reasons():
                err.print(f"[red]mismatch:[/] {reason}", markup=True, highlight=False)
            skipped = f"; not checked: {', '.join(report.skipped)}" if report.skipped else ""
            err.print(f"verify-receipt failed at {report.failed}{skipped}")
    return report.exit_code


def cmd_show_receipt(args: argparse.Namespace) -> int:
    from .formats.statement import facts, load
    from .signing import dsse
    from .signing.keys import load_public

    envelope = dsse.read(args.receipt)
    signature = "not checked (pass --key)"
    if args.key:
        why = envelope.check_signature(load_public(args.key))
        signature = "valid" if why is None else f"INVALID: {why}"
    data = load(envelope.payload, str(args.receipt))
    found = facts(data)
    _emit(args, {"signature": signature, "keyids": [s.keyid for s in envelope.signatures], "facts": found,
                 "statement": data})
    if args.json:
        return 0
    run = data["predicate"]["runDetails"]
    out.print(f"[bold]{found['image.reference']}[/]  {found['image.id']}")
    out.print(f"signature: {signature}; keyids: {', '.join(s.keyid[:16] for s in envelope.signatures) or 'none'}")
    out.print(f"built {run['metadata']['startedOn']} -> {run['metadata']['finishedOn']} by "
              f"{run['builder']['id']} ({run['metadata']['invocationId']})")
    table = Table(title="pinned inputs and fields")
    table.add_column("field")
    table.add_column("value", overflow="fold")
    for name, value in sorted(found.items()):
        table.add_row(name, value if isinstance(value, str) else json.dumps(value))
    out.print(table)
    layers = Table(title="layers")
    for column in ("layer", "key", "wall", "cpu", "peak memory", "audit"):
        layers.add_column(column)
    for item in run["byproducts"]:
        if not item["name"].startswith("layer:"):
            continue
        notes, metrics = item["annotations"], item["annotations"]["metrics"]
        peak = format_size(metrics["peak_memory"]) if metrics.get("peak_memory") else "?"
        sms = sorted({sm for r in notes["audit"] for sm in r.get("sm", [])})
        layers.add_row(item["name"].removeprefix("layer:"), notes["key"][:16], f"{metrics['wall_s']:.1f} s",
                       f"{metrics.get('cpu_s') or 0:.1f} s", peak, ", ".join(f"sm_{s}" for s in sms) or "-")
    out.print(layers)
    return 0


def cmd_run_args(args: argparse.Namespace) -> int:
    import shlex

    from .receipts.runargs import run_args
    from .signing.keys import load_public

    result = run_args(args.receipt, args.root, load_public(args.key) if args.key else None, args.cache)
    _emit(args, result.to_json())
    if not args.json:
        print(shlex.join(result.args()))
    return 0


def _prewarm_target(args: argparse.Namespace) -> tuple[Any, Any]:
    """(target, engine or None) from --spec, --image or --receipt."""
    from .engine import Engine
    from .errors import UsageError
    from .prewarm import targets

    if args.runner != "host" and (args.image_id or args.python):
        raise UsageError("--image-id and --python go with --runner host",
                         hint="inside an image, sparkimg records the image's own ID and uses its own Python")
    if args.spec is not None and args.runner == "host":
        return targets.on_host(targets.target_of_spec(_load(args)), args.image_id), None
    engine = Engine.connect()
    if args.spec is not None:
        target = targets.for_built_spec(_load(args), _store(args), engine)
    elif args.receipt is not None:
        target = targets.for_receipt(args.receipt, engine)
    else:
        target = targets.for_image(args.image, engine)
    return (targets.on_host(target, args.image_id) if args.runner == "host" else target), engine


def _progress(args: argparse.Namespace, total: int) -> Callable[[str, str, dict[str, Any]], None]:
    done: set[str] = set()
    status = _status(args)

    def show(event: str, name: str, fields: dict[str, Any]) -> None:
        if event == "log":
            if not args.quiet:
                err.print(f"[dim]\\[prewarm][/] {fields['line']}", highlight=False, markup=True, soft_wrap=True)
        elif event == "env":
            status(f"prewarm: FlashInfer {fields.get('flashinfer')}, torch {fields.get('torch')}, "
                   f"{fields.get('nvcc') or 'no nvcc'}, workspace {fields.get('base')}/{fields.get('workspace')}")
        elif event == "start":
            status(f"prewarm {name}: compiling")
        elif event == "module" and fields.get("aot"):
            err.print(f"[bold yellow]warning:[/] {name}: FlashInfer in this environment has an AOT build of it and "
                      "loads that instead; the prewarmed copy will not be used", markup=True, highlight=False)
        elif event in ("cached", "compiled", "failed"):
            done.add(name)
            took = f" in {fields['seconds']:.1f} s" if event == "compiled" else ""
            status(f"prewarm [{len(done)}/{total}] {name}: {event}{took}")
    return show


def cmd_prewarm(args: argparse.Namespace) -> int:
    from .build.bounds import Overrides, derive
    from .errors import UsageError
    from .prewarm.runner import runner_for
    from .prewarm.warm import list_modules, prewarm

    if args.quick and not args.verify:
        raise UsageError("--quick goes with --verify", hint="sparkimg prewarm ... --verify --quick --key PUB")
    if not args.list and args.cache is None:
        raise UsageError("--cache DIR is required", hint="name the folder the serving container will mount")
    target, engine = _prewarm_target(args)
    if args.verify:
        return _prewarm_verify(args, target)
    overrides = Overrides(args.memory, args.cpus, None, args.pids, args.reserve, args.cgroup_parent)
    budget = derive(target.kernels.bounds, overrides, layer="prewarm")
    runner = runner_for(args.runner, target, engine=engine, budget=budget, python=args.python)
    if args.list:
        events = list_modules(target, runner, _progress(args, len(target.kernels.modules)))
        _emit(args, {"flashinfer": events.env.get("flashinfer"), "workspace": events.env.get("workspace"),
                     "modules": events.modules})
        if not args.json:
            table = Table(title=f"kernel set: {len(events.modules)} modules, FlashInfer "
                          f"{events.env.get('flashinfer')}, {target.arch_list}",
                          caption=f"each library: CACHE/{events.env.get('workspace')}/cached_ops/NAME/NAME.so")
            for column in ("module name", "generator", "arguments", "AOT"):
                table.add_column(column, overflow="fold")
            for m in events.modules:
                arguments = ", ".join([*map(json.dumps, m["args"]), *(f"{k}={json.dumps(v)}"
                                                                    for k, v in m["kwargs"].items())])
                table.add_row(m["name"], m["generator"].removeprefix("flashinfer.jit."), arguments or "-",
                              "yes: FlashInfer loads its own" if m["aot"] else "-")
            out.print(table)
        return 0
    import sys

    key = _signing_key(args)
    where = target.image_ref or f"this Python ({args.python or sys.executable})"
    _status(args)(f"prewarm {len(target.kernels.modules)} modules for {where}: {budget.jobs} job(s), memory "
                  f"{format_size(budget.memory)}" + (", network none" if args.runner == "image" else
                                                     ", no cgroup bound (host runner)"))
    progress = _progress(args, len(target.kernels.modules))
    result = prewarm(target, runner, args.cache, budget, key, progress)
    _emit(args, {**result.to_json(), "signed": key is not None})
    if key is None:
        err.print(f"[bold yellow]warning:[/] {result.manifest} is NOT signed; pass --key or set SPARKIMG_KEY",
                  markup=True, highlight=False)
    if not args.json:
        compiled = sum(1 for m in result.modules if m["status"] == "compiled")
        out.print(f"{result.manifest}: {len(result.modules)} modules ({compiled} compiled, "
                  f"{len(result.modules) - compiled} cached) in {result.seconds:.1f} s")
    return 0


def _prewarm_verify(args: argparse.Namespace, target: Any) -> int:
    import sys

    from .errors import UsageError
    from .prewarm.runner import HostRunner, compile_path
    from .prewarm.verify import Expect, verify
    from .signing.keys import load_public
    from .spec import Arch

    if args.key is None:
        raise UsageError("--verify needs --key PUB, the trusted public key", hint="the .pub of the signing key")
    host = args.runner == "host"
    # In an image, the image ID stands for its FlashInfer; a host Python is asked.
    flashinfer = HostRunner(args.python or sys.executable).flashinfer_version() if host and not args.quick else None
    base = compile_path(args.runner, args.cache)
    archs = tuple(Arch(a) for a in args.arch) if args.arch else target.archs
    expect = Expect(archs, target.image_id, flashinfer, base)
    report = verify(args.cache, load_public(args.key), expect, quick=args.quick)
    _emit(args, report.to_json())
    if not args.json:
        for problem in report.problems:
            err.print(f"[red]{problem['check']}:[/] {problem['message']}", markup=True, highlight=False)
        mode = "quick " if args.quick else ""
        verdict = "[green]ok[/]" if report.ok else f"[red]{len(report.problems)} problem(s)[/]"
        out.print(f"{args.cache}: {mode}verify {verdict}: {report.files} files; checked "
                  f"{', '.join(report.checked)}; {report.seconds * 1000:.0f} ms")
    return 0 if report.ok else 1


_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "check": cmd_check,
    "lock": cmd_lock,
    "fetch": cmd_fetch,
    "plan": cmd_plan,
    "build": cmd_build,
    "doctor": cmd_doctor,
    "keygen": cmd_keygen,
    "patches": cmd_patches,
    "verify-receipt": cmd_verify_receipt,
    "show-receipt": cmd_show_receipt,
    "run-args": cmd_run_args,
    "prewarm": cmd_prewarm,
}


if __name__ == "__main__":
    raise SystemExit(main())
