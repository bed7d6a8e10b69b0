"""distribution."""
