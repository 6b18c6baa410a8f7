"""What the GPU benchmark scripts (skinny.py, skinny_configs.py, fp8.py) share: the run's
environment, the error measure and its bounds, the median of ``do_bench``, and the results writer.
Not a pytest file; imports torch and triton only inside the functions that need them."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: (shape, dtypes) whose K or N is not a multiple of 8 (rows not 16-byte aligned), square and not,
#: and one with aligned rows where M alone is odd: triton_grouped_sweep.py's and misaligned.py's.
MISALIGNED: list[tuple[tuple[int, int, int], tuple[str, ...]]] = [
    ((4097, 4097, 4097), ("float16", "bfloat16")),
    ((4096, 4096, 4097), ("float16",)),
    ((4096, 4097, 4096), ("float16",)),
    ((4097, 4096, 4096), ("float16",)),  # aligned rows: M alone is odd
    ((2049, 2049, 2049), ("float16",)),
    ((1021, 2039, 4093), ("float16",)),
    ((2048, 11008, 4100), ("bfloat16",)),
    ((512, 4097, 4096), ("float16",)),
    ((1031, 1029, 4097), ("float16",)),
    ((1025, 1025, 1025), ("float16",)),
    ((8191, 8191, 8191), ("bfloat16",)),
]


#: Largest relative Frobenius error against a float32 IEEE product that a result may have.
MAX_REL_ERROR = {"float16": 2e-3, "bfloat16": 1e-2, "float32": 1e-5, "tf32": 2e-3}


def environment() -> dict[str, Any]:
    """Device, driver and library versions, the command (script path as given, no interpreter
    path) and the UTC date, for a results file."""
    import torch
    import triton

    try:
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        driver = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        driver = "unknown"
    return {
        "device": torch.cuda.get_device_name(0),
        "sms": torch.cuda.get_device_properties(0).multi_processor_count,
        "driver": driver or "unknown",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "command": " ".join(["python3", *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def median_ms(fn: Any, rep_ms: int = 100) -> float:
    """The median of ``triton.testing.do_bench`` (L2 flushed before every call), in ms."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=max(5, rep_ms // 4), rep=rep_ms, return_mode="median"))


def relative_error(c: Any, ref: Any) -> float:
    """‖c − ref‖ / ‖ref‖ (Frobenius), with c taken to float32."""
    return (c.float() - ref).norm().item() / max(ref.norm().item(), 1e-30)


def write_results(out_dir: Path, name: str, env: dict[str, Any], rows: list[dict[str, Any]],
                  text: str) -> str:
    """Write OUT_DIR/NAME.json (environment and rows) and OUT_DIR/NAME.md (``text``); return
    ``text``. The scripts call it after every problem, so that a run cut off keeps its rows."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{name}.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    (out_dir / f"{name}.md").write_text(text)
    return text
