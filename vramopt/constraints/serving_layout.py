"""The serving half of the layout fields (gpu, gpus, tensor_parallel, pipeline_parallel,
declared in ``constraints/parallelism.py``): their rules on a serving plan and their vLLM
arguments and launch notes.

A serving replica is tp x pp GPUs (``ParallelLayout`` with dp = 1); the deployment runs
``gpus / (tp x pp)`` independent replicas, or one per MIG instance (``constraints/mig.py``
writes that launch note). The rules that involve the weight format or MIG belong to those
techniques.
"""

from __future__ import annotations

from typing import Any

from vramopt.constraints.contribution import ExportDraft
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
    """data_parallel_size for several whole-GPU replicas, and how they, a replica spanning
    nodes, and the hardware are launched (a MIG plan's launch is the MIG profile's note)."""
    plan = draft.plan
    if plan["mig_profile"] != "none":
        return []
    gpus, replicas = plan["gpus"], plan["replicas"]
    if replicas > 1:
        draft.content["data_parallel_size"] = replicas
    notes: list[str] = []
    nodes = plan.get("nodes")
    multi_node = isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 1
    shards = ParallelLayout(tensor_parallel=plan["tensor_parallel"], pipeline_parallel=plan["pipeline_parallel"],
                            data_parallel=1).replica_gpus
    if replicas > 1:
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

