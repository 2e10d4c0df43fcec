"""Issue 16 item 3 (prefix caching as an option): ``shared_prefix_tokens`` / ``--shared-prefix-tokens``,
the first N tokens of every prompt shared and served from vLLM's prefix cache."""

from __future__ import annotations

import json

import pytest

from tests.cli_runner import invoke
from vramopt.costs.request_serving import cached_prefix_tokens
from vramopt.errors import InputError
from vramopt.estimate import estimate_serving
from vramopt.exporters.vllm import vllm_args
from vramopt.models import load_model
from vramopt.costs.kv_cache import kv_cache_bytes_per_token
from vramopt.types import ServingPlan, ServingWorkload

PLAN = ServingPlan(gpu="h100", gpus=2, tensor_parallel=2, quantization="fp8", kv_cache_dtype="fp8", slots=256)


def estimate(prefix, **fields):
    workload = ServingWorkload(model="70b", input_tokens=1000, output_tokens=200, shared_prefix_tokens=prefix, **fields)
    return estimate_serving(workload, PLAN)


def test_only_whole_blocks_are_cached_and_the_last_token_is_computed():
    """issue 16 item 3: vLLM hashes whole 16-token blocks; a prompt always computes a token."""
    assert cached_prefix_tokens(None, 1000) == 0
    assert cached_prefix_tokens(815, 1000) == 800
    assert cached_prefix_tokens(999, 1000) == 992
    with pytest.raises(InputError, match="shorter than every prompt"):
        cached_prefix_tokens(1000, 1000)
    with pytest.raises(InputError, match="non-negative integer"):
        cached_prefix_tokens(-1, 1000)


def test_the_shared_prefix_is_held_once_per_replica():
    """issue 16 item 3: 256 slots of 1,000 + 200 tokens hold 800 tokens fewer each, plus the
    800-token prefix once: (256 x 800 - 800) tokens of the model's KV bytes per token, split
    over tp 2."""
    per_token = kv_cache_bytes_per_token(load_model("70b"), "fp8")
    saved = estimate(None).values["kv_cache_bytes"] - estimate(800).values["kv_cache_bytes"]
    assert saved == pytest.approx((256 * 800 - 800) * per_token / 2, rel=1e-9)


def test_prefill_and_ttft_shrink_and_capacity_grows():
    """issue 16 item 3: 200 computed prompt tokens instead of 1,000: the prefill is shorter,
    the p99 TTFT too, and each saturated step carries less prefill, so capacity rises."""
    plain, cached = estimate(None, rate_per_s=4.0).values, estimate(800, rate_per_s=4.0).values
    assert cached["prefill_alone_s"] < 0.5 * plain["prefill_alone_s"]
    assert cached["ttft_p99_s"] < plain["ttft_p99_s"]
    assert cached["capacity_tokens_per_s"] > 1.1 * plain["capacity_tokens_per_s"]
    assert cached["tpot_s"] < plain["tpot_s"]


def test_json_and_vllm_export_carry_the_prefix():
    """issue 16 item 3: the response's requests object shows the cached tokens beside the full
    input, and the vLLM export turns prefix caching on."""
    response = estimate(815).to_dict()
    assert response["requests"]["input_tokens"] == 1000 and response["requests"]["cached_prefix_tokens"] == 800
    assert vllm_args(response).content["enable_prefix_caching"] is True
    plain = estimate(None).to_dict()
    assert plain["requests"]["cached_prefix_tokens"] == 0
    assert "enable_prefix_caching" not in vllm_args(plain).content


def test_cli_flag_and_its_errors():
    """issue 16 item 3: --shared-prefix-tokens on the CLI; a prefix as long as a prompt, or the
    flag on a training workload, is one error line and exit status 2."""
    common = ["estimate", "--workload", "infer", "--model", "70b", "--gpu", "h100", "--gpus", "2", "--tp", "2",
              "--quantization", "fp8", "--kv-cache-dtype", "fp8", "--slots", "256", "--input-tokens", "1000", "--output-tokens", "200"]
    result = invoke([*common, "--shared-prefix-tokens", "800", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["requests"]["cached_prefix_tokens"] == 800
    for arguments, fragment in (([*common, "--shared-prefix-tokens", "1000"], "shorter than every prompt"),
                                (["solve", "--workload", "train", "--shared-prefix-tokens", "8"], "does not apply")):
        result = invoke(arguments)
        assert result.exit_code == 2 and result.stderr.startswith("error: ") and fragment in result.stderr, result.stderr
