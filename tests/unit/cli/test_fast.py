"""The no-op answer reads only the build command lines it knows whole; anything else goes to the
full parser (which answers from the stamp too, or builds), never misread."""

from __future__ import annotations

import pytest

from sparkimg.cli.fast import asked


def test_a_plain_build_is_read_whole() -> None:
    assert asked(["build", "layers/demo.yaml"]) == {
        "spec": "layers/demo.yaml", "store": None, "key": None, "receipt": None, "json": False, "quiet": False,
        "record_host": False}
    found = asked(["--store", "/s", "build", "--json", "s.yaml", "--quiet", "--key", "k.key", "--receipt=r.json",
                   "--record-host"])
    assert found == {"spec": "s.yaml", "store": "/s", "key": "k.key", "receipt": "r.json", "json": True,
                     "quiet": True, "record_host": True}
    assert asked(["--store=/s", "build", "s.yaml"]) == {**asked(["build", "s.yaml"]), "store": "/s"}  # type: ignore[dict-item]


@pytest.mark.parametrize("argv", [
    [], ["build"], ["lock", "s.yaml"], ["build", "a.yaml", "b.yaml"], ["build", "s.yaml", "--check"],
    ["build", "s.yaml", "--prewarm", "d"], ["--json-logs", "build", "s.yaml"], ["--debug", "build", "s.yaml"],
    ["build", "s.yaml", "--js"], ["build", "s.yaml", "--key"], ["build", "s.yaml", "--key", "--json"],
    ["build", "s.yaml", "--json", "--json"], ["--store", "build", "s.yaml"], ["--store"], ["build", "-h"],
    ["build", "s.yaml", "--reserve", "16g"], ["--version"], ["build", "s.yaml", "--key", "a", "--key", "b"],
])
def test_anything_else_goes_to_the_full_parser(argv: list[str]) -> None:
    assert asked(argv) is None
