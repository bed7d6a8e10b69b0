"""Unit tests of sparkimg.prewarm."""
