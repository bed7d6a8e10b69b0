"""Unit tests of sparkimg.formats."""
