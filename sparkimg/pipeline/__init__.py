"""The pipeline: what one command does across several stages, told top-down in one place (the
build: fetch, compile, assemble, check, prewarm, SBOM, receipt, stamp), so that ``sparkimg.api``
only composes and the stages below never call back up into it."""
