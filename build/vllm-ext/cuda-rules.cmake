# Loaded by CMake after its NVIDIA CUDA compiler rules (CMAKE_USER_MAKE_RULES_OVERRIDE_CUDA,
# passed by build_ext.py): nvcc compiles without a dependency file.
#
# Why: every build configures or restores a fresh build folder and compiles it once, so ninja
# never reads the dependency files again. sccache, asked for one, runs nvcc's preprocessor an
# extra time (`nvcc -M`) on every call, a hit included: 1.5 of 5.9 s for a CUTLASS object here.
# The objects are the same with or without the file. Ninja takes a missing depfile as empty.
set(CMAKE_DEPFILE_FLAGS_CUDA "")
