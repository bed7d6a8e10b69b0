"""Unit tests of sparkimg.receipts."""
