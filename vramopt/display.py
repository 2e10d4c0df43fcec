"""Text, JSON and CSV rendering of results for the CLI: the display edge.

Everything here takes plain data (the "vramopt/v1" dicts of ``results.py`` and the catalog
dataclasses) and returns strings; nothing prints. Unit conversions happen here and only
here: GB means 1e9 bytes (decimal, as GPU datasheets use it), TB 1e12, TFLOP/s 1e12 FLOP/s.
"""

# The views live in four modules; every name stays importable from vramopt.display.

from vramopt.display_formats import (  # noqa: F401 - re-exported
    CSV_SECTIONS,
    MEMORY_LABELS,
    OUTPUT_FORMATS,
    csv_cell,
    flatten,
    gb,
    on_off,
    percent,
    table,
    to_csv,
    to_json,
    to_plain,
    yes_no,
)
from vramopt.display_training import (  # noqa: F401 - re-exported
    fit_lines,
    render_memory,
    render_plan,
    render_throughput,
    render_training,
)
from vramopt.display_solve import (  # noqa: F401 - re-exported
    SERVING_MEMORY_LABELS,
    _goal,
    _placement_text,
    _plan_brief,
    _requirement_checks,
    _value_text,
    pack_rows,
    render_front,
    render_infeasible,
    render_pack,
    render_runners_up,
    render_serving,
    render_solve,
    render_solver,
)
from vramopt.display_catalogs import (  # noqa: F401 - re-exported
    _gpu_link_text,
    gpus_json,
    models_json,
    render_gpus,
    render_models,
)
