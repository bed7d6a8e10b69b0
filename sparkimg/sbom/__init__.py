"""What is inside a built image, as an SBOM: ``contents`` reads the Debian packages and Python
distributions from the image's layers without running it, ``inventory`` assembles the packages
and their relationships, which ``spdx`` writes as SPDX 2.3 and ``cyclonedx`` as CycloneDX 1.6
(the formats' names: ``formats.sbom_formats``)."""
