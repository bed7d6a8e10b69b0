"""What a failed night records (issue 40): the stage, a failed compile's first error line from its
log, the failed layer, a failed check's differing files; entries written before it read with none."""

from __future__ import annotations

import pytest

from sparkimg.errors import UsageError
from sparkimg.events import Collected, Event, Kind, Phase
from sparkimg.formats.nightly import FILES_KEPT, DifferingFile, Entry, Failure, LayerRun, report
from sparkimg.image.check import Difference
from sparkimg.nightly.failure import failure_of, first_error_line
from sparkimg.nightly.run import _plain_html

# A failed compile's log as nvcc and ninja write it: the cause first, the tool's last word after.
NVCC_LOG = [
    "[1/3] Building CUDA object csrc/moe.cu.o",
    "nvcc -Werror -Iinclude/error.h -c csrc/moe.cu",
    "csrc/moe.cu(41): error: identifier \"__nv_fp4\" is undefined",
    "csrc/moe.cu(52): error: expected a \";\"",
    "2 errors detected in the compilation of \"csrc/moe.cu\".",
    "ninja: build stopped: subcommand failed.",
]


def _failed_entry(**kwargs: object) -> Entry:
    return Entry("20261203T020000Z", "demo.yaml", "2026-12-03T02:00:00Z", "2026-12-03T02:07:12Z", "failed",
                 "build", "layer kernel: command exited with 1; last output: ninja: build stopped",
                 **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("lines", "found"), [
    (NVCC_LOG, "csrc/moe.cu(41): error: identifier \"__nv_fp4\" is undefined"),
    (["gcc -c x.c", "x.c:3:1: fatal error: cuda.h: No such file or directory"],
     "x.c:3:1: fatal error: cuda.h: No such file or directory"),
    (["Traceback (most recent call last):", "  File \"setup.py\", line 3",
      "ModuleNotFoundError: No module named 'torch'"], "ModuleNotFoundError: No module named 'torch'"),
    (["-- Configuring", "CMake Error at CMakeLists.txt:12 (find_package):"],
     "CMake Error at CMakeLists.txt:12 (find_package):"),
    (["FAILED: csrc/a.o ", "ninja: build stopped"], "FAILED: csrc/a.o"),
    (["cc -Werror -include error.h", "[3/9] building errors.o", "done"], None),  # flags and file names are not errors
    ([], None),
])
def test_the_first_line_that_reads_as_an_error_is_found(lines: list[str], found: str | None) -> None:
    assert first_error_line(lines) == found


def test_a_very_long_error_line_is_cut() -> None:
    found = first_error_line(["error: " + "x" * 5000])
    assert found is not None and len(found) == 500 and found.endswith("…")


def test_a_failed_compile_records_its_layer_and_the_first_error_of_its_own_log() -> None:
    said = Collected()
    said(Event(Phase.COMPILE, "other.c:1: error: a layer that was fine then", "six", Kind.LOG))  # not this layer
    for line in NVCC_LOG:
        said(Event(Phase.COMPILE, line, "kernel", Kind.LOG))
    said(Event(Phase.COMPILE, "error: not a log line", "kernel", Kind.WARNING))
    layers = [LayerRun("six", "reused", "unchanged"), LayerRun("kernel", "failed", "source kernel moved"),
              LayerRun("image", "skipped", "layer kernel changed")]
    failure = failure_of("build", "layer kernel: command exited with 1; last output: ninja: build stopped",
                         layers, said)
    assert failure == Failure("build", NVCC_LOG[2], "kernel", (), 0)


def test_without_an_error_line_the_nights_own_error_is_the_first() -> None:
    """An OOM kill, or a build script that says only why it stopped: the error names the cause."""
    said = Collected()
    said(Event(Phase.COMPILE, "this tip is broken", "kernel", Kind.LOG))
    failure = failure_of("build", "layer kernel: killed by the OOM killer", [LayerRun("kernel", "failed", "x")], said)
    assert failure.first_error_line == "layer kernel: killed by the OOM killer" and failure.layer == "kernel"
    assert failure_of("push", "127.0.0.1:9: connection refused", [], Collected()) == \
        Failure("push", "127.0.0.1:9: connection refused")


def test_a_failed_check_records_the_files_that_differ_the_first_hundred_and_how_many() -> None:
    differences = [Difference("kernel", "kernel", f"site-packages/k/{n:03d}.so", "content") for n in range(130)]
    failure = failure_of("check", "the rebuild from scratch differs in 130 place(s)", [], Collected(), differences)
    assert failure.stage == "check" and failure.layer is None and failure.files_total == 130
    assert len(failure.files) == FILES_KEPT and failure.files[0] == DifferingFile("kernel", "site-packages/k/000.so",
                                                                                   "content")


def test_an_entry_keeps_its_failure_and_one_from_before_failures_reads_with_none() -> None:
    night = _failed_entry(failure=Failure("check", None, None, (DifferingFile("kernel", "a/b.so", "content"),), 7))
    data = night.to_json()
    assert data["failure"] == {"stage": "check", "first_error_line": None, "layer": None,
                               "files": [{"layer": "kernel", "path": "a/b.so", "kind": "content"}], "files_total": 7}
    assert Entry.from_json(data, "entry.json") == night
    older = night.to_json()
    del older["failure"]  # written by a sparkimg before issue 40
    assert Entry.from_json(older, "entry.json").failure is None
    assert Entry.from_json({**older, "failure": None}, "entry.json").failure is None
    for bad, said in (({"stage": "bake", "files": [], "files_total": 0}, "failure.stage"),
                      ({"stage": "check", "files": [{"layer": "k"}], "files_total": 1}, "path"),
                      ({"stage": "check", "files": "a.so", "files_total": 1}, "files"), ("build", "failure")):
        with pytest.raises(UsageError, match=said):
            Entry.from_json({**data, "failure": bad}, "entry.json")


def test_the_report_carries_the_failure_and_the_fallback_page_shows_it_escaped() -> None:
    failure = Failure("build", "x.cu(1): error: <b>bold</b> & more", "kernel",
                      (DifferingFile("kernel", "<img src=x>.so", "content"),), 1)
    drift = report(_failed_entry(failure=failure), [])
    assert drift["failure"] == failure.to_json()
    page = _plain_html(drift)
    assert "x.cu(1): error: &lt;b&gt;bold&lt;/b&gt; &amp; more" in page and "<b>" not in page
    assert "&lt;img src=x&gt;.so" in page and "<img" not in page
