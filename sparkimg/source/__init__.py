"""A compile layer's source: retrieved into the store by its pin, unpacked from an sdist, patched with
``source_patches``, and the vLLM preflight that reads its CMake before any compile."""
