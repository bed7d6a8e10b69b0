"""The network, bounded: HTTP documents within a size and a deadline, the OCI distribution client,
PyPI resolution with pip, and git mirrors."""
