"""Unit tests of sparkimg.cli."""
