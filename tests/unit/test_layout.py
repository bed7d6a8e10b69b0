"""The package's layout survives the tools people point at it: GitHub's standard Python
``.gitignore`` (github/gitignore ``Python.gitignore``) ignores no tracked file under ``sparkimg/``.
Its old ``sparkimg/build/`` was ignored by that template's ``build/``, so a fork made with it lost
the build stage."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# The template's patterns that can match a source tree (caches, virtualenvs and editor files aside).
PYTHON_GITIGNORE = """
__pycache__/
*.py[cod]
*$py.class
*.so
.Python
build/
develop-eggs/
dist/
downloads/
eggs/
.eggs/
lib/
lib64/
parts/
sdist/
var/
wheels/
share/python-wheels/
*.egg-info/
.installed.cfg
*.egg
MANIFEST
*.manifest
*.spec
pip-log.txt
htmlcov/
.tox/
.nox/
.coverage
.cache
cover/
instance/
docs/_build/
target/
profile_default/
celerybeat-schedule
*.sage.py
.env
.venv
env/
venv/
ENV/
env.bak/
venv.bak/
site/
.pyre/
.pytype/
cython_debug/
"""


def test_the_standard_python_gitignore_ignores_nothing_in_the_package(tmp_path: Path) -> None:
    excludes = tmp_path / "python.gitignore"
    excludes.write_text(PYTHON_GITIGNORE)
    tracked = subprocess.run(["git", "ls-files", "sparkimg"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout
    assert "sparkimg/api.py" in tracked
    ignored = subprocess.run(["git", "-c", f"core.excludesFile={excludes}", "check-ignore", "--no-index", "--stdin"],
                             cwd=REPO, input=tracked, capture_output=True, text=True, check=False)
    assert ignored.returncode in (0, 1), ignored.stderr
    assert ignored.stdout.split() == []


def test_the_template_would_have_ignored_the_old_build_stage(tmp_path: Path) -> None:
    """The check is live: the same patterns do ignore a file under a package folder named build/."""
    excludes = tmp_path / "python.gitignore"
    excludes.write_text(PYTHON_GITIGNORE)
    ignored = subprocess.run(["git", "-c", f"core.excludesFile={excludes}", "check-ignore", "--no-index",
                              "sparkimg/build/image.py"], cwd=REPO, capture_output=True, text=True, check=False)
    assert ignored.stdout.strip() == "sparkimg/build/image.py"


def test_the_readme_names_every_room_of_the_package() -> None:
    """README's Layout lists the package's rooms (its subpackages), no more and no fewer."""
    import re

    readme = (REPO / "README.md").read_text()
    layout = readme[readme.index("## Layout"):]
    bullet = layout[layout.index("- `sparkimg/`"):layout.index("\n- ", layout.index("- `sparkimg/`") + 1)]
    named = set(re.findall(r"`([a-z_]+)/`", bullet)) - {"sparkimg"}
    rooms = {p.parent.name for p in (REPO / "sparkimg").glob("*/__init__.py")}
    assert named == rooms
