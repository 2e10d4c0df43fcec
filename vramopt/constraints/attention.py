"""Flash attention (Dao et al. 2022): never materializes the s^2 attention scores."""

from __future__ import annotations

from vramopt.constraints.technique import Technique, parse_bool

FLASH_ATTENTION = Technique(
    field="flash_attention",
    group="activation",
    description="flash attention (drops the 5*a*s^2*b score activations; faster attention core)",
    parse=parse_bool("flash_attention"),
    default_values=lambda context: (True, False),
    columns=lambda value: {"flash_attention": int(value)},
    decode=lambda codes: bool(codes["flash_attention"]),
)

TECHNIQUES = (FLASH_ATTENTION,)
