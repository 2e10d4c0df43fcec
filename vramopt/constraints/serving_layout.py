"""The serving half of the layout fields (gpu, gpus, tensor_parallel, pipeline_parallel,
declared in ``constraints/parallelism.py``, and expert_parallel, declared in
``constraints/expert_parallel.py``): their rules on a serving plan and their vLLM
arguments and launch notes.

A serving replica is tp x pp GPUs, or with expert parallelism the ep GPUs of ep / tp
attention groups (``costs/serving_experts.serving_replica_layout``); the deployment runs
``gpus / replica`` independent replicas, or one per MIG instance (``constraints/mig.py``
writes that launch note). The rules that involve the weight format or MIG belong to those
techniques.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vramopt.constraints.contribution import ExportDraft
from vramopt.costs.serving_experts import attention_groups, serving_replica_layout
from vramopt.parallel_layout import ParallelLayout


def serving_layout_invalid_reasons(case, columns) -> dict[str, Any]:
    """tp divides the attention heads (and the KV heads, or they divide tp), pp the layers,
    and tp x pp the GPU count: the replica's layout, owned by the tensor-parallel field as
    the training layout's rules are."""
    model = case.model
    t, p = columns.tensor_parallel, columns.pipeline_parallel
    kv_ok = (model.kv_heads % t == 0) | (t % model.kv_heads == 0)
    return {
        "tensor_parallel must divide the attention heads": (model.heads % t != 0) | ~kv_ok,
        "pipeline_parallel must divide the layers": model.layers % p != 0,
        "tensor_parallel x pipeline_parallel must divide the GPU count": ~ParallelLayout(
            tensor_parallel=t, pipeline_parallel=p, data_parallel=1
        ).divides(columns.gpus),
    }


def vllm_tensor_parallel(draft: ExportDraft) -> list[str]:
    draft.content["tensor_parallel_size"] = draft.plan["tensor_parallel"]
    return []


def vllm_pipeline_parallel(draft: ExportDraft) -> list[str]:
    draft.content["pipeline_parallel_size"] = draft.plan["pipeline_parallel"]
    return []


def vllm_replicas(draft: ExportDraft) -> list[str]:
    """data_parallel_size for several whole-GPU replicas (of tp x pp GPUs; an expert-parallel
    replica is one launch of its own), and how they, a replica spanning
    nodes, and the hardware are launched (a MIG plan's launch is the MIG profile's note)."""
    plan = draft.plan
    if plan["mig_profile"] != "none":
        return []
    gpus, replicas = plan["gpus"], plan["replicas"]
    expert_parallel = plan.get("expert_parallel", 1)
    if replicas > 1 and expert_parallel == 1:  # an expert-parallel replica's dp is its attention groups
        draft.content["data_parallel_size"] = replicas
    notes: list[str] = []
    nodes = plan.get("nodes")
    multi_node = isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 1
    shards = int(serving_replica_layout(plan["tensor_parallel"], plan["pipeline_parallel"], expert_parallel).world_size)
    if replicas > 1 and expert_parallel > 1:
        # vLLM's ep is tp x dp of one launch: each expert-parallel replica is its own engine.
        notes.append(
            f"replicas {replicas}: run one `vllm serve` per expert-parallel replica of {shards} GPUs (its data_parallel_size "
            "is its attention groups) on disjoint GPUs behind a load balancer: vLLM's expert-parallel group spans every "
            "data-parallel engine of one launch"
        )
    elif replicas > 1:
        notes.append(
            f"replicas {replicas}: data_parallel_size {replicas} runs {replicas} engines of {shards} GPU{'s' if shards > 1 else ''} "
            "each (vLLM releases with data parallelism; across nodes add --data-parallel-size-local and "
            "--data-parallel-address); otherwise run one `vllm serve` per replica on disjoint CUDA_VISIBLE_DEVICES behind a load balancer"
        )
    if multi_node and shards > gpus // nodes:
        notes.append(
            f"one replica spans nodes ({shards} GPUs, {gpus // nodes} per node): vLLM runs multi-node tensor/pipeline "
            "parallelism on a Ray cluster (--distributed-executor-backend ray)"
        )
    placement = f" on {nodes} node{'s' if nodes > 1 else ''}" if isinstance(nodes, int) and not isinstance(nodes, bool) else ""
    notes.append(f"hardware: {gpus} x {plan['gpu']}{placement}; the GPU type and count are not vLLM arguments")
    return notes


# ---------------------------------------------------------------------------------------
# expert_parallel on a serving plan (the field is declared in constraints/expert_parallel.py;
# its cost terms and sources are in costs/serving_experts.py)


def serving_default_degrees(context) -> tuple[int, ...]:
    """1 for dense models; for a mixture of experts every power of two that divides the routed
    experts up to the GPUs searched (DeepSeek-V3's decode deployment runs EP320 and prefill
    EP32, report section 3.4: serving spreads experts wider than training's 64)."""
    degrees, degree = [1], 2
    while context.experts and degree <= min(context.experts, context.max_gpus):
        if context.experts % degree == 0:
            degrees.append(degree)
        degree *= 2
    return tuple(degrees)


def serving_expert_invalid_reasons(case, columns) -> dict[str, Any]:
    """ep on a serving plan: a mixture of experts, a divisor of its routed experts, a multiple
    of tp (vLLM's ep is tp x dp), no pipeline and whole GPUs (costs/serving_experts.py)."""
    model = case.model
    ep = np.asarray(columns.expert_parallel)
    t = np.asarray(columns.tensor_parallel)
    split = ep > 1
    experts = model.moe.experts if model.moe is not None else 1
    return {
        "expert_parallel > 1 needs a mixture-of-experts model": split & (model.moe is None),
        "expert_parallel must divide the routed experts": (experts % ep) != 0,
        "expert_parallel must be a multiple of tensor_parallel (the attention's tp groups, vLLM: ep = tp x dp)": split & (ep % t != 0),
        "expert-parallel serving runs without pipeline parallelism (pipeline_parallel 1)": split & (np.asarray(columns.pipeline_parallel) > 1),
        "expert-parallel serving runs on whole GPUs, not MIG instances": split & (np.asarray(columns.mig_profile) >= 0),
        # The replica is the ep group (ep is a multiple of tp and pp is 1, so tp x pp divides it too).
        "expert_parallel must divide the GPU count": split & (np.asarray(columns.gpus) % np.maximum(ep, 1) != 0),
    }


def vllm_expert_parallel(draft: ExportDraft) -> list[str]:
    """enable_expert_parallel and the attention groups as data_parallel_size (vLLM: ep = tp x dp)."""
    plan = draft.plan
    ep = plan.get("expert_parallel", 1)
    if ep == 1:
        return []
    tp = plan["tensor_parallel"]
    groups = int(attention_groups(tp, ep))
    draft.content["enable_expert_parallel"] = True
    if groups > 1:
        draft.content["data_parallel_size"] = groups
    return [
        f"expert parallel {ep}: enable_expert_parallel with tensor_parallel_size {tp} x data_parallel_size {groups} "
        f"= {ep} GPUs, each holding 1/{ep} of the routed experts whole "
        "(vllm/model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make: ep = tp x dp)"
        + (f"; attention runs data parallel in {groups} groups of {tp}" if groups > 1 else "; attention stays tensor parallel"),
        "the plan prices the all-to-all of DeepEP's kernels: set VLLM_ALL2ALL_BACKEND=deepep_low_latency "
        "(decode) or deepep_high_throughput (prefill) in the environment",
    ]
