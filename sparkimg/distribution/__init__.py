"""Moving a built image off the build machine and onto nodes, always with its signed receipt: ``push``
to a registry, ``pull`` after verifying, ``archive`` (``save`` and ``load`` of one file)."""
