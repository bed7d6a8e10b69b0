"""Cache keys: stable for the same inputs, sensitive to every input that changes output,
blind to what does not (job count, bounds, time)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkimg.plan.keys import key_of, layer_inputs
from sparkimg.spec import Spec, load_spec
from tests.formats import loaded, lock_json, spec_header

SPEC = spec_header("keys") + """\
sources:
  kernel:
    path: kernel
  six:
    pypi: six
    version: "1.16.0"
layers:
  - name: kernel
    kind: compile
    source: kernel
    command: python3 /src/build_wheel.py --out /out -j {jobs}
    env:
      NVCC_GENCODE: "{gencode}"
    memory: 2g
    job_memory: 512m
  - name: six
    kind: wheel
    source: six
patches:
  - name: demo
    dir: patches/demo
"""


def lock_data(spec: Spec) -> dict[str, Any]:
    return lock_json()


def keys(spec: Spec, data: dict[str, Any], digest: str = "sha256:" + "0" * 64) -> dict[str, str]:
    return {name: key_of(kind, inputs) for name, kind, inputs in layer_inputs(spec, loaded(data, digest))}


def test_keys_are_stable(project: Callable[..., Path]) -> None:
    spec = load_spec(project(SPEC))
    data = lock_data(spec)
    assert keys(spec, data) == keys(spec, copy.deepcopy(data))
    reordered = dict(reversed(list(data.items())))
    assert keys(spec, data) == keys(spec, reordered)


def test_bounds_and_jobs_do_not_change_keys(project: Callable[..., Path]) -> None:
    base = keys(load_spec(project(SPEC)), lock_data(load_spec(project(SPEC))))
    other = SPEC.replace("memory: 2g", "memory: 6g\n    cpus: 3\n    pids: 99").replace("job_memory: 512m",
                                                                                        "job_memory: 1g")
    spec = load_spec(project(other, "other.yaml"))
    assert keys(spec, lock_data(spec))["kernel"] == base["kernel"]


def test_compile_key_is_sensitive(project: Callable[..., Path]) -> None:
    spec = load_spec(project(SPEC))
    base = keys(spec, lock_data(spec))["kernel"]
    changes: dict[str, Callable[[dict[str, Any]], None]] = {
        "base": lambda d: d["base"].update(config_digest="sha256:" + "9" * 64),
        "source": lambda d: d["sources"]["kernel"].update(sha256="8" * 64),
        "toolchain": lambda d: d["toolchain"].update(nvcc_sha256="7" * 64),
        "platform": lambda d: d.update(platform="linux/amd64"),
    }
    for what, change in changes.items():
        data = lock_data(spec)
        change(data)
        assert keys(spec, data)["kernel"] != base, what
    for i, (old, new) in enumerate([("--out /out", "--out /out --fast"), ('"{gencode}"', '"{sm_targets}"'),
                                    ('["12.1a"]', '["12.1a", "12.0f"]')]):
        changed = load_spec(project(SPEC.replace(old, new), f"s{i}.yaml"))
        assert keys(changed, lock_data(changed))["kernel"] != base, new


def test_patch_change_rebuilds_only_the_image(project: Callable[..., Path]) -> None:
    spec = load_spec(project(SPEC))
    before = keys(spec, lock_data(spec), "sha256:" + "a" * 64)
    data = lock_data(spec)
    data["patches"]["demo"]["files"][0]["sha256"] = "0" * 64
    after = keys(spec, data, "sha256:" + "b" * 64)
    assert after["kernel"] == before["kernel"]
    assert after["six"] == before["six"]
    assert after["image"] != before["image"]


def test_image_key_follows_layer_keys(project: Callable[..., Path]) -> None:
    spec = load_spec(project(SPEC))
    data = lock_data(spec)
    before = keys(spec, data)
    data["sources"]["six"]["sha256"] = "f" * 64
    after = keys(spec, data)
    assert after["six"] != before["six"] and after["image"] != before["image"]
    assert after["kernel"] == before["kernel"]
