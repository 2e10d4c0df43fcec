"""Published runs mapped to plans, for the golden tests: the data and the mapping live in
the library (``vramopt/validation/published.py``, data in ``vramopt/validation/data/``, used by
``vramopt validate``); this module re-exports them under the names the tests use."""

from vramopt.validation.published import (  # noqa: F401
    DATA,
    KORTHIKANTI_FILE,
    KORTHIKANTI_TARGET_MAX,
    KORTHIKANTI_TARGET_MEAN,
    RUNS_FILE,
    PublishedRun,
    calibration_rows,
    calibration_runs,
    korthikanti_runs,
    megatron_gpt_untied,
    table5_runs,
)
