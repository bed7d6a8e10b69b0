"""The shipped demo, end to end on the real engine and registry: lock, build, no-op
rebuild, patch-only rebuild."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkimg.engine import Engine

from .helpers import cached, cli, copy_demo


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return copy_demo(tmp_path)


def test_demo_builds_then_rebuilds_nothing_then_only_the_image(
    demo: Path, tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    assert cli(capsys, store, "check", str(demo))[0] == 0
    assert cli(capsys, store, "lock", str(demo))[0] == 0

    code, first, _ = cli(capsys, store, "build", str(demo), "--json", "--quiet")
    assert code == 0
    assert cached(first) == {"demo-kernel": False, "six": False, "image": False}
    image = first["image"]["reference"]
    assert engine.image_id(image) == first["image"]["id"]
    labels = engine.image_labels(image)
    assert labels["dev.sparkimg.key"] == first["layers"][-1]["key"]
    assert labels["dev.sparkimg.layer.demo-kernel.key"] == first["layers"][0]["key"]
    assert labels["dev.sparkimg.spec-digest"].startswith("sha256:")
    assert labels["org.opencontainers.image.base.digest"].startswith("sha256:")
    assert labels["org.example.purpose"] == "sparkimg-demo"
    inside = subprocess.run(
        [engine.client, "run", "--rm", "--network", "none", image, "python3", "-c",
         "import sparkimg_demo_kernel, six, os; print(sparkimg_demo_kernel.LIBRARY.exists(), six.__version__, "
         "open('/etc/sparkimg/serve.env').read().count('VLLM'), os.environ['SPARKIMG_DEMO'])"],
        capture_output=True, text=True, check=True)
    assert inside.stdout.split() == ["True", "1.16.0", "1", "1"]

    code, second, _ = cli(capsys, store, "build", str(demo), "--json")
    assert code == 0
    assert all(cached(second).values())
    assert second["image"]["id"] == first["image"]["id"]
    code, said, _ = cli(capsys, store, "build", str(demo))
    assert code == 0 and "up to date, nothing built" in said

    patch = demo.parents[1] / "patches" / "demo" / "serve.env"
    patch.write_text(patch.read_text() + "VLLM_EXTRA=1\n")
    code, _, err = cli(capsys, store, "build", str(demo), "--json")
    assert code == 2 and "patches.demo" in err and "MD5SUMS disagrees" in err  # the sums pin the old bytes
    assert cli(capsys, store, "lock", str(demo))[0] == 2  # and the lock will not pin bytes the sums do not
    assert cli(capsys, store, "patches", "pin", str(patch.parent))[0] == 0
    code, _, err = cli(capsys, store, "build", str(demo))
    assert code == 2 and "differ from the lock" in err  # the lock still pins the old bytes: fail closed
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    code, plan, _ = cli(capsys, store, "plan", str(demo), "--json")
    assert cached(plan) == {"demo-kernel": True, "six": True, "image": False}
    code, third, _ = cli(capsys, store, "build", str(demo), "--json", "--quiet")
    assert code == 0
    assert cached(third) == {"demo-kernel": True, "six": True, "image": False}
    assert third["layers"][0]["key"] == first["layers"][0]["key"]
    assert third["image"]["id"] != first["image"]["id"]
    for result in (first, third):
        engine.remove_image(result["image"]["reference"])


def test_stale_and_missing_lock_fail_closed(
    demo: Path, tmp_path: Path, engine: Engine, demo_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    code, _, err = cli(capsys, store, "build", str(demo))
    assert code == 2 and "no lock file" in err
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    demo.write_text(demo.read_text().replace('SPARKIMG_DEMO: "1"', 'SPARKIMG_DEMO: "2"'))
    code, _, err = cli(capsys, store, "build", str(demo))
    assert code == 2 and "stale" in err
