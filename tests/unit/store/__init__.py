"""Unit tests of sparkimg.store."""
