"""A toy scheduler on top of the vramopt API (docs/api.md): admit a queue of jobs onto a
fixed inventory of GPUs, highest priority first.

For each job, in priority order, it asks ``vramopt.solve`` for the best plan on each GPU type
the job may use, with at most the GPUs of that type still free; it keeps the answer with the
most tokens/s (fewer GPUs on a tie), admits the job if there is one and takes its GPUs out of
the inventory, or records the solver's explanation of why nothing fits.

Then it asks ``vramopt.pack`` the same question jointly: pack chooses every job's plan and
node at once, maximizing the weighted normalized throughput of the whole queue, so a
high-priority job cannot take GPUs that would have served two others better, and every plan
is placed on real nodes (tensor parallelism inside one node, multi-node plans on whole free
nodes). The greedy loop below counts GPUs per type only.

Run from the repository root:  python docs/examples/scheduler.py
"""

from __future__ import annotations

import vramopt
from vramopt import SearchSpace, ServingWorkload, SolveRequest, TrainingWorkload

INVENTORY = {"b200": 16, "h100": 8}
"""Free GPUs per type: two 8-GPU B200 nodes and one 8-GPU H100 node."""

QUEUE = [
    # (job id, priority: 1 is the most urgent, workload, most GPUs, extra search-space options)
    ("pretrain-70b", 1, TrainingWorkload(model="70b"), 8, {}),
    ("chat-70b", 2, ServingWorkload(model="70b", context=8192, min_slots=64), 8, {}),
    ("lora-8b", 3, TrainingWorkload(model="8b", kind="lora", global_batch=32), 2, {}),
    ("qlora-70b", 3, TrainingWorkload(model="70b", kind="qlora", global_batch=32), 4, {}),
    ("chat-8b", 4, ServingWorkload(model="8b", context=8192), 1, {}),
    # A team that refuses offloading (too slow for them): without it 70B needs more GPUs than are left.
    ("finetune-70b", 5, TrainingWorkload(model="70b", kind="finetune", global_batch=256), 8,
     {"forbid": {"offload": ("cpu", "nvme")}}),
]


def best_answer(workload, max_gpus, extra, free):
    """The best feasible response over the GPU types, and the last explanation."""
    best, reason = None, "no free GPU left"
    for gpu in free:
        if free[gpu] == 0:
            continue
        space = SearchSpace(gpus=(gpu,), max_gpus=min(max_gpus, free[gpu]), workers=1, **extra)
        response = vramopt.solve(SolveRequest(workload, space))
        if not response.feasible:
            reason = f"{gpu}: {response.to_dict()['explanation']['reason']}"
            continue
        key = (response.to_dict()["throughput"]["tokens_per_s"], -response.plan["gpus"])
        if best is None or key > best[0]:
            best = (key, response)
    return (best[1] if best else None), reason


def greedy(queue, inventory):
    free = dict(inventory)
    rows = []
    for job, priority, workload, max_gpus, extra in sorted(queue, key=lambda item: item[1]):
        response, reason = best_answer(workload, max_gpus, extra, free)
        if response is None:
            rows.append((job, priority, "no", "-", "-", reason))
            continue
        plan = response.plan
        free[plan["gpu"]] -= plan["gpus"]
        tokens = response.to_dict()["throughput"]["tokens_per_s"]
        rows.append((job, priority, "yes", f"{plan['gpus']} x {plan['gpu']}", f"{tokens:,.0f}", brief(plan)))
    return rows, free


def brief(plan):
    if "quantization" in plan:
        return f"serve tp{plan['tensor_parallel']} {plan['quantization']} replicas={plan.get('replicas', 1)}"
    return (f"tp{plan['tensor_parallel']} pp{plan['pipeline_parallel']} dp{plan['data_parallel']} "
            f"ZeRO-{plan['zero_stage']} {plan['precision']} offload={plan['offload']}")


def print_table(rows, headers):
    widths = [max(len(str(row[index])) for row in [headers, *rows]) for index in range(len(headers))]
    for row in [headers, ["-" * width for width in widths], *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


def as_pack_request(queue, inventory):
    """The same inventory as nodes of 8 GPUs, the same queue as pack jobs (weight from priority)."""
    nodes = [{"name": f"{gpu}-{index}", "gpu": gpu, "gpus": 8} for gpu, count in inventory.items() for index in range(count // 8)]
    jobs = []
    for job, priority, workload, max_gpus, extra in queue:
        item = {"id": job, "model": workload.model, "workload": workload.kind, "weight": 6 - priority, "max_gpus": max_gpus}
        if isinstance(workload, ServingWorkload):
            item.update(context=workload.context, min_slots=workload.min_slots)
        else:
            item.update(seq_len=workload.seq_len, global_batch=workload.global_batch)
        for key, values in extra.get("forbid", {}).items():
            item.setdefault("forbid", {})[key] = list(values)
        jobs.append(item)
    return {"cluster": {"nodes": nodes}, "jobs": jobs, "workers": 1}


def main():
    print(f"inventory: {', '.join(f'{count} x {gpu}' for gpu, count in INVENTORY.items())}")
    print("\ngreedy, in priority order (vramopt.solve per job and GPU type):")
    rows, free = greedy(QUEUE, INVENTORY)
    print_table([row[:5] + ((row[5] if row[2] == "yes" else "(below)"),) for row in rows],
                ["job", "prio", "admitted", "GPUs", "tokens/s", "plan / reason"])
    print(f"left free: {', '.join(f'{count} x {gpu}' for gpu, count in free.items())}")
    for row in rows:
        if row[2] == "no":
            print(f"not admitted: {row[0]}: {row[5]}")

    print("\njointly (vramopt.pack, weight = 6 - priority):")
    packed = vramopt.pack(as_pack_request(QUEUE, INVENTORY)).to_dict()
    rows = []
    for placement in packed["placements"]:
        if placement["admitted"]:
            nodes = "; ".join(f"{node}: {len(gpus)}" for node, gpus in placement["gpus_by_node"].items())
            rows.append((placement["job"], "yes", nodes, f"{placement['throughput']['tokens_per_s']:,.0f}", brief(placement["plan"])))
        else:
            rows.append((placement["job"], "no", "-", "-", "(below)"))
    print_table(rows, ["job", "admitted", "GPUs per node", "tokens/s", "plan / reason"])
    summary = packed["summary"]
    print(f"admitted {summary['jobs_admitted']} of {summary['jobs']}; GPUs used {summary['gpus_used']}, left {summary['gpus_left']}; "
          f"weighted normalized throughput {summary['weighted_normalized_throughput']:.3f}; solver {summary['solver']['status']}")
    for placement in packed["placements"]:
        if not placement["admitted"]:
            print(f"not admitted: {placement['job']}: {placement['reason']}")


if __name__ == "__main__":
    main()
