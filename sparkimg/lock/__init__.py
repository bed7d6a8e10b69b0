"""The lock stage: resolve every mutable reference once, write, load and check ``SPEC.lock.json``
(``resolve``; the format itself is ``formats.lockfile``)."""
