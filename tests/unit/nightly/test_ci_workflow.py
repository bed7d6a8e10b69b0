"""The CI workflow we ship runs actions pinned by commit: a tag or a branch can be moved to other
code after review, a commit cannot."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

WORKFLOWS = sorted((Path(__file__).resolve().parents[3] / "scripts" / "ci").glob("*.yml"))
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def uses(node: object) -> list[str]:
    if isinstance(node, dict):
        return [str(v) for k, v in node.items() if k == "uses"] + [u for v in node.values() for u in uses(v)]
    if isinstance(node, list):
        return [u for v in node for u in uses(v)]
    return []


def test_every_action_is_pinned_by_commit() -> None:
    assert WORKFLOWS
    for workflow in WORKFLOWS:
        found = uses(yaml.safe_load(workflow.read_text()))
        assert found, workflow
        assert [u for u in found if not PINNED.match(u)] == [], workflow
        for line in workflow.read_text().splitlines():
            if "uses:" in line:
                assert re.search(r"# v\d+\.\d+\.\d+$", line), f"{workflow.name}: name the release: {line.strip()}"
