"""Unit tests of sparkimg.spec."""
