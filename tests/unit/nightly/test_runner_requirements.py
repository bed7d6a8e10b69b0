"""The nightly runner's requirements file pins every dependency sparkimg declares (and its build
backend) to one version that satisfies pyproject.toml, each with a sha256, and the workflow
installs it with --require-hashes: regenerate it (scripts/ci/pin-runner-requirements) when
pyproject.toml changes."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[3]
PINNED = REPO / "scripts" / "ci" / "runner-requirements.txt"
LINE = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+) --hash=sha256:[0-9a-f]{64}$")


def pins() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in PINNED.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        match = LINE.match(line)
        assert match, f"{PINNED.name}: {line!r} is not NAME==VERSION --hash=sha256:HEX"
        name = canonicalize_name(match["name"])
        assert name not in found, f"{name} is pinned twice"
        found[name] = match["version"]
    return found


def test_every_declared_dependency_and_the_build_backend_is_pinned_within_its_range() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    wanted = [Requirement(r) for r in [*project["project"]["dependencies"], *project["build-system"]["requires"]]]
    pinned = pins()
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{name} is not in {PINNED.name}: run scripts/ci/pin-runner-requirements"
        assert requirement.specifier.contains(pinned[name], prereleases=True), \
            f"{name}=={pinned[name]} does not satisfy {requirement}: run scripts/ci/pin-runner-requirements"


def test_the_workflow_installs_the_pinned_file_with_hashes_required() -> None:
    workflow = (REPO / "scripts" / "ci" / "nightly.yml").read_text()
    assert "--require-hashes --only-binary=:all: -r scripts/ci/runner-requirements.txt" in workflow
    assert "--no-deps --no-build-isolation ." in workflow
