#!/usr/bin/env python
"""vramopt's figures for the seed's serving and LoRA/QLoRA claims.

    python benchmarks/serving_claims.py

The seed (shared/seed-gpu-memory-optimization.txt, P17 and P19) makes these serving claims:

a) vLLM with FP8 and PagedAttention serves a 70B model on one B200 with an 8,192-token
   context at 1,200 tokens/s (P17);
b) MIG partitioning gives models under 30B 2-4x the concurrent serving capacity per GPU (P19);
c) speculative decoding cuts the compute per request by 20-35% (P19);
d) tensor-parallel inference over 2-8 GPUs adds 5-15% latency (P19);

and, for memory, e) the KV cache per token (vramopt's golden figures) and what paged
allocation buys, and f) fine-tuning on one consumer GPU: QLoRA of a 70B model on the 48 GB
RTX 6090 (the seed's GPU) and LoRA of Llama 3.1 8B on a 24 GB RTX 4090; g) what three
details of the serving model do (docs/cost-model.md section 7): the achievable FLOP rate per
format (fp8/fp4 utilization ratios), prefill with causal attention, and tensor parallelism
beyond the KV heads (heads replicated, the cache stops shrinking).

Every number comes from vramopt's cost model through the public API
(``vramopt.estimate.estimate_serving``, ``vramopt.optimizer.search.solve``,
``estimate_training``); nothing is typed in but the settings of each comparison.
docs/claims.md ("Serving claims") quotes this output; benchmarks/claims_audit.py reuses
these functions for rows 17.2, 17.5 and 19.x. GB = 1e9 bytes; tokens/s are output
(decode) tokens per second of the whole deployment; latency is the time per output token
of one sequence.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vramopt.costs.inference import ServingCase  # noqa: E402
from vramopt.costs.kv_cache import kv_cache_bytes_per_token  # noqa: E402
from vramopt.errors import VramoptError  # noqa: E402
from vramopt.estimate import estimate_serving, estimate_training, serving_case  # noqa: E402
from vramopt.hardware import load_gpu  # noqa: E402
from vramopt.models import load_model  # noqa: E402
from vramopt.optimizer.search import solve  # noqa: E402
from vramopt.types import SearchSpace, ServingPlan, ServingWorkload, TrainingPlan, TrainingWorkload  # noqa: E402

GB = 1e9
MODEL_70B = "llama-3.1-70b"
MODEL_8B = "llama-3.1-8b"
CONTEXT = 8192
SEED_TOKENS_PER_S = 1200.0
MAX_SLOTS_SEARCHED = 4096


def serve(model: str = MODEL_70B, context: int = CONTEXT, **plan) -> object:
    """estimate_serving of one plan (ServingPlan defaults: bf16, bf16 KV, paged, 16 slots)."""
    fields = dict(gpu="b200", gpus=1)
    fields.update(plan)
    return estimate_serving(ServingWorkload(model=model, context=context), ServingPlan(**fields))


def best(model: str, gpu: str, max_gpus: int = 1, context: int = CONTEXT, max_latency_ms: float | None = None, **pins):
    """The solver's best plan (max tokens/s) with the given pins, or None when none fits."""
    space = SearchSpace(gpus=(gpu,), max_gpus=max_gpus, pin={name: str(value).lower() for name, value in pins.items()})
    return solve(ServingWorkload(model=model, context=context, max_latency_ms=max_latency_ms), space)


def max_slots(plan: ServingPlan, model: str = MODEL_70B, context: int = CONTEXT) -> int:
    """The most slots per replica that keep the headroom rule (0 when not even one fits)."""
    workload = ServingWorkload(model=model, context=context)

    def fits(slots: int) -> bool:
        return estimate_serving(workload, replace(plan, slots=slots)).fits

    if not fits(1):
        return 0
    low, high = 1, MAX_SLOTS_SEARCHED
    while low < high:  # memory grows with slots, so fits() is monotone
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


def describe(plan: ServingPlan) -> str:
    mig = f", MIG {plan.mig_profile}" if plan.mig_profile != "none" else ""
    return (
        f"{plan.gpus}x {plan.gpu} tp={plan.tensor_parallel} pp={plan.pipeline_parallel}{mig}, {plan.quantization} weights, "
        f"{plan.kv_cache_dtype} KV {'paged' if plan.paged_kv else 'contiguous'}, {plan.slots} slots, "
        f"speculative {'on' if plan.speculative_decoding else 'off'}"
    )


def memory_line(estimate) -> str:
    values = estimate.values
    return (
        f"weights {values['weights_bytes'] / GB:.1f} + KV {values['kv_cache_bytes'] / GB:.1f} + activations "
        f"{values['activations_bytes'] / GB:.1f} + draft {values['draft_bytes'] / GB:.1f} + reserve {values['reserve_bytes'] / GB:.1f} "
        f"= {values['total_bytes'] / GB:.1f} GB of {values['capacity_bytes'] / GB:.1f} GB "
        f"(limit {values['capacity_bytes'] * 0.9 / GB:.1f}); fits={estimate.fits}"
    )


def row(label: str, estimate) -> str:
    values = estimate.values
    bound = "memory" if values["memory_bound"] else "compute"
    return (
        f"  {label:>10s}  {estimate.tokens_per_s:9,.0f} tokens/s  {values['latency_per_token_s'] * 1e3:7.2f} ms/token  "
        f"step {values['step_time_s'] * 1e3:7.2f} ms ({bound} bound)  {estimate.total_bytes / GB:6.1f} GB  fits={estimate.fits}"
    )


# ---------------------------------------------------------------------------------------
# a) 70B FP8 on one B200, 8,192-token context: the seed's 1,200 tokens/s


def seed_70b_on_b200() -> dict:
    print("\n## a) 70B in FP8 on one B200, 8,192-token context (seed P17: ~1,200 tokens/s)")
    result = best(MODEL_70B, "b200", quantization="fp8")
    chosen = result.estimate
    plan = chosen.plan
    print(f"solver (pin quantization=fp8, max-gpus 1): {describe(plan)}")
    print(f"  {chosen.tokens_per_s:,.0f} tokens/s, {chosen.values['latency_per_token_s'] * 1e3:.2f} ms/token; {memory_line(chosen)}")
    for runner in result.runners_up:
        print(f"  runner-up ({runner.changed_field}): {describe(runner.estimate.plan)}: {runner.estimate.tokens_per_s:,.0f} tokens/s "
              f"({-runner.tokens_per_s_loss_fraction:+.1%}), {runner.estimate.values['latency_per_token_s'] * 1e3:.2f} ms/token")
    no_speculative = best(MODEL_70B, "b200", quantization="fp8", speculative_decoding=False).estimate
    print(f"solver with speculative decoding off: {describe(no_speculative.plan)}: {no_speculative.tokens_per_s:,.0f} tokens/s")
    bounded = best(MODEL_70B, "b200", quantization="fp8", max_latency_ms=12).estimate
    print(f"solver with --max-latency-ms 12: {describe(bounded.plan)}: {bounded.tokens_per_s:,.0f} tokens/s "
          f"({bounded.tokens_per_s / chosen.tokens_per_s:.1%} of the unbounded plan), {bounded.values['latency_per_token_s'] * 1e3:.2f} ms/token")

    base = replace(plan, speculative_decoding=False)
    crossing = next(slots for slots in range(1, plan.slots + 1) if serve(**{**vars_of(base), "slots": slots}).tokens_per_s >= SEED_TOKENS_PER_S)
    slot_counts = sorted({1, 4, 16, crossing - 1, crossing, 32, 64, plan.slots})
    table = {}
    print(f"estimate_serving, {base.quantization} weights, {base.kv_cache_dtype} KV paged, slots varied:")
    for speculative in (False, True):
        print(f" speculative decoding {'on' if speculative else 'off'}:")
        for slots in slot_counts:
            estimate = serve(**{**vars_of(base), "slots": slots, "speculative_decoding": speculative})
            table[(slots, speculative)] = estimate
            print(row(f"{slots} slots", estimate))
    single = table[(1, False)]
    at_crossing = table[(crossing, False)]
    full = table[(plan.slots, False)]
    print(f"the roofline reaches {SEED_TOKENS_PER_S:,.0f} tokens/s at {crossing} concurrent sequences "
          f"({at_crossing.tokens_per_s:,.0f} tokens/s; {crossing - 1}: {table[(crossing - 1, False)].tokens_per_s:,.0f}), "
          f"each at {at_crossing.values['latency_per_token_s'] * 1e3:.1f} ms/token = "
          f"{1 / at_crossing.values['latency_per_token_s']:.0f} tokens/s per sequence")
    print(f"one sequence alone: {single.tokens_per_s:,.0f} tokens/s ({single.values['latency_per_token_s'] * 1e3:.2f} ms/token: "
          f"{single.values['weights_bytes'] / GB:.1f} GB of weights read per token at "
          f"{load_gpu('b200').hbm_bandwidth_bytes_per_s * 0.8 / GB:,.0f} GB/s)")
    print(f"memory-limited batch ({plan.slots} slots): {full.tokens_per_s:,.0f} tokens/s without, "
          f"{table[(plan.slots, True)].tokens_per_s:,.0f} with speculative decoding "
          f"= {full.tokens_per_s / SEED_TOKENS_PER_S:.1f}x / {table[(plan.slots, True)].tokens_per_s / SEED_TOKENS_PER_S:.1f}x the seed's figure")
    most_on, most_off = max_slots(plan), max_slots(base)
    print(f"most sequences that fit: {most_on} with speculative decoding (draft weights and KV), {most_off} without "
          f"({serve(**{**vars_of(base), 'slots': most_off}).tokens_per_s:,.0f} tokens/s); the solver's slot grid takes "
          f"{plan.slots} and {no_speculative.plan.slots}")
    print(f"prefill of one 8,192-token prompt: {full.values['prefill_time_s']:.2f} s (not part of tokens/s)")
    return {"plan": plan, "chosen": chosen, "no_speculative": no_speculative, "bounded": bounded, "crossing": crossing, "table": table}


def vars_of(plan: ServingPlan) -> dict:
    return {name: getattr(plan, name) for name in plan.__slots__}


# ---------------------------------------------------------------------------------------
# b) MIG for an 8B model on H100 and H200


def mig_capacity() -> dict:
    print("\n## b) MIG, Llama 3.1 8B (seed P19: 2-4x the concurrent serving capacity per GPU for models under 30B)")
    results = {}
    for gpu_name in ("h100", "h200"):
        gpu = load_gpu(gpu_name)
        print(f"{gpu_name} ({gpu.memory_bytes / GB:.0f} GB, {gpu.hbm_bandwidth_bytes_per_s / 1e12:.2f} TB/s), one GPU, 8,192-token context. "
              "Per profile: the solver's best plan (max tokens/s, --pin mig_profile=...), the most sequences that fit with its formats "
              "(speculative off), and a low-traffic service of 4 sequences per instance:")
        print(f"  {'profile':>10s} {'inst':>4s} {'GB/inst':>7s} {'compute':>7s} {'HBM':>5s}  {'best plan':36s} {'concurrent':>10s} {'tokens/s':>9s} "
              f"{'ms/token':>8s} {'step':>7s}  {'max concurrent':>14s} {'vs whole':>8s}  {'4 seq/instance: tokens/s per GPU, ms/token':s}")
        rows = {}
        for profile in ("none",) + tuple(p.name for p in gpu.mig_profiles):
            mig = gpu.mig_profile(profile)
            shares = f"{mig.compute_slices}/7 {mig.memory_slices}/8" if mig else "7/7 8/8"
            result = best(MODEL_8B, gpu_name, mig_profile=profile)
            if result.estimate is None:
                reason = result.explanation.reason if result.explanation is not None else result.solver.status
                print(f"  {profile:>10s} {mig.max_instances:4d} {mig.memory_bytes / GB:7.1f} {shares:>13s}  no plan fits: {reason}")
                rows[profile] = None
                continue
            estimate = result.estimate
            plan = estimate.plan
            instances = int(round(estimate.values["instances_per_gpu"]))
            most = max_slots(replace(plan, speculative_decoding=False), model=MODEL_8B)
            low = serve(model=MODEL_8B, **{**vars_of(plan), "slots": 4, "speculative_decoding": False})
            rows[profile] = {
                "estimate": estimate, "instances": instances, "max_slots": most, "max_concurrent": most * instances,
                "low_traffic": low, "compute_slices": mig.compute_slices if mig else 7,
            }
            label = f"{plan.quantization}, {plan.kv_cache_dtype} KV, {plan.slots} slots, spec {'on' if plan.speculative_decoding else 'off'}"
            whole = rows["none"]
            print(f"  {profile:>10s} {instances:4d} {estimate.values['capacity_bytes'] / GB:7.1f} {shares:>13s}  {label:36s} "
                  f"{int(round(estimate.values['concurrent_slots'])):10d} {estimate.tokens_per_s:9,.0f} "
                  f"{estimate.values['latency_per_token_s'] * 1e3:8.2f} {'memory' if estimate.values['memory_bound'] else 'compute':>7s}  "
                  f"{rows[profile]['max_concurrent']:14d} "
                  f"{rows[profile]['max_concurrent'] / whole['max_concurrent']:7.2f}x  "
                  f"{instances} x 4 seq: {low.tokens_per_s:6,.0f}, {low.values['latency_per_token_s'] * 1e3:6.2f} ms")
        whole = rows["none"]
        partitioned = {name: data for name, data in rows.items() if data is not None and data["compute_slices"] < 7}
        top_slots = max(partitioned, key=lambda name: partitioned[name]["max_concurrent"])
        top_tokens = max(partitioned, key=lambda name: partitioned[name]["estimate"].tokens_per_s)
        repeated = whole["estimate"].values["weights_bytes"] + whole["estimate"].values["reserve_bytes"] + whole["estimate"].values["activations_bytes"]
        ratios = [data["max_concurrent"] / whole["max_concurrent"] for data in partitioned.values()]
        token_ratios = [data["estimate"].tokens_per_s / whole["estimate"].tokens_per_s for data in partitioned.values()]
        print(f"  whole GPU: {whole['max_concurrent']} concurrent sequences (max), {whole['estimate'].tokens_per_s:,.0f} tokens/s (best plan). "
              f"Partitioned profiles: {min(ratios):.2f}-{max(ratios):.2f}x the sequences (best {top_slots} x{partitioned[top_slots]['instances']} = "
              f"{partitioned[top_slots]['max_concurrent']}), {min(token_ratios):.2f}-{max(token_ratios):.2f}x the tokens/s (best {top_tokens}). "
              f"Each instance repeats {repeated / GB:.1f} GB (fp8 weights + prefill activations and decode logits + framework reserve).")
        services = max(data["instances"] for data in partitioned.values())
        print(f"  isolated 8B replicas (separate services) on one GPU: up to {services} on MIG, 1 on the whole GPU")
        results[gpu_name] = {"rows": rows, "services": services, "ratios": (min(ratios), max(ratios)),
                             "token_ratios": (min(token_ratios), max(token_ratios)), "top_slots": top_slots}
    return results


# ---------------------------------------------------------------------------------------
# c) speculative decoding


def speculative_decoding(plan: ServingPlan) -> dict:
    print("\n## c) Speculative decoding (seed P19: 20-35% less compute per request)")
    case: ServingCase = serving_case(ServingWorkload(model=MODEL_70B, context=CONTEXT), "b200")
    alpha, gamma = case.acceptance_rate, case.speculative_tokens
    expected = (1 - alpha ** (gamma + 1)) / (1 - alpha)
    flops_ratio = ((gamma + 1) + gamma * case.draft_params_fraction) / expected
    print(f"model (Leviathan et al. 2023): acceptance alpha {alpha}, gamma {gamma} draft tokens, draft {case.draft_params_fraction:.0%} "
          f"of the target's parameters, draft KV {case.draft_kv_fraction:.0%} of the target's")
    print(f"  expected tokens per target step (1 - alpha^(gamma+1)) / (1 - alpha) = {expected:.3f}; the target verifies "
          f"{gamma + 1} tokens per step, so FLOPs per emitted token are {flops_ratio:.2f}x plain decoding "
          f"(({gamma + 1} + {gamma} x {case.draft_params_fraction}) / {expected:.3f})")
    weight_reads = (1 + gamma * case.draft_params_fraction) / expected
    print(f"  weight bytes read per emitted token: (1 + {gamma} x {case.draft_params_fraction}) / {expected:.3f} = {weight_reads:.2f}x plain "
          f"decoding (the target reads its weights once per verification step); KV bytes (1 + {gamma} x {case.draft_kv_fraction}) / "
          f"{expected:.3f} = {(1 + gamma * case.draft_kv_fraction) / expected:.2f}x")
    gains = {}
    print(f"70B {plan.quantization} weights, {plan.kv_cache_dtype} KV paged, one B200:")
    for slots in (1, 4, 16, 32, 64, plan.slots):
        off = serve(**{**vars_of(plan), "slots": slots, "speculative_decoding": False})
        on = serve(**{**vars_of(plan), "slots": slots, "speculative_decoding": True})
        gains[slots] = (off, on)
        print(f"  {slots:4d} slots: {off.tokens_per_s:8,.0f} -> {on.tokens_per_s:8,.0f} tokens/s ({on.tokens_per_s / off.tokens_per_s:.2f}x); "
              f"{off.values['latency_per_token_s'] * 1e3:6.2f} -> {on.values['latency_per_token_s'] * 1e3:6.2f} ms/token "
              f"({1 - on.values['latency_per_token_s'] / off.values['latency_per_token_s']:.0%} less time per token); "
              f"plain step {'memory' if off.values['memory_bound'] else 'compute'} bound, "
              f"speculative {'memory' if on.values['memory_bound'] else 'compute'} bound; fits {off.fits}/{on.fits}")
    return {"expected": expected, "flops_ratio": flops_ratio, "weight_reads": weight_reads, "gains": gains}


# ---------------------------------------------------------------------------------------
# d) tensor-parallel inference latency


def tensor_parallel_latency() -> dict:
    print("\n## d) Tensor-parallel inference, 70B on H100 (seed P19: 5-15% latency overhead)")
    gpu = load_gpu("h100")
    from vramopt.costs.coefficients import coefficient

    print(f"  per layer 2 all-reduces of slots x h x 2 bytes; each {coefficient('all_reduce_latency_s') * 1e6:.0f} us + ring time over "
          f"NVLink {gpu.nvlink_bandwidth_bytes_per_s / GB:.0f} GB/s x {coefficient('collective_bandwidth_efficiency')}")
    results = {}
    for quantization in ("fp8", "bf16"):
        for slots in (1, 32):
            for tp in (2, 4, 8):
                estimate = serve(gpu="h100", gpus=tp, tensor_parallel=tp, quantization=quantization, slots=slots)
                values = estimate.values
                all_reduce = values["tensor_parallel_s"]
                step = values["step_time_s"]
                results[(quantization, slots, tp)] = estimate
                print(f"  {quantization} weights, {slots:2d} slots, tp={tp}: step {step * 1e3:6.2f} ms, all-reduces {all_reduce * 1e3:5.2f} ms = "
                      f"{all_reduce / step:5.1%} of the step, +{all_reduce / (step - all_reduce):5.1%} over the step without them; "
                      f"{values['latency_per_token_s'] * 1e3:6.2f} ms/token, {estimate.tokens_per_s:7,.0f} tokens/s; fits={estimate.fits}")
    return results


# ---------------------------------------------------------------------------------------
# e) KV cache per token, paged vs contiguous


def kv_cache_capacity(plan: ServingPlan) -> dict:
    print("\n## e) KV cache per token; paged vs contiguous capacity (70B fp8 weights, one B200, 8,192-token context)")
    figures = {}
    for model_name, dtype in ((MODEL_70B, "bf16"), (MODEL_70B, "fp8"), ("opt-13b", "fp16"), (MODEL_8B, "bf16")):
        model = load_model(model_name)
        per_token = kv_cache_bytes_per_token(model, dtype)
        figures[(model_name, dtype)] = per_token
        print(f"  {model_name} {dtype}: 2 x {model.layers} layers x {model.kv_heads} KV heads x {model.head_dim} x "
              f"{per_token / (2 * model.layers * model.kv_heads * model.head_dim):g} B = {per_token:,.0f} B/token; "
              f"{CONTEXT:,} tokens: {per_token * CONTEXT / GB:.2f} GB")
    capacity = {}
    case = serving_case(ServingWorkload(model=MODEL_70B, context=CONTEXT), "b200")
    for dtype in ("bf16", "fp8"):
        for paged in (False, True):
            candidate = replace(plan, kv_cache_dtype=dtype, paged_kv=paged, speculative_decoding=False)
            slots = max_slots(candidate)
            estimate = serve(**{**vars_of(candidate), "slots": slots})
            capacity[(dtype, paged)] = (slots, estimate)
            print(f"  {dtype} KV, {'paged     ' if paged else 'contiguous'}: {slots:4d} slots fit ({estimate.values['kv_cache_bytes'] / GB:.1f} GB of KV), "
                  f"{estimate.tokens_per_s:,.0f} tokens/s")
    print(f"  paged holds {case.average_context_fraction:.0%} of the context per slot on average (average_context_fraction, an "
          f"assumption), in 16-token blocks, +4% waste (Kwon et al. 2023); contiguous reserves all {CONTEXT:,} tokens")
    for dtype in ("bf16", "fp8"):
        print(f"  {dtype}: paged/contiguous = {capacity[(dtype, True)][0] / capacity[(dtype, False)][0]:.2f}x the slots")
    return {"per_token": figures, "capacity": capacity}


# ---------------------------------------------------------------------------------------
# f) QLoRA 70B on an RTX 6090 and LoRA 8B on an RTX 4090


def fine_tuning_on_one_card() -> dict:
    print("\n## f) QLoRA 70B on one 48 GB RTX 6090, LoRA 8B on one 24 GB RTX 4090 (sequence 2,048, global batch 16, rank 16, all linear layers)")
    results = {}
    for kind, model, gpu in (("qlora", MODEL_70B, "rtx6090"), ("lora", MODEL_8B, "rtx4090"), ("qlora", MODEL_8B, "rtx4090")):
        workload = TrainingWorkload(model=model, kind=kind, seq_len=2048, global_batch=16)
        print(f"{kind} {model} on one {gpu}:")
        for label, forbid in (("default search", {}), ("forbid offload=cpu,nvme", {"offload": ("cpu", "nvme")})):
            result = solve(workload, SearchSpace(gpus=(gpu,), max_gpus=1, forbid=forbid))
            results[(kind, model, label)] = result
            if result.estimate is None:
                explanation = result.explanation
                print(f"  {label}: no plan fits. {explanation.one_line() if explanation else result.solver.status}")
                continue
            estimate = result.estimate
            plan, values = estimate.plan, estimate.values
            lora = estimate.lora_dict()
            print(f"  {label}: ZeRO-{plan.zero_stage}, checkpointing {plan.checkpointing}, offload {plan.offload}, micro-batch {plan.micro_batch} "
                  f"x {int(round(values['micro_batches']))} accumulation; {estimate.total_bytes / GB:.1f} GB of "
                  f"{values['capacity_bytes'] / GB:.0f} GB; {estimate.tokens_per_s:,.0f} tokens/s, MFU {values['mfu']:.1%}")
            print(f"    weights {values['weights_bytes'] / GB:.1f}, gradients {values['gradients_bytes'] / GB:.2f}, Adam "
                  f"{values['optimizer_bytes'] / GB:.2f}, activations {values['activations_bytes'] / GB:.1f}, logits "
                  f"{values['logits_bytes'] / GB:.1f}, reserve {values['reserve_bytes'] / GB:.1f} GB; adapters "
                  f"{lora['adapter_params']:,} parameters ({lora['adapter_params'] / estimate.model.params_total:.2%}), frozen base "
                  f"{lora['frozen_bytes_per_param']:.3f} B/param")
            if result.offload_cost:
                cost = result.offload_cost
                print(f"    without offload the same plan needs {cost['without_offload_total_bytes'] / GB:.1f} GB; offload is "
                      f"{cost['offload_fraction_of_step']:.1%} of the step")
        # The leanest resident plan: micro-batch 1, no offload, the checkpointing that keeps the least.
        lean = min(
            (estimate_training(workload, TrainingPlan(gpu=gpu, gpus=1, checkpointing=checkpointing, micro_batch=1))
             for checkpointing in ("every:1", "every:2", "every:4", "none")),
            key=lambda estimate: estimate.total_bytes,
        )
        values = lean.values
        limit = values["capacity_bytes"] * 0.9
        print(f"  leanest resident plan (micro-batch 1, {lean.plan.checkpointing}, no offload): frozen+adapter weights "
              f"{values['weights_bytes'] / GB:.1f} GB, Adam {values['optimizer_bytes'] / GB:.2f}, gradients {values['gradients_bytes'] / GB:.2f}, "
              f"activations {values['activations_bytes'] / GB:.2f}, logits {values['logits_bytes'] / GB:.2f}, reserve "
              f"{values['reserve_bytes'] / GB:.2f} = {lean.total_bytes / GB:.1f} GB against a {limit / GB:.1f} GB limit (10% headroom) "
              f"and {values['capacity_bytes'] / GB:.0f} GB capacity: fits={lean.fits}; it leaves "
              f"{1 - lean.total_bytes / values['capacity_bytes']:.1%} of the card free")
        results[(kind, model, "lean")] = lean
    return results


# ---------------------------------------------------------------------------------------
# g) What the serving model's details do: fp8 compute rate, prefill, tensor parallelism
#    beyond the KV heads


def model_details() -> dict:
    print("\n## g) Compute rate per format, prefill with causal attention, tensor parallelism beyond the KV heads")
    from vramopt.costs.coefficients import coefficient

    b200 = load_gpu("b200")
    ratios = {"bf16": 1.0, "fp8": coefficient("fp8_utilization_ratio"), "fp4": coefficient("fp4_utilization_ratio")}
    rates = {}
    for name, ratio in ratios.items():
        if name in b200.peak_flops_per_s:
            rates[name] = b200.peak_flops_per_s[name] * coefficient("base_utilization") * ratio
            print(f"  b200 {name}: peak {b200.peak_flops_per_s[name] / 1e12:,.0f} TFLOP/s x base_utilization "
                  f"{coefficient('base_utilization')} x ratio {ratio} = {rates[name] / 1e12:,.0f} TFLOP/s achievable")
    model = load_model(MODEL_70B)
    prefill = {}
    print(f"  prefill of one full-context prompt, 70B ({model.params_active / 1e9:.2f}B active), fp8 weights, one B200:")
    for context in (8192, 32768, 131072):
        linear = 2.0 * model.params_active * context
        attention = 2.0 * model.layers * model.heads * model.head_dim * context**2
        estimate = serve(context=context, quantization="fp8", kv_cache_dtype="fp8", slots=1)
        prefill[context] = estimate.values["prefill_time_s"]
        print(f"    {context:7,d} tokens: linear {linear / 1e15:6.2f} PFLOP + causal attention {attention / 1e15:6.2f} PFLOP "
              f"({attention / (linear + attention):5.1%}) = {prefill[context]:6.2f} s")
    kv = {}
    big = load_model("llama-3.1-405b")
    print(f"  llama-3.1-405b ({big.kv_heads} KV heads) on h100, fp8 weights and KV, 32 slots: the KV cache stops shrinking beyond "
          f"tp = {big.kv_heads} (heads replicated)")
    for tp in (8, 16):
        estimate = serve(model="llama-3.1-405b", gpu="h100", gpus=tp, tensor_parallel=tp, quantization="fp8", kv_cache_dtype="fp8", slots=32)
        values = estimate.values
        kv[tp] = estimate
        print(f"    tp={tp:2d}: weights {values['weights_bytes'] / GB:5.1f} + KV {values['kv_cache_bytes'] / GB:4.2f} GB per GPU "
              f"(total {values['total_bytes'] / GB:5.1f}); {estimate.tokens_per_s:,.0f} tokens/s, "
              f"{values['latency_per_token_s'] * 1e3:.2f} ms/token (all-reduces {values['tensor_parallel_s'] * 1e3:.1f} ms); fits={estimate.fits}")
    return {"rates": rates, "prefill": prefill, "kv": kv}


def main() -> None:
    print("vramopt serving and LoRA/QLoRA figures for docs/claims.md (python benchmarks/serving_claims.py)")
    a = seed_70b_on_b200()
    mig_capacity()
    speculative_decoding(replace(a["plan"], speculative_decoding=False))
    tensor_parallel_latency()
    kv_cache_capacity(a["plan"])
    fine_tuning_on_one_card()
    model_details()


if __name__ == "__main__":
    main()
