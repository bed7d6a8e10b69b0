"""The compiler cache's figures: sccache's JSON statistics read into hits, misses and errors, and
the compile time saved (each timed object's longest compile with this cache, less what it took now)."""

from __future__ import annotations

import json
from pathlib import Path

from sparkimg.compile.cache import STATS, Attached, counts, summary


def _stats(meta: Path, hits: dict[str, int], misses: dict[str, int], errors: int = 0) -> None:
    meta.mkdir(exist_ok=True)
    (meta / STATS).write_text(json.dumps({"cache_size": 4096, "max_cache_size": 1 << 30, "stats": {
        "compile_requests": sum(hits.values()) + sum(misses.values()), "non_cacheable_compilations": 1,
        "cache_hits": {"counts": hits, "adv_counts": {}}, "cache_misses": {"counts": misses, "adv_counts": {}},
        "cache_errors": {"counts": {"CUDA": errors} if errors else {}, "adv_counts": {}}}}))


def test_counts_add_every_language_and_a_damaged_file_gives_none(tmp_path: Path) -> None:
    _stats(tmp_path, {"CUDA": 2, "PTX": 2, "CUBIN": 2, "C/C++": 1}, {"CUDA": 1, "CUBIN": 1}, errors=1)
    assert counts(tmp_path / STATS) == {"hits": 7, "misses": 2, "errors": 1, "requests": 9, "not_cached": 1,
                                        "bytes": 4096}
    (tmp_path / STATS).write_text("sccache: error: connection refused")
    assert counts(tmp_path / STATS) == {}
    assert counts(tmp_path / "absent.json") == {}


def test_time_saved_is_each_objects_longest_compile_less_what_it_took_now(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    cache = Attached(folder, tmp_path / "tool", "sccache 0.16.0", 1 << 30)
    _stats(tmp_path / "cold", {}, {"CUDA": 2})
    cold = summary(cache, tmp_path / "cold", [{"object": "a.cu", "wall_s": 40.0}, {"object": "b.cu", "wall_s": 25.0}])
    assert (cold["hits"], cold["misses"], cold["saved_s"]) == (0, 2, 0.0)
    _stats(tmp_path / "warm", {"CUDA": 1}, {"CUDA": 1})
    warm = summary(cache, tmp_path / "warm", [{"object": "a.cu", "wall_s": 4.0}, {"object": "b.cu", "wall_s": 26.0}])
    assert (warm["hits"], warm["misses"], warm["errors"], warm["saved_s"]) == (1, 1, 0, 36.0)
    assert warm["tool"] == "sccache 0.16.0" and warm["folder"] == "cache"
    (folder / "sparkimg-walls.json").write_text("not json")  # damaged: nothing saved is claimed, never a failure
    assert summary(cache, tmp_path / "warm", [{"object": "a.cu", "wall_s": 4.0}])["saved_s"] == 0.0
    assert summary(cache, tmp_path / "warm", [])["saved_s"] is None  # the script timed nothing
