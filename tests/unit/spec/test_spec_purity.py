"""The spec's pure modules stay pure: ``model`` and ``sections`` read no files and parse no
YAML, so a spec can be validated where the build tree is absent (``disk`` is the reader)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SPEC = Path(__file__).resolve().parents[3] / "sparkimg" / "spec"
FORBIDDEN_MODULES = {"os", "io", "shutil", "glob", "tempfile", "subprocess", "yaml"}
FORBIDDEN_SPARKIMG = {"sparkimg.spec.disk", "sparkimg.spec.load", "sparkimg.patches.sums", "sparkimg.spec.yamlpos"}
# pathlib for types and pure path arithmetic only.
PATHLIB_NAMES = {"Path", "PurePath", "PurePosixPath"}
READS = {
    "read_text", "read_bytes", "write_text", "write_bytes", "open", "exists", "is_file", "is_dir",
    "resolve", "absolute", "iterdir", "glob", "rglob", "stat", "lstat", "cwd", "home", "expanduser",
    "readlink", "samefile",
}


def impurities(path: Path) -> list[str]:
    """What in ``path`` would touch the disk or parse YAML: imports and calls, with their lines."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] in FORBIDDEN_MODULES or a.name in FORBIDDEN_SPARKIMG]
        elif isinstance(node, ast.ImportFrom):
            base = ["sparkimg", "spec"][: 3 - node.level] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            if module.split(".")[0] in FORBIDDEN_MODULES or module in FORBIDDEN_SPARKIMG:
                found.append(f"{node.lineno}: from {module} import")
            found += [f"{node.lineno}: from {module} import {a.name}" for a in node.names
                      if f"{module}.{a.name}" in FORBIDDEN_SPARKIMG
                      or (module == "pathlib" and a.name not in PATHLIB_NAMES)]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in READS:
                found.append(f"{node.lineno}: call {name}()")
    return found


@pytest.mark.parametrize("module", ["model.py", "sections.py"])
def test_pure_module_touches_no_disk_and_no_yaml(module: str) -> None:
    assert impurities(SPEC / module) == []


def test_the_scan_sees_the_disk_reader() -> None:
    found = impurities(SPEC / "disk.py")
    assert any("sparkimg.patches.sums" in f for f in found)
    assert any("call resolve()" in f for f in found) and any("call is_file()" in f for f in found)
    assert any("import yaml" in f for f in impurities(SPEC / "load.py"))
