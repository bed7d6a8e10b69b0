"""Unit tests of sparkimg.patches."""
