"""Patch sets: sums files in the coreutils formats, and every way a set can drift."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkimg.errors import UsageError
from sparkimg.patches import sums as patches

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def patch_set(tmp_path: Path) -> Path:
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "a.py").write_text("A = 1\n")
    (folder / "b.conf").write_text("b\n")
    (folder / "mounts.txt").write_text("# comment\na.py /opt/a.py\nb.conf /etc/b.conf\n")
    return folder


def test_pin_writes_sums_that_coreutils_accepts(patch_set: Path) -> None:
    pinned = patches.pin(patch_set)
    assert set(pinned) == {"a.py", "b.conf"}
    for tool, name in (("md5sum", "MD5SUMS"), ("sha256sum", "SHA256SUMS")):
        done = subprocess.run([tool, "-c", name], cwd=patch_set, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    assert (patch_set / "MD5SUMS").read_text().splitlines()[0] == f"{pinned['a.py']['md5']}  a.py"
    assert patches.check(patch_set)[1] == []


def test_check_reads_sums_that_coreutils_wrote(patch_set: Path) -> None:
    for tool, name in (("md5sum", "MD5SUMS"), ("sha256sum", "SHA256SUMS")):
        sums = subprocess.run([tool, "-b", "a.py", "b.conf"], cwd=patch_set, capture_output=True, text=True,
                              check=True).stdout
        (patch_set / name).write_text(sums)  # binary mode: 'HEX *NAME'
    assert patches.check(patch_set)[1] == []


def test_a_changed_file_is_a_mismatch_in_both_sums(patch_set: Path) -> None:
    patches.pin(patch_set)
    (patch_set / "a.py").write_text("A = 2\n")
    problems = patches.check(patch_set)[1]
    assert [(p.file, p.algorithm) for p in problems] == [("a.py", "md5"), ("a.py", "sha256")]
    assert "MD5SUMS pins" in str(problems[0])


def test_sums_for_a_file_that_is_gone_and_unpinned_files(patch_set: Path) -> None:
    patches.pin(patch_set)
    (patch_set / "mounts.txt").write_text("a.py /opt/a.py\n")
    (patch_set / "b.conf").unlink()
    problems = patches.check(patch_set)[1]
    assert {str(p) for p in problems} == {"b.conf: in MD5SUMS but not in mounts.txt or not on disk",
                                          "b.conf: in SHA256SUMS but not in mounts.txt or not on disk"}


@pytest.mark.parametrize(("setup", "message"), [
    (lambda d: (d / "stray.py").write_text(""), "stray.py not listed in mounts.txt"),
    (lambda d: (d / "a.py").unlink(), "lists files that are not there: a.py"),
    (lambda d: (d / "mounts.txt").unlink(), "mounts.txt: no such file"),
])
def test_sets_that_cannot_be_pinned(patch_set: Path, setup, message: str) -> None:  # type: ignore[no-untyped-def]
    setup(patch_set)
    with pytest.raises(UsageError, match=message):
        patches.pin(patch_set)


def test_missing_or_malformed_sums_are_bad_input(patch_set: Path) -> None:
    with pytest.raises(UsageError, match="MD5SUMS: no such file") as caught:
        patches.check(patch_set)
    assert caught.value.exit_code == 2
    patches.pin(patch_set)
    (patch_set / "MD5SUMS").write_text("not-hex a.py\n")
    with pytest.raises(UsageError, match="not a coreutils sums line"):
        patches.check(patch_set)


@pytest.mark.parametrize("folder", ["patches/demo", "patches/demo-runtime"])
def test_shipped_sets_match_their_sums(folder: str) -> None:
    assert patches.check(REPO / folder)[1] == []
