"""The layer spec (``sparkimg/v1``): frozen models and the one loader that validates them.

Everything is checked before anything runs. Every problem names the file, the line and
the field, and says how to fix it; all problems are reported at once. ``model`` holds the
models, ``checker`` collects problems, ``sections`` validates (pure), ``disk`` reads the
build tree, ``load`` puts them together.
"""

from sparkimg.formats.archs import dotted_arch
from sparkimg.spec.checker import PLACEHOLDER, Checker
from sparkimg.spec.load import load_spec
from sparkimg.spec.model import (
    COMPILER_CACHES,
    DEFAULT_JOB_MEMORY,
    DEFAULT_MEMORY,
    DEFAULT_PIDS,
    LATEST,
    SCHEMA,
    TOOLKIT_NVCC,
    VARIABLE,
    VARIABLES,
    Arch,
    BaseImage,
    Bounds,
    CompileLayer,
    CompilerCache,
    GitSource,
    KernelModule,
    KernelSet,
    Layer,
    PatchFile,
    PatchSet,
    PathSource,
    PypiSource,
    Scalar,
    Source,
    Spec,
    Toolchain,
    WheelLayer,
    split_reference,
    substitute,
)

__all__ = [
    "COMPILER_CACHES",
    "DEFAULT_JOB_MEMORY",
    "DEFAULT_MEMORY",
    "DEFAULT_PIDS",
    "LATEST",
    "PLACEHOLDER",
    "SCHEMA",
    "TOOLKIT_NVCC",
    "VARIABLE",
    "VARIABLES",
    "Arch",
    "BaseImage",
    "Bounds",
    "Checker",
    "CompileLayer",
    "CompilerCache",
    "GitSource",
    "KernelModule",
    "KernelSet",
    "Layer",
    "PatchFile",
    "PatchSet",
    "PathSource",
    "PypiSource",
    "Scalar",
    "Source",
    "Spec",
    "Toolchain",
    "WheelLayer",
    "dotted_arch",
    "load_spec",
    "split_reference",
    "substitute",
]
