"""Unit tests of sparkimg.image."""
