"""Imported by a test's zygote (tests/test_suite_shards.py): every worker it forks stalls for a
minute instead of running its checks."""

import time

from gemmzoo.conformance import shard_worker

shard_worker.run_spec = lambda spec: time.sleep(60) or 0
