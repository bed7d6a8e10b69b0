"""The drift report as one self-contained HTML page (``sparkimg-nightly-report/v1`` in, HTML out).

The page is read from a CI artifact or a mail, maybe years later and offline, so it carries
everything itself: inline CSS, inline SVG plots, no script, no outside URL, and a
Content-Security-Policy that would block any of them. Every string of the report (git
subjects, registry answers, error messages, layer names) is untrusted and escaped; a number
that is null or not a number is shown as unknown and is a gap in the plots. The same report
renders the same bytes.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sparkimg._internal.fs.atomic import write_atomic
from sparkimg._internal.units import format_size
from sparkimg.errors import UsageError
from sparkimg.formats.canonical import pretty
from sparkimg.nightly import plots

SCHEMA = "sparkimg-nightly-report/v1"
TEXT_MAX = 1000  # characters of one string shown; report.json beside the page has all of it
_UNKNOWN = "<span class=\"muted\">–</span>"
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")  # and lone surrogates
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#212529;
margin:0 auto;max-width:1180px;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dee2e6}
table{border-collapse:collapse;width:100%;table-layout:fixed}
table.kv th{width:200px}
th,td{text-align:left;vertical-align:top;padding:4px 8px;border-bottom:1px solid #e9ecef;overflow-wrap:anywhere}
th{background:#f8f9fa;font-weight:600}td.n{text-align:right;white-space:nowrap}
code{font:12px ui-monospace,"DejaVu Sans Mono",monospace}
.meta{color:#495057}.muted{color:#868e96}
.badge{display:inline-block;padding:2px 10px;border-radius:10px;font-weight:600;color:#fff}
.unchanged{background:#868e96}.built{background:#2b8a3e}.failed{background:#c92a2a}
.other{background:#5c7cfa}
.error{background:#fff5f5;border-left:4px solid #c92a2a;padding:8px 12px;margin:12px 0;white-space:pre-wrap;
overflow-wrap:anywhere}
.s-rebuilt{color:#2b8a3e;font-weight:600}.s-reused{color:#868e96}.s-failed{color:#c92a2a;font-weight:600}
.longest{font-weight:700}
.s-skipped{color:#e67700}
.ok{color:#2b8a3e;font-weight:600}.bad{color:#c92a2a;font-weight:600}
figure{margin:12px 0}figcaption{font-weight:600;margin-bottom:4px}figure svg{max-width:100%;height:auto}
"""


def render(report: Mapping[str, Any]) -> str:
    """The page for one night's report; ``UsageError`` when it is not ``sparkimg-nightly-report/v1``."""
    if not isinstance(report, Mapping):
        raise UsageError(f"a nightly report must be a JSON object, not {type(report).__name__}")
    if report.get("schema") != SCHEMA:
        raise UsageError(f"not a nightly report: schema is {_clean(report.get('schema'))[:80]!r}, "
                         f"expected {SCHEMA!r}", hint="render the report.json the nightly job wrote")
    title = f"sparkimg nightly: {_clean(report.get('spec'))} {_clean(report.get('entry'))}"
    body = [_header(report), _failure(report), _moved(_items(report.get("moved"))),
            _layers(_items(report.get("layers"))), _steps(_items(report.get("steps"))), _outcome(report),
            _history(_items(report.get("history"))), _plots(report)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{_CSP}\">\n"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\n"
            f"<meta name=\"referrer\" content=\"no-referrer\">\n<title>{_esc(title)}</title>\n"
            f"<style>{_STYLE}</style>\n</head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write(report: Mapping[str, Any], json_path: Path, html_path: Path) -> None:
    """Write ``report.json`` and ``report.html``, each atomically. The page is rendered first, so a
    report the renderer refuses leaves both files as they were."""
    page = render(report)
    write_atomic(json_path, pretty(dict(report)))
    write_atomic(html_path, page.encode("utf-8"))


# -- strings and numbers from the report ---------------------------------------------------------


def _clean(value: Any) -> str:
    """Text for a person: ``None`` is empty, control characters and lone surrogates are U+FFFD."""
    if value is None:
        return ""
    return _CONTROL.sub("\ufffd", value if isinstance(value, str) else str(value))


def _esc(value: Any, limit: int = TEXT_MAX) -> str:
    text = _clean(value)
    if len(text) > limit:
        more = len(text) - limit
        return html.escape(text[:limit]) + f"<span class=\"muted\">… ({more} more characters in report.json)</span>"
    return html.escape(text)


def _items(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a list field; anything else (null, a string, a number) is none."""
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        return []
    return [item for item in value if isinstance(item, Mapping)]


def _field(item: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = item.get(name)
    return value if isinstance(value, Mapping) else {}


def _when(value: Any) -> str:
    """An RFC 3339 time as ``2026-12-03 02:07:12 UTC``; anything else escaped as it is."""
    text = _clean(value)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return _esc(text, 60)
    offset = moment.utcoffset()
    if offset is not None and not offset:
        return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
    return _esc(moment.isoformat(sep=" "))


def _seconds(value: Any) -> str:
    seconds = plots.number(value)
    if seconds is None:
        return _UNKNOWN
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def _yes_no(value: Any) -> str:
    return "yes" if value is True else "no" if value is False else _UNKNOWN


def _bytes(value: Any) -> str:
    size = plots.number(value)
    return _UNKNOWN if size is None else format_size(size)


def _short(kind: str, value: Any) -> str:
    """A commit as 12 hex digits, a digest as ``sha256:`` and 12; the full value in the title."""
    text = _clean(value)
    shown = text
    if kind == "git" and re.fullmatch(r"[0-9a-f]{40,64}", text):
        shown = text[:12]
    elif re.fullmatch(r"sha256:[0-9a-f]{64}", text):
        shown = text[:19]
    return f"<code title=\"{html.escape(text[:200])}\">{_esc(shown, 120)}</code>"


def _table(columns: Mapping[str, int], rows: list[str]) -> str:
    """A table with fixed column widths (percent): a long unbroken string wraps in its own column
    instead of pushing the others off the page."""
    widths = "".join(f"<col style=\"width:{p}%\">" for p in columns.values())
    headings = "".join(f"<th>{name}</th>" for name in columns)
    return (f"<table><colgroup>{widths}</colgroup><thead><tr>{headings}</tr></thead><tbody>\n"
            + "\n".join(rows) + "\n</tbody></table>")


# -- sections ------------------------------------------------------------------------------------


def _header(report: Mapping[str, Any]) -> str:
    status = _clean(report.get("status"))
    css = status if status in ("unchanged", "built", "failed") else "other"
    lines = [f"<h1>{_esc(report.get('spec'), 200)} <span class=\"badge {css}\">{_esc(status or 'unknown', 40)}"
             "</span></h1>",
             f"<div class=\"meta\">night <code>{_esc(report.get('entry'), 120)}</code> · started "
             f"{_when(report.get('started'))} · finished {_when(report.get('finished'))}</div>"]
    if status == "failed" or report.get("error") is not None:
        stage = _clean(report.get("failed_stage")) or "unknown stage"
        lines.append(f"<div class=\"error\"><strong>failed in {_esc(stage, 40)}:</strong> "
                     f"{_esc(report.get('error'))}</div>")
    return "<header>\n" + "\n".join(lines) + "\n</header>"


def _failure(report: Mapping[str, Any]) -> str:
    """A failed night's detail: the stage, the layer and the first error line of its log, and for a
    failed check the files that differ. A report written before failures were recorded says so."""
    failure = report.get("failure")
    if not isinstance(failure, Mapping):
        if report.get("status") != "failed":
            return ""
        return ("<h2>Why the night failed</h2>\n<p class=\"muted\">This night was recorded before a failure's "
                "detail was kept: the error above is all its entry holds.</p>")
    rows = [("stage", _esc(failure.get("stage") or "unknown", 40))]
    if failure.get("layer") is not None:
        rows.append(("layer", f"<code>{_esc(failure.get('layer'), 300)}</code>"))
    if failure.get("first_error_line") is not None:
        rows.append(("first error line", f"<code>{_esc(failure.get('first_error_line'))}</code>"))
    body = "\n".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in rows)
    out = f"<h2>Why the night failed</h2>\n<table class=\"kv\">\n{body}\n</table>"
    files = _items(failure.get("files"))
    total = max(int(plots.number(failure.get("files_total")) or 0), len(files))
    if files:
        listed = "" if total == len(files) else \
            f" (the first {len(files)}; <code>sparkimg build --check</code> on the night's candidate lock lists all)"
        listing = [f"<tr><td>{_esc(f.get('layer'), 300)}</td><td><code>{_esc(f.get('path'), 500)}</code></td>"
                   f"<td>{_esc(f.get('kind'), 40)}</td></tr>" for f in files]
        out += (f"\n<p>{total} file{'' if total == 1 else 's'} differ between the two builds{listed}:</p>\n"
                + _table({"layer": 20, "path": 60, "difference": 20}, listing))
    return out


def _side(kind: str, value: Any, detail: Mapping[str, Any]) -> str:
    parts = [_short(kind, value)]
    if detail.get("date") is not None:
        parts.append(f"<span class=\"muted\">{_when(detail.get('date'))}</span>")
    if kind == "git" and detail.get("subject") is not None:
        parts.append(_esc(detail.get("subject")))
    return "<br>".join(parts)


def _moved(moved: list[Mapping[str, Any]]) -> str:
    if not moved:
        return "<h2>What moved</h2>\n<p class=\"muted\">No input moved since the last night.</p>"
    rows = [f"<tr><td>{_esc(m.get('input'), 200)}</td><td>{_esc(m.get('kind'), 40)}</td>"
            f"<td>{_side(_clean(m.get('kind')), m.get('from'), _field(m, 'from_detail'))}</td>"
            f"<td>{_side(_clean(m.get('kind')), m.get('to'), _field(m, 'to_detail'))}</td></tr>" for m in moved]
    return "<h2>What moved</h2>\n" + _table({"input": 14, "kind": 7, "old": 39, "new": 40}, rows)


def _layers(layers: list[Mapping[str, Any]]) -> str:
    if not layers:
        return "<h2>Layers</h2>\n<p class=\"muted\">No layer was planned this night.</p>"
    counts: dict[str, int] = {}
    rows = []
    for layer in layers:
        status = _clean(layer.get("status"))
        counts[status] = counts.get(status, 0) + 1
        css = f"s-{status}" if status in ("rebuilt", "reused", "failed", "skipped") else ""
        rows.append(f"<tr><td>{_esc(layer.get('name'), 300)}</td><td class=\"{css}\">{_esc(status, 40)}</td>"
                    f"<td>{_esc(layer.get('reason'))}</td><td class=\"n\">{_seconds(layer.get('wall_s'))}</td>"
                    f"<td class=\"n\">{_seconds(layer.get('cpu_s'))}</td>"
                    f"<td class=\"n\">{_bytes(layer.get('peak_memory_bytes'))}</td>"
                    f"<td>{_cache(layer.get('compiler_cache'))}</td></tr>")
    summary = ", ".join(f"{n} {_esc(s, 40)}" for s, n in counts.items())
    columns = {"layer": 20, "status": 9, "reason": 30, "wall": 9, "CPU": 9, "peak memory": 11, "compiler cache": 12}
    return f"<h2>Layers</h2>\n<p>{summary}</p>\n" + _table(columns, rows) + _objects(layers)


def _cache(value: Any) -> str:
    """A rebuilt layer's compiler cache in a cell: hits, misses, the compile time it saved."""
    if not isinstance(value, Mapping) or not value:
        return "<span class=\"muted\">-</span>"
    hits, misses, saved = (plots.number(value.get(k)) for k in ("hits", "misses", "saved_s"))
    text = f"{int(hits or 0)} hit, {int(misses or 0)} miss"
    return _esc(text + (f", {_seconds(saved)} saved" if saved else ""), 80)


def _objects(layers: list[Mapping[str, Any]]) -> str:
    """The costliest objects of each rebuilt layer whose build script reported them."""
    parts = []
    for layer in layers:
        objects = _items(layer.get("objects"))
        if not objects:
            continue
        rows = [f"<tr><td><code>{_esc(o.get('name'), 300)}</code></td><td class=\"n\">{_seconds(o.get('wall_s'))}</td>"
                f"<td class=\"n\">{_bytes(o.get('peak_memory_bytes'))}</td><td>{_yes_no(o.get('heavy'))}</td></tr>"
                for o in objects]
        parts.append(f"<h3>{_esc(layer.get('name'), 300)}: the costliest objects</h3>\n"
                     + _table({"object": 64, "wall": 12, "peak memory": 14, "heavy": 10}, rows))
    return "".join(f"\n{p}" for p in parts)


def _steps(steps: list[Mapping[str, Any]]) -> str:
    """Each step of the night with its time, in the order they ran, the longest marked: where the
    night's time went (a layer's writing is inside the assembly's time: layers are written at once)."""
    if not steps:
        return ""
    longest = max((plots.number(s.get("wall_s")) or 0.0 for s in steps if not _inside(s)), default=0.0)
    rows = []
    for step in steps:
        seconds = plots.number(step.get("wall_s")) or 0.0
        inside = _inside(step)
        mark = " class=\"longest\"" if seconds == longest > 0 and not inside else ""
        layer = step.get("layer")
        name = _esc(step.get("step"), 40) + ("" if layer is None else f" <code>{_esc(layer, 300)}</code>")
        rows.append(f"<tr><td{MUTED if inside else ''}>{name}</td>"
                    f"<td class=\"n\"><span{mark}>{_seconds(step.get('wall_s'))}</span></td></tr>")
    return "<h2>Steps</h2>\n" + _table({"step": 80, "wall": 20}, rows)


def _inside(step: Mapping[str, Any]) -> bool:
    """A layer's writing: counted in the assembly's wall time (``Step.within_assembly``, on a
    report's untrusted JSON)."""
    return step.get("step") == "assemble" and step.get("layer") is not None


MUTED = " class=\"muted\""
_NOT_RUN = "<span class=\"muted\">not run</span>"


def _verdict(good: bool, text: str) -> str:
    return f"<span class=\"{'ok' if good else 'bad'}\">{text}</span>"


def _outcome(report: Mapping[str, Any]) -> str:
    check, verify, image = report.get("check"), report.get("verify"), report.get("image")
    rows = []
    if isinstance(check, Mapping):
        identical = check.get("identical") is True
        differences = plots.number(check.get("differences"))
        count = "an unknown number of differences" if differences is None else \
            f"{differences:g} difference{'' if differences == 1 else 's'}"
        said = "identical, bit for bit" if identical else f"differs: {count}"
        rows.append(("reproducibility check", _verdict(identical, said)))
    else:
        rows.append(("reproducibility check", _NOT_RUN))
    if isinstance(verify, Mapping):
        ok = verify.get("ok") is True
        message = f" {_esc(verify.get('message'))}" if verify.get("message") is not None else ""
        rows.append(("receipt verification", _verdict(ok, "ok" if ok else "failed") + message))
    else:
        rows.append(("receipt verification", _NOT_RUN))
    if isinstance(image, Mapping):
        listed = image.get("tags")
        tags = [_esc(t, 300) for t in listed if t is not None] if isinstance(listed, list) else []
        rows += [("image", f"<code>{_esc(image.get('reference'), 300)}</code>"),
                 ("manifest", _short("image", image.get("manifest"))),
                 ("config", _short("image", image.get("config"))),
                 ("size", _bytes(image.get("size_bytes"))),
                 ("tags", ", ".join(f"<code>{t}</code>" for t in tags) or "<span class=\"muted\">none</span>")]
    else:
        rows.append(("image", "<span class=\"muted\">none this night</span>"))
    receipt = report.get("receipt")
    rows.append(("receipt", f"<code>{_esc(receipt, 500)}</code>" if receipt is not None
                 else "<span class=\"muted\">none</span>"))
    body = "\n".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in rows)
    return f"<h2>Result</h2>\n<table class=\"kv\">\n{body}\n</table>"


def _history(history: list[Mapping[str, Any]]) -> str:
    if not history:
        return "<h2>Earlier nights</h2>\n<p class=\"muted\">This is the first night on record.</p>"
    rows = [f"<tr><td><code>{_esc(h.get('entry'), 120)}</code></td><td>{_when(h.get('started'))}</td>"
            f"<td>{_esc(h.get('status'), 40)}</td><td>{_yes_no(h.get('known_good'))}</td>"
            f"<td class=\"n\">{_bytes(h.get('image_size_bytes'))}</td></tr>" for h in reversed(history[-14:])]
    more = f"<p class=\"muted\">{len(history) - 14} older nights in the plots only.</p>" if len(history) > 14 else ""
    columns = {"night": 25, "started": 25, "status": 20, "known good": 15, "image size": 15}
    return "<h2>Earlier nights</h2>\n" + _table(columns, rows) + more


def _nights(report: Mapping[str, Any]) -> list[plots.Night]:
    """History, oldest first, then this night, as the plots read them: each by its entry id."""
    out = []
    for item in _items(report.get("history")):
        layers = {_clean(k): v for k, v in _field(item, "layers").items() if isinstance(v, Mapping)}
        out.append(plots.Night(_clean(item.get("entry")) or "?",
                               {k: plots.number(v.get("wall_s")) for k, v in layers.items()},
                               {k: plots.number(v.get("peak_memory_bytes")) for k, v in layers.items()},
                               plots.number(item.get("image_size_bytes"))))
    this = [layer for layer in _items(report.get("layers")) if layer.get("name") is not None]
    image = report.get("image")
    out.append(plots.Night(_clean(report.get("entry")) or "?",
                           {_clean(x.get("name")): plots.number(x.get("wall_s")) for x in this},
                           {_clean(x.get("name")): plots.number(x.get("peak_memory_bytes")) for x in this},
                           plots.number(image.get("size_bytes")) if isinstance(image, Mapping) else None))
    return out


# Why a plot has no number in any night: said instead of an empty frame.
_NONE_YET = {"wall": "a layer has a build time only in a night that rebuilt it",
             "peak": "a layer has a peak memory only in a night that rebuilt it",
             "image": "only a night that built an image has an image size"}


def _plots(report: Mapping[str, Any]) -> str:
    """A plot for each measure two or more nights have numbers for; for one night its numbers in
    words, for none a line saying why: never an empty frame."""
    nights = _nights(report)
    figures, lines = [], []
    for chart in plots.charts(nights):
        shown = chart.nights_with_numbers
        title = _esc(chart.title)
        if not shown:
            lines.append(f"<p class=\"muted\"><strong>{title}</strong>: no plot, no night has a number yet "
                         f"({_NONE_YET[chart.kind]}).</p>")
        elif len(shown) == 1:
            night = shown[0]
            values = ", ".join(
                ("" if chart.kind == "image" else _esc(name, 300) + " ")
                + (_seconds(v[night]) if chart.kind == "wall" else _bytes(v[night]))
                for name, v in chart.series.items() if not math.isnan(v[night]))
            lines.append(f"<p><strong>{title}</strong>: only night <code>{_esc(nights[night].entry, 120)}</code> "
                         f"has a number so far ({values}); the plot starts with a second night.</p>")
        else:
            figures.append(f"<figure><figcaption>{title}</figcaption>\n{plots.svg(nights, chart)}\n</figure>")
    intro = ("<p class=\"muted\">Oldest night on the left, this night shaded, each night labelled by its entry id "
             "(the ID <code>sparkimg promote</code> takes); a gap is a night with no number (a reused layer, an "
             "unchanged or failed night).</p>\n") if figures else ""
    return "<h2>Over the nights</h2>\n" + intro + "\n".join([*lines, *figures])
