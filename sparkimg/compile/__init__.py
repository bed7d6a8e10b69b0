"""The compile stage: a compile layer built in its bounded container (bounds from the memory
budget, an object cache, outputs normalised and audited for the requested CUDA architectures)."""
