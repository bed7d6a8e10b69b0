"""sparkimg: reproducible image builds for vLLM serving on NVIDIA DGX Spark (GB10)."""

__version__ = "0.1.0"
