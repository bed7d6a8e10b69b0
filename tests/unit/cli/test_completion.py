"""``sparkimg completion bash|zsh|fish``: each script is loaded into the real shell (no rc files), which
is asked to complete a command line; what it offers is what the parser says (commands, options,
choices, file and folder names). The scripts are the same bytes every run."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkimg.cli.parser import SHELLS
from tests.support import unavailable

# (command line up to the cursor, what must be offered)
CASES = [
    ("sparkimg bu", {"build"}),
    ("sparkimg build x.yaml --ch", {"--check"}),
    ("sparkimg push x --compression ", {"none", "gzip", "zstd"}),
    ("sparkimg --store /s patches ", {"pin", "check"}),
    ("sparkimg build x.yaml --store /s --rec", {"--recheck", "--record-host"}),
    ("sparkimg com", {"completion"}),
    ("sparkimg completion ", set(SHELLS)),
]


def _script(shell: str) -> str:
    done = subprocess.run([sys.executable, "-m", "sparkimg.cli", "completion", shell], capture_output=True,
                          text=True, check=True)
    assert done.stderr == ""
    return done.stdout


def _shell(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        unavailable(f"{name} is not installed")
    return str(found)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder to complete names in: a key, a spec, and a cache folder."""
    folder = tmp_path_factory.mktemp("names")
    (folder / "demo.key").write_text("")
    (folder / "demo.yaml").write_text("")
    (folder / "cache-a").mkdir()
    return folder


# Paths: a file argument offers files (and folders, to descend), a folder argument folders only.
PATH_CASES = [
    ("sparkimg build --key demo.", {"demo.key", "demo.yaml"}, set()),
    ("sparkimg sbom dem", {"demo.key", "demo.yaml"}, set()),  # SPEC|RECEIPT|REF: a str, a file by its metavar
    ("sparkimg prewarm --cache ", {"cache-a"}, {"demo.key", "demo.yaml"}),
]


def bash_candidates(script: Path, line: str, cwd: Path) -> set[str]:
    """What the completion function bash registered for ``sparkimg`` puts in COMPREPLY for ``line``."""
    program = f"""
        source {script}
        func=$(complete -p sparkimg | sed -E 's/.* -F ([^ ]+) .*/\\1/')
        read -r -a COMP_WORDS <<< "$LINE"
        [[ $LINE == *' ' ]] && COMP_WORDS+=("")
        COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
        COMP_LINE=$LINE; COMP_POINT=${{#LINE}}
        "$func" sparkimg "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
        printf '%s\\n' "${{COMPREPLY[@]}}"
    """
    done = subprocess.run([_shell("bash"), "--norc", "--noprofile", "-c", program], capture_output=True, text=True,
                          env={**os.environ, "LINE": line}, cwd=cwd, check=True, timeout=30)
    assert done.stderr == ""
    return {word.strip().rstrip("/") for word in done.stdout.splitlines() if word.strip()}


def fish_candidates(script: Path, line: str, cwd: Path) -> set[str]:
    """What ``complete -C`` offers for ``line`` in fish with no configuration but the script."""
    done = subprocess.run([_shell("fish"), "--no-config", "-c", f"source {script}; complete -C $LINE"],
                          capture_output=True, text=True, env={**os.environ, "LINE": line}, cwd=cwd, check=True,
                          timeout=30)
    assert done.stderr == ""
    return {row.split("\t")[0].rstrip("/") for row in done.stdout.splitlines() if row}


# zsh completes only inside its line editor: an interactive zsh on a pseudo-terminal is handed the
# line and a Tab, and compadd (which every completion function adds candidates with) is wrapped to
# write the candidates that match to a file. The script is installed as the README says: _sparkimg
# in a folder on $fpath, before compinit.
_ZSH_SETUP = """
fpath=({folder} $fpath)
autoload -Uz compinit && compinit -u -D
compadd() {{
  if [[ ${{@[1,(i)(-|--)]}} == *-(O|A|D)\\ * ]]; then builtin compadd "$@"; return $?; fi
  local -a hits
  builtin compadd -A hits "$@"
  (( $#hits )) && print -rl -- $hits >> {hits}
  builtin compadd "$@"
}}
comppostfuncs=(exit)
"""


def zsh_candidates(folder: Path, line: str, cwd: Path) -> set[str]:
    hits = folder / "hits"
    hits.unlink(missing_ok=True)
    setup = folder / "setup.zsh"
    setup.write_text(_ZSH_SETUP.format(folder=folder, hits=hits))
    leader, follower = os.openpty()
    zsh = subprocess.Popen([_shell("zsh"), "-f", "-i"], stdin=follower, stdout=follower, stderr=follower, cwd=cwd,
                           env={**os.environ, "TERM": "dumb", "PS1": "% "}, start_new_session=True)
    os.close(follower)
    try:
        os.write(leader, f"source {setup}\n{line}\t".encode())
        deadline = time.monotonic() + 30
        while zsh.poll() is None and time.monotonic() < deadline:
            if select.select([leader], [], [], 0.1)[0]:
                try:
                    os.read(leader, 65536)  # drained, or zsh blocks writing its prompt
                except OSError:
                    break
        zsh.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if zsh.poll() is None:
            zsh.kill()
            zsh.wait()
        os.close(leader)
    return {word.rstrip("/") for word in hits.read_text().split()} if hits.exists() else set()


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each shell's script, written where that shell finds it."""
    folder = tmp_path_factory.mktemp("completion")
    paths = {"bash": folder / "sparkimg.bash", "zsh": folder / "_sparkimg", "fish": folder / "sparkimg.fish"}
    for shell, path in paths.items():
        path.write_text(_script(shell))
    return paths


def _candidates(shell: str, installed: dict[str, Path], line: str, cwd: Path) -> set[str]:
    if shell == "bash":
        return bash_candidates(installed["bash"], line, cwd)
    if shell == "fish":
        return fish_candidates(installed["fish"], line, cwd)
    return zsh_candidates(installed["zsh"].parent, line, cwd)


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(("line", "offered"), CASES)
def test_the_shell_completes_commands_options_and_choices(shell: str, line: str, offered: set[str],
                                                           installed: dict[str, Path], files: Path) -> None:
    found = _candidates(shell, installed, line, files)
    assert offered <= found, (shell, line, found)
    if line == "sparkimg bu":
        assert found == {"build"}, found


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(("line", "offered", "not_offered"), PATH_CASES)
def test_path_arguments_complete_file_or_folder_names(shell: str, line: str, offered: set[str],
                                                      not_offered: set[str], installed: dict[str, Path],
                                                      files: Path) -> None:
    found = _candidates(shell, installed, line, files)
    assert offered <= found and not (not_offered & found), (shell, line, found)


@pytest.mark.parametrize("shell", SHELLS)
def test_the_script_is_the_same_bytes_every_run(shell: str) -> None:
    first = _script(shell)
    env = {**os.environ, "PYTHONHASHSEED": "12345", "COLUMNS": "37"}
    again = subprocess.run([sys.executable, "-m", "sparkimg.cli", "completion", shell], capture_output=True,
                           env=env, check=True).stdout
    assert again == first.encode()


def test_no_other_command_loads_shtab() -> None:
    probe = "import sys; import sparkimg.cli.commands, sparkimg.cli.run; print('shtab' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_readme_install_lines_work_as_written(tmp_path: Path) -> None:
    """README's block, run as it stands with HOME in a temporary folder: each script lands where its shell
    looks, and ``man -l`` shows the page."""
    _shell("man")
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    block = next(b for b in readme.split("```sh\n")[1:] if "sparkimg completion bash" in b).split("```")[0]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sparkimg").write_text(f"#!/bin/sh\nexec {sys.executable} -m sparkimg.cli \"$@\"\n")
    (bin_dir / "sparkimg").chmod(0o755)
    env = {**os.environ, "HOME": str(tmp_path), "PATH": f"{bin_dir}:{os.environ['PATH']}", "MANPAGER": "cat",
           "MANWIDTH": "80"}
    done = subprocess.run([_shell("bash"), "--norc", "--noprofile", "-euo", "pipefail", "-c", block], env=env,
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "SPARKIMG(1)" in done.stdout and "sparkimg completion" in done.stdout
    written = {"bash": ".local/share/bash-completion/completions/sparkimg", "zsh": ".zfunc/_sparkimg",
               "fish": ".config/fish/completions/sparkimg.fish"}
    assert {shell: (tmp_path / path).read_text() for shell, path in written.items()} == {
        shell: _script(shell) for shell in written}
