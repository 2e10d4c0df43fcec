"""`vramopt solve --workload infer` with disaggregated prefill/decode (issue 16 item 4 and the
must-show "the same with a disaggregated plan when it wins, with the why line saying why"):
the table, the JSON against the serving schema, the vLLM launch notes, the switch."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from tests.cli_runner import invoke

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "schema" / "vramopt-serving-v1.schema.json").read_text())
MUST_SHOW = ["solve", "--workload", "infer", "--model", "70b", "--gpu", "h100", "--rate", "10", "--input-tokens", "1000",
             "--output-tokens", "1000", "--ttft-p99-ms", "2000", "--tpot-ms", "50", "--objective", "min-gpus"]
WINS = ["solve", "--workload", "infer", "--model", "70b", "--gpu", "h100", "--rate", "20", "--input-tokens", "500",
        "--output-tokens", "100", "--ttft-p99-ms", "500", "--tpot-ms", "10", "--objective", "min-gpus"]


def _schema_errors():
    spec = importlib.util.spec_from_file_location("_vramopt_cli_estimate_helpers", Path(__file__).with_name("test_cli_estimate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.schema_errors


def _json(args):
    result = invoke(args + ["--format", "json"])
    assert result.exit_code == 0, result.output
    response = json.loads(result.stdout)
    body = {key: value for key, value in response.items() if key not in ("solver", "runners_up", "explanation", "offload_cost")}
    assert _schema_errors()(body, SCHEMA, SCHEMA) == []
    return response


def test_the_must_show_says_why_colocated_wins():
    result = invoke(MUST_SHOW)
    assert result.exit_code == 0, result.output
    assert "disaggregated  1 prefill x tp2 + 1 decode x tp4 on h100 (6 GPUs" in result.stdout
    answer = next(line for line in result.stdout.splitlines() if line.startswith("answer    "))
    assert answer.startswith("answer    colocated wins: the best disaggregated plan, 1 prefill x tp2 + 1 decode x tp4 (6 GPUs), gives "), answer
    disaggregated, colocated = (float(text.replace(",", "")) for text in answer.split(" gives ")[1].split(" output")[0].split(" vs "))
    assert disaggregated < colocated  # why colocated wins: more output tokens/s on the same 6 GPUs
    response = _json(MUST_SHOW)
    found = response["disaggregation"]
    assert found["chosen"] is False and found["plan"]["gpus"] == response["plan"]["gpus"] == 6
    assert found["searched"]["gpu_bound"] == 6
    assert found["requests"]["tpot_ms"] < response["requests"]["tpot_ms"]  # no prefill in the decode steps


def test_a_disaggregated_plan_that_wins_is_the_answer_with_its_reason():
    result = invoke(WINS)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "answer    disaggregated wins: 1 prefill x tp2 + 1 decode x tp2 (4 GPUs) serves the load within the targets, " \
           "the colocated plan needs 6 GPUs (the smallest mean TPOT within 4 GPUs at this load is " in out
    assert "the decode step with its prefill share); the target is 10 ms); its decode steps carry no prefill" in out
    assert "why       disaggregated prefill/decode is the answer (above)" in out
    response = _json(WINS)
    found = response["disaggregation"]
    assert found["chosen"] is True and found["plan"]["gpus"] == 4 < response["plan"]["gpus"] == 6
    assert found["requests"]["ttft_p99_ms"] <= 500 and found["requests"]["tpot_ms"] <= 10


def test_the_vllm_export_says_how_to_launch_it(tmp_path):
    target = tmp_path / "vllm.json"
    result = invoke(WINS + ["--export", "vllm", str(target)])
    assert result.exit_code == 0, result.output
    notes = result.stderr if hasattr(result, "stderr") else result.output
    assert "disaggregated prefill/decode is the answer (1 prefill x tp2 + 1 decode x tp2, 4 GPUs)" in notes
    assert "1 prefill instance(s): vllm serve <model> --tensor-parallel-size 2 --quantization fp8" in notes
    assert "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}'" in notes
    assert "toy_proxy_server.py --prefiller-hosts" in notes


def test_the_sglang_export_says_how_to_launch_it(tmp_path):
    target = tmp_path / "sglang.yaml"
    result = invoke(WINS + ["--export", "sglang", str(target)])
    assert result.exit_code == 0, result.output
    notes = result.stderr if hasattr(result, "stderr") else result.output
    assert "note (sglang): disaggregated prefill/decode is the answer (1 prefill x tp2 + 1 decode x tp2)" in notes
    assert "--disaggregation-mode prefill" in notes and "--disaggregation-mode decode" in notes
    assert target.read_text().startswith("# python -m sglang.launch_server --config FILE")


def test_the_switch_turns_it_off_and_is_checked():
    response = _json(WINS + ["--disaggregation", "off"])
    assert "disaggregation" not in response
    bad = invoke(WINS + ["--disaggregation", "maybe"])
    assert bad.exit_code == 2 and "maybe" in bad.output


def test_no_colocated_plan_names_the_disaggregated_one_as_a_fix():
    result = invoke(WINS + ["--max-gpus", "4"])
    assert result.exit_code == 2
    assert ("fix: disaggregated prefill/decode: 1 prefill x tp2 + 1 decode x tp2 (4 GPUs) meets every target" in result.output)
