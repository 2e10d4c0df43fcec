"""Context parallelism: the ``context_parallel`` plan field (ring attention, cost terms in
costs/context_parallel.py).

A key field: it changes the layout (gpus = tp x cp x pp x dp), the tokens each rank holds
and the group that reduces and shards gradients (dp x cp), so it is fixed per candidate
row like tp and pp.

Default domain: cp = 1 for sequences up to 8,192 tokens, where the activations of one
sequence are small next to the model states and the ring would only add transfers
(Llama 3, Dubey et al. 2024, section 3.3.2, pretrains at 8K without context parallelism and
uses it for the long-context stage; torchtitan's published sweep starts CP at 32K). Longer
sequences search cp in powers of two up to 16 (Llama 3 Table 4: cp = 16 at 131,072 tokens)
and up to the GPUs searched, keeping those that split the sequence into 2 x cp chunks of
whole attention tiles. Pin or allow any other value.
"""

from __future__ import annotations

from vramopt.constraints.technique import DomainContext, Technique, parse_int
from vramopt.costs.context_parallel import whole_tile_chunks

LONG_SEQUENCE_TOKENS = 8192
"""Above this many tokens per sequence context parallelism is searched by default (Llama 3
section 3.3.2: 8K pretraining sequences without CP)."""

LARGEST_DEFAULT_DEGREE = 16
"""Llama 3 (Dubey et al. 2024) Table 4: the 131,072-token stage of 405B ran cp = 16."""


def default_degrees(context: DomainContext) -> tuple[int, ...]:
    if context.seq_len <= LONG_SEQUENCE_TOKENS:
        return (1,)
    degrees, degree = [], 1
    while degree <= min(LARGEST_DEFAULT_DEGREE, context.max_gpus):
        if bool(whole_tile_chunks(context.seq_len, degree)):
            degrees.append(degree)
        degree *= 2
    return tuple(degrees)


CONTEXT_PARALLEL = Technique(
    field="context_parallel",
    group="key",
    description="context parallel degree: ring attention over cp GPUs that split each sequence",
    parse=parse_int("context_parallel", 1),
    default_values=default_degrees,
    columns=lambda value: {"context_parallel": value},
    decode=lambda codes: int(codes["context_parallel"]),
)

TECHNIQUES = (CONTEXT_PARALLEL,)

EXPORT_NOTES = {
    "deepspeed": (
        "context parallel {cp}: not supported by this DeepSpeed config (DeepSpeed-Ulysses is a different "
        "scheme: an all-to-all over attention heads, not a KV ring); run ring attention with Megatron-Core "
        "(--context-parallel-size {cp}) or torchtitan (parallelism.context_parallel_degree = {cp})"
    ),
}
"""What each exporter says about a plan with cp > 1 (no exporter writes a CP setting)."""
