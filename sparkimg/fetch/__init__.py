"""fetch."""
