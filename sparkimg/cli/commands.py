"""One handler per subcommand: turn the arguments into one ``sparkimg.api`` call, render the
result (a table and lines for a person, one JSON object with ``--json``), return the exit code.
No pipeline logic lives here.
"""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sparkimg import api
from sparkimg._internal.units import format_size
from sparkimg.cli import render
from sparkimg.errors import UsageError
from sparkimg.events import Reporter
from sparkimg.formats.results import result_schema
from sparkimg.formats.steps import Step


def _reporter(args: argparse.Namespace) -> Reporter:
    return render.reporter(json_logs=args.json_logs, quiet=getattr(args, "quiet", False))


def _emit(args: argparse.Namespace, data: dict[str, Any], *, document: bool = False) -> bool:
    """Print ``data`` as JSON when ``--json`` was given, with its schema (``formats.results``) unless
    it is a ``document`` of a format of its own (an SBOM); True when it was printed."""
    if args.json:
        render.print_json(data if document or "schema" in data else {"schema": result_schema(args.command), **data})
    return bool(args.json)


def cmd_check(args: argparse.Namespace) -> int:
    checked = api.check(args.spec, store=args.store, report=_reporter(args))
    if not _emit(args, {"ok": True, "spec": str(args.spec), "name": checked.spec.name, "lock": checked.lock,
                        "preflight": [v.to_json() for v in checked.preflight]}):
        render.line(f"{args.spec}: ok ({len(checked.spec.layers)} layers; lock {checked.lock})")
    return 0


def cmd_lock(args: argparse.Namespace) -> int:
    written = api.lock(args.spec, store=args.store, update=args.update, plain_http=args.plain_http,
                       ca_file=args.ca_file, report=_reporter(args))
    model = written.model
    sources = {name: {f: v[f] for f in ("kind", "commit", "sha256") if f in v}
               for name, v in ((n, pin.to_json()) for n, pin in model.sources.items())}
    data = {"lock": str(written.path), "digest": written.digest, "base": model.base.to_json(), "sources": sources}
    if not _emit(args, data):
        render.line(f"wrote {written.path} ({render.ident(written.digest, 19)})")
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    fetched = api.fetch(args.spec, store=args.store, report=_reporter(args))
    if not _emit(args, {"blobs": fetched.blobs, "patches": fetched.patch_blobs, "base": fetched.base_tag}):
        render.line(f"fetched {len(fetched.blobs)} sources and {len(fetched.patch_blobs)} patch sets; "
                    f"base {fetched.base_tag}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    if args.dockerfile:
        print(api.dockerfile(args.spec, store=args.store, report=_reporter(args)), end="")
        return 0
    planned = api.plan(args.spec, store=args.store, report=_reporter(args))
    plan = planned.plan
    if _emit(args, {"image": {"reference": plan.image_ref, "id": planned.image_id}, "receipt": None,
                    "layers": [layer.to_plan_json() for layer in plan.layers]}):
        return 0
    rows: list[list[render.Cell]] = [[layer.name, layer.kind, render.ident(layer.key, 16),
             render.state("cached", "green") if layer.cached else render.state("to build", "yellow"),
             ", ".join(layer.changed) or "-"] for layer in plan.layers]
    render.table(f"{plan.spec.name}: {plan.image_ref}", ["layer", "kind", "key", "state", "changed since last build"],
                 rows)
    return 0


def _overrides(args: argparse.Namespace) -> api.Overrides:
    return api.Overrides(args.memory, args.cpus, getattr(args, "cpuset", None), args.pids, args.reserve,
                     args.cgroup_parent)


def cmd_build(args: argparse.Namespace) -> int:
    if args.recheck and not args.check:
        raise UsageError("--recheck goes with --check", hint=f"sparkimg build {args.spec} --check --recheck")
    options = api.BuildOptions(_overrides(args), args.key, args.receipt, args.record_host, args.prewarm, args.check,
                               args.recheck, sbom_format=args.sbom_format)
    built = api.build(args.spec, options, store=args.store, report=_reporter(args))
    result = built.result
    failed = 1 if built.check is not None and not built.check.identical else 0
    if _emit(args, built.to_json()):
        return failed
    if built.check is not None:
        render.check_report(built.check)
        return failed
    if result.loaded:
        render.line(f"{result.image_ref}: loaded into the engine from the store, nothing built ({result.image_id})")
        return 0
    if not result.built:
        render.line(f"{result.image_ref}: up to date, nothing built ({result.image_id})")
        return 0
    render.line(f"built {result.image_ref} ({result.image_id}); rebuilt: {', '.join(result.built)}")
    for name, record in result.records.items():
        if name in result.built:
            m = record.metrics
            peak = format_size(m.peak_memory) if m.peak_memory else "?"
            render.line(f"  {name}: wall {m.wall_s:.1f} s, cpu {m.cpu_s or 0:.1f} s, peak {peak}, jobs {record.jobs}")
    render.line(f"  steps: {steps_line(built.steps)}")
    return 0


def steps_line(steps: Sequence[Step]) -> str:
    """A build's steps on one line, in the order they ran: each compile named, the image's layers
    counted under the assembly's wall time (they are written several at once; ``--json`` has each)."""
    layers = sum(step.within_assembly for step in steps)
    parts = []
    for step in steps:
        if step.within_assembly:
            continue
        name = f"{step.name} {step.layer}" if step.layer else step.name
        parts.append(f"{name} {step.wall_s:.1f} s" + (f" ({layers} layers)" if step.name == "assemble" else ""))
    return ", ".join(parts)


def cmd_doctor(args: argparse.Namespace) -> int:
    if args.clean:
        cleaned = api.clean(store=args.store)
        if not _emit(args, {"removed_containers": cleaned.containers, "removed_folders": cleaned.folders}):
            render.line(f"removed {len(cleaned.containers)} container(s) of dead runs"
                        + (f" ({', '.join(cleaned.containers)})" if cleaned.containers else "")
                        + f" and {cleaned.folders} work folder(s)")
        return 0
    checks = api.doctor(store=args.store)
    ok = all(c["ok"] or not c["required"] for c in checks)
    if not _emit(args, {"ok": ok, "checks": checks}):
        rows: list[list[render.Cell]] = [[c["name"], render.state("ok", "green") if c["ok"] else
                 render.state("missing", "red") if c["required"] else render.state("warn", "yellow"), c["detail"]]
                for c in checks]
        render.table("sparkimg doctor", ["check", "state", "detail"], rows)
    return 0 if ok else 1


def cmd_store(args: argparse.Namespace) -> int:
    found = api.store_verify(store=args.store, repair=args.repair, report=_reporter(args))
    if _emit(args, found.to_json()):
        return found.exit_code
    for blob in found.damaged:
        why = f"its bytes hash to sha256:{blob.found}" if blob.found else "it cannot be read"
        render.mismatch("store", f"sha256:{blob.sha256} ({format_size(blob.size)}) is damaged: {why}"
                        + ("; removed" if found.repaired else ""))
    if found.ok:
        verdict = "all sound"
    elif found.repaired:
        verdict = f"{len(found.damaged)} damaged, removed: the next build fetches or rebuilds them"
    else:
        verdict = f"{len(found.damaged)} damaged; fix: sparkimg store verify --repair"
    render.line(f"{found.store}: {found.blobs} blob(s), {format_size(found.bytes)} hashed in {found.seconds:.1f} s; "
                f"{verdict}")
    return found.exit_code


def cmd_gc(args: argparse.Namespace) -> int:
    done = api.gc(store=args.store, keep=args.keep_root, keep_storage=args.keep_storage, dry_run=args.dry_run)
    if _emit(args, done.to_json()):
        return 0
    blobs = sum(d.kind == "blob" for d in done.removed)
    caches = sum(d.kind == "compiler-cache" for d in done.removed)
    if args.dry_run:
        for d in done.removed:
            render.line(f"  {d.kind:<18} {format_size(d.size):>10}  {d.path}")
    render.line(f"{'would remove' if args.dry_run else 'removed'} {blobs} blob(s), "
                f"{len(done.removed) - blobs - caches} record(s) and {caches} compiler cache(s), "
                f"{format_size(done.removed_bytes)}; kept {format_size(done.kept_bytes)} that "
                f"{len(done.roots)} root(s) reach" + (f" and {format_size(done.cache_bytes)} of compiler caches"
                                                      if done.cache_bytes else "")
                + (f"; {done.work_folders} dead work folder(s)" if done.work_folders else ""))
    return 0


def cmd_sbom(args: argparse.Namespace) -> int:
    shown = api.sbom(args.source, key=args.key, store=args.store, report=_reporter(args),
                     sbom_format=args.sbom_format)
    if _emit(args, shown.document, document=True):
        return 0
    rows: list[list[render.Cell]] = [[p.kind, p.name, p.version, render.ident(p.sha256, 16) or p.note[:60]]
                                     for p in shown.packages]
    render.table(f"{shown.name}: {len(rows)} package(s)", ["kind", "name", "version", "sha256 or note"], rows)
    render.line(f"from {shown.source}; signature: {shown.signature}")
    return 0


def cmd_keygen(args: argparse.Namespace) -> int:
    from sparkimg.signing.keys import key_paths

    key = api.keygen(args.out, force=args.force)
    private, public = key_paths(args.out)
    files = {"private": str(private), "public": str(public)}
    if not _emit(args, {"keyid": key.keyid, **files}):
        render.line(f"wrote {files['private']} (mode 0600) and {files['public']}; keyid {key.keyid}")
    return 0


def cmd_patches(args: argparse.Namespace) -> int:
    if args.action == "pin":
        files = api.patches_pin(args.dir)
        if not _emit(args, {"dir": str(args.dir), "files": files}):
            noun = "file" if len(files) == 1 else "files"
            render.line(f"wrote {args.dir}/MD5SUMS and {args.dir}/SHA256SUMS ({len(files)} {noun})")
        return 0
    files, problems = api.patches_check(args.dir)
    if not _emit(args, {"dir": str(args.dir), "ok": not problems, "files": files,
                        "problems": [p.to_json() for p in problems]}):
        for problem in problems:
            render.mismatch("mismatch", f"{args.dir}/{problem}")
        noun = "file" if len(files) == 1 else "files"
        render.line(f"{args.dir}: {len(files)} {noun} " + ("match MD5SUMS and SHA256SUMS" if not problems
                                                           else f"with {len(problems)} mismatches"))
    return 0 if not problems else 1


def _short(value: Any) -> str:
    """A value of a verify table: a long one shortened on a terminal, whole anywhere else."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 40 or not render.terminal() else text[:23] + "…" + text[-8:]


def cmd_verify_receipt(args: argparse.Namespace) -> int:
    request = api.ReceiptRequest(args.receipt, args.key, args.recipe, args.image, args.patches, args.rehash,
                                 args.sbom)
    return _show_verified(args, "verify-receipt", api.verify_receipt(request, store=args.store))


def cmd_verify_node(args: argparse.Namespace) -> int:
    request = api.NodeRequest(args.receipt, args.key, args.recipe, args.patches, args.cache, args.sbom,
                              args.platform)
    return _show_verified(args, "verify-node", api.verify_node(request, store=args.store))


def _show_verified(args: argparse.Namespace, command: str, report: api.ReceiptReport) -> int:
    if _emit(args, report.to_json()):
        return report.exit_code
    rows: list[list[render.Cell]] = [[c.stage, c.field, _short(c.expected), _short(c.found),
             render.state("ok", "green") if c.ok else render.state("MISMATCH", "red")] for c in report.checks]
    render.table(f"{command} {args.receipt}", ["stage", "field", "expected", "found", ""], rows, fold=True)
    if report.ok:
        render.line(("ok", "green"), f": {len(report.checks)} checks passed")
    else:
        for reason in report.reasons():
            render.mismatch("mismatch", reason)
        skipped = f"; not checked: {', '.join(report.skipped)}" if report.skipped else ""
        render.error_text(f"{command} failed at {report.failed}{skipped}")
    return report.exit_code


def cmd_show_receipt(args: argparse.Namespace) -> int:
    shown = api.show_receipt(args.receipt, args.key)
    signatures = shown.envelope.signatures
    if _emit(args, {"signature": shown.signature, "keyids": [s.keyid for s in signatures], "facts": shown.facts,
                    "statement": shown.statement.to_json()}):
        return 0
    statement = shown.statement
    metadata = statement.metadata or api.RunMetadata()
    render.line((statement.image.name, "bold"), f"  {statement.image.sha256}")
    keyids = ", ".join(render.ident(s.keyid, 16) for s in signatures) or "none"
    render.line(f"signature: {shown.signature}; keyids: {keyids}")
    render.line(f"built {metadata.started_on or '?'} -> {metadata.finished_on or '?'} by "
                f"{statement.builder_id} ({metadata.invocation_id or 'no invocation id recorded'})")
    rows = [[name, value if isinstance(value, str) else json.dumps(value)]
            for name, value in sorted(shown.facts.items())]
    render.table("pinned inputs and fields", ["field", "value"], rows, fold=True)
    layers = []
    for item in statement.byproducts:
        if item.name.startswith("layer:"):
            layers.append(_layer_row(item.name.removeprefix("layer:"), item.notes))
    render.table("layers", ["layer", "key", "wall", "cpu", "peak memory", "audit"], layers)
    return 0


def _layer_row(name: str, notes: Mapping[str, Any]) -> list[render.Cell]:
    """One layer of a receipt for a person; a field of an unexpected shape shows as '?'."""
    metrics: Mapping[str, Any] = notes["metrics"] if isinstance(notes.get("metrics"), dict) else {}

    def number(key: str, unit: str) -> str:
        value = metrics.get(key)
        return f"{value:.1f} {unit}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "?"
    peak = metrics.get("peak_memory")
    audit: list[Any] = notes["audit"] if isinstance(notes.get("audit"), list) else []
    sms = sorted({str(sm) for r in audit if isinstance(r, dict) and isinstance(r.get("sm"), list) for sm in r["sm"]})
    return [name, render.ident(str(notes.get("key", "?")), 16), number("wall_s", "s"), number("cpu_s", "s"),
            format_size(peak) if isinstance(peak, int) and not isinstance(peak, bool) and peak > 0 else "?",
            ", ".join(f"sm_{s}" for s in sms) or "-"]


def cmd_run_args(args: argparse.Namespace) -> int:
    result = api.run_args(args.receipt, args.root, args.key, args.cache, args.platform)
    if not _emit(args, result.to_json()):
        print(shlex.join(result.args()))
    return 0


def _prewarm_request(args: argparse.Namespace) -> api.PrewarmRequest:
    return api.PrewarmRequest(args.cache, args.spec, args.image, args.receipt, args.runner, args.python,
                              args.image_id, _overrides(args), args.store)


def cmd_prewarm(args: argparse.Namespace) -> int:
    if args.quick and not args.verify:
        raise UsageError("--quick goes with --verify", hint="sparkimg prewarm ... --verify --quick --key PUB")
    if args.verify:
        return _prewarm_verify(args)
    if args.list:
        return _prewarm_list(args)
    result = api.prewarm(_prewarm_request(args), args.key, report=_reporter(args))
    if not _emit(args, result.to_json()):
        counts = {s: sum(1 for m in result.modules if m["status"] == s) for s in ("compiled", "cached", "aot")}
        render.line(f"{result.manifest}: {len(result.modules)} modules ({counts['compiled']} compiled, "
                    f"{counts['cached']} cached, {counts['aot']} provided by the image's AOT build) "
                    f"in {result.seconds:.1f} s")
    return 0


def provided_by(module: dict[str, Any]) -> str:
    """Where a listed module comes from when serving: the image's AOT build, or prewarm's JIT compile
    (unknown where FlashInfer could not resolve it)."""
    if module.get("resolved") is False:
        return "unresolved: FlashInfer is not here"
    if not module.get("aot"):
        return "JIT: prewarm compiles it"
    provider = (module.get("aot_provider") or {}).get("provider", "flashinfer")
    return f"AOT: the image ({provider})"


def _prewarm_list(args: argparse.Namespace) -> int:
    target, events = api.prewarm_list(_prewarm_request(args), report=_reporter(args))
    resolved = all(m.get("resolved", True) for m in events.modules)
    if _emit(args, {"flashinfer": events.env.get("flashinfer"), "workspace": events.env.get("workspace"),
                    "resolved": resolved, "modules": events.modules}):
        return 0
    rows = []
    for m in events.modules:
        arguments = ", ".join([*map(json.dumps, m["args"]), *(f"{k}={json.dumps(v)}" for k, v in m["kwargs"].items())])
        rows.append([m["name"] or "(unresolved)", m["generator"].removeprefix("flashinfer.jit."), arguments or "-",
                     provided_by(m)])
    aot = sum(1 for m in events.modules if m.get("aot"))
    title = (f"kernel set: {len(events.modules)} modules, FlashInfer {events.env.get('flashinfer')}, "
             f"{target.arch_list}: {aot} AOT in the image, {len(events.modules) - aot} to JIT-compile" if resolved
             else f"kernel set: {len(events.modules)} modules for {target.arch_list}, unresolved (no FlashInfer here)")
    render.table(title, ["module name", "generator", "arguments", "provided by"], rows, fold=True,
                 caption=f"each library: CACHE/{events.env.get('workspace')}/cached_ops/NAME/NAME.so" if resolved
                 else None)
    return 0


def _prewarm_verify(args: argparse.Namespace) -> int:
    report = api.prewarm_verify(_prewarm_request(args), args.key, quick=args.quick, archs=args.arch or ())
    if not _emit(args, report.to_json()):
        for problem in report.problems:
            render.mismatch(problem["check"], problem["message"])
        mode = "quick " if args.quick else ""
        verdict = render.state("ok", "green") if report.ok else render.state(f"{len(report.problems)} problem(s)",
                                                                             "red")
        render.line(f"{args.cache}: {mode}verify ", verdict,
                    f": {report.files} files; checked {', '.join(report.checked)}; {report.seconds * 1000:.0f} ms")
    return 0 if report.ok else 1


def cmd_push(args: argparse.Namespace) -> int:
    from sparkimg.distribution.push import PushedIndex

    pushed = api.push(args.spec, args.to, args.tag, receipt=args.receipt, store=args.store,
                      compression=args.compression, level=args.level, threads=args.threads, also=args.also,
                      plain_http=args.plain_http, ca_file=args.ca_file, report=_reporter(args))
    if isinstance(pushed, PushedIndex):
        if not _emit(args, pushed.to_json()):
            render.line(f"pushed {pushed.repository}@{pushed.digest} (tags: {', '.join(pushed.tags) or 'none'}): "
                        + "; ".join(f"{platform} {image.manifest_digest}" for platform, image in pushed.images))
        return 0
    if not _emit(args, pushed.to_json()):
        moved = sum(b.how == "uploaded" for b in pushed.blobs)
        render.line(f"pushed {pushed.repository}@{pushed.manifest_digest} (tags: {', '.join(pushed.tags)}); "
                    f"{moved} of {len(pushed.blobs)} blob(s) uploaded, {format_size(pushed.sent)} sent")
    return 0


def cmd_pull(args: argparse.Namespace) -> int:
    pulled = api.pull(args.reference, args.key, recipe=args.recipe, receipt_out=args.receipt_out, store=args.store,
                      platform=args.platform, plain_http=args.plain_http, ca_file=args.ca_file,
                      report=_reporter(args))
    if not _emit(args, pulled.to_json()):
        render.line(f"pulled {pulled.reference}: manifest {pulled.manifest_digest}, config {pulled.config_digest}, "
                    f"{len(pulled.diff_ids)} layers; receipt verified ({', '.join(pulled.checks)})")
    return 0


def cmd_save(args: argparse.Namespace) -> int:
    saved = api.save(args.source, args.output, without_base=args.without_base, receipt=args.receipt, tag=args.tag,
                     store=args.store, also=args.also, report=_reporter(args))
    if not _emit(args, saved.to_json()):
        for image in saved.images:
            left = f", {len(image.left_out)} base layer(s) left out" if image.left_out else ""
            render.line(f"saved {image.name} ({image.platform}, {image.manifest_digest}) to {saved.path}: "
                        f"{len(image.layers)} layer(s){left}")
        render.line(f"{saved.path}: {format_size(saved.size)}")
    return 0


def cmd_load(args: argparse.Namespace) -> int:
    loaded = api.load_archive(args.archive, args.key, recipe=args.recipe, tag=args.tag, receipt_out=args.receipt_out,
                              store=args.store, platform=args.platform, report=_reporter(args))
    if not _emit(args, loaded.to_json()):
        render.line(f"loaded {loaded.reference}: manifest {loaded.manifest_digest}, config {loaded.config_digest}, "
                    f"{loaded.sent} of {len(loaded.diff_ids)} layer(s) sent; receipt verified "
                    f"({', '.join(loaded.checks)})")
    return 0


def cmd_nightly(args: argparse.Namespace) -> int:
    overrides = api.Overrides(reserve=args.reserve, cgroup_parent=args.cgroup_parent)
    options = api.NightOptions(args.state, args.key, args.push, args.check, overrides, args.hook, args.keep,
                               plain_http=args.plain_http, ca_file=args.ca_file)
    night = api.nightly(args.spec, options, store=args.store, report=_reporter(args))
    entry = night.entry
    if _emit(args, night.to_json()):
        return night.exit_code
    if entry.status == "failed":
        render.mismatch("nightly", f"{entry.entry}: failed at {entry.failed_stage}: {entry.error}; "
                        "the lock and the image in service are unchanged")
    elif entry.status == "unchanged":
        render.line(f"{entry.entry}: nothing moved; the build in service stays")
    else:
        render.line(f"{entry.entry}: built {entry.image.reference if entry.image else '?'}; rebuilt: "
                    f"{', '.join(entry.rebuilt) or 'nothing'}")
    for move in entry.moved:
        render.line(f"  {move.input} ({move.kind}): {move.before} -> {move.after}")
    if entry.steps:
        render.line(f"  steps: {steps_line(entry.steps)}")
    render.line(f"  report: {night.report_html}")
    return night.exit_code


def cmd_history(args: argparse.Namespace) -> int:
    found = api.history(args.spec, state=args.state)
    if _emit(args, found.to_json()):
        return 0
    rows: list[list[render.Cell]] = []
    for e in found.entries:
        status = render.state(e.status, {"built": "green", "failed": "red"}.get(e.status, "dim"))
        rows.append([e.entry + (" *" if e.entry == found.current else ""), status, e.failed_stage or "-",
                     ", ".join(f"{m.input} {_abbrev(m.before)}->{_abbrev(m.after)}" for m in e.moved) or "-",
                     ", ".join(e.rebuilt) or "-", "yes" if e.known_good else "-",
                     e.image.reference if e.image else "-"])
    render.table(f"nightly history of {args.spec} (* in service)",
                 ["entry", "status", "failed at", "moved", "rebuilt", "known-good", "image"], rows, whole=["entry"])
    return 0


def _abbrev(value: str | None) -> str:
    """A commit or digest cut to 12 hex digits on a terminal; a version as it is; whole off a terminal."""
    if value is None:
        return "(none)"
    hexpart = value.removeprefix("sha256:")
    return render.ident(hexpart, 12) if len(hexpart) in (40, 64) else value


def cmd_promote(args: argparse.Namespace) -> int:
    entry = api.promote(args.spec, args.entry, state=args.state)
    if not _emit(args, {"entry": entry.entry, "known_good": entry.known_good}):
        render.line(f"{entry.entry}: marked known-good ({entry.image.reference if entry.image else '-'})")
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    rolled = api.rollback(args.spec, args.to, state=args.state, store=args.store)
    if not _emit(args, rolled.to_json()):
        render.line(f"rolled back to {rolled.entry.entry}: {rolled.lock} restored; {', '.join(rolled.tags)} now name "
                    f"{rolled.entry.image.reference if rolled.entry.image else '-'}")
    return 0


def cmd_completion(args: argparse.Namespace) -> int:
    from sparkimg.cli.completion import script  # shtab loads for this command only

    print(script(args.shell), end="")
    return 0


def cmd_man(args: argparse.Namespace) -> int:
    from sparkimg.cli.manpage import page

    print(page(), end="")
    return 0


HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "nightly": cmd_nightly,
    "history": cmd_history,
    "promote": cmd_promote,
    "rollback": cmd_rollback,
    "pull": cmd_pull,
    "verify-node": cmd_verify_node,
    "push": cmd_push,
    "save": cmd_save,
    "load": cmd_load,
    "check": cmd_check,
    "lock": cmd_lock,
    "fetch": cmd_fetch,
    "plan": cmd_plan,
    "build": cmd_build,
    "doctor": cmd_doctor,
    "gc": cmd_gc,
    "sbom": cmd_sbom,
    "keygen": cmd_keygen,
    "patches": cmd_patches,
    "store": cmd_store,
    "verify-receipt": cmd_verify_receipt,
    "show-receipt": cmd_show_receipt,
    "run-args": cmd_run_args,
    "prewarm": cmd_prewarm,
    "completion": cmd_completion,
    "man": cmd_man,
}
