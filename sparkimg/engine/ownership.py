"""Which sparkimg process owns a container: an owner label (host, pid, start time, PID namespace)
on every container sparkimg starts, and a lease the container can watch. A later run removes the
containers of owners that died (kill -9), and a container's wrapper stops its work when its
owner's lease comes free (compile/container.py, prewarm/worker.py)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

# Every container sparkimg starts carries its owner (host/pid/process start time), so a later
# run can tell one whose sparkimg died (kill -9) and remove it. Inside, SPARKIMG_LEASE names a
# file the owner holds an flock on: when the lock comes free, the owner is gone and the
# container's wrapper stops the work (build/compile.py, prewarm/worker.py).
OWNER_LABEL = "dev.sparkimg.owner"
LEASE = "/run/sparkimg-lease/lease"


@contextlib.contextmanager
def lease() -> Iterator[Path]:
    """A folder holding the file this process keeps an flock on while its container runs
    (``store.flock``); the kernel lets go of it when the process dies, however it dies, which
    the container can see. The folder is removed when the container is done."""
    from sparkimg._internal.fs.atomic import flock

    sweep_leases()
    with tempfile.TemporaryDirectory(prefix="sparkimg-lease-") as folder:
        Path(folder).chmod(0o755)  # readable by the container's user, whoever that is
        with flock(Path(folder) / "lease"):
            yield Path(folder)


def sweep_leases(older_than_s: float = 30.0) -> int:
    """Remove lease folders whose owner died (kill -9 leaves one): their flock is free. Young ones
    are left alone, as the owner takes its flock right after it makes the folder."""
    import fcntl
    import shutil
    import time

    removed = 0
    for folder in Path(tempfile.gettempdir()).glob("sparkimg-lease-*"):
        held = folder / "lease"
        try:
            if time.time() - folder.stat().st_mtime < older_than_s:
                continue
            with open(held, "rb") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
        except (BlockingIOError, FileNotFoundError, NotADirectoryError, PermissionError):
            continue
    return removed


def _start_time(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (``/proc/PID/stat`` field 22): with the
    pid, it names one process, even after the pid is used again."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def _pid_namespace() -> str:
    """This process's PID namespace (its inode): pids mean something only inside one."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "?"


def owner() -> str:
    """This process, as the owner label writes it: host/pid/start time/PID namespace."""
    import socket

    return f"{socket.gethostname()}/{os.getpid()}/{_start_time(os.getpid())}/{_pid_namespace()}"


def alive(label: str) -> bool:
    """Whether the owner a label names still runs. Another host's containers are never judged dead."""
    import socket

    host, _, rest = label.partition("/")
    pid, _, rest = rest.partition("/")
    started, _, namespace = rest.partition("/")
    if host != socket.gethostname() or not pid.isdigit() or namespace != _pid_namespace():
        return True  # another machine, or another PID namespace: its processes are not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # there, but not ours to signal
    found = _start_time(int(pid))
    return found is None or found == started  # unreadable: assume alive (hidepid); another start: pid reused
