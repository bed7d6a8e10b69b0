"""The drift report page: untrusted strings escaped, the schema checked, the same bytes for the same
report, nulls and an empty history drawn, nothing that reaches outside the file, the plots inline
with each night labelled by its entry id, no empty plot, and a failed night's detail."""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkimg.errors import UsageError
from sparkimg.nightly import html as page
from sparkimg.nightly import plots
from tests.nightly_reports import FAILED_CHECK, FAILED_COMPILE, HOSTILE, history, report
from tests.support import REPO

SHOWN = html.escape(HOSTILE.replace("\x07", "\ufffd"))  # control characters are shown as U+FFFD
ALLOWED = {"html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "h3", "div", "span", "strong",
           "code", "p", "br", "table", "colgroup", "col", "thead", "tbody", "tr", "th", "td", "figure", "figcaption",
           # matplotlib's SVG
           "svg", "defs", "g", "path", "use", "text", "clippath", "rect", "tspan"}


class Elements(HTMLParser):
    """Every element and attribute as a browser's tokenizer sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str | None]] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += attrs
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)


def parsed(text: str) -> Elements:
    parser = Elements()
    parser.feed(text)
    return parser


def hostile_everywhere() -> dict[str, Any]:
    """Every string field of the report holds the hostile string, layer names in the plots included."""
    layer = {"name": HOSTILE, "status": HOSTILE, "reason": HOSTILE, "wall_s": 1.0, "cpu_s": 2.0,
             "peak_memory_bytes": 3 << 20,
             "objects": [{"name": HOSTILE, "wall_s": HOSTILE, "peak_memory_bytes": 7 << 30, "heavy": HOSTILE}]}
    return report(spec=HOSTILE, entry=HOSTILE, started=HOSTILE, finished=HOSTILE, status="failed",
                  failed_stage=HOSTILE, error=HOSTILE,
                  failure={"stage": HOSTILE, "first_error_line": HOSTILE, "layer": HOSTILE,
                           "files": [{"layer": HOSTILE, "path": HOSTILE, "kind": HOSTILE}], "files_total": HOSTILE},
                  moved=[{"input": HOSTILE, "kind": "git", "from": HOSTILE, "to": HOSTILE,
                          "from_detail": {"date": HOSTILE, "subject": HOSTILE},
                          "to_detail": {"date": HOSTILE, "subject": HOSTILE}}],
                  layers=[layer], verify={"ok": False, "message": HOSTILE},
                  steps=[{"step": HOSTILE, "layer": HOSTILE, "wall_s": HOSTILE},
                         {"step": "assemble", "layer": HOSTILE}],
                  image={"reference": HOSTILE, "manifest": HOSTILE, "config": HOSTILE, "size_bytes": 1,
                         "tags": [HOSTILE]},
                  receipt=HOSTILE,
                  history=[{"entry": HOSTILE, "started": HOSTILE, "status": HOSTILE, "known_good": HOSTILE,
                            "image_size_bytes": 5, "layers": {HOSTILE: {"wall_s": 2.0, "peak_memory_bytes": 9}}}])


def test_every_untrusted_string_is_text_never_markup() -> None:
    text = page.render(hostile_everywhere())
    assert "<script" not in text.lower() and "<img" not in text.lower()
    assert text.count("</style>") == 1 + text.count("<svg")  # the page's and each plot's own
    assert SHOWN in text  # the subject and the error, as text
    elements = parsed(text)
    assert set(elements.tags) <= ALLOWED, set(elements.tags) - ALLOWED
    assert not [name for name, _ in elements.attributes if name.startswith("on")]
    assert elements.styles and not [style for style in elements.styles if "pwned" in style or "<" in style]
    assert elements.tags.count("title") == 1


@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.text(alphabet=st.sampled_from("<>&\"'/=$\\ scriptonerrorstyle\x00\x07\ud800é中"), max_size=40))
def test_any_string_in_any_field_stays_text(hostile: str) -> None:
    """Strings made of markup's own characters, in the subject, a layer name (plots too) and the error."""
    night = report(status="failed", failed_stage="build", error=hostile,
                   layers=[{"name": hostile or "x", "status": "rebuilt", "reason": hostile, "wall_s": 1.0}])
    night["moved"][0]["to_detail"]["subject"] = hostile
    elements = parsed(page.render(night))
    assert set(elements.tags) <= ALLOWED and not [n for n, _ in elements.attributes if n.startswith("on")]


def test_mathtext_and_very_long_names_are_plain_text_cut_in_the_legend() -> None:
    long_name = "layer-" + "x" * 5000
    layers = [{"name": name, "status": "rebuilt", "reason": "r" * 50_000, "wall_s": 1.0, "cpu_s": 1.0,
               "peak_memory_bytes": 1 << 30} for name in ("$\\frac{a}{b}$ and $ alone", long_name)]
    text = page.render(report(layers=layers, error="e" * 100_000, status="failed", failed_stage="build"))
    assert "$\\frac{a}{b}$ and $ alone" in text
    assert long_name[: plots.LABEL_MAX - 1] + "…" in text  # the legend's label
    assert "more characters in report.json" in text
    assert len(text) < 400_000


def test_a_report_of_another_schema_is_refused_with_what_was_expected() -> None:
    for bad in (report(schema="sparkimg-nightly-report/v2"), {k: v for k, v in report().items() if k != "schema"},
                report(schema=HOSTILE)):
        with pytest.raises(UsageError, match="sparkimg-nightly-report/v1") as caught:
            page.render(bad)
        assert caught.value.exit_code == 2
    with pytest.raises(UsageError, match="JSON object"):
        page.render([])  # type: ignore[arg-type]


def test_the_same_report_renders_the_same_bytes_in_another_process() -> None:
    first = page.render(report())
    assert page.render(report()) == first
    probe = ("import sys; from sparkimg.nightly.html import render; from tests.nightly_reports import report; "
             "sys.stdout.buffer.write(render(report()).encode())")
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO)}
    other = subprocess.run([sys.executable, "-c", probe], capture_output=True, check=True, cwd=REPO, env=env)
    assert other.stdout.decode() == first


def test_nothing_in_the_page_reaches_outside_it() -> None:
    night = report()
    night["moved"][0]["to_detail"]["subject"] = HOSTILE.replace("https://evil.example/x", "")
    text = page.render(night)
    assert "http://" not in text and "https://" not in text and "<script" not in text
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    elements = parsed(text)
    links = [value or "" for name, value in elements.attributes if name in ("href", "xlink:href", "src")]
    assert links and all(link.startswith("#") for link in links)  # matplotlib's markers, in the same SVG
    ids = [value for name, value in elements.attributes if name == "id"]
    assert len(ids) == len(set(ids)), "each plot's ids are its own"


def test_a_url_in_an_untrusted_string_is_text_not_a_link() -> None:
    text = page.render(report(status="failed", failed_stage="resolve", error="GET https://pypi.org/x: 503"))
    assert "GET https://pypi.org/x: 503" in text
    assert not [v for n, v in parsed(text).attributes if n in ("href", "src") and "pypi" in (v or "")]


def test_the_plots_show_every_layer_with_numbers_and_this_night() -> None:
    text = page.render(report())
    assert text.count("<svg") == 3
    for caption in ("Build time per layer", "Peak memory per layer", "Image size"):
        assert f"<figcaption>{caption}</figcaption>" in text
    assert ">demo-kernel</text>" in text and ">six</text>" in text  # legend entries


def test_each_night_on_the_x_axis_is_its_entry_id_two_nights_of_one_day_apart() -> None:
    """Labelled by date, two nights of one day were one label twice; an entry id is what promote takes."""
    nights = [*history(), {**history()[-1], "entry": "20261202T140000Z", "started": "2026-12-02T14:00:00Z",
                           "status": "built", "image_size_bytes": 810000000,
                           "layers": {"demo-kernel": {"wall_s": 13.0, "peak_memory_bytes": 750000000}}}]
    text = page.render(report(history=nights))
    assert text.count("<svg") == 3
    for entry in ("20261130T020000Z", "20261201T020000Z", "20261202T020000Z", "20261202T140000Z",
                  "20261203T020000Z"):
        assert text.count(f">{entry}</text>") == 3, entry  # one tick per night in each plot
    assert ">12-02</text>" not in text and ">12-03</text>" not in text
    assert "night (entry id)</text>" in text


def test_many_nights_label_every_nth_and_always_this_night() -> None:
    assert plots.ticks(5) == [0, 1, 2, 3, 4] and plots.ticks(plots.TICKS_MAX) == list(range(plots.TICKS_MAX))
    assert plots.ticks(45) == list(range(2, 45, 3))
    many = [{"entry": f"202611{n // 24 + 1:02d}T{n % 24:02d}0000Z", "status": "built", "image_size_bytes": 1 << 30,
             "layers": {"demo-kernel": {"wall_s": float(n), "peak_memory_bytes": 1 << 30}}} for n in range(59)]
    text = page.render(report(history=many))
    labels = [f">{m['entry']}</text>" for m in many]
    labelled = [n for n, label in enumerate(labels) if label in text]
    assert labelled == list(range(2, 59, 3)) and len(labelled) + 1 <= plots.TICKS_MAX
    assert text.count(">20261203T020000Z</text>") == 3  # this night, always
    assert "night (entry id; one in 3 labelled)</text>" in text


def test_a_first_night_draws_no_empty_plot_and_says_its_numbers() -> None:
    text = page.render(report(history=[]))
    assert "<svg" not in text and "<figure" not in text
    assert ("<strong>Build time per layer</strong>: only night <code>20261203T020000Z</code> has a number so far "
            "(demo-kernel 12.3 s); the plot starts with a second night.") in text
    assert "(demo-kernel 700.0 MiB)" in text and "(774.7 MiB)" in text
    assert "This is the first night on record" in text


def test_first_night_unchanged_and_all_numbers_null() -> None:
    nulls = [{"name": "demo-kernel", "status": "reused", "reason": "unchanged", "wall_s": None, "cpu_s": None,
              "peak_memory_bytes": None}]
    for layers in ([], nulls):
        text = page.render(report(status="unchanged", moved=[], layers=layers, check=None, verify=None, image=None,
                                  receipt=None, history=[]))
        assert "<svg" not in text
        assert "<strong>Build time per layer</strong>: no plot, no night has a number yet (a layer has a build " \
            "time only in a night that rebuilt it)." in text
        assert "<strong>Image size</strong>: no plot, no night has a number yet" in text
        assert "This is the first night on record" in text and "No input moved" in text
        assert "not run" in text


def test_a_measure_one_night_has_is_words_the_others_plots() -> None:
    """Three nights, only one with an image size: two plots and a line, no frame with one dot."""
    nights = [{**h, "image_size_bytes": None} for h in history()]
    text = page.render(report(history=nights))
    assert text.count("<svg") == 2 and "<figcaption>Image size</figcaption>" not in text
    assert "<strong>Image size</strong>: only night <code>20261203T020000Z</code> has a number so far" in text


def test_gaps_and_wrong_types_are_unknown_not_errors() -> None:
    nights = [{"entry": "a", "started": "2026-12-01T02:00:00Z", "status": "built", "image_size_bytes": "big",
               "known_good": ["not", "a", "bool"],
               "layers": {"k": {"wall_s": float("nan"), "peak_memory_bytes": True}, "j": "no"}},
              "not a night", {"entry": "b", "started": None, "layers": None}]
    weird = report(history=nights, moved="nothing", layers=[{"name": "k", "wall_s": "1", "cpu_s": -1.0}],
                   image={"size_bytes": None, "tags": "one"}, check={"identical": False, "differences": None},
                   failure={"stage": None, "files": "x", "files_total": "many", "first_error_line": 3})
    text = page.render(weird)
    assert "<svg" not in text and text.count("no plot, no night has a number yet") == 3
    assert "differs: an unknown number of differences" in text
    assert "<th>first error line</th><td><code>3</code>" in text


def test_many_layers_get_a_legend_each() -> None:
    layers = [{"name": f"layer-{i:02d}", "status": "rebuilt", "reason": "moved", "wall_s": float(i), "cpu_s": 1.0,
               "peak_memory_bytes": i << 20} for i in range(40)]
    earlier = {"entry": "20261202T020000Z", "layers": {f"layer-{i:02d}": {"wall_s": 1.0} for i in range(40)}}
    text = page.render(report(layers=layers, history=[earlier]))
    assert all(f">layer-{i:02d}</text>" in text for i in range(40))


def test_a_failed_compile_shows_its_stage_layer_and_first_error_line_escaped() -> None:
    text = page.render(FAILED_COMPILE)
    section = text[text.index("<h2>Why the night failed</h2>"):text.index("<h2>What moved</h2>")]
    assert "<th>stage</th><td>build</td>" in section and "<th>layer</th><td><code>demo-kernel</code>" in section
    assert ("<th>first error line</th><td><code>csrc/moe.cu(41): error: identifier &quot;__nv_fp4&lt;T&gt;&quot; "
            "is undefined</code>") in section
    assert "<table>" not in section  # no file list for a compile
    assert "failed in build:</strong> layer demo-kernel: command exited with 2" in text  # the one-line error stays


def test_a_failed_check_lists_the_files_that_differ_escaped() -> None:
    text = page.render(FAILED_CHECK)
    section = text[text.index("<h2>Why the night failed</h2>"):text.index("<h2>What moved</h2>")]
    assert "<th>stage</th><td>check</td>" in section
    assert "3 files differ between the two builds (the first 2; <code>sparkimg build --check</code>" in section
    assert "<td>demo-kernel</td><td><code>usr/lib/python3/site-packages/demo/_C.so</code></td><td>content</td>" \
        in section
    assert "<td>image</td><td><code>etc/&lt;script&gt;x&lt;/script&gt;.conf</code></td><td>metadata</td>" in section
    assert "<script" not in text


def test_a_failed_night_from_before_failures_were_kept_says_so() -> None:
    text = page.render({k: v for k, v in FAILED_COMPILE.items() if k != "failure"})
    assert "recorded before a failure's detail was kept" in text
    assert "Why the night failed" not in page.render(report())


def test_units_for_people() -> None:
    text = page.render(report())
    assert "700.0 MiB" in text and "12.3 s" in text and "774.7 MiB" in text
    assert "<code title=\"0123456789abcdef" in text and ">0123456789ab</code>" in text  # a commit, short
    assert ">sha256:dddddddddddd</code>" in text
    assert "2026-12-02 11:00:00 UTC" in text


def test_write_puts_both_files_and_a_refused_report_neither(tmp_path: Path) -> None:
    night = report(error="lone \udc80 surrogate", status="failed", failed_stage="build")
    page.write(night, tmp_path / "report.json", tmp_path / "report.html")
    assert json.loads((tmp_path / "report.json").read_text()) == night
    written = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert written == page.render(night) and "lone \ufffd surrogate" in written
    with pytest.raises(UsageError):
        page.write(report(schema="other"), tmp_path / "b.json", tmp_path / "b.html")
    assert not (tmp_path / "b.json").exists() and not (tmp_path / "b.html").exists()


def test_importing_the_renderer_loads_no_plotting_library() -> None:
    probe = ("import sys, sparkimg.nightly.html, sparkimg.cli.commands; "
             "print(sorted(m for m in ('matplotlib', 'numpy', 'PIL') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_a_layers_costliest_objects_are_listed_under_the_layers() -> None:
    night = report(layers=[{"name": "vllm-stable-libtorch", "status": "rebuilt", "reason": "x", "wall_s": 300.0,
                            "objects": [{"name": "csrc/quantization/fp4/nvfp4_scaled_mm_sm120_kernels.cu",
                                         "wall_s": 215.0, "peak_memory_bytes": 7907921920, "heavy": True}]}])
    text = page.render(night)
    assert "vllm-stable-libtorch: the costliest objects" in text
    assert "nvfp4_scaled_mm_sm120_kernels.cu</code></td><td class=\"n\">3 min 35 s</td>" in text


def test_the_steps_show_where_the_nights_time_went_the_longest_marked() -> None:
    text = page.render(report())
    steps = text[text.index("<h2>Steps</h2>"):text.index("</table>", text.index("<h2>Steps</h2>"))]
    assert "compile <code>demo-kernel</code>" in steps and "12.3 s" in steps
    assert steps.count("class=\"longest\"") == 1 and "<span class=\"longest\">12.3 s" in steps
    assert "<td class=\"muted\">assemble <code>six</code>" in steps  # inside the assembly's own time
    assert "<h2>Steps</h2>" not in page.render(report(steps=[]))
