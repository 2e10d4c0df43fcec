"""A user's hardware file (issue 17 item 1): GPUs and node profiles added to, or overriding,
the built-in catalog with the catalog's strict rules, for one call at a time."""

from __future__ import annotations

import json
import threading

import pytest

import vramopt
from vramopt.errors import CatalogError, UnknownNameError
from vramopt.hardware import builtin_gpus, load_gpu, load_hardware_file, merge_hardware, using_hardware
from vramopt.units import BYTES_PER_GB, BYTES_PER_GIB

from tests.cli_runner import invoke

CLUSTER_FILE = """
[gpu.h100]
runtime_memory_gib = { value = 78.5, source = "measured on our cluster: torch.cuda.mem_get_info" }
[gpu.h100.node]
network_gbit_per_s_per_gpu = { value = 200, source = "measured on our cluster: nccl-tests" }

[gpu.h100-lab]
based_on = "h100"
display_name = "H100 SXM in our 4-GPU lab nodes"
[gpu.h100-lab.node]
gpus_per_node = { value = 4, source = "our lab inventory" }
"""


@pytest.fixture
def cluster_file(tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_text(CLUSTER_FILE)
    return path


def write(tmp_path, text):
    path = tmp_path / "hardware.toml"
    path.write_text(text)
    return path


def test_override_changes_only_the_given_keys_and_carries_their_sources(cluster_file):
    """issue 17 item 1: an override keeps every other built-in value and source."""
    builtin = load_gpu("h100")
    catalog = load_hardware_file(cluster_file)
    with using_hardware(catalog):
        gpu = load_gpu("h100")
        assert load_gpu("h100-sxm") is gpu  # the built-in aliases still reach it
    assert gpu.memory_bytes == round(78.5 * BYTES_PER_GIB)
    assert gpu.sources["memory_bytes"] == "measured on our cluster: torch.cuda.mem_get_info"
    assert gpu.node.network_bandwidth_bytes_per_s_per_gpu == 200e9 / 8
    assert gpu.node.sources["network_bandwidth_bytes_per_s_per_gpu"] == "measured on our cluster: nccl-tests"
    # Untouched keys: exactly the built-in figures and sources.
    assert gpu.hbm_bandwidth_bytes_per_s == builtin.hbm_bandwidth_bytes_per_s
    assert gpu.node.host_ram_bytes == builtin.node.host_ram_bytes
    assert gpu.sources["hbm_bandwidth_bytes_per_s"] == builtin.sources["hbm_bandwidth_bytes_per_s"]
    assert gpu.node.gpus_per_node == builtin.node.gpus_per_node
    # Outside the block the built-in catalog is back.
    assert load_gpu("h100") == builtin
    with pytest.raises(UnknownNameError):
        load_gpu("h100-lab")


def test_new_profile_based_on_a_builtin_gpu(cluster_file):
    """issue 17 item 1: a node profile of one's own, started from a built-in GPU."""
    with using_hardware(load_hardware_file(cluster_file)):
        lab = load_gpu("h100-lab")
    builtin = load_gpu("h100")
    assert lab.node.gpus_per_node == 4 and builtin.node.gpus_per_node == 8
    assert lab.aliases == ()  # aliases are not inherited: they would clash
    assert lab.display_name == "H100 SXM in our 4-GPU lab nodes"
    assert lab.peak_flops_per_s == builtin.peak_flops_per_s


def test_a_unit_written_differently_replaces_the_builtin_key(tmp_path):
    path = write(tmp_path, '[gpu.h100]\nruntime_memory_mib = { value = 80000, source = "measured" }\n')
    with using_hardware(load_hardware_file(path)):
        assert load_gpu("h100").memory_bytes == 80000 * 2**20


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[gpu.h100]\nruntime_memory_gib = { value = 78, source = "x" }\nfoo = 1\n', "key 'gpu.h100.foo' is not a known key"),
        ('[gpu.h100]\nruntime_memory = { value = 78, source = "x" }\n', "key 'gpu.h100.runtime_memory' has no unit"),
        ('[gpu.h100.node]\nnetwork_per_gpu = { value = 1, source = "x" }\n', "key 'gpu.h100.node.network_per_gpu' has no unit"),
        ('[gpu.h100]\nruntime_memory_gib = { value = 78 }\n', "key 'gpu.h100.runtime_memory_gib.source' is missing"),
        ('[gpu.newcard]\ndisplay_name = "x"\n', "'gpu.newcard.datasheet_memory_gb' is missing"),
        ('[gpu.lab]\nbased_on = "nope"\n', "key 'gpu.lab.based_on' must name a built-in GPU"),
        ('[gpu.h100]\nbased_on = "h200"\n', "key 'gpu.h100.based_on' is only for a new GPU"),
        ('[gpu.lab]\nbased_on = "h100"\naliases = ["h200"]\n', "'h200' is already used by 'h200'"),
        ('[gpu.h100]\nruntime_memory_gib = { value = 7, source = "x" }\n', "check the unit"),
        ('[gpus.h100]\n', "key 'gpus' is not a known key"),
        ('[gpu.h100]\nruntime_memory_gib = { value = 72, source = "x" }\n', "key 'gpu.h100.mig_profiles[1].max_instances'"),
        ('[gpu.H100]\n', "table 'gpu.H100'"),
    ],
)
def test_bad_files_name_the_file_and_the_key(tmp_path, text, message):
    """issue 17 item 1: unknown keys and missing units refused, naming file and key."""
    path = write(tmp_path, text)
    with pytest.raises(CatalogError) as caught:
        load_hardware_file(path)
    assert str(path) in str(caught.value) and message in str(caught.value)


def test_override_is_local_to_the_thread():
    """A catalog activated in one thread is invisible to another running at the same time."""
    catalog = merge_hardware(
        {"gpu": {"h100": {"runtime_memory_gib": {"value": 76.0, "source": "measured"}}}}, __import__("pathlib").Path("t"), builtin_gpus()
    )
    seen = {}
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        inside.wait()
        seen["other"] = load_gpu("h100").memory_bytes
        release.set()

    thread = threading.Thread(target=other)
    thread.start()
    with using_hardware(catalog):
        inside.set()
        release.wait(timeout=30)
        seen["mine"] = load_gpu("h100").memory_bytes
    thread.join()
    assert seen["mine"] == round(76.0 * BYTES_PER_GIB)
    assert seen["other"] == load_gpu("h100").memory_bytes != seen["mine"]


def test_cli_gpus_shows_the_merge(cluster_file):
    result = invoke(["gpus", "--hardware", str(cluster_file)])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    lab = next(line for line in lines if line.startswith("h100-lab "))
    assert lab.split()[-2] == "4"  # GPUs/node of the new profile
    h100 = next(line for line in lines if line.startswith("h100 "))
    assert "78.50" in h100
    assert lines[-1] == f"From {cluster_file}: h100 (overrides built-in), h100-lab (added)"
    data = json.loads(invoke(["gpus", "--hardware", str(cluster_file), "--format", "json"]).stdout)
    assert next(gpu for gpu in data if gpu["name"] == "h100")["sources"]["memory_bytes"].startswith("measured on our cluster")


def test_cli_solve_and_estimate_use_the_profile(cluster_file):
    args = ["--model", "llama-3.1-8b", "--gpu", "h100-lab", "--hardware", str(cluster_file), "--format", "json"]
    solved = invoke(["solve", "--max-gpus", "8", *args])
    assert solved.exit_code == 0, solved.stderr
    data = json.loads(solved.stdout)
    assert data["plan"]["gpu"] == "h100-lab"
    assert data["plan"]["nodes"] == -(-data["plan"]["gpus"] // 4)  # 4 GPUs per node in the profile
    estimated = invoke(["estimate", "--gpus", "4", *args])
    assert estimated.exit_code == 0, estimated.stderr
    assert json.loads(estimated.stdout)["plan"]["gpu"] == "h100-lab"
    unknown = invoke(["solve", "--model", "llama-3.1-8b", "--gpu", "h100-lab"])
    assert unknown.exit_code == 2 and "unknown GPU 'h100-lab'" in unknown.stderr


def test_cli_bad_file_is_one_line_exit_2(tmp_path):
    path = write(tmp_path, '[gpu.h100]\nruntime_memory = { value = 78, source = "x" }\n')
    for command in (["gpus"], ["solve", "--model", "llama-3.1-8b"], ["pareto", "--model", "llama-3.1-8b"],
                    ["estimate", "--model", "llama-3.1-8b"]):
        result = invoke([*command, "--hardware", str(path)])
        assert result.exit_code == 2
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ") and "has no unit" in result.stderr


def test_api_inline_hardware(cluster_file):
    """The API's ``hardware`` field: the file's content inline; a path is refused."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    hardware = tomllib.loads(cluster_file.read_text())
    request = {"workload": {"model": "llama-3.1-8b"}, "space": {"gpus": ["h100-lab"], "max_gpus": 4}, "hardware": hardware}
    response = vramopt.api.solve(request)
    assert response.plan["gpu"] == "h100-lab" and response.plan["nodes"] == 1
    assert vramopt.api.SolveRequest.from_dict(request).to_dict()["hardware"] == hardware
    with pytest.raises(vramopt.errors.InputError, match="request hardware: must be an object"):
        vramopt.api.solve({**request, "hardware": str(cluster_file)})
    bad = {"gpu": {"h100": {"runtime_memory": {"value": 1, "source": "x"}}}}
    with pytest.raises(CatalogError, match="request.hardware: key 'gpu.h100.runtime_memory' has no unit"):
        vramopt.api.solve({**request, "hardware": bad})
    with pytest.raises(UnknownNameError):
        vramopt.api.solve({**request, "hardware": None})


def test_pack_cluster_names_a_profile_of_the_file(cluster_file, tmp_path):
    """issue 17 item 1: a cluster file of `pack` may name a GPU the hardware file adds."""
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"nodes": [{"name": "lab-1", "gpu": "h100-lab", "gpus": 4}]}))
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps([{"id": "serve-8b", "model": "8b", "workload": "infer", "context": 4096, "max_gpus": 1}]))
    args = ["pack", "--cluster", str(cluster), "--jobs", str(jobs), "--format", "json"]
    result = invoke([*args, "--hardware", str(cluster_file)])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["placements"][0]["admitted"]
    without = invoke(args)
    assert without.exit_code == 2 and "h100-lab" in without.stderr
