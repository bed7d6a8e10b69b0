"""Recipes: both formats become expectations in receipt terms; bad recipes are exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkimg.errors import RecipeError
from sparkimg.formats.recipe import Recipe
from sparkimg.receipts import contract as recipe
from sparkimg.receipts.verify import recipe_checks
from sparkimg.signing.keys import PrivateKey, generate

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sparkring"
COMMIT = "e47aa780" + "0" * 32


@pytest.fixture
def key(tmp_path: Path) -> PrivateKey:
    return generate(tmp_path / "k")


def _expected(found: Recipe) -> dict[str, object]:
    return {e.field: e.expected for e in found.expectations}


def test_sparkring_runtime_block_and_image_lock(key: PrivateKey) -> None:
    loaded = recipe.load_recipe(FIXTURES / "deepseek-v41-flash-cycle.json", key.public)
    assert loaded.schema == "sparkring-recipe/v1" and loaded.name == "deepseek-v41-flash-cycle"
    assert _expected(loaded) == {
        "cuda_architectures": ["12.1a"],
        "platform": "linux/arm64",
        "base.manifest_digest": "sha256:" + "1" * 64,
        "base.config_digest": "sha256:" + "2" * 64,
        "image.manifest_digest": "sha256:" + "3" * 64,
        "sources.vllm.commit": "e47aa780",
        "sources.flashinfer.ref": "v0.7.0rc1",
        "patches.*/engram_disk.py.md5": "0123456789abcdef0123456789abcdef",
    }


def test_a_short_commit_matches_the_full_one_it_starts(key: PrivateKey) -> None:
    loaded = recipe.load_recipe(FIXTURES / "deepseek-v41-flash-cycle.json", key.public)
    facts = {"cuda_architectures": ["12.1a"], "platform": "linux/arm64", "base.manifest_digest": "sha256:" + "1" * 64,
             "base.config_digest": "sha256:" + "2" * 64, "image.manifest_digest": "sha256:" + "3" * 64,
             "sources.vllm.commit": COMMIT, "sources.flashinfer.ref": "v0.7.0rc1",
             "patches.dsv41/engram_disk.py.md5": "0123456789abcdef0123456789abcdef"}
    assert all(c.ok for c in recipe_checks(loaded, facts))
    facts["sources.vllm.commit"] = "f" * 40
    failed = [c.field for c in recipe_checks(loaded, facts) if not c.ok]
    assert failed == ["sources.vllm.commit"]


def test_sparkimg_recipe_explicit_expectations(tmp_path: Path, key: PrivateKey) -> None:
    (tmp_path / "MD5SUMS").write_text("0123456789abcdef0123456789abcdef  serve.env\n")
    path = tmp_path / "r.yaml"
    path.write_text("schema: sparkimg-recipe/v1\nname: r\nexpect:\n  cuda_architectures: [\"12.1a\"]\n"
                    "  base: {manifest_digest: 'sha256:abc'}\n  sources: {vllm: {commit: e47aa780}}\n"
                    "  patches: MD5SUMS\n")
    assert _expected(recipe.load_recipe(path, key.public)) == {
        "cuda_architectures": ["12.1a"], "base.manifest_digest": "sha256:abc", "sources.vllm.commit": "e47aa780",
        "patches.*/serve.env.md5": "0123456789abcdef0123456789abcdef"}


@pytest.mark.parametrize(("text", "message"), [
    ("schema: sparkimg-recipe/v2\n", "not a recipe format sparkimg reads"),
    ("schema: sparkimg-recipe/v1\nexpct: {}\n", "expct: unknown key"),
    ("schema: sparkimg-recipe/v1\nexpect: {sources: {vllm: {comit: abc}}}\n", "expect.sources.vllm.comit"),
    ("schema: sparkimg-recipe/v1\nexpect: {patches: {a.py: nothex}}\n", "is not an md5"),
    ("schema: sparkimg-recipe/v1\nexpect: {cuda_architectures: [gb10]}\n", "not a CUDA architecture"),
    ("schema: sparkimg-recipe/v1\n", "expects nothing"),
    ("schema: sparkring-recipe/v1\nrecipe_id: x\n", "runtime: missing"),
    ("[1, 2", "not YAML or JSON"),
])
def test_bad_recipes_are_bad_input(tmp_path: Path, key: PrivateKey, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(RecipeError, match=message) as caught:
        recipe.load_recipe(path, key.public)
    assert caught.value.exit_code == 2 and str(path) in caught.value.message


def test_unknown_key_gets_a_did_you_mean(tmp_path: Path, key: PrivateKey) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("schema: sparkimg-recipe/v1\nexpect: {cuda_architecture: [12.1a]}\n")
    with pytest.raises(RecipeError) as caught:
        recipe.load_recipe(path, key.public)
    assert caught.value.hint == "did you mean 'cuda_architectures'?"
