"""The packing objective in integers: each admitted job counts its weight times its
normalized throughput (tokens/s of its option / its best tokens/s on this inventory).

Weights are relative priorities. CP-SAT needs integers, so the objective counts in steps of
``1 / STEPS_PER_SMALLEST_WEIGHT`` of the *smallest* weight of the queue: scaling every
weight by the same factor (1e-7 or 1e6) changes nothing, and the job with the smallest
weight still tells its best option from one 1e-6 slower. Every option of positive
throughput counts at least one step, so admitting a job where it fits always beats leaving
it out. ``vramopt.cluster.MAX_WEIGHT_SPREAD`` bounds largest / smallest weight, which keeps
the sum within int64.
"""

from __future__ import annotations

from vramopt.cluster import PackJob, check_weight_spread

STEPS_PER_SMALLEST_WEIGHT = 1_000_000
"""Integer steps of normalized throughput for the smallest weight (1e-6 resolution)."""


class Values:
    """Integer objective coefficients of every (job, option), and their report."""

    def __init__(self, jobs, options, best, price_units=None, admit_all: bool = False) -> None:
        check_weight_spread(jobs)
        self.admit_all = admit_all
        """pack objective 'cost': every option of a job counts its full weight (the most
        weight admitted, then the least money; ``pack_prices``)."""
        self.price_units = price_units
        """None: the tie-break counts whole GPUs; else GPU type -> integer price
        (``pack_prices``), and it counts money."""
        self.unit_weight = min((job.weight for job in jobs), default=1.0)
        self.table = [[self._value(job, option.tokens_per_s, best[index]) for option in options[index]]
                      for index, job in enumerate(jobs)]

    def _value(self, job: PackJob, tokens_per_s: float, best: float) -> int:
        if best <= 0 or tokens_per_s <= 0:
            return 0
        share = 1.0 if self.admit_all else min(tokens_per_s / best, 1.0)
        steps = STEPS_PER_SMALLEST_WEIGHT * (job.weight / self.unit_weight) * share
        return max(1, int(round(steps)))

    def cost_of(self, option) -> int:
        """The tie-break's integer cost of one option: its whole GPUs, or with prices its
        money per hour (``pack_prices.option_cost_units``)."""
        if self.price_units is None:
            return option.gpus
        from vramopt.optimizer.pack_prices import option_cost_units

        return option_cost_units(option, self.price_units)

    def of(self, job: int, option: int) -> int:
        return self.table[job][option]

    def best_of(self, job: int) -> int:
        """What the job counts at most (its best option)."""
        return max(self.table[job], default=0)

    def report(self, value: int) -> float:
        """An integer objective as weighted normalized throughput (sum of weight x share)."""
        return value * self.unit_weight / STEPS_PER_SMALLEST_WEIGHT


def objective_of(values: Values, options, assignment: dict) -> tuple[int, int]:
    """(integer value, whole GPUs used -- or, with prices, integer money per hour) of an
    assignment {job: (option, nodes)}."""
    value = sum(values.of(job, option) for job, (option, _) in assignment.items())
    gpus = sum(values.cost_of(options[job][option]) for job, (option, _) in assignment.items())
    return value, gpus


def rank(values: Values, options, assignment: dict) -> tuple[int, int]:
    """What the objective prefers, as a key: more value, then fewer whole GPUs (with
    prices: less money per hour)."""
    value, gpus = objective_of(values, options, assignment)
    return value, -gpus
