"""The platform tags of a glibc, by pypa/packaging's rule: held equal to packaging's own answer
for this machine, whose glibc packaging reads itself."""

from __future__ import annotations

import platform as host

import pytest
from packaging import tags as packaging_tags

from sparkimg._internal.wheeltags import host_glibc, platform_tags

HOST_PLATFORM = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}.get(host.machine())


@pytest.mark.skipif(HOST_PLATFORM is None or host_glibc() is None, reason="needs a glibc Linux on x86_64 or aarch64")
def test_the_tags_of_this_machines_glibc_are_packagings() -> None:
    assert HOST_PLATFORM is not None
    ours = platform_tags(HOST_PLATFORM, host_glibc())
    theirs = [t for t in packaging_tags.platform_tags() if not t.startswith("musllinux")]
    # packaging's own order puts linux_ARCH first (pip prefers a manylinux wheel either way: it
    # ranks by the interpreter tags, then by this list); the set and the manylinux order are the same.
    assert set(ours) == set(theirs)
    assert [t for t in ours if t.startswith("manylinux")] == [t for t in theirs if t.startswith("manylinux")]


def test_x86_64_reaches_manylinux1_and_aarch64_stops_at_2014() -> None:
    amd = platform_tags("linux/amd64", "2.36")
    assert amd[:2] == ["manylinux_2_36_x86_64", "manylinux_2_35_x86_64"]
    assert amd[-4:] == ["manylinux_2_6_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64", "linux_x86_64"]
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux_2_12_x86_64"} <= set(amd)
    assert amd.index("manylinux2010_x86_64") == amd.index("manylinux_2_12_x86_64") + 1
    arm = platform_tags("linux/arm64", "2.28")
    assert arm[0] == "manylinux_2_28_aarch64"
    assert arm[-3:] == ["manylinux_2_17_aarch64", "manylinux2014_aarch64", "linux_aarch64"]
    assert not any("2010" in t or "manylinux1" in t for t in arm)


def test_no_glibc_means_no_manylinux_and_an_unknown_platform_no_tags() -> None:
    assert platform_tags("linux/arm64", None) == ["linux_aarch64"]
    assert platform_tags("linux/riscv64", "2.36") == []
