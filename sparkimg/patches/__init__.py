"""Patch sets on disk: their files, ``mounts.txt`` and the ``MD5SUMS`` / ``SHA256SUMS`` pins (``sums``)."""
