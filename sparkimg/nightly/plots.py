"""The drift report's plots: build time, peak memory and image size per night, as SVG to inline.

Each night on the x axis is labelled by its entry id (what ``sparkimg promote`` takes), one tick
per night, slanted; past ``TICKS_MAX`` nights every n-th is labelled, this night always. A plot is
drawn only when at least two nights have a number for it (``Chart.nights_with_numbers``): the page
says in words what one night or none has, instead of an empty frame.

matplotlib is imported inside ``svg``, so importing this module (and the renderer) costs the CLI
nothing. Every figure is drawn inside one ``rc_context`` with a fixed hash salt, text kept as
text (no mathtext: a ``$`` in a layer name is a character) and no date in the metadata, so the
same nights give the same bytes. The XML prolog, DOCTYPE, metadata, namespace declarations and
group ids are taken out: the SVG is inlined in HTML, names no outside resource, and several
plots sit in one page without duplicate ids.
"""

from __future__ import annotations

import io
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LABEL_MAX = 40  # legend labels are cut here; the tables hold the full names
TICKS_MAX = 20  # entry ids on one x axis at most: slanted at 45 degrees they stay apart at the page's width
_UNITS = (("B", 1), ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("TiB", 1 << 40))
_PROLOG = re.compile(r"\A.*?(?=<svg\b)", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
_NAMESPACES = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')
_GROUP_IDS = re.compile(r'<g id="[^"]*"')


@dataclass(frozen=True)
class Night:
    """One night as the plots see it: its entry id (the x axis' label) and its numbers (``None``: unknown)."""

    entry: str
    wall_s: Mapping[str, float | None] = field(default_factory=dict)
    peak_bytes: Mapping[str, float | None] = field(default_factory=dict)
    image_bytes: float | None = None


def number(value: Any) -> float | None:
    """A finite number, or ``None`` for null, a bool, a string or anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    result = float(value)
    return result if math.isfinite(result) else None


def layer_names(nights: Sequence[Night]) -> list[str]:
    """Every layer any night has, in the order they first appear, newest night's order first."""
    names: dict[str, None] = {}
    for night in [*nights[-1:], *nights[:-1]]:
        for name in [*night.wall_s, *night.peak_bytes]:
            names.setdefault(name, None)
    return list(names)


def unit_for(largest: float) -> tuple[str, int]:
    """The binary unit that shows ``largest`` bytes with a short number."""
    chosen = _UNITS[0]
    for unit in _UNITS:
        if largest >= unit[1]:
            chosen = unit
    return chosen


def short_label(name: str) -> str:
    return name if len(name) <= LABEL_MAX else name[: LABEL_MAX - 1] + "…"


@dataclass(frozen=True)
class Chart:
    """One plot's numbers: each series that has any, one value per night (NaN: none that night)."""

    title: str
    kind: str  # "wall" (seconds), "peak" or "image" (bytes)
    series: Mapping[str, list[float]]

    @property
    def nights_with_numbers(self) -> list[int]:
        """The nights (indexes) that have a number in some series."""
        if not self.series:
            return []
        count = len(next(iter(self.series.values())))
        return [i for i in range(count) if any(not math.isnan(v[i]) for v in self.series.values())]


def charts(nights: Sequence[Night]) -> list[Chart]:
    """Build time, peak memory and image size over ``nights`` (oldest first), each with only the
    series that have a number in some night."""
    if not nights:
        return []
    names = layer_names(nights)
    out = []
    for title, kind, series in (("Build time per layer", "wall", names), ("Peak memory per layer", "peak", names),
                                ("Image size", "image", ["image"])):
        every = {name: _values(nights, kind, name) for name in series}
        out.append(Chart(title, kind, {n: v for n, v in every.items() if not all(math.isnan(x) for x in v)}))
    return out


def ticks(count: int) -> list[int]:
    """The nights labelled on an axis of ``count``: all up to ``TICKS_MAX``, else every n-th counted
    back from the last (this night is always labelled)."""
    step = max(1, math.ceil(count / TICKS_MAX))
    return [i for i in range(count) if (count - 1 - i) % step == 0]


def _values(nights: Sequence[Night], kind: str, name: str) -> list[float]:
    def pick(night: Night) -> float | None:
        if kind == "wall":
            return night.wall_s.get(name)
        if kind == "peak":
            return night.peak_bytes.get(name)
        return night.image_bytes

    return [math.nan if (v := pick(n)) is None else v for n in nights]


def svg(nights: Sequence[Night], chart: Chart) -> str:
    """``chart`` drawn over ``nights`` as inline SVG, the entry ids on the x axis."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    known = [v for values in chart.series.values() for v in values if not math.isnan(v)]
    unit, factor = ("s", 1) if chart.kind == "wall" else unit_for(max(known, default=0.0))
    with matplotlib.rc_context({"svg.hashsalt": f"sparkimg-{chart.kind}", "svg.fonttype": "none",
                                "text.parse_math": False, "text.usetex": False, "font.family": "sans-serif",
                                "font.size": 9, "axes.prop_cycle": _cycle()}):
        figure = Figure(figsize=(9.0, 3.2), dpi=72)
        FigureCanvasAgg(figure)  # Agg, never a GUI backend, whatever the caller's pyplot uses
        axes = figure.subplots()
        xs = list(range(len(nights)))
        dot = 4.0 if len(nights) <= 60 else 1.5  # a lone night between gaps stays visible, a year stays a line
        for name, values in chart.series.items():
            axes.plot(xs, [v / factor for v in values], marker="o", markersize=dot, linewidth=1.4,
                      label=short_label(name))
        axes.axvspan(len(nights) - 1.4, len(nights) - 0.6, color="#fff3bf", zorder=0, linewidth=0)
        axes.set_xlim(-0.6, len(nights) - 0.4)
        axes.set_ylim(0, max(known, default=1.0) / factor * 1.15 or 1.0)
        axes.set_ylabel(unit)
        labelled = ticks(len(nights))
        axes.set_xticks(labelled, [short_label(nights[i].entry) for i in labelled], rotation=45, ha="right",
                        rotation_mode="anchor", fontsize=8)
        step = labelled[1] - labelled[0] if len(labelled) > 1 else 1
        axes.set_xlabel("night (entry id)" if step == 1 else f"night (entry id; one in {step} labelled)", fontsize=8)
        axes.grid(True, axis="y", color="#e9ecef")
        axes.spines[["top", "right"]].set_visible(False)
        if chart.kind != "image" and chart.series:
            axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
                        ncol=1 + (len(chart.series) - 1) // 18, fontsize=8)
        out = io.StringIO()
        with warnings.catch_warnings():  # a name in a script the font lacks is still text; the browser draws it
            warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from", category=UserWarning)
            figure.savefig(out, format="svg", bbox_inches="tight",
                           metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    return _inline(out.getvalue())


def _cycle() -> Any:
    """tab20's ten strong colours, its ten light ones, then all of them dashed, then dotted: many
    layers stay apart, and neighbours in the legend never share a hue."""
    from cycler import cycler
    from matplotlib import colormaps

    colours = [colormaps["tab20"](i) for i in [*range(0, 20, 2), *range(1, 20, 2)]]
    return cycler(linestyle=["-", "--", ":"]) * cycler(color=colours)


def _inline(text: str) -> str:
    text = _PROLOG.sub("", text, count=1)
    text = _METADATA.sub("", text)
    text = _NAMESPACES.sub("", text)
    return _GROUP_IDS.sub("<g", text).strip()
