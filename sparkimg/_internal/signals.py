"""SIGINT and SIGTERM end a command the same way: what it started is stopped and removed, what it
wrote half is removed, and it exits 130 (SIGINT) or 143 (SIGTERM).

The first signal raises ``Interrupted`` (a ``KeyboardInterrupt``, so every cleanup that handles
Ctrl-C handles both) in the main thread; a second one ends the process at once. Python runs a
handler between bytecodes of the main thread, so the exception can land inside a finalizer
(``__del__``) or a callback that swallows it: the signal is remembered, and ``check`` raises it
again where a build must not pass once stopped (before it signs a receipt);
``cli.run`` turns a remembered signal into its exit code even if nothing raised it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

_received: list[int] = []  # the first signal, once one came
_held: list[None] = []  # the main thread is inside ``held``: the first signal is raised at its end
_deferred: list[int] = []  # that signal, until then


class Interrupted(KeyboardInterrupt):
    """The command was asked to stop by ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _first(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    for each in (signal.SIGINT, signal.SIGTERM):
        signal.signal(each, _second)
    if _held:
        _deferred.append(signum)
        return
    raise Interrupted(signum)


def _second(signum: int, frame: FrameType | None) -> None:
    os._exit(128 + (_received[0] if _received else signum))


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """SIGINT and SIGTERM handled as above while the block runs (in the main thread; elsewhere
    nothing changes), the previous handlers back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    _deferred.clear()
    before = {each: signal.getsignal(each) for each in (signal.SIGINT, signal.SIGTERM)}
    hook = sys.unraisablehook
    for each in before:
        signal.signal(each, _first)
    sys.unraisablehook = _quiet(hook)
    try:
        yield
    finally:
        sys.unraisablehook = hook
        for each, handler in before.items():
            signal.signal(each, handler)


def _quiet(hook: Callable[[Any], object]) -> Callable[[Any], object]:
    """Python prints a traceback for an exception it must drop (one raised in a ``__del__``): for
    our own stop, remembered above and raised again, that is noise; anything else is printed."""

    def quiet(unraisable: Any) -> object:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and _received:
            return None
        return hook(unraisable)

    return quiet


@contextlib.contextmanager
def held() -> Iterator[None]:
    """A few statements a stop must not split (a work folder made and remembered, so that the stop
    removes it): a first signal that comes meanwhile is raised when the block ends. Only the main
    thread, where handlers run, is held; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _held.append(None)
    try:
        yield
    finally:
        _held.pop()
    if not _held and _deferred:
        raise Interrupted(_deferred.pop())


def received() -> int | None:
    """The signal that asked this command to stop, if one did."""
    return _received[0] if _received else None


def check() -> None:
    """Raise ``Interrupted`` again if a signal came: its first raise may have been swallowed."""
    if _received:
        raise Interrupted(_received[0])
