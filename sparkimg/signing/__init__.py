"""Keys (``keys``), DSSE envelopes (``dsse``) and the one signed-file writer (``signed``):
shared by receipts and prewarm manifests, so neither reaches into the other."""
