"""What is inside a built image, as an SBOM: ``contents`` reads the Debian packages and Python
distributions from the image's layers without running it, ``spdx`` writes the SPDX 2.3 document."""
