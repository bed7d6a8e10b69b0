"""``load_spec``: read a spec file, parse it with positions, validate it, all problems at once.

The one place that puts the pieces together: the file and its YAML here, the pure
``sections`` with the build tree from ``disk``, and every problem raised as one ``SpecError``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from sparkimg._internal.fs.files import read_input
from sparkimg.errors import SpecError, UsageError
from sparkimg.spec import located as _located
from sparkimg.spec.checker import Checker, type_name
from sparkimg.spec.disk import BuildTree
from sparkimg.spec.model import Spec
from sparkimg.spec.sections import validate


def load_spec(path: str | Path, *, allow_placeholders: bool = False, parsed: Path | None = None) -> Spec:
    """Load and fully validate a spec file; raise ``SpecError`` listing every problem.

    Placeholders (``<operator: what to supply>``) are problems too, unless
    ``allow_placeholders`` is set (then they are returned in ``Spec.placeholders``
    and the fields holding them are left unset in the model). ``parsed`` is a folder
    that remembers YAML parses by the file's sha256 (``_located``); every check still runs.
    """
    spec_path = Path(path)
    display = str(path)
    try:
        raw = read_input(spec_path, _located.MAX_BYTES, hint="pass the path of a YAML layer spec")
    except FileNotFoundError:
        raise UsageError(f"{display}: no such spec file", hint="pass the path of a YAML layer spec") from None
    except OSError as exc:
        raise UsageError(f"{display}: cannot read: {exc.strerror}") from None
    located = _located.remembered(parsed, raw) if parsed is not None else None
    if located is None:
        located = _parse(raw, display)
        if parsed is not None:
            _located.remember(parsed, raw, located)
    check = Checker(display, located)
    check.duplicates()
    data = located.data
    if not isinstance(data, dict):
        check.problem((), f"the spec must be a YAML mapping, not {type_name(data)}")
        raise SpecError(display, check.problems)
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    spec = validate(data, check, BuildTree(spec_path), path=spec_path.resolve(), digest=digest)
    problems = check.report(allow_placeholders=allow_placeholders)
    if problems or spec is None:
        raise SpecError(display, problems or [f"{display}:1: (top level): invalid spec"])
    return spec


def _parse(raw: bytes, display: str) -> _located.Located:
    """The YAML parse with positions; PyYAML is imported only here, when a parse is needed."""
    import yaml

    from sparkimg.spec import yamlpos as _yamlpos

    try:
        return _yamlpos.parse_located(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise SpecError(display, [f"{display}:1: (file): not UTF-8 text"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(display, [f"{display}:{line}: (syntax): {problem}; fix the YAML syntax"]) from None
