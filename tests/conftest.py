"""Hypothesis profiles: 'ci' (default, 200 examples per property) and 'long' (benchmarks)."""

import os

from hypothesis import settings

settings.register_profile("ci", max_examples=200, derandomize=True)
settings.register_profile("long", max_examples=int(os.environ.get("VRAMOPT_LONG_EXAMPLES", "2000")))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
