"""Pack at scale: elapsed time, peak memory, status and gap of ``solve_pack``.

Run: python benchmarks/pack_scale.py [--workers 4] [--cases 20x16,100x128@10,60x120@0.01:open,...]

A case is JOBSxNODES, optionally @LIMIT (the time limit in seconds, default --time-limit)
and :open (the jobs have no max_gpus, so each may take every free GPU of a type; the
default queue caps each template's GPUs). A deterministic mixed cluster (a third each of
H100 nodes, some with carved MIG slices, A100-80GB and B200 nodes, about 30% partly busy)
and a seeded queue of serving, LoRA, QLoRA, fine-tuning and pretraining jobs with weights
0.5-3. Each case runs in its own process, so that its peak RSS (resource.getrusage
ru_maxrss) is its own.

Printed per case: the time limit and the answer's elapsed time against the target of
2 x limit + 1 s, the peak RSS, the status, gap and what was admitted; then, without a
deadline, the time to build every job's options and what the greedy pass alone admits
from them (the floor a time-limited answer is held to; an answer whose options the limit
cut short may admit less).
Targets (issue 11): 100 jobs on 128 nodes within 10 s at a gap of at most 1%; every answer
within 2 x limit + 1 s, and 300 jobs on 512 nodes under 1 GB.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time

DEFAULT_CASES = "20x16,100x128,500x512,60x120@0.01,60x120@0.01:open,300x512@10,300x512@10:open"

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


def make_jobs(count: int, rng: random.Random, open_queue: bool = False) -> list[dict]:
    jobs = []
    for index in range(count):
        job = dict(rng.choice(TEMPLATES))
        job.update(id=f"job{index:03d}", weight=rng.choice((0.5, 1.0, 1.0, 2.0, 3.0)))
        if job["workload"] == "infer" and rng.random() < 0.3:
            job["min_tokens_per_s"] = 2000.0
        if open_queue:
            del job["max_gpus"]
        jobs.append(job)
    return jobs


def parse_case(text: str, default_limit_s: float) -> tuple[int, int, float, bool]:
    sizes, _, queue = text.partition(":")
    sizes, _, limit = sizes.partition("@")
    job_count, node_count = (int(part) for part in sizes.split("x"))
    if queue not in ("", "open"):
        raise SystemExit(f"case {text!r}: the queue is empty (capped) or 'open'")
    return job_count, node_count, float(limit) if limit else default_limit_s, queue == "open"


def run_case(case: str, default_limit_s: float, workers: int) -> dict:
    """One case, in this process (the parent starts a process per case)."""
    from vramopt.cluster import parse_cluster, parse_jobs
    from vramopt.optimizer.pack import solve_pack
    from vramopt.optimizer.pack_greedy import greedy
    from vramopt.optimizer.pack_options import build_options
    from vramopt.optimizer.pack_value import Values

    job_count, node_count, limit_s, open_queue = parse_case(case, default_limit_s)
    rng = random.Random(1234 + job_count)
    nodes = parse_cluster(make_cluster(node_count, rng))
    jobs = parse_jobs(make_jobs(job_count, rng, open_queue))
    started = time.perf_counter()
    response = solve_pack(jobs, nodes, time_limit_s=limit_s, workers=workers)
    elapsed_s = time.perf_counter() - started
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    started = time.perf_counter()
    built = build_options(jobs, nodes)
    options_s = time.perf_counter() - started
    values = Values(jobs, built.options, built.best)
    floor = greedy(jobs, built.options, values, nodes)
    summary = response["summary"]
    return {"case": case, "jobs": job_count, "nodes": node_count, "queue": "open" if open_queue else "capped",
            "limit_s": limit_s, "elapsed_s": elapsed_s, "target_s": 2 * limit_s + 1, "peak_rss_mib": peak_rss_mib,
            "status": summary["solver"]["status"], "gap": summary["solver"]["gap"], "admitted": summary["jobs_admitted"],
            "gpus_used": summary["gpus_used"], "value": summary["weighted_normalized_throughput"],
            "options_s": options_s, "greedy_admitted": len(floor),
            "greedy_value": values.report(sum(values.of(job, option) for job, (option, _) in floor.items()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=10.0, help="limit of the cases without @LIMIT")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--one-case", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.one_case:
        print(json.dumps(run_case(arguments.one_case, arguments.time_limit, arguments.workers)))
        return
    print(f"{'jobs':>5} {'nodes':>5} {'queue':<6} {'limit_s':>7} {'elapsed_s':>9} {'target_s':>8} {'rss_mib':>7} "
          f"{'status':<9} {'gap':>7} {'admitted':>8} {'gpus_used':>9} {'value':>8} {'options_s':>9} {'greedy':>6} {'greedy_value':>12}")
    for case in arguments.cases.split(","):
        child = subprocess.run([sys.executable, __file__, "--one-case", case, "--time-limit", str(arguments.time_limit),
                                "--workers", str(arguments.workers)], capture_output=True, text=True, check=False)
        if child.returncode != 0:
            print(f"{case}: failed\n{child.stderr}", file=sys.stderr)
            continue
        row = json.loads(child.stdout.splitlines()[-1])
        print(f"{row['jobs']:>5} {row['nodes']:>5} {row['queue']:<6} {row['limit_s']:>7g} {row['elapsed_s']:>9.2f} "
              f"{row['target_s']:>8.2f} {row['peak_rss_mib']:>7.0f} {row['status']:<9} {row['gap']:>7.2%} {row['admitted']:>8} "
              f"{row['gpus_used']:>9} {row['value']:>8.2f} {row['options_s']:>9.2f} {row['greedy_admitted']:>6} "
              f"{row['greedy_value']:>12.2f}", flush=True)


if __name__ == "__main__":
    main()
