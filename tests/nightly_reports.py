"""Nightly drift reports (``sparkimg-nightly-report/v1``) for the renderer's tests: a realistic night
with a few nights of history, and the hostile strings a git subject or an error message may hold."""

from __future__ import annotations

import copy
from typing import Any

# What an untrusted string may hold: markup, quotes, a style break-out, an event handler, a URL,
# mathtext for matplotlib, unicode, a control character.
HOSTILE = ("<script>document.title='pwned'</script>\"'</style><img src=x onerror=alert(1)>"
           " https://evil.example/x $\\frac{a}{b}$ ünïcødé 中文 \x07")


def _hex(char: str, n: int = 40) -> str:
    return char * n


REPORT: dict[str, Any] = {
    "schema": "sparkimg-nightly-report/v1",
    "spec": "demo.yaml",
    "entry": "20261203T020000Z",
    "started": "2026-12-03T02:00:00Z",
    "finished": "2026-12-03T02:07:12Z",
    "status": "built",
    "failed_stage": None,
    "error": None,
    "failure": None,
    "moved": [
        {"input": "vllm", "kind": "git", "from": _hex("a"), "to": "0123456789abcdef" + _hex("b", 24),
         "from_detail": {"date": "2026-12-01T10:00:00Z", "subject": "[Kernel] Fix MoE for sm_121a"},
         "to_detail": {"date": "2026-12-02T11:00:00Z", "subject": HOSTILE}},
        {"input": "base", "kind": "image", "from": "sha256:" + _hex("c", 64), "to": "sha256:" + _hex("d", 64),
         "from_detail": {}, "to_detail": {"date": "2026-12-02T00:00:00Z"}},
    ],
    "layers": [
        {"name": "demo-kernel", "status": "rebuilt", "reason": "source vllm moved",
         "wall_s": 12.3, "cpu_s": 40.1, "peak_memory_bytes": 734003200},
        {"name": "six", "status": "reused", "reason": "unchanged", "wall_s": None, "cpu_s": None,
         "peak_memory_bytes": None},
    ],
    "steps": [{"step": "resolve", "layer": None, "wall_s": 3.1}, {"step": "fetch", "layer": None, "wall_s": 1.4},
              {"step": "compile", "layer": "demo-kernel", "wall_s": 12.3},
              {"step": "assemble", "layer": "six", "wall_s": 0.2}, {"step": "assemble", "layer": None, "wall_s": 0.4},
              {"step": "load", "layer": None, "wall_s": 0.3}, {"step": "sbom", "layer": None, "wall_s": 0.6},
              {"step": "sign", "layer": None, "wall_s": 0.1}, {"step": "push", "layer": None, "wall_s": 4.2}],
    "check": {"identical": True, "differences": 0},
    "verify": {"ok": True, "message": "receipt, recipe, image and patches agree"},
    "image": {"reference": "127.0.0.1:5000/sparkimg/demo:nightly", "manifest": "sha256:" + _hex("e", 64),
              "config": "sha256:" + _hex("f", 64), "size_bytes": 812345678, "tags": ["nightly", "20261203"]},
    "receipt": "state/demo/20261203T020000Z/receipt.dsse.json",
    "history": [
        {"entry": "20261130T020000Z", "started": "2026-11-30T02:00:00Z", "status": "built", "known_good": True,
         "image_size_bytes": 800000000,
         "layers": {"demo-kernel": {"wall_s": 11.9, "peak_memory_bytes": 700000000},
                    "six": {"wall_s": 1.2, "peak_memory_bytes": 50000000}}},
        {"entry": "20261201T020000Z", "started": "2026-12-01T02:00:00Z", "status": "unchanged", "known_good": True,
         "image_size_bytes": 800000000, "layers": {}},
        {"entry": "20261202T020000Z", "started": "2026-12-02T02:00:00Z", "status": "failed", "known_good": False,
         "image_size_bytes": None, "layers": {"demo-kernel": {"wall_s": None, "peak_memory_bytes": 1200000000}}},
    ],
}


def report(**changes: Any) -> dict[str, Any]:
    """A deep copy of ``REPORT`` with top-level fields replaced."""
    out = copy.deepcopy(REPORT)
    out.update(changes)
    return out


def history() -> list[dict[str, Any]]:
    """A deep copy of ``REPORT``'s three earlier nights."""
    return copy.deepcopy(REPORT["history"])


# A night whose compile failed: the one-line error is the tool's last word, the failure its first error.
FAILED_COMPILE = report(
    status="failed", failed_stage="build", error="layer demo-kernel: command exited with 2; last output: "
    "ninja: build stopped: subcommand failed.", image=None, check=None, verify=None, receipt=None,
    layers=[{"name": "demo-kernel", "status": "failed", "reason": "source vllm moved", "wall_s": None,
             "cpu_s": None, "peak_memory_bytes": None},
            {"name": "six", "status": "reused", "reason": "unchanged", "wall_s": None, "cpu_s": None,
             "peak_memory_bytes": None}],
    failure={"stage": "build", "first_error_line": "csrc/moe.cu(41): error: identifier \"__nv_fp4<T>\" is undefined",
             "layer": "demo-kernel", "files": [], "files_total": 0})

# A night whose rebuild from scratch differed: the first files of three, one path hostile.
FAILED_CHECK = report(
    status="failed", failed_stage="check", error="the rebuild from scratch differs in 3 place(s); see "
    "`sparkimg build --check` on the candidate", check={"identical": False, "differences": 3},
    failure={"stage": "check", "first_error_line": None, "layer": None, "files_total": 3,
             "files": [{"layer": "demo-kernel", "path": "usr/lib/python3/site-packages/demo/_C.so", "kind": "content"},
                       {"layer": "image", "path": "etc/<script>x</script>.conf", "kind": "metadata"}]})
