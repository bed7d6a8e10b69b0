"""How much an archive from outside (an sdist, a git tree's tar, a wheel) may unpack to: one bound
for every reader, checked against what the archive declares before anything is written, so a
small archive that inflates to fill the disk (a zip bomb with an honest RECORD) is refused at once.
The largest real ones: vLLM 0.34.0's sdist unpacks to about 0.2 GiB, cuDNN's aarch64 wheel
(the largest of the vLLM environment) to 1.0 GiB from 621 MiB."""

from __future__ import annotations

MAX_MEMBERS = 500_000
MAX_BYTES = 8 << 30  # unpacked
