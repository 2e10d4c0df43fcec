"""Uneven pipeline stages: how many transformer layers each stage holds.

The assignment is Megatron-Core's (``--decoder-first-pipeline-num-layers`` and
``--decoder-last-pipeline-num-layers`` of megatron/training/arguments.py, release
core_v0.16.1; checked in ``TransformerConfig.__post_init__``,
megatron/core/transformer/transformer_config.py, and applied by ``get_num_layers_to_build``
in megatron/core/transformer/transformer_block.py): the first and the last stage may be
given their own layer counts (each > 0); the layers left must divide evenly over the stages
left, the middle stages. A count left unset (0 in vramopt's plan) means that stage holds
what a middle stage holds; with both unset the layers must divide by the pipeline degree,
as before. With an interleaved schedule (virtual stages v) Megatron-Core also requires the
first, the last and each middle stage's layers to be divisible by v.

Why the ends get fewer layers: the first stage also holds the input embedding and, under
1F1B, the activations of p micro-batches (the other stages fewer); the last stage holds the
output head and runs the head GEMM and the loss (Llama 3 405B: 126 layers over 16 stages,
one layer fewer on the first and the last, Dubey et al. 2024 section 3.3.2). Megatron's
alternative, ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-
pipeline-split``, counts the embedding and the loss as one layer each in an even split: its
stages hold what a first or last stage one layer short holds, so vramopt expresses it with
these two fields; it differs in how the chunks of an interleaved schedule divide the ends
(``embedding_loss_slots``: 7 + 14 x 8 + 7 runs 2 or 4 chunks that way, not with the counts).

Costs (the heaviest stage sets memory and time, ``costs/memory.py``,
``costs/operators.py``):
- weights: the stage with the most parameters (its layers at the average parameters per
  layer, plus the embedding on the first and the head on the last stage);
- activations: the most any stage holds, stage i keeping min(p - i, m) micro-batches of its
  layers (1F1B, Narayanan et al. 2021 section 2.2.1): the first stage, the first middle
  stage (p - 1 in flight) or the last (one in flight);
- state and activation bytes are each taken at their own heaviest stage and added (at most
  what one stage holds + what another holds; exact for even stages, where one stage is the
  heaviest in both), which keeps the tables separable;
- compute: the slowest of the last stage (its layers, the head and the loss) and the
  heaviest other stage (its layers only); the communication per layer (tensor-parallel
  all-reduces, the context-parallel ring, the expert all-to-all) is priced for the stage
  with the most layers (exact when that stage is the slowest, an upper bound otherwise).

Default search domain (small tables): for each pipeline degree, the assignments whose
largest stage holds ceil(layers / p) layers, i.e. the most balanced ones Megatron can
express, with the ends at or below the middle and at most one layer apart. A degree that
divides the layers keeps only its even split; others get one or two candidates (126 on 16:
7 + 14 x 8 + 7; DeepSeek-V3's prime 61 on 16: 3 + 14 x 4 + 2 and 2 + 14 x 4 + 3).
"""

from __future__ import annotations

import numpy as np


def stage_layers(layers, pipeline_parallel, first_stage_layers=0, last_stage_layers=0):
    """(first, middle, last) layer counts and the number of middle stages, per plan.

    At pp = 1 the one stage is first and last: all three are the layer count. Invalid
    assignments give meaningless counts; ``uneven_invalid_reasons`` names them."""
    p = np.asarray(pipeline_parallel)
    first_given, last_given = np.asarray(first_stage_layers), np.asarray(last_stage_layers)
    middle_stages = p - (first_given > 0) - (last_given > 0)
    rest = layers - first_given - last_given
    middle = np.where(middle_stages > 0, rest // np.maximum(middle_stages, 1), 0)
    first = np.where(first_given > 0, first_given, middle)
    last = np.where(last_given > 0, last_given, middle)
    return first, middle, last, middle_stages


def uneven(columns) -> np.ndarray:
    """Plans that set the first or the last stage's layers."""
    sources = (columns.first_stage_layers, columns.last_stage_layers)
    return _remembered("uneven", sources, lambda: (np.asarray(columns.first_stage_layers) > 0)
                       | (np.asarray(columns.last_stage_layers) > 0))


_LAST: dict[str, tuple] = {}
"""One remembered result per function: (the arrays it was computed from, the result). The
cost model calls these several times on the same ``PlanColumns`` (one per memory and time
term), and the solver's tables have millions of rows; the arrays are held, so an identity
match cannot be a reused id."""


def _remembered(name: str, sources: tuple, compute):
    last = _LAST.get(name)
    if last is not None and len(last[0]) == len(sources) and all(a is b for a, b in zip(last[0], sources)):
        return last[1]
    value = compute()
    _LAST[name] = (sources, value)
    return value


def columns_stage_layers(model, columns):
    """``stage_layers`` of every row of a ``PlanColumns``."""
    sources = (model, columns.pipeline_parallel, columns.first_stage_layers, columns.last_stage_layers)
    return _remembered("stage_layers", sources, lambda: stage_layers(
        model.layers, columns.pipeline_parallel, columns.first_stage_layers, columns.last_stage_layers))


def most_layers_on_a_stage(model, columns) -> np.ndarray:
    """Layers of the stage that holds the most: ``layers / pp`` for even stages."""
    even = model.layers / np.asarray(columns.pipeline_parallel, dtype=float)
    if not np.any(uneven(columns)):  # the solver's tables: mostly even rows, skip the rest
        return even
    first, middle, last, middle_stages = columns_stage_layers(model, columns)
    return np.where(uneven(columns), np.maximum(np.maximum(first, last), np.where(np.asarray(columns.pipeline_parallel) > 2, middle, 0)), even)


def timed_stage_layers(model, columns, stage: str) -> np.ndarray:
    """Layers of the stage ``costs/operators.py`` times: 'last' (the stage with the head and
    the loss) or 'inner' (the heaviest of the others: the first or a middle stage)."""
    even = model.layers / np.asarray(columns.pipeline_parallel, dtype=float)
    if not np.any(uneven(columns)):
        return even
    first, middle, last, middle_stages = columns_stage_layers(model, columns)
    if stage == "last":
        return np.where(uneven(columns), last, even)
    return np.where(uneven(columns), np.maximum(first, np.where(np.asarray(columns.pipeline_parallel) > 2, middle, 0)), even)


def stage_embedding_parameters(model, columns) -> np.ndarray:
    """Embedding parameters the first (and the last) stage holds: all of them at pp = 1 or
    when tied (both ends keep a copy), else half (the input table first, the head last)."""
    embedding = model.parameters.embedding
    pipeline = np.asarray(columns.pipeline_parallel, dtype=float)
    return np.where((pipeline == 1) | model.tied_embeddings, embedding, embedding / 2.0)


def heaviest_weight_stage(model, columns) -> tuple[np.ndarray, np.ndarray]:
    """(layers, embedding parameters) of the stage with the most parameters (its layers at the
    average parameters per layer plus ``stage_embedding_parameters`` on the first and last)."""
    sources = (model, columns.pipeline_parallel, columns.first_stage_layers, columns.last_stage_layers)
    return _remembered("heaviest_weight_stage", sources, lambda: _heaviest_weight_stage(model, columns))


def _heaviest_weight_stage(model, columns):
    embedding = stage_embedding_parameters(model, columns)
    even = model.layers / np.asarray(columns.pipeline_parallel, dtype=float)
    is_uneven = uneven(columns)
    if not np.any(is_uneven):
        return even, embedding
    first, middle, last, _ = columns_stage_layers(model, columns)
    per_layer = (model.parameters.total - model.parameters.embedding) / model.layers
    inner = np.where(np.asarray(columns.pipeline_parallel) > 2, middle, 0)
    end_layers = np.maximum(first, last)  # both ends hold the same embedding share
    ends_heavier = end_layers * per_layer + embedding >= inner * per_layer
    layers = np.where(ends_heavier, end_layers, inner)
    stage_embedding = np.where(ends_heavier, embedding, 0.0)
    return np.where(is_uneven, layers, even), np.where(is_uneven, stage_embedding, embedding)


def stage_activation_loads(model, columns, in_flight, micro_batches) -> list[tuple[np.ndarray, np.ndarray]]:
    """(layers, micro-batches in flight) of each stage that may hold the most activations:
    the first (``in_flight``, min(p, m) with the interleaving factor), the first middle
    stage (min(p - 1, m) of them) and the last (one); even stages: the first only."""
    even = model.layers / np.asarray(columns.pipeline_parallel, dtype=float)
    if not np.any(uneven(columns)):
        return [(even, in_flight)]
    first, middle, last, middle_stages = columns_stage_layers(model, columns)
    is_uneven = uneven(columns)
    p = np.asarray(columns.pipeline_parallel, dtype=float)
    stage_zero = np.maximum(np.minimum(p, micro_batches), 1.0)
    second = in_flight * np.minimum(p - 1.0, micro_batches) / stage_zero
    return [
        (np.where(is_uneven, first, even), in_flight),
        (np.where(is_uneven & (p > 2), middle, 0), second),
        (np.where(is_uneven, last, 0), in_flight / stage_zero),
    ]


def fewest_layers_on_a_stage(model, columns) -> np.ndarray:
    """Layers of the stage that holds the fewest: ``layers // pp`` for even stages."""
    even = model.layers // np.asarray(columns.pipeline_parallel)
    if not np.any(uneven(columns)):
        return even
    first, middle, last, middle_stages = columns_stage_layers(model, columns)
    fewest = np.minimum(first, last)
    return np.where(uneven(columns), np.where(np.asarray(columns.pipeline_parallel) > 2, np.minimum(fewest, middle), fewest), even)


def divides_every_stage(model_layers, pipeline_parallel, first_stage_layers, last_stage_layers, divisor) -> np.ndarray:
    """Whether ``divisor`` divides the layers of every stage (checkpoint every:k, virtual stages)."""
    first, middle, last, middle_stages = stage_layers(model_layers, pipeline_parallel, first_stage_layers, last_stage_layers)
    divisor = np.maximum(np.asarray(divisor), 1)
    return (first % divisor == 0) & (last % divisor == 0) & ((middle_stages <= 0) | (middle % divisor == 0))


def embedding_loss_slots(model_layers, pipeline_parallel, first_stage_layers, last_stage_layers, virtual_stages):
    """(interleaves, embedding_counted, loss_counted): the plans whose stage split is
    Megatron-Core's ``--account-for-embedding-in-pipeline-split`` /
    ``--account-for-loss-in-pipeline-split`` form for ``virtual_stages`` chunks, and which end
    counts its module as a layer.

    Megatron-Core core_v0.16.1 (transformer_config.py ``TransformerConfig.__post_init__``, the
    ``elif account_for_...`` branch; transformer_block.py ``get_num_layers_to_build``): the
    embedding and the loss each take one layer slot, layers + slots must divide by pp, each
    stage's share c = (layers + slots) / pp by v, and the first (last) model chunk of the first
    (last) stage builds one layer fewer (``num_layers_to_build -= 1``, at least 0). So every
    stage holds c layers but the ends, which hold c or c - 1, and the chunks need not divide
    the ends' counts: Llama 3 405B's 126 layers + 2 = 128 = 16 stages x 2 chunks x 4 layers
    (stage 0: 3 + 4, stage 15: 4 + 3). The flags cannot be combined with the decoder-first/last
    counts (the same ``__post_init__`` raises), so a split is one form or the other."""
    first, middle, last, _ = stage_layers(model_layers, pipeline_parallel, first_stage_layers, last_stage_layers)
    inner = np.asarray(pipeline_parallel) > 2  # at pp 2 the "middle" count is the last stage's
    full = np.maximum(np.maximum(first, last), np.where(inner, middle, 0))
    chunks = np.maximum(np.asarray(virtual_stages), 1)
    embedding_counted, loss_counted = first == full - 1, last == full - 1
    interleaves = ((np.asarray(pipeline_parallel) > 1) & (full % chunks == 0) & (full >= 1)
                   & ((first == full) | embedding_counted) & ((last == full) | loss_counted)
                   & (~inner | (middle == full)))
    return interleaves, embedding_counted, loss_counted


def interleaves_every_stage(model_layers, pipeline_parallel, first_stage_layers, last_stage_layers, virtual_stages) -> np.ndarray:
    """Whether Megatron-Core runs ``virtual_stages`` chunks on this stage split: every stage's
    layers divisible by v (the decoder-first/last form, ``divides_every_stage``) or the
    embedding/loss-slot form (``embedding_loss_slots``)."""
    return divides_every_stage(model_layers, pipeline_parallel, first_stage_layers, last_stage_layers, virtual_stages) | (
        embedding_loss_slots(model_layers, pipeline_parallel, first_stage_layers, last_stage_layers, virtual_stages)[0])


def uneven_invalid_reasons(layers: int, columns) -> dict[str, np.ndarray]:
    """Megatron-Core's rules on a first/last stage assignment (the even split's rule,
    'pipeline_parallel must divide the layers', is the layout's)."""
    p = np.asarray(columns.pipeline_parallel)
    first_given, last_given = np.asarray(columns.first_stage_layers), np.asarray(columns.last_stage_layers)
    is_uneven = (first_given > 0) | (last_given > 0)
    _, middle, _, middle_stages = stage_layers(layers, p, first_given, last_given)
    rest = layers - first_given - last_given
    return {
        "first_stage_layers and last_stage_layers need pipeline_parallel > 1": is_uneven & (p == 1),
        "first_stage_layers and last_stage_layers must leave every pipeline stage at least one layer": is_uneven & (p > 1)
        & (((middle_stages > 0) & (rest < middle_stages)) | (rest < 0)),
        "the layers left after first_stage_layers and last_stage_layers must divide evenly over the other pipeline stages": (
            is_uneven & (p > 1) & (middle_stages > 0) & (rest >= middle_stages) & (rest % np.maximum(middle_stages, 1) != 0)
        ),
        "first_stage_layers + last_stage_layers must equal the layers at pipeline_parallel 2": is_uneven & (p > 1)
        & (middle_stages == 0) & (rest != 0),
    }


def _canonical(pipeline_parallel: int, first: int, middle: int, last: int) -> tuple[int, int]:
    """The plan's codes of an assignment: 0 for an end that holds what a middle stage holds;
    at pp = 2 (no middle stage) the first stage's count and 0 for the rest."""
    if pipeline_parallel == 2:
        return (0, 0) if first == last else (first, 0)
    return (0 if first == middle else first, 0 if last == middle else last)


def stage_splits(layers: int, pipeline_parallel: int) -> tuple[tuple[int, int], ...]:
    """The default candidates (first_stage_layers, last_stage_layers) of one pipeline degree:
    the Megatron-expressible assignments whose largest stage holds ceil(layers / p) layers and
    whose two ends differ by at most one layer (the even split alone where p divides the
    layers; fewer on the last stage first)."""
    p = pipeline_parallel
    if p == 1:
        return ((0, 0),)
    if layers % p == 0:
        return ((0, 0),)
    cap = -(-layers // p)
    middle = cap if p > 2 else 0
    ends = layers - middle * (p - 2)
    # The ends share what the middle leaves as evenly as possible (one layer apart at most):
    # fewer candidates keep the tables small; a pin reaches any other valid pair.
    pairs = [(first, ends - first) for first in range(max(1, ends - cap), min(cap, ends - 1) + 1)
             if abs(2 * first - ends) <= 1]
    pairs.sort(key=lambda pair: pair[1])  # fewer on the last stage first (it also runs the head)
    return tuple(_canonical(p, first, middle if p > 2 else 0, last) for first, last in pairs)


def is_valid_split(layers: int, pipeline_parallel: int, first: int, last: int) -> bool:
    """Whether one (first_stage_layers, last_stage_layers) is a valid Megatron assignment."""
    if pipeline_parallel == 1:
        return first == 0 and last == 0
    if first == 0 and last == 0:
        return layers % pipeline_parallel == 0
    middle_stages = pipeline_parallel - (first > 0) - (last > 0)
    rest = layers - first - last
    if middle_stages == 0:
        return rest == 0
    return rest >= middle_stages and rest % middle_stages == 0


def stage_counts(layers: int, pipeline_parallel: int, first: int, last: int) -> list[int]:
    """Every stage's layer count of one valid assignment, first to last."""
    head, middle, tail, _ = (int(value) for value in stage_layers(layers, pipeline_parallel, first, last))
    if pipeline_parallel == 1:
        return [layers]
    return [head] + [middle] * (pipeline_parallel - 2) + [tail]


def stage_count_sets(layers: int, degrees) -> list[tuple[int, set[int]]]:
    """(degree, the set of its stages' layer counts) for each default split of each degree."""
    sets = []
    for degree in degrees:
        for first, last in stage_splits(layers, degree):
            head, middle, tail, _ = (int(value) for value in stage_layers(layers, degree, first, last))
            sets.append((degree, {head, tail} | ({middle} if degree > 2 else set()) if degree > 1 else {layers}))
    return sets


def counts_interleave(counts, chunks: int) -> bool:
    """Whether a default split with these stage layer counts (``stage_count_sets``: its middle
    stages hold the most) runs ``chunks`` virtual stages: each count divisible by it, or the
    largest divisible and the ends at most one layer short (``embedding_loss_slots``)."""
    full = max(counts)
    return all(count % chunks == 0 for count in counts) or (full % chunks == 0 and all(count >= full - 1 for count in counts))


def pipeline_degrees(layers: int, max_gpus: int) -> tuple[int, ...]:
    """The default pipeline degrees of a training search: every divisor of the layers (even
    stages) and every power of two up to the GPUs searched that has an uneven split, ascending."""
    degrees = {value for value in range(1, int(layers ** 0.5) + 1) if layers % value == 0}
    degrees |= {layers // value for value in degrees}
    degree = 2
    while degree <= min(layers, max_gpus):
        if stage_splits(layers, degree):
            degrees.add(degree)
        degree *= 2
    return tuple(sorted(degrees))
