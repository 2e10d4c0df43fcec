"""How to launch a disaggregated prefill/decode answer with vLLM: notes beside the engine
arguments of the colocated plan (``exporters/vllm.py``), which stay the arguments of one
engine; vLLM has no single set of engine arguments for a whole xPyD deployment.

The launch follows vLLM's NixlConnector guide (docs/features/nixl_connector_usage.md,
vLLM 0.11-0.12): every instance runs ``vllm serve`` with
``--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'`` and its own
``VLLM_NIXL_SIDE_CHANNEL_PORT``; a proxy (``tests/v1/kv_connector/nixl_integration/
toy_proxy_server.py --prefiller-hosts ... --decoder-hosts ...``, or a router such as
llm-d's or Dynamo's) sends each request to a prefill instance, then to a decode instance
that pulls the KV cache.
"""

from __future__ import annotations

from typing import Any, Mapping

KV_TRANSFER_CONFIG = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
SPECULATIVE_CONFIG = '{"model":"<draft-model>","num_speculative_tokens":4}'
"""The draft the plan budgets (costs/inference.ServingCase: 4 speculative tokens); replace <draft-model>."""


def disaggregated_notes(response: Mapping[str, Any]) -> list[str]:
    """The launch notes of a response whose ``disaggregation`` is the answer; none otherwise."""
    found = response.get("disaggregation")
    if not isinstance(found, Mapping) or not found.get("chosen") or not isinstance(found.get("plan"), Mapping):
        return []
    plan = found["plan"]
    weights = {"bf16": "", "fp8": "--quantization fp8 "}.get(plan["quantization"], f"<a {plan['quantization']} checkpoint> ")
    common = f"{weights}--kv-cache-dtype {'fp8' if plan['kv_cache_dtype'] == 'fp8' else 'auto'} --kv-transfer-config '{KV_TRANSFER_CONFIG}'"
    return [
        f"disaggregated prefill/decode is the answer ({plan['prefill_replicas']} prefill x tp{plan['prefill_tensor_parallel']} + "
        f"{plan['decode_replicas']} decode x tp{plan['decode_tensor_parallel']}, {plan['gpus']} GPUs); the arguments above are the "
        "colocated plan's: launch instead, each with the max_model_len, gpu_memory_utilization and max_num_batched_tokens above and its "
        "own VLLM_NIXL_SIDE_CHANNEL_PORT (vLLM NixlConnector guide):",
        f"  {plan['prefill_replicas']} prefill instance(s): vllm serve <model> --tensor-parallel-size {plan['prefill_tensor_parallel']} {common}",
        f"  {plan['decode_replicas']} decode instance(s): vllm serve <model> --tensor-parallel-size {plan['decode_tensor_parallel']} "
        f"--max-num-seqs {plan['decode_slots']} {common}"
        + (f" --speculative-config '{SPECULATIVE_CONFIG}'" if plan["speculative_decoding"] else ""),
        "  a proxy in front: vLLM's tests/v1/kv_connector/nixl_integration/toy_proxy_server.py --prefiller-hosts ... --decoder-hosts ... "
        "(each request to a prefill instance with max_tokens 1, then to a decode instance), or llm-d's or Dynamo's router",
    ]
