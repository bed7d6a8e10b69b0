"""Which CUDA toolkit a prewarm mounts: a host toolkit at its path, the toolkit wheels' tree the
store unpacked for the image's lock (named by the image's label), or none for a base's nvcc."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sparkimg.compile.bounds import Overrides, derive
from sparkimg.errors import UsageError
from sparkimg.prewarm.runner import HostRunner, ImageRunner, runner_for, toolkit_mount
from sparkimg.prewarm.targets import Target
from sparkimg.spec import KernelSet
from sparkimg.spec.model import Bounds, Toolchain

IDENTITY = "ab" * 32
KERNELS = KernelSet((), Bounds(1 << 30, None, None, 256, 1 << 30), {})


def target(**toolchain: str | None) -> Target:
    return Target(KERNELS, (), "sparkimg/demo:k", "sha256:" + "c" * 64, dict(toolchain))


def unpacked(store: Path) -> Path:
    tree = store / "toolkits" / IDENTITY
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "nvcc").write_bytes(b"\x7fELF")
    return tree


def test_the_wheels_tree_the_label_names_is_mounted_where_the_compile_layers_saw_it(tmp_path: Path) -> None:
    tree = unpacked(tmp_path / "store")
    mount = toolkit_mount(target(cuda="wheels", path=None, toolkit=IDENTITY), tmp_path / "store")
    assert mount is not None and (mount.source, mount.target, mount.writable) == (tree, "/usr/local/cuda", False)


def test_the_host_runner_compiles_with_that_tree_as_cuda_home(tmp_path: Path) -> None:
    tree = unpacked(tmp_path / "store")
    budget = derive(KERNELS.bounds, Overrides(), layer="prewarm")
    runner = runner_for("host", target(cuda="wheels", path=None, toolkit=IDENTITY), engine=None, budget=budget,
                        python="python3", store=tmp_path / "store")
    assert isinstance(runner, HostRunner) and runner.cuda_home == str(tree)
    hosted = runner_for("host", target(cuda="host", path="/usr/local/cuda"), engine=None, budget=budget,
                        python="python3")
    assert isinstance(hosted, HostRunner) and hosted.cuda_home == "/usr/local/cuda"  # as the spec names it
    assert not isinstance(hosted, ImageRunner)


def test_a_tree_the_store_lacks_names_the_store_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as raised:
        toolkit_mount(target(cuda="wheels", path=None, toolkit=IDENTITY), tmp_path / "elsewhere")
    assert f"its CUDA toolkit ({IDENTITY[:16]}" in raised.value.message
    assert str(tmp_path / "elsewhere") in raised.value.message and "--store" in str(raised.value.hint)


def test_a_label_without_the_identity_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not say which"):
        toolkit_mount(target(cuda="wheels", path=None), tmp_path / "store")


def test_a_base_toolchain_mounts_nothing(tmp_path: Path) -> None:
    assert toolkit_mount(target(cuda="base", path=None), tmp_path / "store") is None


def test_the_label_of_a_wheels_image_names_its_toolkit_and_a_host_ones_does_not() -> None:
    from sparkimg.spec import kernel_label, load_spec
    from tests.support import REPO

    demo = kernel_label.of_spec(load_spec(REPO / "layers" / "demo.yaml"), IDENTITY)
    assert demo is not None and demo.toolchain["toolkit"] == IDENTITY
    again = kernel_label.KernelLabel.from_label(demo.to_label(), "label")
    assert again.toolchain["toolkit"] == IDENTITY  # what a node's prewarm reads back
    spec = load_spec(REPO / "layers" / "demo.yaml")
    hosted = kernel_label.of_spec(replace(spec, toolchain=Toolchain("host", "/usr/local/cuda")), IDENTITY)
    assert hosted is not None and "toolkit" not in hosted.toolchain
