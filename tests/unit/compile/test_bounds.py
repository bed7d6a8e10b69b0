"""Job derivation and the --reserve budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkimg.compile.bounds import Overrides, derive, mem_available
from sparkimg.errors import BudgetError
from sparkimg.spec import Bounds

GIB = 1 << 30


def bounds(memory: int = 16 * GIB, cpus: float | None = 8, job_memory: int = 4 * GIB) -> Bounds:
    return Bounds(memory=memory, cpus=cpus, cpuset=None, pids=4096, job_memory=job_memory)


def test_jobs_limited_by_memory() -> None:
    assert derive(bounds(), Overrides(), layer="x").jobs == 4  # 16 GiB / 4 GiB, 8 CPUs


def test_jobs_limited_by_cpus() -> None:
    assert derive(bounds(memory=64 * GIB, cpus=3), Overrides(), layer="x").jobs == 3


def test_at_least_one_job() -> None:
    assert derive(bounds(memory=4 * GIB, cpus=0.5), Overrides(), layer="x").jobs == 1


def test_cpuset_counts_cpus() -> None:
    budget = derive(bounds(memory=64 * GIB, cpus=None), Overrides(cpuset="0-1,4"), layer="x")
    assert budget.jobs == 3


def test_env_sets_every_knob() -> None:
    env = derive(bounds(), Overrides(), layer="x").env()
    assert env["MAX_JOBS"] == env["CMAKE_BUILD_PARALLEL_LEVEL"] == "4"
    assert env["NINJAFLAGS"] == "-j4" and env["NVCC_THREADS"] == "1"
    assert env["SPARKIMG_MEMORY"] == str(16 * GIB) and env["SPARKIMG_JOB_MEMORY"] == str(4 * GIB)


def test_reserve_shrinks_budget() -> None:
    budget = derive(bounds(), Overrides(reserve=20 * GIB), layer="x", available=30 * GIB)
    assert budget.memory == 10 * GIB and budget.jobs == 2


def test_reserve_refuses_when_one_job_does_not_fit() -> None:
    with pytest.raises(BudgetError) as info:
        derive(bounds(), Overrides(reserve=28 * GIB), layer="flashinfer", available=30 * GIB)
    assert "flashinfer" in info.value.message and "--reserve" in info.value.message
    assert info.value.exit_code == 4


def test_mem_available_reads_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nMemAvailable:    2048 kB\n")
    assert mem_available(meminfo) == 2048 * 1024
