"""Unit tests of sparkimg.distribution."""
