"""Imported by a test's zygote (tests/test_suite_shards.py) in place of a worker's checks: a worker
it forks stalls for a minute where its spec says ``"stall"``, else writes where it runs (working
directory, one variable of its environment, its module path) to the spec's result file; the numpy
backend's ``warm_up`` writes its name to the file ``GEMMZOO_TEST_WARMED`` names."""

import json
import os
import sys
import time

from gemmzoo.conformance import shard_worker
from gemmzoo_numpy.backend import NumpyBackend


def _run_spec(spec):
    if spec.get("stall"):
        time.sleep(60)
        return 0
    with open(spec["out"], "w", encoding="utf-8") as out:
        json.dump({"cwd": os.getcwd(), "probe": os.environ.get("GEMMZOO_TEST_PROBE"), "path": sys.path,
                   "added": os.environ.get("GEMMZOO_TEST_ADDED")}, out)
    return 0


def _warm_up(self):
    marker = os.environ.get("GEMMZOO_TEST_WARMED")
    if marker:
        with open(marker, "a", encoding="utf-8") as out:
            out.write(f"{self.name}\n")


shard_worker.run_spec = _run_spec
NumpyBackend.warm_up = _warm_up
