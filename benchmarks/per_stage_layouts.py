"""Per-stage checkpointing vs the best uniform plan on pipeline layouts (issue 18 item 1).

Run: python benchmarks/per_stage_layouts.py [--skip-speed]
For each layout: the best uniform plan of the space (``solve``, the layout pinned), the best
with one checkpointing (block:N included) on every stage, and the per-stage optimum of the same space (``optimizer/per_stage.per_stage_search``): tokens/s, the
gain, and per stage its checkpointing, micro-batches in flight and memory; the search's wall time.
Layouts: GPT-3 175B on 64 A100 80GB at batch 64 (Narayanan et al. 2021's model, the issue's
case, layout free); Llama 3.1 405B on 512 H100, tp 8 pp 8 (torchtitan's Table 5 layout,
benchmarks/llama3_h100_202412_torchtitan.md; sequence 8,192; the global batch, 128, is an
assumption: the table does not give it); Llama 3.1 70B on 32 A100 40GB, tp 8 pp 4 (an assumed
layout with pp >= 4, sequence 4,096, batch 64).

Then the GPT-3 175B / 64 A100 / batch 64 case with every virtual-stage count allowed
(``--allow virtual_stages=1,2,3,4,6,8,12,...``; the default domain is {1, 2, 4}): vramopt's
uniform and per-stage optima against Calculon's kind of plan (tp 4, pp 8, dp 2, 6 virtual
stages, micro-batch 1, no recomputation: rebuilt from the issue's description, its exact plan
is not published) evaluated by vramopt's own model. Last, the per-stage search's time on
2t at 16,384 GPUs (default space), split into the uniform tables (``build_problem``, shared
with solve) and the per-stage search after them; CPU seconds on this machine, load printed.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace

from vramopt.estimate import estimate_training
from vramopt.optimizer import per_stage
from vramopt.optimizer.per_stage import per_stage_search
from vramopt.optimizer.problem import build_problem
from vramopt.optimizer.search import solve_training
from vramopt.types import SearchSpace, TrainingPlan, TrainingWorkload

def _framework(space: SearchSpace, name: str) -> SearchSpace:
    return replace(space, framework=name)


LAYOUTS = [
    ("GPT-3 175B, 64 A100 80GB, batch 64", TrainingWorkload(model="gpt3-175b", seq_len=2048, global_batch=64),
     SearchSpace(gpus=("a100-80gb",), max_gpus=64, pin={"gpus": ("64",), "tensor_parallel": ("4",), "pipeline_parallel": ("8",)}, workers=1)),
    ("Llama 3.1 405B, 512 H100, tp 8 pp 8", TrainingWorkload(model="llama-3.1-405b", seq_len=8192, global_batch=128),
     SearchSpace(gpus=("h100",), max_gpus=512, pin={"gpus": ("512",), "tensor_parallel": ("8",), "pipeline_parallel": ("8",)}, workers=1)),
    ("Llama 3.1 70B, 32 A100 40GB, tp 8 pp 4", TrainingWorkload(model="llama-3.1-70b", seq_len=4096, global_batch=64),
     SearchSpace(gpus=("a100-40gb",), max_gpus=32, pin={"gpus": ("32",), "tensor_parallel": ("8",), "pipeline_parallel": ("4",)}, workers=1)),
]


FRAMEWORK_LAYOUTS = [(f"{label}, --framework {name}", workload, _framework(space, name))
                     for (label, workload, space), name in zip(LAYOUTS, ("megatron", "megatron", "megatron"))]
"""The same layouts under Megatron-LM's rules (ZeRO <= 1 as its distributed optimizer), where
memory binds harder (torchtitan's pin check refuses these pins: see the report)."""


def main() -> None:
    for label, workload, space in LAYOUTS + FRAMEWORK_LAYOUTS:
        uniform = solve_training(workload, space, runner_up_count=0)
        started = time.perf_counter()
        answer = per_stage_search(workload, space)
        elapsed = time.perf_counter() - started
        plan = uniform.estimate.plan
        print(f"== {label}")
        print(f"uniform   {uniform.estimate.tokens_per_s:>10,.1f} tokens/s  "
              f"v={plan.virtual_stages} mb={plan.micro_batch} zero={plan.zero_stage} offload={plan.offload} ckpt={plan.checkpointing} "
              f"memory {uniform.estimate.total_bytes / 2**30:.2f} GiB (heaviest stage)")
        alike = per_stage_search(workload, space, same_on_every_stage=True)
        print(f"same N    {alike.tokens_per_s:>10,.1f} tokens/s  ({alike.tokens_per_s / uniform.estimate.tokens_per_s - 1.0:+.2%}), "
              f"every stage {alike.stages[0].checkpointing} (block:N is Megatron-LM's --recompute-method block "
              f"--recompute-num-layers N), v={alike.layout['virtual_stages']} mb={alike.layout['micro_batch']} "
              f"zero={alike.layout['zero_stage']} offload={alike.layout['offload']}")
        layout = answer.layout
        gain = answer.tokens_per_s / uniform.estimate.tokens_per_s - 1.0
        print(f"per-stage {answer.tokens_per_s:>10,.1f} tokens/s  ({gain:+.2%}), v={layout['virtual_stages']} mb={layout['micro_batch']} "
              f"zero={layout['zero_stage']} offload={layout['offload']}, searched in {elapsed:.2f} s")
        for stage in answer.stages:
            print(f"  stage {stage.stage}: {stage.layers} layers, {stage.checkpointing:<10} {stage.in_flight_micro_batches:5.2f} in flight, "
                  f"{stage.memory_bytes / 2**30:6.2f} of {stage.budget_bytes / 2**30:.2f} GiB; {stage.why}")


GPT3_WORKLOAD = TrainingWorkload(model="gpt3-175b", seq_len=2048, global_batch=64)
EVERY_COUNT = tuple(str(count) for count in range(1, 97) if 96 % count == 0)
GPT3_SPACE = SearchSpace(gpus=("a100-80gb",), max_gpus=64, pin={"gpus": ("64",)}, allow={"virtual_stages": EVERY_COUNT},
                         workers=1, time_limit_s=60.0)


def calculon_case() -> None:
    print("== GPT-3 175B, 64 A100 80GB, batch 64, --allow virtual_stages=" + ",".join(EVERY_COUNT))
    uniform = solve_training(GPT3_WORKLOAD, GPT3_SPACE, runner_up_count=0).estimate
    answer = per_stage_search(GPT3_WORKLOAD, GPT3_SPACE, time_limit_s=60.0)
    for zero_stage in (1, 3):
        calculon = estimate_training(GPT3_WORKLOAD, TrainingPlan(
            gpu="a100-80gb", gpus=64, tensor_parallel=4, pipeline_parallel=8, virtual_stages=6, sequence_parallel=True,
            zero_stage=zero_stage, checkpointing="none", precision="bf16", flash_attention=True, micro_batch=1))
        print(f"Calculon-style tp4 pp8 dp2 v6 mb1, ZeRO-{zero_stage}: {calculon.tokens_per_s:,.1f} tokens/s, "
              f"{calculon.total_bytes / 2**30:.2f} GiB ({'fits' if calculon.fits else 'does not fit'} the 90% budget)")
    plan = uniform.plan
    print(f"vramopt uniform optimum: {uniform.tokens_per_s:,.1f} tokens/s, tp{plan.tensor_parallel} pp{plan.pipeline_parallel} "
          f"v{plan.virtual_stages} mb{plan.micro_batch} zero{plan.zero_stage} ckpt={plan.checkpointing} offload={plan.offload}")
    print(f"vramopt per-stage optimum: {answer.tokens_per_s:,.1f} tokens/s ({answer.tokens_per_s / uniform.tokens_per_s - 1:+.2%}), "
          f"tp{answer.plan.tensor_parallel} pp{answer.plan.pipeline_parallel} v{answer.plan.virtual_stages} mb{answer.plan.micro_batch} "
          f"zero{answer.plan.zero_stage} offload={answer.plan.offload}, stages {', '.join(stage.checkpointing for stage in answer.stages)}")


def speed_case() -> None:
    workload, space = TrainingWorkload(model="2t"), SearchSpace(max_gpus=16_384, workers=1, time_limit_s=60.0)
    started = time.process_time()
    problem = build_problem(workload, space)
    tables = time.process_time() - started
    built = per_stage.build_problem
    per_stage.build_problem = lambda *_: problem  # the search reuses the tables solve builds
    try:
        started, wall = time.process_time(), time.perf_counter()
        answer = per_stage_search(workload, space, time_limit_s=60.0)
        search, wall = time.process_time() - started, time.perf_counter() - wall
    finally:
        per_stage.build_problem = built
    print(f"== per-stage search, 2t at 16,384 GPUs (load {os.getloadavg()[0]:.1f}): uniform tables {tables:.2f} s CPU "
          f"({problem.key_count:,} keys), per-stage search after them {search:.2f} s CPU ({wall:.2f} s wall); {answer.tokens_per_s:,.1f} tokens/s, "
          f"pp {answer.plan.pipeline_parallel}, stages {', '.join(sorted(set(stage.checkpointing for stage in answer.stages)))}")


if __name__ == "__main__":
    main()
    calculon_case()
    if "--skip-speed" not in sys.argv[1:]:
        speed_case()
