"""Tuning: a persistent database of measurements and the ``best_backend`` choice built on it.

Nothing here imports torch, cupy or triton, and nothing opens the database until a question is
asked.
"""

from gemmzoo.tuning.db import ConformanceRecord, Record, TuningCacheWarning, TuningStore, open_store
from gemmzoo.tuning.select import Choice, Timed, best_backend, explain, log_distance, rank
from gemmzoo.tuning.tune import conformance_verdict, tune

__all__ = [
    "Choice",
    "ConformanceRecord",
    "Record",
    "Timed",
    "TuningCacheWarning",
    "TuningStore",
    "best_backend",
    "conformance_verdict",
    "explain",
    "log_distance",
    "open_store",
    "rank",
    "tune",
]
