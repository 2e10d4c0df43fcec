"""The table view of the request-level serving figures (a response's ``requests`` object)."""

from __future__ import annotations

from typing import Any, Mapping

from vramopt.display_formats import table


def _ms(value: float | None) -> str:
    return "not served" if value is None else f"{value:,.1f} ms"


def _lengths(requests: Mapping[str, Any]) -> str:
    cached = requests.get("cached_prefix_tokens") or 0
    prefix = f" ({cached:,} of each prompt from the prefix cache)" if cached else ""
    if requests.get("lengths_from") == "lognormal":
        return (f"lognormal lengths from a mean and a p99 ({requests['length_samples']:,} quantiles), mean {requests['input_tokens']:,.1f} "
                f"input + {requests['output_tokens']:,.1f} output tokens{prefix}")
    if requests.get("length_samples"):
        return (f"{requests['length_samples']:,} sampled requests, mean {requests['input_tokens']:,.1f} input + "
                f"{requests['output_tokens']:,.1f} output tokens{prefix}")
    return f"{requests['input_tokens']:,} input + {requests['output_tokens']:,} output tokens{prefix}"


def _prompt(requests: Mapping[str, Any]) -> str:
    """The prompt whose prefill is shown: its computed tokens, after a cached prefix."""
    cached = requests.get("cached_prefix_tokens") or 0
    computed = f"{requests['input_tokens'] - cached:,.0f}"
    return f"{computed}-token prompt" if not cached else f"{computed}-token prompt after the {cached:,}-token cached prefix"


def render_requests(result: Mapping[str, Any]) -> str:
    """Per-request figures beside tokens/s, and the check of each request target."""
    requests = result["requests"]
    load = (f"{requests['rate_per_s']:g} requests/s offered" if requests["mode"] == "rate"
            else f"{requests['concurrency']:,} clients" if requests["mode"] == "concurrency"
            else "every request queued at once (saturation)")
    rows = [
        ["requests/s served", f"{requests['requests_per_s']:,.2f}"],
        ["output tokens/s served", f"{requests['output_tokens_per_s']:,.0f}"],
        ["time to first token, p99", _ms(requests["ttft_p99_ms"])],
        ["time to first token, mean", _ms(requests["ttft_mean_ms"])],
        ["time per output token, mean", _ms(requests["tpot_ms"])],
        [f"prefill of one {_prompt(requests)} (chunked, beside the decodes)", _ms(requests["prefill_ms"])],
        ["sequences decoding per replica", f"{requests['running_per_replica']:,.1f}"],
        ["capacity: requests/s at saturation", f"{requests['capacity_requests_per_s']:,.2f}"],
        ["capacity: output tokens/s at saturation", f"{requests['capacity_output_tokens_per_s']:,.0f}"],
    ]
    if requests["mode"] == "rate":  # the p99 over requests is modelled for Poisson arrivals only
        rows.insert(5, ["time per output token, p99 over requests", _ms(requests["tpot_p99_ms"])])
    lines = [
        f"requests  {_lengths(requests)}; {load}",
        table(rows, ["per request", "value"]),
    ]
    checks = []
    requirements = result.get("requirements") or {}
    if not requirements.get("load_served", True):
        checks.append("  load        FAIL  the replicas cannot keep up (the queue grows or the batch exceeds the slots)")
    if requirements.get("ttft_p99_target_ms") is not None:
        ok = requirements["ttft_p99_met"]
        checks.append(f"  p99 TTFT    {'ok  ' if ok else 'FAIL'}  {_ms(requests['ttft_p99_ms'])} {'<=' if ok else '>'} "
                      f"{requirements['ttft_p99_target_ms']:g} ms target (--ttft-p99-ms)")
    if requirements.get("tpot_target_ms") is not None:
        ok = requirements["tpot_met"]
        checks.append(f"  mean TPOT   {'ok  ' if ok else 'FAIL'}  {_ms(requests['tpot_ms'])} {'<=' if ok else '>'} "
                      f"{requirements['tpot_target_ms']:g} ms target (--tpot-ms)")
    lines.extend(checks)
    lines.append("queueing  " + requests["queueing_model"])
    return "\n".join(lines)


def request_goal(result: Mapping[str, Any]) -> str | None:
    """The min-gpus goal in words when the request load is the target."""
    requests, requirements = result.get("requests"), result.get("requirements") or {}
    if not requests or not str(result["solver"].get("objective", "")).startswith("min-gpus: fewest GPUs serving"):
        return None
    load = f"{requests['rate_per_s']:g} requests/s" if requests["mode"] == "rate" else f"{requests['concurrency']:,} clients"
    targets = [f"p99 TTFT <= {requirements['ttft_p99_target_ms']:g} ms" for _ in [0] if requirements.get("ttft_p99_target_ms") is not None]
    targets += [f"mean TPOT <= {requirements['tpot_target_ms']:g} ms" for _ in [0] if requirements.get("tpot_target_ms") is not None]
    return f"the fewest GPUs serving {load}" + (f" with {' and '.join(targets)}" if targets else "")


def render_disaggregation(result: Mapping[str, Any]) -> str | None:
    """The best disaggregated prefill/decode plan beside the colocated one (solve only)."""
    found = result.get("disaggregation")
    if not found:
        return None
    lines = []
    plan, requests = found["plan"], found["requests"]
    if plan is not None:
        where = "one node, KV over NVLink" if requests["inside_one_node"] else "across nodes, KV over the network"
        lines.append(f"disaggregated  {plan['prefill_replicas']} prefill x tp{plan['prefill_tensor_parallel']} + {plan['decode_replicas']} "
                     f"decode x tp{plan['decode_tensor_parallel']} on {plan['gpu']} ({plan['gpus']:,} GPUs, {where}); "
                     f"{plan['quantization']} weights, {plan['kv_cache_dtype']} KV, {plan['decode_slots']:,} slots per decode replica"
                     + ("; speculative decoding on the decode replicas" if plan["speculative_decoding"] else ""))
        prefill, decode = requests["prefill"], requests["decode"]
        rows = [
            ["time to first token, p99", _ms(requests["ttft_p99_ms"])],
            ["time to first token, mean", _ms(requests["ttft_mean_ms"])],
            ["time per output token, mean (decodes only)", _ms(requests["tpot_ms"])],
            ["time per output token, p99 over requests", _ms(requests["tpot_p99_ms"])],
            [f"KV transfer of one prompt ({requests['kv_transfer_bytes_per_request'] / 1e6:,.0f} MB)", f"{requests['kv_transfer_ms']:,.2f} ms"],
            ["prefill of one prompt (whole step budget)", f"{prefill['prefill_ms']:,.1f} ms"],
            ["prefill replicas: utilization, p99 wait", f"{prefill['utilization']:.1%}, {_ms(prefill['wait_p99_ms'])}"],
            ["sequences decoding per decode replica", f"{decode['running_per_replica']:,.1f}"],
            ["capacity: output tokens/s at saturation", f"{requests['capacity_output_tokens_per_s']:,.0f}"],
        ]
        lines.append(table(rows, ["disaggregated plan", "value"]))
    lines.append("answer    " + found["why"])
    return "\n".join(lines)
