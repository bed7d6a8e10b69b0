"""The FlashInfer JIT module catalogue: short names for FlashInfer's generator functions.

Data about FlashInfer, kept apart from the spec so the prewarm stage owns what it knows of
FlashInfer. A leaf: it imports nothing from sparkimg, so the spec (which validates a
``prewarm:`` kernel set against it) and the prewarm stage (which imports the spec) can both
use it without an import cycle between those stages.
"""

from __future__ import annotations

import re

# Short names for FlashInfer's JIT module generators (flashinfer.jit.*); any other
# generator is written out in full with ``generator:``.
GENERATORS = {
    "activation": "flashinfer.jit.activation.gen_act_and_mul_module",
    "norm": "flashinfer.jit.norm.gen_norm_module",
    "page": "flashinfer.jit.page.gen_page_module",
    "sampling": "flashinfer.jit.sampling.gen_sampling_module",
    "rope": "flashinfer.jit.rope.gen_rope_module",
    "topk": "flashinfer.jit.topk.gen_topk_module",
    "cascade": "flashinfer.jit.cascade.gen_cascade_module",
    "decode": "flashinfer.jit.attention.gen_batch_decode_module",
    "prefill": "flashinfer.jit.attention.gen_batch_prefill_module",
    "mla": "flashinfer.jit.attention.gen_batch_mla_module",
}
# A generator written out in full: a dotted function under the flashinfer package.
DOTTED_GENERATOR = re.compile(r"^flashinfer(\.[A-Za-z_][A-Za-z0-9_]*)+$")
