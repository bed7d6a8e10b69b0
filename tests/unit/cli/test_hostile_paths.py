"""Nothing outside the spec's root (or a patch set's folder) is read through a link, and
nothing that would block a read is read at all: each is refused with the file named, exit 2."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkimg.cli import main
from tests.formats import GOOD as ARM64

# This machine's platform: an arm64 spec with this machine's toolkit is refused before any link is read.
GOOD = ARM64.replace("platform: linux/arm64\n", "platform: native\n", 1)

Project = Callable[..., Path]


def _check(spec: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["check", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("what", ["serve.env", "mounts.txt"])
def test_a_patch_set_file_linked_out_of_the_folder_is_refused(project: Project, what: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    spec = project(GOOD)
    target = spec.parent / "patches" / "demo" / what
    target.unlink()
    target.symlink_to("/etc/hostname")
    err = _check(spec, capsys)
    assert f"{target}: a link to /etc/hostname, outside" in err
    for action in ("pin", "check"):
        assert main(["patches", action, str(target.parent)]) == 2
        assert "outside" in capsys.readouterr().err


def test_a_sums_file_linked_out_of_the_folder_is_refused(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    spec = project(GOOD)
    sums = spec.parent / "patches" / "demo" / "MD5SUMS"
    sums.unlink()
    sums.symlink_to("/etc/hostname")
    assert main(["patches", "check", str(sums.parent)]) == 2
    assert f"{sums}: a link to /etc/hostname" in capsys.readouterr().err


def test_a_link_inside_the_folder_is_followed(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    spec = project(GOOD)
    folder = spec.parent / "patches" / "demo"
    (folder / "serve.env").rename(folder / "real.env")
    (folder / "serve.env").symlink_to("real.env")
    (folder / "real.env").rename(folder / ".real.env")  # hidden files are not patch files
    (folder / "serve.env").unlink()
    (folder / "serve.env").symlink_to(".real.env")
    assert main(["check", str(spec)]) == 0, capsys.readouterr().err


def test_a_fifo_is_refused_instead_of_blocking(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    spec = project(GOOD)
    target = spec.parent / "patches" / "demo" / "serve.env"
    target.unlink()
    os.mkfifo(target)
    assert f"{target}: not a regular file" in _check(spec, capsys)


@pytest.mark.parametrize("root", ["../../../../../../../../../..", "kernel"])
def test_root_is_the_spec_folder_or_above_it_and_never_slash(project: Project, root: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    spec = project(GOOD.replace("name: demo\n", f"name: demo\nroot: {root}\n", 1))
    err = _check(spec, capsys)
    assert "root: '" in err and "must be the spec's folder or a folder above it" in err


@pytest.mark.parametrize("target", ["/", "/opt/../etc/x", "/opt//x", "/opt/x/", "opt/x", "/opt/./x"])
def test_a_patch_target_is_a_clean_absolute_path(project: Project, target: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    spec = project(GOOD)
    (spec.parent / "patches" / "demo" / "mounts.txt").write_text(f"serve.env {target}\n"
                                                                "sitecustomize_banner.py /opt/s/b.py\n")
    err = _check(spec, capsys)
    assert (f"serve.env -> '{target}'" in err and "clean absolute path" in err) or \
        f"mounts.txt:1: '{target}' must be an absolute container path" in err


def test_replacing_a_system_file_needs_the_opt_in(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    spec = project(GOOD)
    (spec.parent / "patches" / "demo" / "mounts.txt").write_text("serve.env /etc/passwd\n"
                                                                "sitecustomize_banner.py /opt/s/b.py\n")
    err = _check(spec, capsys)
    assert "serve.env -> '/etc/passwd': replaces a file the base system owns" in err
    assert "replaces_system_files: true" in err
    opted = project(GOOD.replace("    mode: bake\n", "    mode: bake\n    replaces_system_files: true\n"), "opted.yaml")
    assert main(["check", str(opted)]) == 0, capsys.readouterr().err


def test_a_credential_in_env_is_warned_about_where_it_shows(project: Project,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD.replace('env:\n  A: "1"\n', 'env:\n  A: "1"\n  HF_TOKEN: "hf_x"\n').replace(
        '      NVCC_GENCODE: "{gencode}"\n', '      NVCC_GENCODE: "{gencode}"\n      GIT_PASSWORD: "x"\n')
    spec = project(text)
    assert main(["check", str(spec)]) == 0
    err = capsys.readouterr().err
    assert "env.HF_TOKEN: looks like a credential" in err and "docker inspect" in err
    assert "layers[0].env.GIT_PASSWORD: looks like a credential" in err and "build container" in err
    assert "env.A:" not in err


@pytest.mark.parametrize("kind", ["fifo", "loop", "date", "huge-int"])
def test_a_spec_file_that_is_no_spec_is_exit_2_at_once(tmp_path: Path, kind: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.yaml"
    if kind == "fifo":
        os.mkfifo(spec)
    elif kind == "loop":
        spec.symlink_to(spec)
    elif kind == "date":
        spec.write_text("schema: sparkimg/v1\nname: 2024-02-30\n")
    else:
        spec.write_text("schema: sparkimg/v1\nname: " + "9" * 5000 + "\n")
    for command in ("check", "build"):
        assert main([command, str(spec)]) == 2
        assert "Traceback" not in capsys.readouterr().err
