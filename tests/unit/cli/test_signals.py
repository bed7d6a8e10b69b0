"""A stop asked for is never lost: a SIGTERM whose ``KeyboardInterrupt`` lands in a finalizer
(where Python prints it and goes on, as urllib3's did during a download) is remembered, raised
again where a build must not pass (before it signs), and the command exits 143 anyway."""

from __future__ import annotations

import os
import signal
import time

import pytest

from sparkimg._internal import signals


class _Finalized:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # the handler runs here, inside the finalizer
            time.sleep(0.01)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_signal_swallowed_by_a_finalizer_is_raised_again_at_the_next_check() -> None:
    with signals.handled():
        thing = _Finalized()
        del thing  # the Interrupted raised in __del__ is printed and dropped by Python
        assert signals.received() == signal.SIGTERM
        with pytest.raises(signals.Interrupted) as raised:
            signals.check()
        assert raised.value.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers before are back


def test_the_command_exits_with_the_signal_even_when_nothing_raised_it(monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from sparkimg.cli import commands
    from sparkimg.cli.run import run
    from sparkimg.store import content

    def swallowing(args: object) -> int:
        thing = _Finalized()
        del thing
        return 0

    monkeypatch.setitem(commands.HANDLERS, "doctor", swallowing)
    monkeypatch.setattr(content, "_OWN_WORK", [])  # only this command's work folders are removed
    assert run(["doctor"]) == 143
    said = capsys.readouterr().err
    assert "stopped by SIGTERM" in said and "Traceback" not in said  # the dropped raise is not printed


def test_a_signal_inside_held_is_raised_when_the_block_ends() -> None:
    """``held``: a work folder is made and remembered with no stop between the two; the stop comes
    right after, and a signal outside any held block is raised where it lands, as before."""
    done: list[str] = []
    with signals.handled():
        with pytest.raises(signals.Interrupted), signals.held():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # bytecodes a handler would run between
                pass
            done.append("the whole block")
        assert done == ["the whole block"] and signals.received() == signal.SIGTERM
