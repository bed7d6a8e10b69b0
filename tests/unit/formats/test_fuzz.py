"""Hostile input at every parser: thousands of generated inputs, each must end with exit 0, 1
or 2 and a message, never a traceback (any exception other than a SparkimgError fails).

Inputs start from a valid file and are damaged the ways hostile files are: a field replaced
by a value of another type, deep nesting, a removed key, anchors and aliases, bytes that are
not UTF-8, truncation. The examples are derandomized so CI sees the same ones every run;
set SPARKIMG_FUZZ_EXAMPLES to run more.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkimg.cli import main
from sparkimg.errors import SparkimgError
from sparkimg.formats.lockfile import LockFile
from sparkimg.formats.prewarm_manifest import PrewarmManifest
from sparkimg.formats.statement import Statement
from sparkimg.receipts import contract as recipe
from sparkimg.signing import dsse
from sparkimg.signing.keys import generate
from tests.formats import GOOD, lock_json, prewarm_manifest, statement
from tests.support import REPO

EXAMPLES = int(os.environ.get("SPARKIMG_FUZZ_EXAMPLES", "400"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
                    st.text(max_size=40), st.sampled_from(["../../etc/passwd", "/", "sha256:", "[/usr/local/cuda]",
                                                           "${HOME}", "{jobs}", "<operator: x>", "a" * 300]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=10), inner, max_size=4)),
                      max_leaves=12)


def _deep(depth: int, as_list: bool) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value] if as_list else {"a": value}
    return value


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if len(prefix) > 8:
        return
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _paths(value, (*prefix, index))


@st.composite
def damaged(draw: st.DrawFn, valid: Any) -> Any:
    """``valid`` with one to three of its nodes replaced, removed or nested very deep."""
    data = json.loads(json.dumps(valid))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(data) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        how = draw(st.sampled_from(["replace", "remove", "deep"]))
        if how == "remove":
            del parent[path[-1]]
        elif how == "deep":
            parent[path[-1]] = _deep(draw(st.sampled_from([20, 200])), draw(st.booleans()))
            break
        else:
            parent[path[-1]] = draw(values)
    return data


def _text(data: Any) -> str:
    try:
        return json.dumps(data)
    except (ValueError, RecursionError):
        return "{"


raw_bytes = st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode),
                      st.sampled_from([b"\xff\xfe", b"{" * 100000, b"[" * 5000 + b"]" * 5000, b"", b"null", b"[]"]))


@pytest.fixture(scope="module")
def tree() -> Iterator[Path]:
    """A spec tree (the demo kernel and patch set, as tests.formats.GOOD names them) to damage."""
    root = Path(tempfile.mkdtemp(prefix="sparkimg-fuzz."))
    shutil.copytree(REPO / "build" / "demo-kernel", root / "kernel")
    shutil.copytree(REPO / "patches" / "demo", root / "patches" / "demo")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _exit(args: list[str]) -> int:
    code = main(args)
    assert code in (0, 1, 2), args
    return code


@FUZZ
@given(data=damaged(yaml.safe_load(GOOD)))
def test_damaged_specs(tree: Path, data: Any) -> None:
    spec = tree / "fuzz.yaml"
    try:
        spec.write_text(yaml.safe_dump(data))
    except (yaml.YAMLError, RecursionError):
        spec.write_text("a: [")
    _exit(["check", str(spec)])


@FUZZ
@given(text=st.one_of(
    st.text(max_size=300),
    st.sampled_from(["a: &x [1, 2]\nb: *x\n", "<<: *x\n", "a: " + "[" * 3000 + "]" * 3000,
                     "a: !!python/object:os.system 'true'\n", "? [a, b]\n: 1\n", "schema: sparkimg/v1\n" * 3]),
    st.builds(lambda body: "schema: sparkimg/v1\nname: x\n" + body, st.text(max_size=200))))
def test_raw_spec_text(tree: Path, text: str) -> None:
    spec = tree / "raw.yaml"
    spec.write_text(text)
    assert _exit(["check", str(spec)]) == 2


@FUZZ
@given(data=damaged(lock_json()))
def test_damaged_locks(data: Any) -> None:
    try:
        LockFile.from_json(data, "fuzz.lock.json")
    except SparkimgError as exc:
        assert exc.exit_code == 2 and "fuzz.lock.json" in exc.message


@FUZZ
@given(data=st.one_of(damaged(statement().to_json()), values))
def test_damaged_receipt_statements(tmp_path_factory: pytest.TempPathFactory, data: Any) -> None:
    try:
        Statement.from_json(data, "fuzz.receipt.json")
    except SparkimgError as exc:
        assert exc.exit_code == 2
    receipt = tmp_path_factory.getbasetemp() / "fuzz.receipt.json"
    receipt.write_bytes(dsse.Envelope(_text(data).encode()).dumps())
    _exit(["show-receipt", str(receipt)])
    _exit(["show-receipt", str(receipt), "--json"])


@FUZZ
@given(raw=st.one_of(raw_bytes, damaged(json.loads(dsse.Envelope(b"{}").dumps())).map(lambda d: _text(d).encode())))
def test_damaged_envelopes(tmp_path_factory: pytest.TempPathFactory, raw: bytes) -> None:
    receipt = tmp_path_factory.getbasetemp() / "envelope.json"
    receipt.write_bytes(raw)
    _exit(["show-receipt", str(receipt)])


@FUZZ
@given(data=damaged(prewarm_manifest().to_json()))
def test_damaged_prewarm_manifests(data: Any) -> None:
    try:
        PrewarmManifest.from_json(data, "sparkimg-prewarm.json")
    except SparkimgError as exc:
        assert exc.exit_code == 2


@pytest.fixture(scope="module")
def trusted() -> Iterator[Any]:
    folder = Path(tempfile.mkdtemp(prefix="sparkimg-fuzz-key."))
    yield generate(folder / "k")
    shutil.rmtree(folder, ignore_errors=True)


VALID_RECIPE = {"schema": "sparkimg-recipe/v1", "name": "demo",
                "expect": {"platform": "linux/arm64", "cuda_architectures": ["12.1a"],
                           "sources": {"six": {"version": "1.16.0"}}, "patches": {"demo": {"serve.env": "0" * 32}}}}


@FUZZ
@given(text=st.one_of(damaged(VALID_RECIPE).map(_text), st.text(max_size=200),
                      st.sampled_from(["a: &x 1\nb: *x\n", "[" * 5000, "\udcff"])))
def test_damaged_recipes(tmp_path_factory: pytest.TempPathFactory, trusted: Any, text: str) -> None:
    path = tmp_path_factory.getbasetemp() / "fuzz.recipe.yaml"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    try:
        recipe.load_recipe(path, trusted.public)
    except SparkimgError as exc:
        assert exc.exit_code in (1, 2)


@FUZZ
@given(mounts=st.one_of(st.text(max_size=200), st.binary(max_size=100).map(lambda b: b.decode("latin-1"))),
       md5=st.text(max_size=200), sha=st.binary(max_size=100))
def test_damaged_patch_sets(tree: Path, mounts: str, md5: str, sha: bytes) -> None:
    folder = tree / "patches" / "fuzzed"
    folder.mkdir(exist_ok=True)
    (folder / "serve.env").write_text("A=1\n")
    (folder / "mounts.txt").write_bytes(mounts.encode("utf-8", "surrogateescape"))
    (folder / "MD5SUMS").write_bytes(md5.encode("utf-8", "surrogateescape"))
    (folder / "SHA256SUMS").write_bytes(sha)
    _exit(["patches", "check", str(folder)])
    spec = tree / "patched.yaml"
    spec.write_text(GOOD.replace("dir: patches/demo\n", "dir: patches/fuzzed\n", 1))
    _exit(["check", str(spec)])


# -- what a registry or an archive hands over ---------------------------------------------------

_DIGEST_A = "sha256:" + "a" * 64
_MANIFEST = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
             "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _DIGEST_A, "size": 2},
             "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": _DIGEST_A, "size": 3,
                         "annotations": {"dev.sparkimg.tar.size": "10"}}]}
_INDEX = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
    {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": _DIGEST_A, "size": 9,
     "platform": {"os": "linux", "architecture": "arm64"}, "artifactType": "application/vnd.sparkimg.receipt.v1+json",
     "annotations": {"io.containerd.image.name": "x:1", "dev.sparkimg.receipt": _DIGEST_A}}]}
_ARTIFACT = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
             "artifactType": "application/vnd.sparkimg.receipt.v1+json",
             "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": _DIGEST_A, "size": 9},
             "layers": [{"mediaType": "application/vnd.dsse.envelope.v1+json", "digest": _DIGEST_A, "size": 9}]}
_DOCKER_ARCHIVE = [{"Config": "blobs/sha256/" + "a" * 64, "RepoTags": ["x:1"], "Layers": ["blobs/sha256/" + "a" * 64]}]


def _bytes_of(valid: Any) -> st.SearchStrategy[bytes]:
    return st.one_of(damaged(valid).map(lambda d: _text(d).encode()), raw_bytes)


@FUZZ
@given(manifest=_bytes_of(_MANIFEST), index=_bytes_of(_INDEX), artifact=_bytes_of(_ARTIFACT),
       archive=_bytes_of(_DOCKER_ARCHIVE))
def test_damaged_registry_and_archive_documents(manifest: bytes, index: bytes, artifact: bytes, archive: bytes) -> None:
    """Each parser of a document a registry serves or an archive holds returns, or refuses with a
    SparkimgError; nothing else escapes (no KeyError, TypeError, RecursionError)."""
    from sparkimg._internal.net.registry import _config_digest, _json_object, _pick
    from sparkimg.formats import oci

    def survives(parse: Any) -> None:
        with contextlib.suppress(SparkimgError):
            parse()

    survives(lambda: oci.built_manifest(manifest, ["sha256:" + "b" * 64]))
    survives(lambda: oci.BaseImage(manifest, b"{}").layers)
    survives(lambda: oci.BaseImage(manifest, index).diff_ids)
    survives(lambda: _pick(_json_object(index, "http://r/v2/x/manifests/t", "index"), "linux/arm64", "x"))
    survives(lambda: _config_digest(_json_object(manifest, "http://r/v2/x/manifests/t", "manifest"), "x"))
    survives(lambda: oci.receipt_referrers(index))
    survives(lambda: oci.referrers_index(index, b"{}"))
    survives(lambda: oci.LayoutEntry.parse(index))
    survives(lambda: oci.receipt_layer(artifact, _DIGEST_A))
    survives(lambda: oci.docker_archive_layers(archive))
    with contextlib.suppress(ValueError, RecursionError):  # a store record is JSON the store wrote: damaged, not raw
        record = json.loads(manifest)
        survives(lambda: oci.ImageRecord.from_json(record, "fuzz"))
