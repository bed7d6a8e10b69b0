"""The SBOM formats sparkimg writes, by the names the CLI takes (``sbom --format``, ``build
--sbom-format``): a leaf, so the parser names them without loading any format's code."""

SPDX = "spdx"
CYCLONEDX = "cyclonedx"
FORMATS = (SPDX, CYCLONEDX)  # the first is the default
