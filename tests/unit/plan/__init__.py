"""Unit tests of sparkimg.plan."""
