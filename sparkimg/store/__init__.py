"""The content-addressed store (``content``): every input and output held by its sha256."""
