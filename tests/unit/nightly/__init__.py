"""Unit tests of sparkimg.nightly."""
