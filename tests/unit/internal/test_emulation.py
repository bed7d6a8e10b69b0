"""Whether the kernel runs another platform's programs: a binfmt_misc handler that matches the
platform's ELF header, enabled, with the F flag; each missing piece said with its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkimg._internal import emulation
from sparkimg.errors import EmulationError

# As Debian's qemu-user-static registers it (/usr/lib/binfmt.d/qemu-aarch64.conf).
AARCH64 = """{state}
interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P
flags: {flags}
offset 0
magic 7f454c460201010000000000000000000200b700
mask ffffffffffffff00fffffffffffffffffeffffff
"""
FOREIGN = "linux/arm64" if emulation.native() == "linux/amd64" else "linux/amd64"


def _binfmt(tmp_path: Path, *, status: str = "enabled", handler: str | None = None) -> Path:
    folder = tmp_path / "binfmt_misc"
    folder.mkdir(parents=True)
    (folder / "register").write_text("")
    (folder / "status").write_text(status + "\n")
    (folder / "python3.11").write_text("enabled\ninterpreter /usr/bin/python3.11\nflags: \noffset 0\n"
                                       "magic a70d0d0a\n")
    if handler is not None:
        (folder / "qemu-aarch64").write_text(handler)
    return folder


def test_this_machines_own_platform_needs_nothing(tmp_path: Path) -> None:
    assert emulation.verdict(emulation.native(), tmp_path / "absent").ok


@pytest.mark.skipif(FOREIGN != "linux/arm64", reason="the handler text here is qemu-aarch64's")
def test_each_missing_piece_is_said_with_its_fix(tmp_path: Path) -> None:
    said = emulation.verdict("linux/arm64", tmp_path / "absent")
    assert not said.ok and "binfmt_misc is not mounted" in said.detail and "mount -t binfmt_misc" in str(said.fix)
    said = emulation.verdict("linux/arm64", _binfmt(tmp_path / "a", status="disabled"))
    assert not said.ok and "disabled" in said.detail
    said = emulation.verdict("linux/arm64", _binfmt(tmp_path / "b"))
    assert not said.ok and "no binfmt handler runs aarch64 programs" in said.detail
    assert "tonistiigi/binfmt --install arm64" in str(said.fix) and "qemu 8 or newer" in str(said.fix)
    said = emulation.verdict("linux/arm64", _binfmt(tmp_path / "c", handler=AARCH64.format(state="enabled",
                                                                                          flags="PO")))
    assert not said.ok and "lacks the F flag" in said.detail
    said = emulation.verdict("linux/arm64", _binfmt(tmp_path / "d", handler=AARCH64.format(state="disabled",
                                                                                          flags="POF")))
    assert not said.ok and "is disabled" in said.detail
    said = emulation.verdict("linux/arm64", _binfmt(tmp_path / "e", handler=AARCH64.format(state="enabled",
                                                                                          flags="POF")))
    assert said.ok and "qemu-aarch64" in said.detail


def test_a_handler_is_found_by_what_it_matches_not_by_its_name(tmp_path: Path) -> None:
    folder = _binfmt(tmp_path, handler=AARCH64.format(state="enabled", flags="F"))
    (folder / "qemu-aarch64").rename(folder / "arm64-by-another-tool")
    assert emulation.verdict("linux/arm64", folder).ok or emulation.native() == "linux/arm64"
    x86 = AARCH64.replace("0200b700", "02003e00")  # the same handler for x86_64 matches no aarch64 file
    (folder / "arm64-by-another-tool").write_text(x86.format(state="enabled", flags="F"))
    assert not emulation.verdict("linux/arm64", folder).ok or emulation.native() == "linux/arm64"


def test_require_refuses_with_exit_3(tmp_path: Path) -> None:
    with pytest.raises(EmulationError) as raised:
        emulation.require(FOREIGN, tmp_path / "absent")
    assert raised.value.exit_code == 3 and f"cannot build for {FOREIGN} here" in str(raised.value)
