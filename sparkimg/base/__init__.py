"""Asking a base image, once, about itself (its CUDA toolkit, its Python install scheme) in a bounded
``--network none`` container, and the store records of its answers."""
