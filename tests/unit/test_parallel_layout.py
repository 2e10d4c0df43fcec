"""The parallel layout (vramopt/parallel_layout.py): degrees, rank order, node placement,
divisibility rules and tensor sharding, for one plan and for many at once (issue 12 item 1)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import vramopt
from vramopt.costs.columns import PlanColumns
from vramopt.parallel_layout import ParallelLayout
from vramopt.types import TrainingPlan


def test_world_size_is_the_product_of_the_four_degrees():
    layout = ParallelLayout(tensor_parallel=2, context_parallel=4, pipeline_parallel=8, data_parallel=3)
    assert layout.world_size == 192
    assert layout.replica_gpus == 64
    assert layout.model_parallel == 16
    assert layout.sharding_group == 12
    assert layout.stage_gpus == 24


def test_from_gpus_derives_the_data_parallel_degree():
    layout = ParallelLayout.from_gpus(64, tensor_parallel=4, pipeline_parallel=2, context_parallel=2)
    assert layout.data_parallel == 4
    assert layout.divides(64) and not layout.divides(40)
    assert layout.matches(64)


def test_from_plan_reads_context_parallel():
    plan = SimpleNamespace(gpus=32, tensor_parallel=4, pipeline_parallel=2, context_parallel=2)
    layout = ParallelLayout.from_plan(plan)
    assert (layout.data_parallel, layout.world_size) == (2, 32)
    plain = ParallelLayout.from_plan(TrainingPlan(gpu="h100", gpus=32, tensor_parallel=4, pipeline_parallel=2))
    assert (plain.context_parallel, plain.data_parallel) == (1, 4)


def test_rank_order_puts_tensor_parallel_innermost():
    """torchtitan ['pp', 'dp', 'cp', 'tp'] / Megatron-Core 'tp-cp-ep-dp-pp': tp ranks are
    adjacent, cp groups step over tp, dp over tp x cp, pp over the whole stage."""
    layout = ParallelLayout(tensor_parallel=8, context_parallel=2, pipeline_parallel=4, data_parallel=16)
    assert layout.group_stride("tensor_parallel") == 1
    assert layout.group_stride("context_parallel") == 8
    assert layout.group_stride("data_parallel") == 16
    assert layout.group_stride("pipeline_parallel") == 256
    assert layout.group_span("tensor_parallel") == 8
    assert layout.group_span("context_parallel") == 16
    assert layout.group_span("data_parallel") == 256
    assert layout.group_span("sharding") == 256
    assert layout.group_span("pipeline_parallel") == 1024 == layout.world_size


def test_which_groups_leave_a_node():
    layout = ParallelLayout(tensor_parallel=8, context_parallel=2, pipeline_parallel=1, data_parallel=1)
    assert not layout.spans_nodes("tensor_parallel", 8)
    assert layout.spans_nodes("context_parallel", 8)
    assert not layout.spans_nodes("context_parallel", 16)
    small = ParallelLayout(tensor_parallel=2, context_parallel=1, pipeline_parallel=1, data_parallel=4)
    assert not small.spans_nodes("data_parallel", 8)
    assert small.spans_nodes("data_parallel", 4)
    assert small.nodes(4) == 2 and small.nodes(8) == 1
    with pytest.raises(ValueError):
        small.group_span("expert_tensor")


def test_zero_stages_shard_over_data_times_context():
    layout = ParallelLayout(tensor_parallel=1, context_parallel=2, pipeline_parallel=1, data_parallel=4)
    stages = np.array([0, 1, 2, 3])
    assert layout.optimizer_zero_shards(stages).tolist() == [1, 8, 8, 8]
    assert layout.gradient_zero_shards(stages).tolist() == [1, 1, 8, 8]
    assert layout.weight_zero_shards(stages).tolist() == [1, 1, 1, 8]


def test_tensor_classes():
    layout = ParallelLayout(tensor_parallel=4, context_parallel=2, pipeline_parallel=2, data_parallel=1,
                            expert_parallel=8, expert_tensor_parallel=1)
    assert layout.dense_weight_shards == 8
    assert layout.expert_weight_shards == 8
    assert layout.kv_cache_shards == 8
    assert layout.tokens_per_rank(8192) == 4096.0
    assert layout.tokens_per_gpu(8192, 2) == 8192 * 2 / 16


def test_micro_batches_per_step():
    layout = ParallelLayout(tensor_parallel=1, pipeline_parallel=1, data_parallel=8)
    assert layout.micro_batches(512, 4) == 16.0
    assert layout.sequences_per_micro_step(4) == 32


def test_works_on_columns_of_many_plans():
    columns = PlanColumns.from_scalars(
        gpus=[8, 16, 16], tensor_parallel=[2, 4, 8], pipeline_parallel=[1, 2, 1], data_parallel=[4, 2, 1],
        sequence_parallel=0, virtual_stages=1, zero_stage=[0, 1, 3], checkpoint_kind=0, checkpoint_every=0,
        precision=0, grad_comm_precision=0, offload=0, flash_attention=1, micro_batch=1,
    )
    with_context = SimpleNamespace(**{name: getattr(columns, name) for name in columns.column_names()})
    with_context.context_parallel = np.array([1, 1, 2])
    layout = ParallelLayout.from_columns(with_context)
    assert layout.world_size.tolist() == [8, 16, 16]
    assert layout.matches(columns.gpus).all()
    assert layout.sharding_group.tolist() == [4, 2, 2]
    assert layout.spans_nodes("data_parallel", 8).tolist() == [False, False, True]
    assert layout.optimizer_zero_shards(columns.zero_stage).tolist() == [1, 2, 2]


def test_invalid_reasons_name_each_broken_rule():
    layout = ParallelLayout(tensor_parallel=np.array([3, 4, 4, 4]), pipeline_parallel=np.array([1, 5, 1, 1]),
                            data_parallel=np.array([1, 1, 2, 1]), expert_parallel=np.array([1, 1, 1, 8]))
    reasons = layout.invalid_reasons(gpus=np.array([3, 20, 4, 4]), heads=32, kv_heads=8, layers=32,
                                     global_batch=6, micro_batch=1, experts=16)
    assert reasons["tensor_parallel must divide the attention heads"].tolist() == [True, False, False, False]
    assert reasons["pipeline_parallel must divide the layers"].tolist() == [False, True, False, False]
    assert reasons[
        "tensor_parallel x context_parallel x pipeline_parallel x data_parallel must equal the GPU count"
    ].tolist() == [False, False, True, False]
    assert reasons["global_batch must be a multiple of micro_batch x data_parallel"].tolist() == [False] * 4
    assert reasons[
        "expert_parallel x expert_tensor_parallel must divide tensor_parallel x context_parallel x data_parallel"
    ].tolist() == [False, False, False, True]
    odd_batch = ParallelLayout(tensor_parallel=1, pipeline_parallel=1, data_parallel=4)
    reasons = odd_batch.invalid_reasons(gpus=4, heads=32, kv_heads=8, layers=32, global_batch=6, micro_batch=1)
    assert bool(reasons["global_batch must be a multiple of micro_batch x data_parallel"])


def test_grouped_query_attention_rule():
    """tp may exceed the KV heads when it is a multiple of them (each KV head replicated)."""
    for tp, bad in ((16, False), (4, False), (3, True)):
        layout = ParallelLayout(tensor_parallel=tp, pipeline_parallel=1, data_parallel=1)
        reasons = layout.invalid_reasons(gpus=tp, heads=48, kv_heads=8, layers=32)
        assert bool(reasons["tensor_parallel must divide the attention heads"]) is bad, tp


def test_is_frozen():
    layout = ParallelLayout(tensor_parallel=1, pipeline_parallel=1, data_parallel=1)
    with pytest.raises(AttributeError):
        layout.tensor_parallel = 2  # type: ignore[misc]


DEGREE = r"(?:tensor_parallel|context_parallel|pipeline_parallel|data_parallel|expert_parallel|expert_tensor_parallel|tp|cp|pp|dp|t|p)"
PRODUCT = re.compile(rf"(?<![\w\"'])(?:\w+\s*\.\s*)*{DEGREE}\s*\*\s*(?:\w+\s*\.\s*)*{DEGREE}(?![\w(])")


def _code_lines(path: Path):
    """Source lines without comments and string literals (docstrings and messages may spell
    out 'tp x pp'; the code may not multiply)."""
    import io
    import tokenize

    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    lines: dict[int, list[str]] = {}
    for token in tokens:
        if token.type in (tokenize.COMMENT, tokenize.STRING) or token.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            continue
        lines.setdefault(token.start[0], []).append(token.string)
    return {number: " ".join(parts) for number, parts in lines.items()}


def test_no_module_outside_the_layout_multiplies_two_degrees():
    """issue 12 item 1: every product of parallel degrees is asked of ParallelLayout."""
    package = Path(vramopt.__file__).resolve().parent
    offenders = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "parallel_layout.py":
            continue
        for number, line in _code_lines(path).items():
            if PRODUCT.search(line):
                offenders.append(f"{path.relative_to(package.parent)}:{number}: {line.strip()}")
    assert offenders == [], "\n".join(offenders)


def test_the_scan_catches_a_product():
    assert PRODUCT.search("shards = t * p")
    assert PRODUCT.search("x = plan.tensor_parallel * plan.pipeline_parallel")
    assert PRODUCT.search("gpus = tp * cp * pp * dp")
    assert not PRODUCT.search("count = layout.world_size")
    assert PRODUCT.search("gpus // ( plan . tensor_parallel * plan . pipeline_parallel )")
    assert not PRODUCT.search("bytes = 2 * p_bytes")
