"""``python -m sparkimg.cli``: the same as the ``sparkimg`` console script."""

from sparkimg.cli import main

raise SystemExit(main())
