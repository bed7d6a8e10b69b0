"""Unit tests of sparkimg.source."""
