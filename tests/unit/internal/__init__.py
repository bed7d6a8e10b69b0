"""Unit tests of sparkimg._internal."""
