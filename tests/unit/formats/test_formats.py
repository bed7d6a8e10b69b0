"""Each format's model reads back what it writes, byte for byte in canonical JSON, and a
damaged file is bad input naming the file and the field (never a KeyError)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sparkimg.errors import EnvelopeError, LockError, UsageError
from sparkimg.formats.canonical import canonical, digest_of, pretty
from sparkimg.formats.lockfile import LockFile
from sparkimg.formats.prewarm_manifest import PrewarmManifest
from sparkimg.formats.record import LayerRecord
from sparkimg.formats.scheme import BaseScheme
from sparkimg.formats.statement import Statement, facts
from sparkimg.spec import Arch, Bounds, KernelModule, KernelSet
from sparkimg.spec.kernel_label import KernelLabel
from tests.formats import base_scheme, layer_record, lock_json, old_six, prewarm_manifest, statement


def test_canonical_json_is_a_pure_function_of_the_value() -> None:
    assert canonical({"b": 1, "a": [1, "é"]}) == b'{"a":[1,"\\u00e9"],"b":1}'
    assert pretty({"b": 1, "a": 2}) == b'{\n  "a": 2,\n  "b": 1\n}\n'
    assert digest_of({"a": 1}) == digest_of(dict(reversed(list({"a": 1}.items()))))


def test_lock_round_trips() -> None:
    data = lock_json()
    assert LockFile.from_json(copy.deepcopy(data), "x").to_json() == data
    host = lock_json()
    host["toolchain"] = {"cuda": "base"}
    assert LockFile.from_json(host, "x").to_json()["toolchain"] == {"cuda": "base"}


@pytest.mark.parametrize(("path", "value", "message"), [
    (("base", "manifest_digest"), "latest", "base.manifest_digest must be a sha256:HEX digest"),
    (("sources", "six", "kind"), "svn", "sources.six.kind must be 'git', 'pypi' or 'path'"),
    (("source_date_epoch",), "yesterday", "source_date_epoch must be a non-negative integer"),
    (("patches", "demo", "mode"), "copy", "patches.demo.mode must be 'bake' or 'mount'"),
    (("sources",), [], "sources must be an object"),
    (("sources", "six", "filename"), "../../etc/six-1.16.0-py3-none-any.whl", "sources.six.filename must be a bare"),
    (("sources", "six", "sha256"), "ABC", "sources.six.sha256 must be 64 lower-case hex digits"),
    (("sources", "six", "url"), "ftp://x/six.whl", "sources.six.url must be an https://"),
    (("sources", "kernel", "path"), "../outside", "sources.kernel.path must be a clean path relative"),
    (("patches", "demo", "dir"), "/etc", "patches.demo.dir must be a clean path relative"),
    (("toolchain", "nvcc_sha256"), "x", "toolchain.nvcc_sha256 must be 64 lower-case hex digits"),
    (("cuda_architectures",), ["sm_121a"], "cuda_architectures must be a list of CUDA architectures"),
    (("platform",), "windows/amd64", "platform must be one of linux/amd64, linux/arm64"),
    (("base", "index_digest"), "latest", "base.index_digest must be a sha256:HEX digest"),
    (("patches",), {"../x": {"dir": "p", "mode": "bake", "files": []}}, "patches must be keyed by names"),
])
def test_a_damaged_lock_names_the_field(path: tuple[str, ...], value: Any, message: str) -> None:
    data = lock_json()
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(LockError) as caught:
        LockFile.from_json(data, "demo.yaml.lock.json")
    assert caught.value.message.startswith("demo.yaml.lock.json: ") and message in caught.value.message
    assert caught.value.exit_code == 2


def test_layer_record_round_trips() -> None:
    record = layer_record(wheels=2)
    assert LayerRecord.from_json(record.to_json(), "x") == record
    broken = record.to_json()
    del broken["outputs"][0]["sha256"]
    with pytest.raises(UsageError, match=r"records/layers/KEY\.json: not a sparkimg layer record"):
        LayerRecord.from_json(broken, "records/layers/KEY.json")


def test_base_scheme_round_trips() -> None:
    scheme = base_scheme(old_six())
    data = scheme.to_json()
    assert data["schema"] == "sparkimg-scheme/v3"
    assert BaseScheme.from_json(copy.deepcopy(data), "x") == scheme
    assert canonical(BaseScheme.from_json(copy.deepcopy(data), "x").to_json()) == canonical(data)


@pytest.mark.parametrize(("path", "value", "message"), [
    (("schema",), "sparkimg-scheme/v2", "schema must be 'sparkimg-scheme/v3'"),
    (("glibc",), "2.36.1", "glibc must be a glibc version (2.36) or null"),
    (("interpreter",), "python3", "interpreter must be an absolute normalised path"),
    (("python_version",), "three", "python_version must be a Python version"),
    (("paths", "purelib"), "/usr/local/../lib", "paths.purelib must be an absolute normalised path"),
    (("paths", "headers"), None, "paths.headers must be an absolute normalised path"),
    (("installed", 0, "name"), "Six", "installed[0].name must be a canonical (PEP 503) distribution name"),
    (("installed", 0, "version"), "1 .0", "installed[0].version must be a version with no space"),
    (("installed", 0, "files", 0), "relative.py", "installed[0].files[0] must be an absolute normalised path"),
    (("installed", 0, "files", 0), "/a/b\nc", "installed[0].files[0] must be an absolute normalised path"),
    (("installed", 0, "owned_dirs"), ["/b", "/a"], "installed[0].owned_dirs must be sorted and without repeats"),
    (("installed", 0, "extra"), 1, "installed[0] must be an object with exactly"),
    (("extra",), 1, "(top level) must be exactly the fields"),
])
def test_a_damaged_base_scheme_names_the_field(path: tuple[str | int, ...], value: Any, message: str) -> None:
    data: Any = base_scheme(old_six()).to_json()
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value.replace("\\n", "\n") if isinstance(value, str) else value
    with pytest.raises(UsageError) as caught:
        BaseScheme.from_json(data, "records/schemes/X.json")
    assert caught.value.message.startswith("records/schemes/X.json: ") and message in caught.value.message


@pytest.mark.parametrize("metadata", [True, False])
def test_statement_round_trips(metadata: bool) -> None:
    made = statement(metadata=metadata)
    data = made.to_json()
    assert canonical(Statement.from_json(copy.deepcopy(data), "x").to_json()) == canonical(data)
    assert ("metadata" in data["predicate"]["runDetails"]) is metadata
    assert data["predicate"]["buildDefinition"]["resolvedDependencies"][0]["mediaType"] is None  # kept as written
    assert facts(Statement.from_json(data, "x"))["image.id"] == "sha256:" + "2" * 64


def test_statement_that_is_not_a_receipt_names_the_file() -> None:
    data = statement().to_json()
    data["predicateType"] = "https://example/other"
    with pytest.raises(EnvelopeError, match=r"r\.json: not a sparkimg receipt: predicateType"):
        Statement.from_json(data, "r.json")


def test_prewarm_manifest_round_trips_and_ignores_time_when_compared() -> None:
    made = prewarm_manifest()
    data = made.to_json()
    assert PrewarmManifest.from_json(copy.deepcopy(data), "m") == made
    assert data["subject"] == [{"name": made.modules[0].library, "digest": {"sha256": "7" * 64}}]
    later = PrewarmManifest.from_json({**data, "predicate": {**data["predicate"], "created": "2027-01-01T00:00:00Z"}},
                                      "m")
    assert later != made and later.timeless() == made.timeless()
    del data["predicate"]["modules"][0]["files"][0]["size"]
    with pytest.raises(EnvelopeError, match="m: not a sparkimg prewarm manifest"):
        PrewarmManifest.from_json(data, "m")


def test_kernel_label_round_trips() -> None:
    label = KernelLabel(KernelSet((KernelModule("flashinfer.jit.page.gen_page_module"),
                                   KernelModule("flashinfer.jit.activation.gen_act_and_mul_module", ("silu",))),
                                  Bounds(8 << 30, None, None, 4096, 2 << 30), {"A": "1"}),
                        (Arch("12.1a"),), {"cuda": "host", "path": "/usr/local/cuda"})
    assert KernelLabel.from_label(label.to_label(), "img") == label
    with pytest.raises(UsageError, match=r"img: label dev\.sparkimg\.prewarm is not a kernel set"):
        KernelLabel.from_label('{"modules": 3}', "img")


@pytest.mark.parametrize(("field", "value"), [("file", "../a.py"), ("file", ".hidden"), ("mount", "/"),
                                              ("mount", "/etc/../passwd"), ("mount", "relative/path")])
def test_a_lock_never_names_a_patch_path_outside_its_place(field: str, value: str) -> None:
    data = lock_json()
    data["patches"]["demo"]["files"][0][field] = value
    with pytest.raises(LockError, match=rf"patches\.demo\.files\[0\]\.{field} must be"):
        LockFile.from_json(data, "x")


def test_recipe_round_trips() -> None:
    from pathlib import Path

    from sparkimg.errors import RecipeError
    from sparkimg.formats.recipe import Expectation, Recipe

    made = Recipe(Path("layers/demo.recipe.yaml"), "sparkimg-recipe/v1", "demo", (
        Expectation("platform", "linux/arm64", "demo.recipe.yaml expect"),
        Expectation("sources.vllm.commit", "e47aa780", "sparkring", prefix=True)))
    assert Recipe.from_json(made.to_json(), "x") == made
    assert made.expectations[1].matches("e47aa780" + "0" * 32) and not made.expectations[0].matches("linux/amd64")
    with pytest.raises(RecipeError, match="x: not a resolved recipe"):
        Recipe.from_json({"path": "p"}, "x")


def test_a_base_reached_over_plain_http_is_recorded_and_nothing_else_changes() -> None:
    """``lock --plain-http`` writes ``transport: http`` on the base; without it the key is absent, so
    a lock made without the flag is the same bytes as before the field existed."""
    data = lock_json()
    assert "transport" not in data["base"]
    assert LockFile.from_json(copy.deepcopy(data), "x.lock.json").base.transport is None
    data["base"]["transport"] = "http"
    read = LockFile.from_json(copy.deepcopy(data), "x.lock.json")
    assert read.base.transport == "http" and read.to_json() == data
    data["base"]["transport"] = "ftp"
    with pytest.raises(LockError, match=r"base\.transport must be 'http' or absent"):
        LockFile.from_json(data, "x.lock.json")
