"""Cost terms that benchmarks/mutation_test.py showed no other test would miss (issue 11,
"a mutation script ... every mutation must be caught").

Each expected value is hand arithmetic from a published figure (a datasheet, a paper's
equation, a model's configuration), never a number the code printed. Where a term also
depends on one of vramopt's own assumptions (an efficiency, an acceptance rate), the test
sets or reads that assumption explicitly and checks how the term uses it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from vramopt.costs.coefficients import coefficient
from vramopt.costs.columns import OFFLOAD_CPU, PlanColumns
from vramopt.costs.inference import KV_CACHE_DTYPES, QUANTIZATIONS, ServingCase, ServingColumns, evaluate_serving
from vramopt.costs.lora import frozen_bytes_per_parameter
from vramopt.costs.training import TrainingCase, evaluate_training
from vramopt.hardware import load_gpu
from vramopt.models import load_model
from vramopt.types import PRECISIONS, ParameterCount


def serving(case: ServingCase, slots=1, speculative=0, mig_profile=-1, quantization="fp8") -> dict[str, float]:
    columns = ServingColumns(
        gpus=np.array([1]), tensor_parallel=np.array([1]), pipeline_parallel=np.array([1]),
        quantization=np.array([QUANTIZATIONS.index(quantization)]), kv_cache_dtype=np.array([KV_CACHE_DTYPES.index("fp8")]),
        paged_kv=np.array([1]), speculative=np.array([speculative]), slots=np.array([slots]), mig_profile=np.array([mig_profile]),
    )
    return {name: float(np.asarray(value).reshape(-1)[0]) for name, value in evaluate_serving(case, columns).items()}


def test_a_mig_instance_streams_memory_at_its_share_of_the_bandwidth():
    """NVIDIA's MIG User Guide (H100 80GB profiles): 3g.40gb owns 4 of the 8 memory slices
    (4 of 8 memory controllers and L2 slices), so it reads HBM at half the GPU's 3.35 TB/s.
    One decode step of Llama 3.1 8B at one slot is memory-bound (8 GB of fp8 weights, 2 FLOPs
    per weight per token), so on the instance it takes 8 / 4 = 2 times as long as on the
    whole GPU, and 1g.10gb (1 slice) 8 times."""
    gpu = load_gpu("h100")
    assert gpu.hbm_bandwidth_bytes_per_s == 3.35e12
    profiles = [profile.name for profile in gpu.mig_profiles]
    assert gpu.mig_profiles[profiles.index("3g.40gb")].memory_slices == 4
    assert gpu.mig_profiles[profiles.index("1g.10gb")].memory_slices == 1
    case = ServingCase(model=load_model("llama-3.1-8b"), gpu=gpu, context=4096)
    whole = serving(case)
    half = serving(case, mig_profile=profiles.index("3g.40gb"))
    eighth = serving(case, mig_profile=profiles.index("1g.10gb"))
    assert whole["memory_bound"] and half["memory_bound"] and eighth["memory_bound"]
    assert half["step_time_s"] / whole["step_time_s"] == pytest.approx(2.0, rel=1e-9)
    assert eighth["step_time_s"] / whole["step_time_s"] == pytest.approx(8.0, rel=1e-9)
    # The whole-GPU step by hand: fp8 weights (1 byte each) plus the KV cache in use, 2,048
    # tokens (half the 4,096 context, whole 16-token blocks) x 2 x 32 layers x 8 KV heads x
    # 128 x 1 byte, over 3.35 TB/s at the assumed streaming efficiency.
    bytes_read = 8_030_261_248 * 1.0 + 2048 * 2 * 32 * 8 * 128 * 1.0
    assert whole["step_time_s"] == pytest.approx(bytes_read / (3.35e12 * coefficient("hbm_bandwidth_efficiency")), rel=1e-9)


@pytest.mark.parametrize(("alpha", "gamma", "tokens_per_step"), [
    (0.6, 4, (1 - 0.6**5) / (1 - 0.6)),  # 2.3056
    (0.8, 4, (1 - 0.8**5) / (1 - 0.8)),  # 3.3616
    (0.8, 2, (1 - 0.8**3) / (1 - 0.8)),  # 2.44
])
def test_speculative_decoding_emits_the_expected_accepted_tokens_per_step(alpha, gamma, tokens_per_step):
    """Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative Decoding"),
    equation 1: with acceptance rate alpha and gamma draft tokens, a verification step emits
    (1 - alpha^(gamma+1)) / (1 - alpha) tokens on average, not gamma + 1. So the time per
    output token is the step time (target verification plus gamma draft steps) over that
    number, and one sequence's tokens/s is that number over the step time."""
    case = ServingCase(model=load_model("llama-3.1-8b"), gpu=load_gpu("h100"), context=4096,
                       acceptance_rate=alpha, speculative_tokens=gamma)
    plan = serving(case, speculative=1)
    assert plan["step_time_s"] / plan["latency_per_token_s"] == pytest.approx(tokens_per_step, rel=1e-12)
    assert plan["tokens_per_s"] * plan["step_time_s"] == pytest.approx(tokens_per_step, rel=1e-12)
    assert serving(case)["step_time_s"] == pytest.approx(serving(case)["latency_per_token_s"], rel=1e-12)


def test_qlora_stores_the_frozen_layers_in_4_127_bits():
    """Dettmers et al. 2023 (QLoRA) section 3: NF4 weights with double quantization cost
    4 + 0.127 bits per parameter (the second quantization cuts the constants from 0.5 to
    0.127 bits); embeddings and the output head stay in bf16. Llama 3.1 8B (its
    config.json: vocabulary 128,256, hidden size 4,096, untied embeddings, 8,030,261,248
    parameters) has 2 x 128,256 x 4,096 = 1,050,673,152 embedding parameters."""
    model = load_model("llama-3.1-8b")
    assert (model.parameters.total, model.parameters.embedding) == (8_030_261_248, 1_050_673_152)
    layers = 8_030_261_248 - 1_050_673_152
    expected = (layers * 4.127 / 8 + 1_050_673_152 * 2) / 8_030_261_248
    assert frozen_bytes_per_parameter(model, "qlora") == pytest.approx(expected, rel=1e-12)
    assert frozen_bytes_per_parameter(model, "lora") == 2.0


def synthetic(total: float):
    """Llama 3.1 70B's architecture with exactly ``total`` parameters, all of them layer
    parameters (no embedding, no ZeRO-3 buffer): only the count matters below."""
    count = ParameterCount(total=int(total), active=int(total), embedding=0, largest_layer=0)
    return replace(load_model("llama-3.1-70b"), name=f"synthetic-{total:.3g}", parameters=count)


@pytest.mark.parametrize(("params", "fits"), [(130e9, True), (150e9, False)])
def test_cpu_offload_may_use_80_percent_of_the_nodes_host_ram(params, fits):
    """The DGX B200 datasheet: 2 TB of system memory. ZeRO-Offload on one 8-GPU node with
    ZeRO-1 parks the 12 bytes of Adam state of every parameter in host RAM: 12 x 130e9 =
    1.56 TB fits the 1.6 TB that the 80% rule leaves (costs/coefficients.py,
    host_ram_usable_fraction), 12 x 150e9 = 1.8 TB does not, though it is under 2 TB."""
    gpu = load_gpu("b200")
    assert gpu.node.host_ram_bytes == 2e12 and gpu.node.gpus_per_node == 8
    assert coefficient("host_ram_usable_fraction") == 0.80
    case = TrainingCase(model=synthetic(params), gpu=gpu, seq_len=4096, global_batch=64)
    columns = PlanColumns.from_scalars(
        gpus=8, tensor_parallel=1, pipeline_parallel=1, data_parallel=8, sequence_parallel=0, virtual_stages=1,
        zero_stage=1, checkpoint_kind=0, checkpoint_every=0, precision=PRECISIONS.index("bf16"),
        grad_comm_precision=PRECISIONS.index("bf16"), offload=OFFLOAD_CPU, flash_attention=1, micro_batch=1,
    )
    values = evaluate_training(case, columns)
    assert float(values["host_bytes_per_node"][0]) == pytest.approx(12 * params, rel=1e-12)
    assert bool(values["fits_host"][0]) is fits
