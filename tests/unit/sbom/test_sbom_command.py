"""``sparkimg sbom --format``: an unknown format is a usage error naming the choices, and a
signed SBOM file is shown in the format it was signed in (its table from either format; another
format asked for is refused, never converted). The files are real, signed with a real key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkimg import api
from sparkimg.cli import main
from sparkimg.errors import UsageError
from sparkimg.formats import sbom as sbom_format
from sparkimg.formats.sbom_formats import CYCLONEDX, FORMATS, SPDX
from sparkimg.formats.statement import Subject
from sparkimg.sbom.attest import written
from sparkimg.signing.signed import write_signed

from .fixture import made


@pytest.mark.parametrize("command", [["sbom", "layers/demo.yaml", "--format"], ["build", "layers/demo.yaml",
                                                                                "--sbom-format"]])
def test_an_unknown_format_is_a_usage_error_naming_the_choices(command: list[str],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:  # argparse's usage error, exit 2 as for any bad argument
        main([*command, "xml"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "xml" in err and all(f"'{name}'" in err for name in FORMATS) and "Traceback" not in err


def _signed(tmp_path: Path, kind: str) -> tuple[Path, dict[str, object]]:
    key = api.keygen(tmp_path / "k")
    document = written(made("git"), kind)
    path = tmp_path / f"demo-{kind}.sbom.json"
    write_signed(path, sbom_format.statement(document, [Subject("sparkimg/demo:abc", {"sha256": "f" * 64})]), key)
    return path, document


@pytest.mark.parametrize("kind", FORMATS)
def test_a_signed_sbom_is_shown_in_the_format_it_was_signed_in(kind: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path, document = _signed(tmp_path, kind)
    pub = str(tmp_path / "k.pub")
    assert main(["sbom", str(path), "--key", pub, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == document
    assert main(["sbom", str(path), "--key", pub, "--format", kind, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == document
    assert main(["sbom", str(path), "--key", pub]) == 0
    table = capsys.readouterr().out
    assert "sparkimg/demo:abc" in table and "six" in table and "8abb2f1d86890a2d" in table and "valid" in table
    other = CYCLONEDX if kind == SPDX else SPDX
    assert main(["sbom", str(path), "--format", other]) == 2
    err = capsys.readouterr().err
    assert "a signed SBOM is shown as it was signed" in err and f"--format {other}" in err


def test_the_api_refuses_an_unknown_format_before_anything_is_built_or_read(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown SBOM format 'xml'") as refused:
        api.BuildOptions(sbom_format="xml")
    assert refused.value.hint is not None and all(name in refused.value.hint for name in FORMATS)
    with pytest.raises(UsageError, match="unknown SBOM format 'xml'"):
        api.sbom(tmp_path / "none.yaml", store=tmp_path / "store", sbom_format="xml")
