"""The fetch stage: every locked input into the store, and the base into the engine (``inputs``)."""
