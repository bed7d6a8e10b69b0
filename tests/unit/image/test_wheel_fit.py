"""A wheel layer takes only wheels the base's CPython can use, and the lock resolves wheels for
the base's Python once a build has asked it (pip checks tags when it installs; pypa/installer
does not, and pip run on this machine picks for this machine's Python)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sparkimg._internal.net import pypi as _pypi
from sparkimg._internal.wheeltags import platform_tags
from sparkimg.base.schemes import QUERY, RECORDS, record_name
from sparkimg.errors import BuildError
from sparkimg.formats.scheme import BaseScheme
from sparkimg.image.wheels import check_fits
from sparkimg.lock import resolve as lock_mod
from sparkimg.store.content import Store

PATHS = {k: f"/usr/local/lib/python3.12/{k}" for k in ("purelib", "platlib", "headers", "scripts", "data")}
PY312 = BaseScheme("/usr/bin/python3", "3.12.3", PATHS, (), glibc="2.36")  # Debian 12's glibc
CONFIG = "sha256:" + "c" * 64


@pytest.mark.parametrize("wheel, platform", [
    ("six-1.16.0-py2.py3-none-any.whl", "linux/arm64"),
    ("PyYAML-6.0.2-cp312-cp312-manylinux_2_17_aarch64.manylinux2014_aarch64.whl", "linux/arm64"),
    ("cryptography-43.0.0-cp39-abi3-manylinux_2_28_aarch64.whl", "linux/arm64"),
    ("numpy-2.1.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "linux/amd64"),
    ("flashinfer_jit_cache-0.6.1-py3-none-manylinux_2_28_aarch64.whl", "linux/arm64"),
    # The tags of NVIDIA's CUDA 13 wheels that torch 2.14.0 pulls in (nvrtc, nvjitlink, nvtx), which pip installs.
    ("nvidia_cuda_nvrtc-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl", "linux/amd64"),
    ("nvidia_nvtx-13.0.85-py3-none-manylinux1_x86_64.manylinux_2_5_x86_64.whl", "linux/amd64"),
    ("nvidia_cuda_nvrtc-13.0.88-py3-none-manylinux_2_36_x86_64.whl", "linux/amd64"),
])
def test_a_wheel_the_base_can_use_fits(wheel: str, platform: str) -> None:
    check_fits(wheel, PY312, platform)


@pytest.mark.parametrize("wheel, platform", [
    ("PyYAML-6.0.2-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl", "linux/arm64"),
    ("PyYAML-6.0.2-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "linux/arm64"),
    ("PyYAML-6.0.2-cp312-cp312-musllinux_1_1_aarch64.whl", "linux/arm64"),
    ("cryptography-43.0.0-cp313-abi3-manylinux_2_28_aarch64.whl", "linux/arm64"),
    # Newer than the base's glibc 2.36: it would install and then fail at import.
    ("torch-9.0.0-cp312-cp312-manylinux_2_39_x86_64.whl", "linux/amd64"),
    ("torch-9.0.0-cp312-cp312-manylinux_2_37_aarch64.whl", "linux/arm64"),
    # manylinux1 and manylinux2010 never existed for aarch64.
    ("nvidia_nvtx-13.0.85-py3-none-manylinux1_aarch64.manylinux_2_5_aarch64.whl", "linux/arm64"),
])
def test_a_wheel_for_another_python_or_platform_is_refused_naming_both(wheel: str, platform: str) -> None:
    with pytest.raises(BuildError, match=rf"wheel {wheel.split('-')[0]}.* does not fit the base's Python 3\.12\.3 on "
                       rf"{platform} with glibc 2\.36") as info:
        check_fits(wheel, PY312, platform)
    assert "cp312" in (info.value.hint or "")


def test_a_name_that_is_no_wheel_is_refused() -> None:
    with pytest.raises(BuildError, match="not a wheel file name"):
        check_fits("six.zip", PY312, "linux/arm64")


def test_a_base_without_glibc_takes_no_manylinux_wheel() -> None:
    musl = BaseScheme("/usr/bin/python3", "3.12.3", PATHS, ())
    check_fits("six-1.16.0-py2.py3-none-any.whl", musl, "linux/arm64")
    with pytest.raises(BuildError, match=r"with glibc \(none\)"):
        check_fits("PyYAML-6.0.2-cp312-cp312-manylinux_2_17_aarch64.manylinux2014_aarch64.whl", musl, "linux/arm64")


def test_the_lock_knows_the_base_python_and_glibc_once_a_build_asked_it(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    assert lock_mod.base_asked(store, CONFIG) is None
    store.write_record(RECORDS, record_name(CONFIG, QUERY.read_bytes()), PY312.to_json())
    asked = lock_mod.base_asked(store, CONFIG)
    assert asked is not None and (asked.python_version, asked.glibc) == ("3.12.3", "2.36")
    store.write_record(RECORDS, record_name(CONFIG, QUERY.read_bytes()), {"schema": "damaged"})
    assert lock_mod.base_asked(store, CONFIG) is None


def test_pip_is_asked_for_the_base_python(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def pip(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        seen.append(args)
        answer = {"install": [{"download_info": {"url": "https://x/p-1.0-cp312-cp312-linux_aarch64.whl",
                                                 "archive_info": {"hashes": {"sha256": "4" * 64}}},
                               "metadata": {"version": "1.0"}}]}
        return subprocess.CompletedProcess(args, 0, json.dumps(answer), "")

    monkeypatch.setattr(subprocess, "run", pip)
    monkeypatch.setattr(_pypi, "file_size", lambda url: None)  # no HEAD to the made-up index
    _pypi.resolve("p", "1.0", "linux/arm64", python="3.12.3", glibc="2.36")
    _pypi.resolve("p", "1.0", "linux/arm64")
    with_python, without = seen
    assert with_python[with_python.index("--python-version") + 1] == "3.12"
    assert with_python[with_python.index("--implementation") + 1] == "cp"
    assert "--python-version" not in without
    # pip is given the very tags the build checks wheels against: the base's glibc down to 2.17.
    platforms = [with_python[i + 1] for i, arg in enumerate(with_python) if arg == "--platform"]
    assert platforms == platform_tags("linux/arm64", "2.36")
    assert platforms[0] == "manylinux_2_36_aarch64" and "manylinux_2_37_aarch64" not in platforms
    assert platforms[-3:] == ["manylinux_2_17_aarch64", "manylinux2014_aarch64", "linux_aarch64"]
