"""Issue 11 item 3: pack on large clusters.

Before: on 256 empty H100 nodes one ``8b`` infer job was "not admitted: no plan of 8b fits"
(the job's option table covered every GPU count up to 2,048 and hit the table size guard),
while ``solve --max-gpus 2048`` finds a plan; and a training job had one option per entirely
free node (255 multi-node options on 256 nodes). Now a job's options grow with the number of
distinct free-GPU shapes and the logarithm of the node count, not with the node count.
"""

from __future__ import annotations

from vramopt.cluster import parse_cluster, parse_jobs
from vramopt.optimizer.pack import job_options, solve_pack


def empty_h100_nodes(count: int):
    return parse_cluster({"nodes": [{"name": f"n{index:03d}", "gpu": "h100", "gpus": 8} for index in range(count)]})


def test_one_infer_job_on_256_empty_nodes_is_admitted():
    """issue 11 item 3"""
    response = solve_pack(parse_jobs([{"id": "chat", "model": "8b", "workload": "infer"}]), empty_h100_nodes(256),
                          time_limit_s=60.0, workers=1)
    placement = response["placements"][0]
    assert placement["admitted"], placement["reason"]
    assert "no plan of 8b fits" not in placement["reason"]
    # It takes whole nodes beyond one node, each GPU once.
    gpus = [(node, gpu) for node, items in placement["gpus_by_node"].items() for gpu in items]
    assert len(gpus) == len(set(gpus)) == placement["plan"]["gpus"] > 8


def test_options_do_not_grow_with_the_node_count():
    """issue 11 item 3: four times the nodes adds the doubling node counts (32 and 64
    nodes), not one option per node (a serving job had 19 options on 16 nodes, 67 on 64)."""
    jobs = parse_jobs([{"id": "chat", "model": "70b", "workload": "infer"}])
    counts = {}
    for nodes in (16, 64):
        options, _ = job_options(jobs, empty_h100_nodes(nodes))
        counts[nodes] = len(options[0])
        assert counts[nodes] > 0
    assert counts[64] <= counts[16] + 2, counts
