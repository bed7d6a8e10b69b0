"""lock."""
