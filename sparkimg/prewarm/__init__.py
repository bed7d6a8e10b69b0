"""``sparkimg prewarm``: compile the FlashInfer JIT modules an image needs before it serves.

``targets`` says what to warm, ``runner`` where the worker runs, ``warm`` compiles and
writes the signed manifest (``manifest``), ``verify`` checks a cache, ``serving`` mounts it.
"""
