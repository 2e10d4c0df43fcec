"""Pack at scale: time and gap for 20 jobs on 16 nodes, 100 on 128, 500 on 512.

Run: python benchmarks/pack_scale.py [--time-limit 10] [--workers 4] [--cases 20x16,100x128,500x512]
A deterministic mixed cluster (a third each of H100 nodes, some with carved MIG slices,
A100-80GB and B200 nodes, some partly busy) and a queue drawn from serving, LoRA,
fine-tuning and pretraining templates with weights 0.5-3 (seeded). Prints the wall time,
the time spent building job options, the solver status and gap, and what was admitted.
Target: 100 jobs on 128 nodes within 10 s at a gap of at most 1%.
"""

from __future__ import annotations

import argparse
import random
import time

from vramopt.cluster import parse_cluster, parse_jobs
from vramopt.optimizer import pack as pack_module
from vramopt.optimizer.pack import solve_pack

TEMPLATES = [
    {"model": "8b", "workload": "infer", "context": 8192, "max_gpus": 2},
    {"model": "70b", "workload": "infer", "context": 8192, "max_gpus": 8},
    {"model": "7b", "workload": "infer", "context": 4096, "max_gpus": 1},
    {"model": "8b", "workload": "lora", "global_batch": 32, "seq_len": 4096, "max_gpus": 2},
    {"model": "70b", "workload": "qlora", "global_batch": 32, "seq_len": 4096, "max_gpus": 4},
    {"model": "13b", "workload": "finetune", "global_batch": 128, "seq_len": 4096, "max_gpus": 8},
    {"model": "70b", "workload": "train", "global_batch": 1024, "seq_len": 4096, "max_gpus": 32},
    {"model": "8b", "workload": "train", "global_batch": 512, "seq_len": 4096, "max_gpus": 16},
]


def make_cluster(nodes: int, rng: random.Random) -> dict:
    items = []
    for index in range(nodes):
        gpu = ("h100", "a100-80gb", "b200")[index % 3]
        node = {"name": f"n{index:03d}", "gpu": gpu, "gpus": 8}
        busy = rng.random() < 0.3
        free = list(range(8))
        if busy:
            free = sorted(rng.sample(range(8), rng.randint(2, 6)))
        if gpu == "h100" and rng.random() < 0.3:
            carved = max(free) if free else 7
            free = [value for value in free if value != carved]
            node["mig"] = {str(carved): rng.choice((["3g.40gb", "3g.40gb"], ["2g.20gb"] * 3, ["1g.20gb"] * 4))}
        node["free_gpus"] = free
        items.append(node)
    return {"nodes": items}


def make_jobs(count: int, rng: random.Random) -> list[dict]:
    jobs = []
    for index in range(count):
        job = dict(rng.choice(TEMPLATES))
        job.update(id=f"job{index:03d}", weight=rng.choice((0.5, 1.0, 1.0, 2.0, 3.0)))
        if job["workload"] == "infer" and rng.random() < 0.3:
            job["min_tokens_per_s"] = 2000.0
        jobs.append(job)
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--cases", default="20x16,100x128,500x512")
    arguments = parser.parse_args()
    print(f"{'jobs':>5} {'nodes':>5} {'options_s':>9} {'total_s':>8} {'status':<8} {'gap':>7} {'admitted':>8} {'gpus_used':>9} {'value':>8}")
    for case in arguments.cases.split(","):
        job_count, node_count = (int(part) for part in case.split("x"))
        rng = random.Random(1234 + job_count)
        nodes = parse_cluster(make_cluster(node_count, rng))
        jobs = parse_jobs(make_jobs(job_count, rng))
        started = time.perf_counter()
        options, _ = pack_module.job_options(jobs, nodes)
        options_s = time.perf_counter() - started
        started = time.perf_counter()
        response = solve_pack(jobs, nodes, time_limit_s=arguments.time_limit, workers=arguments.workers)
        total_s = time.perf_counter() - started
        summary = response["summary"]
        solver = summary["solver"]
        print(f"{job_count:>5} {node_count:>5} {options_s:>9.2f} {total_s:>8.2f} {solver['status']:<8} {solver['gap']:>7.2%} "
              f"{summary['jobs_admitted']:>8} {summary['gpus_used']:>9} {summary['weighted_normalized_throughput']:>8.2f}")


if __name__ == "__main__":
    main()
