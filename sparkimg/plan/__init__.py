"""The plan: a cache key per layer from what changes its output, and what changed (``keys``)."""
