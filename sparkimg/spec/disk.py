"""The spec checks that read the build tree: the root folder, paths inside it, patch sets.

Apart from the pure section validation so that a spec can be checked without the build
tree (on a serving node, say) by passing another ``sections.Disk`` instead of this one.
"""

from __future__ import annotations

from pathlib import Path

from sparkimg._internal.fs.files import regular_file
from sparkimg.errors import UsageError
from sparkimg.patches.sums import numbered_lines
from sparkimg.spec.checker import Checker, KeyPath
from sparkimg.spec.model import PatchFile


class BuildTree:
    """The build tree around a spec file, read from disk (a ``sections.Disk``)."""

    def __init__(self, spec_path: Path) -> None:
        self.spec_path = spec_path

    def root(self, written: str, c: Checker) -> Path | None:
        """The spec's folder or one of the folders above it (``.``, ``..``, ``../..``), never ``/``:
        everything a build reads comes from under it, and no link leads out of it."""
        here = self.spec_path.resolve().parent
        root = (here / written).resolve()
        if not root.is_dir():
            c.problem(("root",), f"'{written}' is not a folder next to the spec")
            return None
        if not here.is_relative_to(root) or root == Path(root.anchor):
            c.problem(("root",), f"'{written}' ({root}) must be the spec's folder or a folder above it, and not "
                      "/; write e.g. '..' for the repository that holds layers/")
            return None
        return root

    def inside(self, root: Path, written: str, path: KeyPath, c: Checker) -> Path | None:
        """Resolve a path relative to the root; refuse one that escapes it."""
        resolved = (root / written).resolve()
        if not resolved.is_relative_to(root):
            c.problem(path, f"'{written}' escapes the spec's root {root}; keep inputs inside it "
                      "(or widen 'root')")
            return None
        if not resolved.exists():
            c.problem(path, f"'{written}' does not exist under {root}")
            return None
        return resolved

    def folder(self, root: Path, written: str, path: KeyPath, c: Checker) -> Path | None:
        resolved = self.inside(root, written, path, c)
        if resolved is None:
            return None
        if not resolved.is_dir():
            c.problem(path, "must be a folder")
            return None
        return resolved

    def file(self, root: Path, written: str, path: KeyPath, c: Checker) -> Path | None:
        resolved = self.inside(root, written, path, c)
        if resolved is None:
            return None
        if not resolved.is_file():
            c.problem(path, "must be a regular file")
            return None
        return resolved

    def patch_files(self, folder: Path, path: KeyPath, c: Checker) -> tuple[PatchFile, ...] | None:
        """Read ``mounts.txt``: one ``FILE CONTAINER_PATH`` per line, ``#`` comments."""
        mounts = folder / "mounts.txt"
        if not mounts.is_file():
            c.problem(path, f"{mounts} is missing; list each patch file and its container path there")
            return None
        try:
            lines = list(numbered_lines(mounts))
        except UsageError as exc:
            c.problem(path, exc.message)
            return None
        files: list[PatchFile] = []
        for number, line in lines:
            where = f"{_shown(mounts)}:{number}"
            if "<operator" in line:
                c.placeholders.append(f"{where}: {line}")
                continue
            parts = line.split()
            if len(parts) != 2:
                c.problem(path, f"{where}: write 'FILE /container/path', one per line")
                continue
            file, target = parts
            if "/" in file or file.startswith("."):
                c.problem(path, f"{where}: '{file}' must be a plain file name inside {folder.name}/")
                continue
            if not target.startswith("/"):
                c.problem(path, f"{where}: '{target}' must be an absolute container path")
                continue
            try:
                regular_file(folder / file, folder)
            except UsageError as exc:
                c.problem(path, f"{where}: {exc.message}; {exc.hint or 'keep patch files in the set folder'}")
                continue
            if not (folder / file).is_file():
                c.placeholders.append(f"{where}: the patch file {folder / file} itself (not in the repository)")
                continue
            files.append(PatchFile(file, target))
        return tuple(files)


def _shown(path: Path) -> str:
    """A path as the user would type it: relative to the working folder when inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
