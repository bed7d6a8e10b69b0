"""The lock asks the index for every PyPI source side by side, and says the same as one by one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from sparkimg.errors import ResolveError
from sparkimg.lock import resolve


def test_sources_are_asked_side_by_side_and_kept_in_the_specs_order() -> None:
    meeting = threading.Barrier(3, timeout=10)  # breaks unless three asks run at once

    def ask(name: str) -> Callable[[], str]:
        def run() -> str:
            meeting.wait()
            return f"pin of {name}"
        return run

    names = ["torch", "vllm", "six"]
    pins = resolve._all_at_once({name: ask(name) for name in names})
    assert list(pins) == names
    assert pins["vllm"] == "pin of vllm"


def test_the_first_failure_in_the_specs_order_is_raised_whichever_ends_first() -> None:
    def slow_failure() -> str:
        time.sleep(0.3)
        raise ResolveError("no wheel for first")

    def quick_failure() -> str:
        raise ResolveError("no wheel for second")

    with pytest.raises(ResolveError, match="first"):
        resolve._all_at_once({"first": slow_failure, "second": quick_failure})


def test_one_source_is_asked_in_this_thread() -> None:
    pins = resolve._all_at_once({"only": lambda: threading.current_thread().name})
    assert pins == {"only": threading.current_thread().name}
