"""Expert-parallel serving (issue 14 item 2): routed experts spread over ep GPUs with the
attention in tensor parallel inside groups of tp and data parallel across them (vLLM
``enable_expert_parallel``: ep = tp x dp; SGLang ``ep_size`` / ``enable_dp_attention``), the
all-to-all of each MoE layer over the link the ep group crosses, and the expert weights a
decode step reads from the batch's expert coverage. The expected values are computed here
from the models' configs and from published figures, not by the code under test."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from tests.cli_runner import invoke
from vramopt.estimate import estimate_serving, serving_case, serving_columns
from vramopt.types import SearchSpace, ServingPlan, ServingWorkload

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "exporters"

# DeepSeek-V3 config.json: 61 layers, the first 3 dense, 58 MoE layers of 256 routed experts
# of width 2048 (gate, up, down: 3 x 7168 x 2048 each), top-8.
DEEPSEEK_ROUTED_PARAMETERS = 58 * 256 * 3 * 7168 * 2048


def test_expected_experts_touched_is_the_occupancy_of_k_subsets():
    """issue 14 item 2: E x (1 - (1 - k/E)^B) experts touched by B tokens choosing top-k of E
    uniformly, checked by enumerating every routing of 2 tokens over 8 experts, top-2."""
    from vramopt.costs.serving_experts import expert_coverage

    subsets = list(itertools.combinations(range(8), 2))
    touched = np.mean([len(set(first) | set(second)) for first, second in itertools.product(subsets, subsets)])
    assert 8 * expert_coverage(2, 8, 2) == pytest.approx(touched)  # 3.5 experts
    assert 256 * expert_coverage(1, 256, 8) == pytest.approx(8.0)
    assert expert_coverage(10_000, 256, 8) == pytest.approx(1.0)


def _step_model(workload, plan):
    from vramopt.costs.inference import evaluate_serving
    from vramopt.costs.request_serving import mix_contexts
    from vramopt.costs.serving_step import StepModel, step_inputs

    case = serving_case(workload, plan.gpu)
    columns = serving_columns(case, [plan])
    values = evaluate_serving(case, columns)
    return StepModel(case, step_inputs(columns, values), float(case.requests.input_tokens), *mix_contexts(case.requests)), values


def test_a_one_token_decode_streams_only_its_eight_routed_experts():
    """issue 14 item 2: decode reads the experts its tokens are routed to. DeepSeek-V3 in fp8
    on 8 H200 (tp 8): one token streams the dense weights / 8 and 8/256 of the routed experts
    / 8, not all 671 GB / 8."""
    from vramopt.models import load_model

    workload = ServingWorkload(model="deepseek-v3", context=4096, input_tokens=1000, output_tokens=100)
    model, values = _step_model(workload, ServingPlan(gpu="h200", gpus=8, tensor_parallel=8, quantization="fp8", slots=8))
    dense = load_model("deepseek-v3").params_total - DEEPSEEK_ROUTED_PARAMETERS
    expected_bytes = dense / 8 + DEEPSEEK_ROUTED_PARAMETERS / 8 * 8 / 256  # fp8: one byte per parameter
    full_waves, _, _ = model.pieces(np.array([1.0]), np.array([0.0]), 1.0)
    streamed_s = float(full_waves[0][0][0]) if np.ndim(full_waves[0][0]) else float(full_waves[0][0])
    assert streamed_s * float(values["hbm_bytes_per_s"][0]) == pytest.approx(expected_bytes, rel=1e-9)
    assert expected_bytes < 0.2 * load_model("deepseek-v3").params_total / 8


def test_a_pipelined_replica_streams_the_experts_of_every_stage():
    """issue 14 item 2: a step runs the pipeline's stages in turn, so one replica of tp 2 x pp 2
    reads every expert once per step (a GPU of each stage its stage's half): at a batch that
    touches every expert it serves half the tokens/s of two tp-2 replicas on the same GPUs,
    as before expert coverage was modelled."""
    workload = ServingWorkload(model="mixtral-8x7b", context=4096)
    two = estimate_serving(workload, ServingPlan(gpu="h100", gpus=4, tensor_parallel=2, slots=64)).values
    staged = estimate_serving(workload, ServingPlan(gpu="h100", gpus=4, tensor_parallel=2, pipeline_parallel=2, slots=64)).values
    assert staged["tokens_per_s"] == pytest.approx(two["tokens_per_s"] / 2, rel=1e-6)
    assert staged["weights_bytes"] == pytest.approx(two["weights_bytes"] / 2, rel=1e-9)


# DeepEP README, "Low-latency kernels with pure RDMA": H800 with a CX7 400 Gb/s NIC, 128 tokens
# per GPU, 7168 hidden, top-8, FP8 dispatch and BF16 combine: dispatch + combine latency (us).
DEEPEP_LOW_LATENCY_US = {16: 118 + 195, 32: 155 + 273, 64: 173 + 314, 128: 192 + 369, 256: 194 + 360}


@pytest.mark.parametrize("expert_parallel", sorted(DEEPEP_LOW_LATENCY_US))
def test_the_all_to_all_matches_deepeps_measured_low_latency_kernels(expert_parallel):
    """issue 14 item 2: the all-to-all per decode step over the link the ep group crosses;
    DeepSeek-V3 fp8 on H800 (tp 1) at 128 tokens per GPU, one MoE layer's dispatch and
    combine, within 8% of DeepEP's measurement (out of sample: nothing was fitted)."""
    from vramopt.costs.coefficients import coefficient
    from vramopt.costs.serving_experts import serving_expert_terms
    from vramopt.hardware import load_gpu
    from vramopt.models import load_model

    model = load_model("deepseek-v3")
    terms = serving_expert_terms(model, load_gpu("h800"), np.array([1]), np.array([1]), np.array([expert_parallel]),
                                 np.array([float(DEEPSEEK_ROUTED_PARAMETERS)]), coefficient("all_reduce_latency_s"),
                                 quantization=np.array([1]))
    per_layer_s = (float(terms["all_to_all_s_per_token"][0]) * 128 * expert_parallel
                   + float(terms["all_to_all_latency_s"][0])) / 58
    assert per_layer_s * 1e6 == pytest.approx(DEEPEP_LOW_LATENCY_US[expert_parallel], rel=0.08)


def test_deepseek_v3s_prefill_unit_fits_with_eight_experts_per_gpu():
    """issue 14 item 2: DeepSeek-V3 report section 3.4.1, the prefill deployment unit: 4 nodes
    of H800 (32 GPUs), attention TP4 with DP8, MoE EP32 (each GPU holds 256 / 32 = 8 routed
    experts). Expressible, fits, and its weights are the dense part / 4 plus 8 experts; the
    MLA cache of a group's sequences only (every tp rank keeps the whole latent)."""
    workload = ServingWorkload(model="deepseek-v3", context=8192)
    estimate = estimate_serving(workload, ServingPlan(gpu="h800", gpus=32, tensor_parallel=4, expert_parallel=32,
                                                      quantization="fp8", slots=256))
    from vramopt.models import load_model

    dense = load_model("deepseek-v3").params_total - DEEPSEEK_ROUTED_PARAMETERS
    assert estimate.values["weights_bytes"] == pytest.approx(dense / 4 + DEEPSEEK_ROUTED_PARAMETERS / 32, rel=1e-9)
    assert estimate.values["replicas"] == 1
    assert estimate.fits
    latent_bytes_per_token = 61 * (512 + 64) * 2  # kv_lora_rank + qk_rope_head_dim, bf16
    held = np.ceil(8192 * 0.5 / 16) * 16  # the decode-only model's half context in whole blocks
    assert estimate.values["kv_cache_bytes"] == pytest.approx(256 / 8 * held * latent_bytes_per_token * 1.04, rel=0.05)


def test_deepseek_v3_serving_chooses_expert_parallel_with_data_parallel_attention():
    """issue 14 item 2 must-show: DeepSeek-V3 serving chooses ep where it pays. On 32 H100 at
    2,000 + 200 tokens the optimum spreads the experts with data-parallel attention (as the
    DeepSeek-V3 deployment and SGLang's large-scale EP blog run it). Against the best plan
    without expert parallelism (TP16 over two nodes): SGLang reports 3.3x (prefill, EP32 on 4
    nodes against TP16) to "up to 5x" output throughput over vanilla tensor parallelism on
    the same GPUs (LMSYS blog 2025-05-05); vramopt predicts 6.46x per GPU, 29% over the top of
    that range (its TP16 pays every token's all-reduces over InfiniBand, 2 x 61 per step).
    The lower bound is SGLang's figure; the upper one is a regression bound around the
    recorded 6.46x (10%), not a published figure."""
    from vramopt.optimizer.search import solve

    workload = ServingWorkload(model="deepseek-v3", context=4096, input_tokens=2000, output_tokens=200)
    chosen = solve(workload, SearchSpace(gpus=("h100",), max_gpus=32, objective="per-gpu")).estimate
    plan = chosen.plan
    assert plan.expert_parallel > 1 and plan.expert_parallel // plan.tensor_parallel > 1, plan
    # Without ep, 61 layers (prime) leave no pipeline split: tp 16 across two nodes, SGLang's TP16 baseline.
    without = solve(workload, SearchSpace(gpus=("h100",), max_gpus=32, objective="per-gpu", pin={"expert_parallel": "1"},
                                          allow_tp_across_nodes=True)).estimate
    assert without.plan.tensor_parallel == 16
    ratio = (chosen.values["tokens_per_s"] / plan.gpus) / (without.values["tokens_per_s"] / without.plan.gpus)
    assert 3.3 <= ratio <= 6.46 * 1.1, ratio


def test_the_2t_serving_must_show_chooses_expert_parallel_and_exports_it(tmp_path):
    """issue 14 must-show: `--workload infer --model 2t --max-gpus 16` gives a serving plan with
    ep > 1 when it wins; the vLLM and SGLang exports carry it."""
    out = tmp_path / "vllm.yaml"
    result = invoke(["solve", "--workload", "infer", "--model", "2t", "--max-gpus", "16", "--export", "vllm", str(out)])
    assert result.exit_code == 0, result.output
    replicas = next(line for line in result.stdout.splitlines() if line.startswith("replicas"))
    assert " ep=" in replicas, replicas
    assert "expert-parallel all-to-alls per step" in result.stdout
    assert "enable_expert_parallel: true" in out.read_text()
    sglang = tmp_path / "sglang.yaml"
    assert invoke(["solve", "--workload", "infer", "--model", "2t", "--max-gpus", "16", "--export", "sglang", str(sglang)]).exit_code == 0
    text = sglang.read_text()
    assert "ep_size: " in text and 'moe_a2a_backend: "deepep"' in text


def test_the_sglang_arguments_of_an_expert_parallel_plan_are_its_parsers():
    """issue 14 item 2: SGLang's tp_size is the ep group (ep = tp x dp attention groups),
    dp_size its attention groups with enable_dp_attention, ep_size and the DeepEP backend,
    each a recorded argument of SGLang 0.5.23's parser with a value it takes; vLLM's
    enable_expert_parallel and data_parallel_size are in its recorded EngineArgs."""
    from vramopt.exporters.sglang import sglang_args
    from vramopt.exporters.vllm import vllm_args

    response = estimate_serving(ServingWorkload(model="deepseek-v3", context=8192),
                                ServingPlan(gpu="h200", gpus=32, tensor_parallel=4, expert_parallel=16,
                                            quantization="fp8", slots=256)).to_dict()
    vllm = vllm_args(response).content
    assert (vllm["tensor_parallel_size"], vllm["data_parallel_size"], vllm["enable_expert_parallel"]) == (4, 4, True)
    assert vllm["max_num_seqs"] == 64  # 256 slots over 4 data-parallel engines
    documented = json.loads((FIXTURES / "vllm_documented_args.json").read_text())["args"]
    assert {"enable_expert_parallel", "data_parallel_size"} <= set(documented)
    content = sglang_args(response).content
    assert (content["tp_size"], content["dp_size"], content["ep_size"]) == (16, 4, 16)
    assert content["enable_dp_attention"] is True and content["max_running_requests"] == 256
    recorded = {option[2:].replace("-", "_"): argument
                for argument in json.loads((FIXTURES / "sglang_server_args.json").read_text())["arguments"]
                for option in argument["options"] if option.startswith("--")}
    assert recorded["enable_dp_attention"]["nargs"] == 0  # a bare flag (a custom action in 0.5.23), written as one
    assert content["moe_a2a_backend"] in recorded["moe_a2a_backend"]["choices"]
    assert recorded["ep_size"]["type"] == "int" and recorded["dp_size"]["type"] == "int"


@pytest.mark.parametrize("args,fragment", [
    (["--model", "70b", "--gpus", "2", "--ep", "2"], "needs a mixture-of-experts model"),
    (["--model", "mixtral-8x7b", "--gpus", "4", "--tp", "4", "--ep", "2"], "multiple of tensor_parallel"),
    (["--model", "mixtral-8x7b", "--gpus", "4", "--tp", "2", "--pp", "2", "--ep", "2"], "without pipeline parallelism"),
    (["--model", "mixtral-8x7b", "--gpus", "4", "--ep", "3"], "divide the routed experts"),
    (["--model", "mixtral-8x7b", "--gpus", "4", "--ep", "8"], "expert_parallel must divide the GPU count"),
])
def test_bad_expert_parallel_serving_plans_are_one_line(args, fragment):
    """issue 14 must-show (bad input): one line, exit 2."""
    result = invoke(["estimate", "--workload", "infer", "--gpu", "h100", *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and fragment in result.stderr, result.stderr


@pytest.mark.parametrize("model,gpu,max_gpus,objective,load", [
    ("mixtral-8x7b", "h100", 16, "throughput", {}),
    ("qwen3-30b-a3b", "a100-80gb", 8, "per-gpu", {"input_tokens": 1000, "output_tokens": 200, "rate_per_s": 20.0, "tpot_ms": 60.0}),
    ("deepseek-v3", "h200", 16, "min-gpus", {"input_tokens": 1000, "output_tokens": 500, "rate_per_s": 5.0, "tpot_ms": 80.0}),
])
def test_cp_sat_equals_exhaustive_with_expert_parallel_keys(model, gpu, max_gpus, objective, load):
    """issue 16 item 5 / issue 14: CP-SAT = exhaustive on serving tables whose keys include ep."""
    from vramopt.optimizer.oracle import solve_exhaustive
    from vramopt.optimizer.problem import build_problem
    from vramopt.optimizer.solve import solve_cp

    problem = build_problem(ServingWorkload(model=model, context=4096, **load), SearchSpace(gpus=(gpu,), max_gpus=max_gpus, objective=objective))
    assert (problem.keys["expert_parallel"] > 1).any()
    outcome, exhaustive = solve_cp(problem, time_limit_s=60.0, workers=1), solve_exhaustive(problem)
    assert exhaustive is not None and outcome.status == "optimal"
    assert (outcome.choice.key, outcome.choice.state_item) == (exhaustive.key, exhaustive.state_item)
