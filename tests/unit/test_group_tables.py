"""The group tables evaluated rule by rule on the distinct combinations of the columns each
rule reads (``optimizer/grid_rules.py``, issue 18: table building) equal, bit for bit, the
tables of the row-by-row evaluation they replaced.

The oracle is ``optimizer/problem._evaluate_group`` frozen verbatim from commit ddf2610
below; every call the problem builder makes is checked against it, over dense and MoE
models, long sequences (cp), uneven stages, several GPU types, frameworks, and forbids.
"""

from __future__ import annotations

import numpy as np
import pytest

from vramopt.constraints.validity import training_invalid_reasons as invalid_reasons
from vramopt.costs.columns import PlanColumns
from vramopt.costs.pipeline_stages import divides_every_stage
from vramopt.costs.training import evaluate_training
from vramopt.frameworks import refused_masks
from vramopt.optimizer import problem
from vramopt.optimizer.tables import KEY_COLUMNS, ItemTable
from vramopt.constraints import registry
from vramopt.types import PRECISIONS, SearchSpace, TrainingWorkload
from vramopt.units import mib_ceil_array


def frozen_evaluate_group(cases, keys, items, group, choices, framework="generic"):
    """``optimizer/problem._evaluate_group`` at ddf2610, verbatim."""
    key_count, item_count = len(keys["gpus"]), len(items)
    codes = {name: np.repeat(keys[name], item_count) for name in KEY_COLUMNS}
    item_codes: dict[str, list[int]] = {}
    for item in items:
        merged: dict[str, int] = {}
        for field_name, value in item.items():
            merged.update(registry.technique(field_name).columns(value))
        for name, code in merged.items():
            item_codes.setdefault(name, []).append(code)
    for name, values in item_codes.items():
        codes[name] = np.tile(np.array(values, dtype=np.int64), key_count)
    neutral = problem.neutral_codes(registry.ACTIVATION_FIELDS if group == "state" else registry.STATE_FIELDS)
    for name, code in neutral.items():
        codes.setdefault(name, np.full(key_count * item_count, code, dtype=np.int64))
    if "grad_comm_precision" not in codes:
        codes["grad_comm_precision"] = codes["precision"]

    gpu_index = np.repeat(keys["gpu_index"], item_count)
    memory = np.zeros(key_count * item_count)
    seconds = np.zeros(key_count * item_count)
    constant = np.zeros(key_count * item_count)
    valid = np.ones(key_count * item_count, dtype=bool)
    valid[:] = False
    for index, case in enumerate(cases):
        rows = np.flatnonzero(gpu_index == index)
        if rows.size == 0:
            continue
        every_row = rows.size == gpu_index.size
        columns = PlanColumns(**{name: codes[name] if every_row else codes[name][rows] for name in PlanColumns.__dataclass_fields__})
        well_formed = np.ones(rows.size, dtype=bool)
        for mask in invalid_reasons(case, columns).values():
            well_formed &= ~np.asarray(mask, dtype=bool)
        for mask in refused_masks(framework, columns, group).values():
            well_formed &= ~mask
        rows = rows[well_formed]
        if rows.size == 0:
            continue
        columns = PlanColumns(**{name: codes[name][rows] for name in PlanColumns.__dataclass_fields__})
        values = evaluate_training(case, columns)
        if group == "state":
            memory[rows] = values["weights_bytes"] + values["gradients_bytes"] + values["optimizer_bytes"]
            seconds[rows] = values["data_parallel_s"] + values["offload_s"] + values["optimizer_step_s"]
            ok = values["fits_host"] & values["fits_nvme"]
        else:
            memory[rows] = values["activations_bytes"]
            # The activation time sum as problem.py defines it (the pipeline point-to-point term
            # joined it after the frozen copy was taken): the tables are compared, not the sum.
            seconds[rows] = (values["compute_s"] + values["tensor_parallel_s"] + values["context_parallel_s"] + values["expert_parallel_s"]
                             + values["pipeline_parallel_s"])
            ok = np.ones(rows.size, dtype=bool)
        constant[rows] = values["logits_bytes"] + values["reserve_bytes"]
        valid[rows] = ok & np.isfinite(seconds[rows])
    if group == "state":
        forbidden = choices["forbid"].get("grad_comm_precision", ())
        for name in forbidden:
            valid &= codes["grad_comm_precision"] != PRECISIONS.index(name)
    else:
        every = codes["checkpoint_every"]
        valid &= (every == 0) | divides_every_stage(
            cases[0].model.layers, codes["pipeline_parallel"], codes["first_stage_layers"], codes["last_stage_layers"], every)
    shape = (key_count, item_count)
    table = ItemTable(
        values=tuple(items),
        valid=valid.reshape(shape),
        memory_mib=mib_ceil_array(memory).reshape(shape),
        time_ticks=np.zeros(shape, dtype=np.int64),
        memory_bytes=memory.reshape(shape),
        time_s=seconds.reshape(shape),
    )
    return constant.reshape(shape).max(axis=1), table


REQUESTS = [
    (TrainingWorkload(model="2t"), SearchSpace(max_gpus=16)),
    (TrainingWorkload(model="70b"), SearchSpace(max_gpus=64, gpus=("h100", "a100-80gb"))),
    (TrainingWorkload(model="405b"), SearchSpace(max_gpus=512, allow={"pipeline_parallel": ("16", "18")},
                                                   forbid={"grad_comm_precision": ("fp8",)})),
    (TrainingWorkload(model="405b"), SearchSpace(max_gpus=64, allow={"grad_comm_precision": ("bf16", "fp8")},
                                                   forbid={"grad_comm_precision": ("fp8",)})),
    (TrainingWorkload(model="mixtral", global_batch=256), SearchSpace(max_gpus=64, gpus=("b200", "h100"),
                                                                      allow={"expert_tensor_parallel": ("tp", "1", "2")})),
    (TrainingWorkload(model="70b", seq_len=131072, global_batch=64), SearchSpace(max_gpus=64)),
    (TrainingWorkload(model="8b", kind="lora", global_batch=64), SearchSpace(max_gpus=8, gpus=("rtx4090", "l40s"))),
    (TrainingWorkload(model="8b"), SearchSpace(max_gpus=16, framework="megatron")),
    (TrainingWorkload(model="70b"), SearchSpace(max_gpus=32, framework="torchtitan")),
    (TrainingWorkload(model="70b", kind="finetune", global_batch=96), SearchSpace(max_gpus=32, framework="deepspeed")),
    (TrainingWorkload(model="deepseek-v3", global_batch=1536), SearchSpace(max_gpus=256, gpus=("h100",))),
]


@pytest.mark.parametrize("workload,space", REQUESTS, ids=[f"{w.model}-{s.max_gpus}-{s.framework}" for w, s in REQUESTS])
def test_group_tables_equal_the_row_by_row_evaluation(monkeypatch, workload, space):
    """issue 18: faster table building changes no table entry."""
    calls = []
    evaluate = problem._evaluate_group

    def checked(cases, keys, items, group, choices, framework="generic", conditional=None):
        constant, table = evaluate(cases, keys, items, group, choices, framework, conditional)
        expected_constant, expected = frozen_evaluate_group(cases, keys, items, group, choices, framework)
        np.testing.assert_array_equal(constant, expected_constant)
        assert table.values == expected.values
        for name in ("valid", "memory_mib", "time_ticks", "memory_bytes", "time_s"):
            np.testing.assert_array_equal(getattr(table, name), getattr(expected, name), err_msg=f"{group} {name}")
        calls.append((group, int(table.valid.sum())))
        return constant, table

    monkeypatch.setattr(problem, "_evaluate_group", checked)
    problem.build_problem(workload, space)
    assert [group for group, _ in calls] == ["state", "activation"]
    assert all(count > 0 for _, count in calls)
