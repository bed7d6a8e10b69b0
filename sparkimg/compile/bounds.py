"""Resource budgets for compile containers, and the job count derived from them.

jobs = max(1, min(cpus, memory // job_memory)): the compile gets as many parallel jobs as
both its CPUs and its memory allow, so MAX_JOBS is never a guess that runs the box out of
memory. ``reserve`` keeps host MemAvailable free for a serving process.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from sparkimg._internal.units import format_size
from sparkimg.errors import BudgetError
from sparkimg.spec import Bounds

MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class Overrides:
    """Command-line bounds; each one, when set, replaces the spec's value for every layer."""

    memory: int | None = None
    cpus: float | None = None
    cpuset: str | None = None
    pids: int | None = None
    reserve: int | None = None
    cgroup_parent: str | None = None


@dataclass(frozen=True)
class Budget:
    memory: int
    cpus: float | None
    cpuset: str | None
    pids: int
    jobs: int
    job_memory: int
    cgroup_parent: str | None
    reserve: int | None
    available: int | None

    def env(self) -> dict[str, str]:
        """Every parallelism knob set from one number.

        NVCC_THREADS is 1: nvcc's own threads multiply with MAX_JOBS, and the memory
        budget is counted per job. The budget itself (bytes) is there for a build script that
        schedules heavier objects apart (``build/vllm-ext``).
        """
        jobs = str(self.jobs)
        return {
            "MAX_JOBS": jobs,
            "NVCC_THREADS": "1",
            "CMAKE_BUILD_PARALLEL_LEVEL": jobs,
            "NINJAFLAGS": f"-j{jobs}",
            "MAKEFLAGS": f"-j{jobs}",
            "SPARKIMG_MEMORY": str(self.memory),
            "SPARKIMG_JOB_MEMORY": str(self.job_memory),
        }

    def to_json(self) -> dict[str, object]:
        return {
            "memory": self.memory, "cpus": self.cpus, "cpuset": self.cpuset, "pids": self.pids,
            "jobs": self.jobs, "job_memory": self.job_memory, "cgroup_parent": self.cgroup_parent,
            "reserve": self.reserve, "mem_available": self.available,
        }


def mem_available(meminfo: Path = MEMINFO) -> int:
    """Host MemAvailable in bytes."""
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise BudgetError(f"{meminfo} has no MemAvailable line")


def cpu_count(cpuset: str | None) -> int:
    if cpuset:
        total = 0
        for part in cpuset.split(","):
            low, _, high = part.partition("-")
            total += int(high or low) - int(low) + 1
        return total
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def derive(bounds: Bounds, overrides: Overrides, *, layer: str, available: int | None = None) -> Budget:
    memory = overrides.memory or bounds.memory
    cpuset = overrides.cpuset or bounds.cpuset
    cpus = overrides.cpus or bounds.cpus
    pids = overrides.pids or bounds.pids
    if overrides.reserve is not None:
        available = mem_available() if available is None else available
        room = available - overrides.reserve
        if room < bounds.job_memory:
            raise BudgetError(
                f"layer {layer}: host MemAvailable is {format_size(available)}; keeping "
                f"{format_size(overrides.reserve)} free (--reserve) leaves {format_size(max(room, 0))}, "
                f"less than one job needs ({format_size(bounds.job_memory)})",
                hint="build when the node serves less, lower --reserve, or lower the layer's job_memory",
            )
        memory = min(memory, room)
    cpu_limit = cpus if cpus is not None else cpu_count(cpuset)
    jobs = max(1, min(math.floor(cpu_limit) or 1, memory // bounds.job_memory))
    return Budget(memory, cpus, cpuset, pids, jobs, bounds.job_memory, overrides.cgroup_parent,
                  overrides.reserve, available)
