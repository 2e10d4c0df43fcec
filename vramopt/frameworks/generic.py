"""The generic target: the physics-only search, every well-formed plan (no framework rule).

This is vramopt's default: the rules that hold whatever runs the plan (tp divides the
heads, offload needs a ZeRO stage that shards the offloaded state, ...) live in
``costs/training.invalid_reasons``; a framework module adds what its own code refuses.
"""

from __future__ import annotations

from vramopt.frameworks.rule import Framework

GENERIC = Framework(
    name="generic",
    display_name="generic",
    version="-",
    description="every well-formed plan, whatever framework runs it (no framework rule)",
    rules=(),
)
