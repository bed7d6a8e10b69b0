"""``python -m sparkimg.cli``: the same as the ``sparkimg`` console script."""

from .main import main

raise SystemExit(main())
