"""Asking a base image a question: one script of ours, run once in a bounded ``--network none``
container from the base, its answer written to a file in a folder the container may write.

The folder is the container's, so whatever it left there is read as the container's word and
nothing more: opened without following a link (a hostile base could point one at a host file)
and bounded in size. Used by the toolchain probe (``basecuda``) and the Python scheme query
(``build.pyscheme``).
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sparkimg.engine.protocol import Engine, Mount, RunLimits
from sparkimg.store.content import Store

SCRIPTS = "/sparkimg/bin"  # the script, read-only
ANSWERS = "/sparkimg/out"  # where it writes its answer


@dataclass(frozen=True)
class Asked:
    exit_code: int
    oom_killed: bool
    answer: bytes  # empty when the script wrote none (or something that is not a plain file)
    tail: tuple[str, ...]  # the container's last lines of output


def ask(engine: Engine, image: str, *, script: tuple[str, bytes], command: Sequence[str], answer: str,
        limits: RunLimits, store: Store, layer: str, phase: str, env: Mapping[str, str] | None = None,
        limit: int = 64 << 20) -> Asked:
    """Run ``command`` (which runs ``SCRIPTS/NAME``) in ``image``; read ``ANSWERS/answer``."""
    name, text = script
    work = store.temp_dir(f"{layer}.")
    try:
        scripts, out = work / "bin", work / "out"
        scripts.mkdir()
        out.mkdir()
        scripts.chmod(0o755)
        out.chmod(0o777)  # the base's user, whoever it is, writes the answer
        (scripts / name).write_bytes(text)
        (scripts / name).chmod(0o644)
        tail: list[str] = []

        def keep(_layer: str, _phase: str, line: str) -> None:
            tail.append(line)
            del tail[:-20]

        result = engine.run_bounded(image, list(command), limits=limits, env=env, log=keep, layer=layer,
                                    phase=phase, mounts=[Mount(scripts, SCRIPTS), Mount(out, ANSWERS, writable=True)])
        return Asked(result.exit_code, result.oom_killed, read_answer(out / answer, limit), tuple(tail))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def read_answer(path: Path, limit: int) -> bytes:
    """What the container wrote at ``path``: not through a link, a plain file, at most ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return b""
        return handle.read(limit)
