"""Unit tests of sparkimg.engine."""
