#!/usr/bin/env python
"""Print every vramopt figure that docs/claims.md sets beside a figure of the seed.

    python benchmarks/claims_audit.py

The seed is /work/shared/seed-gpu-memory-optimization.txt (shared/ in the repository).
Figures are grouped by the seed's paragraph (P1 ... P19) and numbered as in docs/claims.md.
Every number comes from vramopt's cost model (``estimate_training``, ``evaluate_training``,
``estimate_serving``, ``solve``, ``costs.*``) and the catalogs; nothing is typed in except the
seed's own figures and the settings of each comparison. The serving rows (17.2, 17.5, 19.x)
reuse benchmarks/serving_claims.py, which prints the full serving tables. Decimal GB (1e9)
unless a line says GiB.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from vramopt.costs.activations import activation_shape, layer_bytes
from vramopt.costs.coefficients import coefficient
from vramopt.costs.kv_cache import kv_cache_bytes_per_token
from vramopt.costs.memory import PREFETCH_LAYERS
from vramopt.costs.precision import BYTES_PER_ELEMENT
from vramopt.costs.training import TrainingCase, evaluate_training
from vramopt.estimate import estimate_training
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.plan import encode
from vramopt.types import TrainingPlan, TrainingWorkload

import serving_claims  # noqa: E402  (benchmarks/serving_claims.py)

GB = 1e9
GIB = 2**30
MODEL_70B = "llama-3.1-70b"
# The representative training setting of the audit: 70B on one 8-GPU B200 node, Llama 2's
# 4,096-token sequences and 1,024-sequence (4.2M-token) global batch (vramopt's defaults).
SEQ, GLOBAL_BATCH = 4096, 1024


def estimate(model: str = MODEL_70B, seq_len: int = SEQ, global_batch: int = GLOBAL_BATCH, **plan) -> dict[str, float]:
    fields = dict(gpu="b200", gpus=8)
    fields.update(plan)
    workload = TrainingWorkload(model=model, seq_len=seq_len, global_batch=global_batch)
    return dict(estimate_training(workload, TrainingPlan(**fields)).values)


def evaluate_on(gpu, model: str, seq_len: int, global_batch: int, **plan) -> dict[str, float]:
    """evaluate_training on a modified GpuSpec (for 'what if the seed's hardware figure held')."""
    case = TrainingCase(model=load_model(model), gpu=gpu, seq_len=seq_len, global_batch=global_batch)
    fields = dict(gpu=gpu.name, gpus=8)
    fields.update(plan)
    columns = encode([TrainingPlan(**fields)])
    return {name: float(np.asarray(value).reshape(-1)[0]) for name, value in evaluate_training(case, columns).items()}


def slowdown(fast: dict, slow: dict) -> str:
    """'+x% step time, -y% tokens/s' of slow against fast."""
    more = slow["step_time_s"] / fast["step_time_s"] - 1
    less = 1 - fast["step_time_s"] / slow["step_time_s"]
    return f"+{more:.1%} step time = -{less:.1%} tokens/s"


def line(figure: str, seed: str, vramopt: str) -> None:
    print(f"{figure:6s} seed: {seed}\n       vramopt: {vramopt}")


def gb(value: float) -> str:
    return f"{value / GB:,.1f} GB"


def model_state_figures() -> None:
    model = load_model(MODEL_70B)
    params = model.parameters.total
    print("\n## P1: VRAM of GPUs, 2T weights")
    line("1.1", "RTX 6090 offers 48 GB", f"catalog rtx6090 {gb(load_gpu('rtx6090').datasheet_memory_bytes)} (the seed's assumption; no such product is published)")
    line("1.2", "B200 offers 192 GB", f"catalog b200 {gb(load_gpu('b200').datasheet_memory_bytes)} datasheet, {load_gpu('b200').memory_bytes / GIB:,.2f} GiB "
         f"as the runtime reports it (shipping HGX/DGX part); b200-192gb {gb(load_gpu('b200-192gb').datasheet_memory_bytes)}")
    for precision, seed in (("fp16", "3,700 GB"), ("fp8", "1,850 GB")):
        weights = 2e12 * {"fp16": 2, "fp8": 1}[precision]
        line(f"1.{3 if precision == 'fp16' else 4}", f"2T parameters in {precision.upper()}: {seed} of weights",
             f"{weights / GB:,.0f} GB = {weights / GIB:,.0f} GiB")
    behemoth = load_model("llama-4-behemoth")
    line("1.5", "'at least that much again' (3,700 GB) for optimizer states and activations",
         f"Adam K=12: {2e12 * 12 / GB:,.0f} GB + gradients {2e12 * 2 / GB:,.0f} GB; model states 16 B/param = {2e12 * 16 / 1e12:.0f} TB "
         f"(catalog Behemoth, {behemoth.parameters.total / 1e12:.3f}T params: {behemoth.parameters.total * 16 / 1e12:.1f} TB)")
    for name in ("b200", "b200-192gb"):
        gpu = load_gpu(name)
        usable = gpu.memory_bytes * 0.9 - gpu.node.framework_reserve_bytes
        line("1.6", "FP8 weights of 2T: impossible on fewer than 10 B200s",
             f"{name}: {math.ceil(2e12 / usable)} GPUs at 10% headroom + {gpu.node.framework_reserve_bytes / GIB:.0f} GiB reserve "
             f"({math.ceil(2e12 / gpu.memory_bytes)} with neither)")

    print("\n## P2: the 70B breakdown")
    weights = estimate(gpus=1, checkpointing="every:1")
    line("2.1", "weights 140 GB (1,024 * 70B * 2 bytes)",
         f"70e9 x 2 B = 140 GB; catalog Llama 3.1 70B ({params / 1e9:.2f}B params): {gb(weights['weights_bytes'])}; 1,024 x 70e9 x 2 B would be {1024 * 140e9 / 1e12:.0f} TB")
    line("2.2", "Adam states 280 GB (2 states x 140 GB)",
         f"two fp32 states {gb(8 * params)}; with the fp32 master copy (K=12) {gb(weights['optimizer_bytes'])}")
    line("2.3", "gradients 140 GB", gb(weights["gradients_bytes"]))
    for seq, micro_batch in ((2048, 1), (4096, 1), (8192, 1), (4096, 4)):
        values = estimate(gpus=1, seq_len=seq, global_batch=micro_batch, micro_batch=micro_batch, checkpointing="none")
        every = estimate(gpus=1, seq_len=seq, global_batch=micro_batch, micro_batch=micro_batch, checkpointing="every:1")
        line("2.4", "activations 30 to 60 GB depending on sequence length and batch size",
             f"s={seq} b={micro_batch}, flash, 1 GPU: none {gb(values['activations_bytes'])}, every:1 {gb(every['activations_bytes'])}")
    states = weights["weights_bytes"] + weights["gradients_bytes"] + weights["optimizer_bytes"]
    line("2.5", "total 590 to 620 GB for a single replica", f"model states {gb(states)} (+ activations above; seed's own parts: 140+280+140+30..60)")
    for gpus, checkpointing in ((4, "every:4"), (4, "every:1"), (8, "every:1"), (8, "every:4")):
        values = estimate(gpus=gpus, zero_stage=3, checkpointing=checkpointing)
        line("2.6", "4 B200 with ZeRO-3: 148 to 155 GB per GPU, 37-44 GB to spare (of 192)",
             f"{gpus} x b200, ZeRO-3, {checkpointing}, s={SEQ} b=1: {gb(values['total_bytes'])} per GPU "
             f"(states {gb(values['weights_bytes'] + values['gradients_bytes'] + values['optimizer_bytes'])}, activations {gb(values['activations_bytes'])}); "
             f"fits={bool(values['fits'])}")


def checkpointing_figures() -> None:
    print("\n## P3: checkpoint interval")
    line("3.1", "checkpoints typically every 4 to 12 transformer layers",
         "the cost model takes every:k for any k from 1 to the layers per stage (and none, selective); see 4.6")

    print("\n## P4: checkpointing 70B, seq 8,192, batch 32")
    for checkpointing in ("none", "every:4", "every:2", "every:1"):
        values = estimate(gpus=1, seq_len=8192, global_batch=32, checkpointing=checkpointing)
        line("4.1", "58 GB -> 11 GB with checkpointing every 4 layers (81%)",
             f"per GPU, micro-batch 1, flash, tp=1: {checkpointing}: {gb(values['activations_bytes'])} = {values['activations_bytes'] / GIB:.1f} GiB")
    none = estimate(gpus=1, seq_len=8192, global_batch=32, checkpointing="none")["activations_bytes"]
    every4 = estimate(gpus=1, seq_len=8192, global_batch=32, checkpointing="every:4")["activations_bytes"]
    line("4.2", "a reduction of 81%", f"{1 - every4 / none:.1%}")
    for gpus, tp, sp in ((4, 4, True), (8, 8, False), (8, 8, True)):
        values = estimate(gpus=gpus, tensor_parallel=tp, sequence_parallel=sp, seq_len=8192, global_batch=32, checkpointing="none")
        line("4.3", "58 GB (looking for a reading that gives it)", f"tp={tp} sp={sp}, micro-batch 1, flash, no checkpointing: {gb(values['activations_bytes'])}")
    # Penalty of full recomputation: same plan without and with every:1 (memory ignored).
    for label, plan in (("tp=1 ZeRO-3", dict(zero_stage=3)), ("tp=8 ZeRO-1", dict(tensor_parallel=8, zero_stage=1))):
        base = estimate(checkpointing="none", **plan)
        full = estimate(checkpointing="every:1", **plan)
        line("4.4", "20% to 30% throughput penalty", f"70B 8xb200 s={SEQ} gb={GLOBAL_BATCH} {label}: every:1 vs none: {slowdown(base, full)}")
    model = load_model(MODEL_70B)
    shape = activation_shape(model)
    costs = {k: math.ceil(80 / k) * 2 + k * shape.total_sbh for k in (1, 2, 4, 6, 8, 12)}
    best = min(costs, key=costs.get)
    kept = 80 * shape.total_sbh  # every layer kept whole, no checkpointing (units of s*b*h)
    savings = {k: 1 - value / kept for k, value in costs.items()}
    line("4.5", "heuristic (budget) checkpointing: 55-75% savings, 15-22% penalty",
         "differs: the solver picks k under the memory budget, but vramopt's every:k recomputes every layer's forward, so its penalty "
         f"is full checkpointing's for every k (4.4); savings vs no checkpointing ({shape.total_sbh * 80:,.0f} s*b*h): "
         + ", ".join(f"k={k}: {value:.1%}" for k, value in savings.items())
         + "; partial recomputation (some layers kept whole) is not in the search space")
    line("4.6", "every 4 to 6 layers is best for Llama",
         "activation memory per micro-batch (units of s*b*h bytes) by k: "
         + ", ".join(f"k={k}: {value:.0f}" for k, value in costs.items()) + f"; minimum at k={best}; compute is the same for every k")

    print("\n## P5: selective recomputation")
    for flash in (False, True):
        none = estimate(tensor_parallel=8, zero_stage=1, checkpointing="none", flash_attention=flash)
        selective = estimate(tensor_parallel=8, zero_stage=1, checkpointing="selective", flash_attention=flash)
        full = estimate(tensor_parallel=8, zero_stage=1, checkpointing="every:1", flash_attention=flash)
        saved = (none["activations_bytes"] - selective["activations_bytes"]) / (none["activations_bytes"] - full["activations_bytes"])
        line("5.1", "penalty 25% -> 11%, 70% of the memory savings of full checkpointing",
             f"70B tp=8 flash={flash}: selective {slowdown(none, selective)}; full {slowdown(none, full)}; "
             f"selective keeps {saved:.0%} of full's savings (activations none {gb(none['activations_bytes'])}, "
             f"selective {gb(selective['activations_bytes'])}, every:1 {gb(full['activations_bytes'])})")


def precision_figures() -> None:
    print("\n## P6-P8: precision")
    line("6.1", "FP16/BF16 2 bytes, FP8 1 byte, FP4 0.5 bytes per parameter",
         ", ".join(f"{name} {BYTES_PER_ELEMENT[name]:g}" for name in ("fp32", "bf16", "fp16", "fp8", "fp4")))
    parts = {}
    for precision in ("bf16", "fp32", "fp8"):
        values = estimate(gpus=1, precision=precision, grad_comm_precision=precision, checkpointing="every:1")
        parts[precision] = values
        total = values["weights_bytes"] + values["gradients_bytes"] + values["optimizer_bytes"]
        line({"bf16": "7.2", "fp32": "7.2", "fp8": "8.1"}[precision], "560 GB (BF16) vs 840 GB (FP32); 8.1 FP8 70+280+70 = 420 GB",
             f"{precision}: weights {gb(values['weights_bytes'])} + Adam {gb(values['optimizer_bytes'])} + gradients {gb(values['gradients_bytes'])} = {gb(total)}")
    b200 = load_gpu("b200")
    ratio = b200.peak_flops_per_s["fp8"] / b200.peak_flops_per_s["bf16"] * coefficient("fp8_utilization_ratio")
    line("8.2", "FP8 1.6x to 2x BF16 throughput", f"compute alone: {ratio:.2f}x (peak 2x x fp8_utilization_ratio {coefficient('fp8_utilization_ratio')})")
    for label, plan in (("tp=1 ZeRO-3 every:1", dict(zero_stage=3, checkpointing="every:1")),
                        ("tp=8 ZeRO-1 every:1", dict(tensor_parallel=8, zero_stage=1, checkpointing="every:1")),
                        ("tp=1 ZeRO-3 every:1 fp8 grads", dict(zero_stage=3, checkpointing="every:1", grad_comm_precision="fp8"))):
        bf16 = estimate(**{**plan, "grad_comm_precision": "bf16"})
        fp8 = estimate(precision="fp8", **plan)
        line("8.2", "FP8 1.6x to 2x BF16 throughput", f"70B 8xb200 {label}: {fp8['tokens_per_s'] / bf16['tokens_per_s']:.2f}x tokens/s")


def zero_figures() -> None:
    print("\n## P10: ZeRO on 8 GPUs, 70B")
    stages = {stage: estimate(zero_stage=stage, checkpointing="every:1") for stage in (0, 1, 2, 3)}
    line("10.1", "ZeRO-1: optimizer 280 GB -> 35 GB per GPU, 'saving 35 GB'",
         f"optimizer {gb(stages[0]['optimizer_bytes'])} -> {gb(stages[1]['optimizer_bytes'])} per GPU, saving "
         f"{gb(stages[0]['optimizer_bytes'] - stages[1]['optimizer_bytes'])} (seed's own 280 GB: 35 GB left, 245 GB saved)")
    line("10.2", "ZeRO-2 saves another 17.5 GB per GPU (140/8)",
         f"gradients {gb(stages[1]['gradients_bytes'])} -> {gb(stages[2]['gradients_bytes'])}: saves {gb(stages[1]['gradients_bytes'] - stages[2]['gradients_bytes'])}")
    model = load_model(MODEL_70B)
    prefetch = PREFETCH_LAYERS * model.parameters.largest_layer * 2
    line("10.3", "ZeRO-3 weights 140 GB -> 17.5 GB per GPU",
         f"{gb(stages[2]['weights_bytes'])} -> {gb(stages[3]['weights_bytes'])} (shard {gb(stages[3]['weights_bytes'] - prefetch)} + prefetch of 2 layers {gb(prefetch)})")
    states = {stage: sum(stages[stage][name] for name in ("weights_bytes", "gradients_bytes", "optimizer_bytes")) for stage in stages}
    line("10.4", "cumulative ZeRO-3 saving about 110 GB per GPU vs DDP",
         f"{gb(states[0] - states[3])} ({gb(states[0])} -> {gb(states[3])}); seed's own parts (560 GB x 7/8): 490 GB")

    print("\n## P11: ZeRO communication")
    for stage in (1, 2, 3):
        line(f"11.{stage}", "ZeRO-1 negligible, ZeRO-2 +30-50%, ZeRO-3 +200-300% communication volume vs DDP",
             f"stage {stage}: data-parallel time {stages[stage]['data_parallel_s']:.2f} s vs DDP {stages[0]['data_parallel_s']:.2f} s "
             f"(m = {stages[stage]['micro_batches']:.0f} micro-batches; ZeRO-3 moves 1.5x DDP per micro-batch)")
    line("11.4", "ZeRO-3 on one 8-GPU NVLink node: 10% to 15%",
         f"70B 8xb200 s={SEQ} gb={GLOBAL_BATCH} b=1 every:1: ZeRO-3 vs ZeRO-2 {slowdown(stages[2], stages[3])} "
         "(gradient traffic beside the backward GEMMs, costs/overlap.py)")
    for micro_batch in (1, 2):
        z2 = estimate(model="llama-3.1-8b", zero_stage=2, micro_batch=micro_batch, checkpointing="none")
        z3 = estimate(model="llama-3.1-8b", zero_stage=3, micro_batch=micro_batch, checkpointing="none")
        line("11.4", "ZeRO-3 on one 8-GPU NVLink node: 10% to 15%", f"8B 8xb200 b={micro_batch} no checkpointing: {slowdown(z2, z3)}")
    for micro_batch in (1, 2, 4, 8):
        z2 = estimate(gpus=16, zero_stage=2, micro_batch=micro_batch, checkpointing="every:1")
        z3 = estimate(gpus=16, zero_stage=3, micro_batch=micro_batch, checkpointing="every:1")
        line("11.5", "ZeRO-3 across nodes with InfiniBand: 25% to 40%",
             f"70B 16xb200 (2 nodes, 400 Gb/s per GPU) b={micro_batch} ({micro_batch * SEQ:,} tokens per micro-batch) every:1: {slowdown(z2, z3)}")


def offload_figures() -> None:
    print("\n## P13: CPU offload")
    gpu = load_gpu("b200")
    line("13.1", "CPU DRAM 256 GB to 1,024 GB per server", f"catalog DGX B200 host RAM {gb(gpu.node.host_ram_bytes)}, of which {coefficient('host_ram_usable_fraction'):.0%} usable")
    one = estimate(gpus=1, zero_stage=1, checkpointing="every:1")
    one_cpu = estimate(gpus=1, zero_stage=1, checkpointing="every:1", offload="cpu")
    line("13.2", "offloading 280 GB of optimizer states frees 140 GB of VRAM",
         f"1 GPU: frees {gb(one['total_bytes'] - one_cpu['total_bytes'])} (the Adam states, K=12); 8 GPUs ZeRO-3: frees "
         f"{gb(estimate(zero_stage=3, checkpointing='every:1')['total_bytes'] - estimate(zero_stage=3, checkpointing='every:1', offload='cpu')['total_bytes'])} per GPU")
    for global_batch in (64, 128, 256, 1024):
        base = estimate(global_batch=global_batch, zero_stage=3, checkpointing="every:1")
        cpu = estimate(global_batch=global_batch, zero_stage=3, checkpointing="every:1", offload="cpu")
        line("13.3", "CPU offload penalty 15% to 25%",
             f"70B 8xb200 ZeRO-3 every:1 gb={global_batch} (step {base['step_time_s']:.1f} s): offload {cpu['offload_s']:.2f} s per step, {slowdown(base, cpu)}")
    line("13.4", "PCIe Gen 5 ~32 GB/s per direction for H200; B200 Gen5 x16 64 GB/s",
         f"catalog h200 {load_gpu('h200').pcie_bandwidth_bytes_per_s / GB:.0f} GB/s, b200 {gpu.pcie_bandwidth_bytes_per_s / GB:.0f} GB/s per direction; "
         f"x {coefficient('pcie_efficiency')} efficiency")
    pcie = gpu.pcie_bandwidth_bytes_per_s * coefficient("pcie_efficiency")
    params = load_model(MODEL_70B).parameters.total
    line("13.5", "transfer of 280 GB adds roughly 4.4 s per step",
         f"280 GB / 64 GB/s = {280e9 / 64e9:.2f} s. vramopt moves gradients down and parameters up (4 B/param): 1 GPU "
         f"{params * 4 / pcie:.2f} s, 8 GPUs {params / 8 * 4 / pcie:.2f} s each in parallel; CPU Adam "
         f"{params / coefficient('cpu_adam_params_per_s_per_node'):.2f} s per node; one_cpu offload_s = {one_cpu['offload_s']:.2f} s")

    print("\n## P14: NVMe offload")
    line("14.1", "NVMe 3.2 TB to 30 TB per node", f"catalog DGX B200 {gpu.node.nvme_capacity_bytes / 1e12:.2f} TB")
    line("14.2", "PCIe Gen 5 x4 NVMe ~7 GB/s", f"catalog node aggregate {gpu.node.nvme_bandwidth_bytes_per_s / GB:.0f} GB/s (8 Gen4 drives x 7 GB/s); one Gen5 x4 drive ~14 GB/s")
    line("14.3", "3,300 GB/s GPU VRAM bandwidth",
         "catalog " + ", ".join(f"{name} {load_gpu(name).hbm_bandwidth_bytes_per_s / GB:,.0f} GB/s" for name in ("h100", "h200", "b200")))
    slow_drive = replace(gpu, node=replace(gpu.node, nvme_bandwidth_bytes_per_s=7e9))
    for global_batch in (64, 1024):
        base = estimate(global_batch=global_batch, zero_stage=3, checkpointing="every:1")
        nvme = estimate(global_batch=global_batch, zero_stage=3, checkpointing="every:1", offload="nvme")
        base_slow = evaluate_on(slow_drive, MODEL_70B, SEQ, global_batch, zero_stage=3, checkpointing="every:1")
        nvme_slow = evaluate_on(slow_drive, MODEL_70B, SEQ, global_batch, zero_stage=3, checkpointing="every:1", offload="nvme")
        line("14.4", "NVMe offload: 2% to 5% of baseline throughput",
             f"70B 8xb200 ZeRO-3 every:1 gb={global_batch}: {base['step_time_s'] / nvme['step_time_s']:.1%} of baseline with the catalog's 56 GB/s per node; "
             f"{base_slow['step_time_s'] / nvme_slow['step_time_s']:.1%} with the seed's single 7 GB/s drive")


def attention_and_composition_figures() -> None:
    print("\n## P15: TMA")
    line("15.1", "TMA reduces the effective activation footprint by 15% to 30%",
         "not modelled: TMA is an asynchronous copy engine; it overlaps transfers, it does not shrink saved activations")

    print("\n## P16: flash attention, 70B at 32,768 tokens")
    model = load_model(MODEL_70B)
    shape = activation_shape(model)
    for tp, sp in ((1, False), (8, True)):
        with_scores = float(layer_bytes(shape, 32768, 1, tp, sp, True))
        without = float(layer_bytes(shape, 32768, 1, tp, sp, False))
        line("16.1", "42 GB -> 8 GB (81%)",
             f"per layer, b=1, tp={tp} sp={sp}: {gb(with_scores)} -> {gb(without)} ({1 - without / with_scores:.1%}); "
             f"80 layers: {gb(80 * with_scores)} -> {gb(80 * without)}")
    for micro_batch, global_batch in ((1, 64), (2, 64)):
        for plan in (dict(zero_stage=3, checkpointing="every:1"), dict(tensor_parallel=8, zero_stage=1, checkpointing="every:1"),
                     dict(zero_stage=3, checkpointing="none")):
            values = estimate(global_batch=global_batch, micro_batch=micro_batch, **plan)
            line("16.2", "8 B200, 70B, global batch 64: 82% MFU",
                 f"{plan} b={micro_batch} s={SEQ}: MFU {values['mfu']:.1%}, fits={bool(values['fits'])} "
                 f"(ceiling: base_utilization {coefficient('base_utilization')})")

    print("\n## P17: the composed plan; serving 70B on one B200")
    line("17.1", "techniques compose multiplicatively", "step time is a sum of terms (docs/cost-model.md section 6)")
    bf16_plan = serving_claims.ServingPlan(gpu="b200", gpus=1, quantization="bf16", kv_cache_dtype="bf16")
    bf16_slots = serving_claims.max_slots(bf16_plan)
    bf16_serving = serving_claims.serve(quantization="bf16", kv_cache_dtype="bf16", slots=max(bf16_slots, 1))
    bf16_fp8kv_slots = serving_claims.max_slots(replace(bf16_plan, kv_cache_dtype="fp8"))
    line("17.2", "a single B200 cannot run a 70B model with full BF16 weights",
         f"bf16 weights {gb(bf16_serving.values['weights_bytes'])} on b200 (limit {gb(0.9 * b200_memory())}): "
         f"{bf16_slots} paged bf16-KV slots of 8,192 tokens fit ({bf16_fp8kv_slots} with fp8 KV), "
         f"{bf16_serving.tokens_per_s:,.0f} tokens/s at {bf16_slots} slots")
    combined = estimate(gpus=4, zero_stage=3, checkpointing="every:4", flash_attention=True, grad_comm_precision="fp8")
    plain = estimate(gpus=4, zero_stage=0, checkpointing="none", flash_attention=False)
    line("17.3", "155 GB -> 43 GB per GPU (BF16, ZeRO-3 on 4, every 4 layers, flash, FP8 grad comm)",
         f"4xb200 s={SEQ} b=1: {gb(plain['total_bytes'])} without -> {gb(combined['total_bytes'])} with "
         f"(states {gb(combined['weights_bytes'] + combined['gradients_bytes'] + combined['optimizer_bytes'])}); fits={bool(combined['fits'])}")
    replicated = estimate(gpus=8, zero_stage=0, checkpointing="every:4")
    line("17.4", "throughput 75% of a fully replicated 8-GPU setup",
         f"{combined['tokens_per_s']:,.0f} vs {replicated['tokens_per_s']:,.0f} tokens/s = {combined['tokens_per_s'] / replicated['tokens_per_s']:.0%} "
         f"(the replicated plan needs {gb(replicated['total_bytes'])} per GPU, fits={bool(replicated['fits'])})")
    model = load_model(MODEL_70B)
    per_token = kv_cache_bytes_per_token(model, "bf16")
    result = serving_claims.best(MODEL_70B, "b200", quantization="fp8")
    chosen = result.estimate
    plain_plan = replace(chosen.plan, speculative_decoding=False)
    rates = {slots: serving_claims.serve(**{**serving_claims.vars_of(plain_plan), "slots": slots}) for slots in (1, 16, plain_plan.slots)}
    crossing = next(slots for slots in range(1, plain_plan.slots + 1)
                    if serving_claims.serve(**{**serving_claims.vars_of(plain_plan), "slots": slots}).tokens_per_s >= 1200)
    line("17.5", "vLLM FP8 + PagedAttention on one B200, 8,192-token context: 1,200 tokens/s for 70B",
         f"solver: {serving_claims.describe(chosen.plan)}: {chosen.tokens_per_s:,.0f} tokens/s "
         f"({chosen.values['latency_per_token_s'] * 1e3:.1f} ms/token); without speculative decoding: "
         + ", ".join(f"{slots} slots {value.tokens_per_s:,.0f} tokens/s ({value.values['latency_per_token_s'] * 1e3:.1f} ms/token)" for slots, value in rates.items())
         + f"; 1,200 tokens/s is reached at {crossing} concurrent sequences. KV cache {per_token:,.0f} B/token bf16 ({per_token / 2:,.0f} fp8)")

    print("\n## P18: recommendations")
    line("18.1", "avoid offload and FP8 unless VRAM headroom is below 10%",
         "vramopt's default headroom rule is the same 10%; the solver ranks by throughput (benchmarks/seed_stack_comparison.py)")
    ideal = estimate(zero_stage=2, checkpointing="none")
    aggressive = estimate(zero_stage=3, checkpointing="every:1", precision="fp8", grad_comm_precision="fp8")
    aggressive_bf16 = estimate(zero_stage=3, checkpointing="every:1")
    line("18.2", "FP8 + aggressive checkpointing + ZeRO-3: accept 15% to 25% less than the ideal configuration",
         f"70B 8xb200 vs bf16/ZeRO-2/no checkpointing (which does not fit, {gb(ideal['total_bytes'])}): "
         f"bf16 ZeRO-3 every:1 {aggressive_bf16['tokens_per_s'] / ideal['tokens_per_s']:.0%}, "
         f"fp8 ZeRO-3 every:1 {aggressive['tokens_per_s'] / ideal['tokens_per_s']:.0%} of its tokens/s")

    print("\n## P19: inference (full tables: python benchmarks/serving_claims.py)")
    for gpu_name in ("h100", "h200"):
        rows = {}
        for profile in ("none",) + tuple(profile.name for profile in load_gpu(gpu_name).mig_profiles):
            found = serving_claims.best("llama-3.1-8b", gpu_name, mig_profile=profile).estimate
            if found is not None:
                most = serving_claims.max_slots(replace(found.plan, speculative_decoding=False), model="llama-3.1-8b")
                rows[profile] = (most * int(round(found.values["instances_per_gpu"])), found)
        whole_slots, whole = rows.pop("none")
        partitioned = {name: value for name, value in rows.items() if not name.startswith("7g")}
        line("19.1", "MIG: 2x to 4x concurrent serving capacity for models under 30B",
             f"llama-3.1-8b on {gpu_name}, 8,192-token context: whole GPU {whole_slots} sequences, {whole.tokens_per_s:,.0f} tokens/s; "
             + ", ".join(f"{name} x{int(round(value[1].values['instances_per_gpu']))}: {value[0]} ({value[0] / whole_slots:.2f}x), "
                         f"{value[1].tokens_per_s:,.0f} tokens/s" for name, value in partitioned.items()))
    case = serving_claims.serving_case(serving_claims.ServingWorkload(model=MODEL_70B), "b200")
    alpha, gamma = case.acceptance_rate, case.speculative_tokens
    expected = (1 - alpha ** (gamma + 1)) / (1 - alpha)
    gains = []
    for slots in (1, 16, plain_plan.slots):
        off = serving_claims.serve(**{**serving_claims.vars_of(plain_plan), "slots": slots})
        on = serving_claims.serve(**{**serving_claims.vars_of(plain_plan), "slots": slots, "speculative_decoding": True})
        gains.append(f"{slots} slots {off.tokens_per_s:,.0f} -> {on.tokens_per_s:,.0f} tokens/s "
                     f"(-{1 - on.values['latency_per_token_s'] / off.values['latency_per_token_s']:.0%} time per token)")
    line("19.2", "speculative decoding: 20% to 35% less compute per request",
         f"70B fp8 on one b200, alpha {alpha}, gamma {gamma}: {expected:.2f} tokens per target step; FLOPs per token "
         f"{((gamma + 1) + gamma * case.draft_params_fraction) / expected:.2f}x, weight reads per token "
         f"{(1 + gamma * case.draft_params_fraction) / expected:.2f}x; " + "; ".join(gains))
    for tp in (2, 4, 8):
        parts = []
        for slots in (1, 32):
            value = serving_claims.serve(gpu="h100", gpus=tp, tensor_parallel=tp, quantization="fp8", slots=slots).values
            parts.append(f"{slots} slots +{value['tensor_parallel_s'] / (value['step_time_s'] - value['tensor_parallel_s']):.1%}")
        line("19.3", "tensor-parallel inference: 5% to 15% latency overhead",
             f"70B fp8 on h100 tp={tp}: all-reduce time over the step without it: " + ", ".join(parts))


def b200_memory() -> float:
    return float(load_gpu("b200").memory_bytes)


def main() -> None:
    print("vramopt figures for docs/claims.md (python benchmarks/claims_audit.py)")
    print(f"coefficients: base_utilization {coefficient('base_utilization')}, "
          f"fp8_utilization_ratio {coefficient('fp8_utilization_ratio')}")
    model_state_figures()
    checkpointing_figures()
    precision_figures()
    zero_figures()
    offload_figures()
    attention_and_composition_figures()


if __name__ == "__main__":
    main()
