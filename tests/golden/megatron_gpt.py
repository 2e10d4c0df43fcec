"""Narayanan et al. 2021 Table 1 and the Megatron GPT models, for the golden tests: the
table and its evaluation live in the library (``vramopt/validation/narayanan.py``, used by
``vramopt validate``); this module re-exports them under the names the tests use."""

from vramopt.validation.narayanan import (  # noqa: F401
    GPU,
    SEQ_LEN,
    TABLE_1,
    VOCAB,
    Table1Row,
    evaluate_row,
    gpt_model,
    row_plan,
)
