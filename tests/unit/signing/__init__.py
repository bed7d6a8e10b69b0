"""Unit tests of sparkimg.signing."""
