"""Problem points and the named shape grids shared by the suite, the benchmarks, bench and tune.

A grid is a list of (M, N, K) shapes; :func:`get_grid` crosses it with dtypes and layouts to give
:class:`GridPoint` objects. Named grids:

- ``smoke``: a few tiny shapes, for CI;
- ``cpu``: what a CPU answers in seconds (the default grid on a machine with no GPU);
- ``gpu``: powers of two to 8192 and the shapes of docs' reference table (the default with a GPU);
- ``square``: 256 to 4096 in steps of 128, as in Triton's matmul tutorial;
- ``llm``: transformer projections (Llama-2-7B and Llama-3-8B q/kv/o/gate/up/down) against token
  counts M from 1 (decode) to 4096 (prefill);
- ``odd``: misaligned and prime sizes (1, 3, 1000, 4097, ...).

Grids of the problem classes beyond gemm (:mod:`gemmzoo.problems.classes`) are lists of their text forms,
in :data:`CLASS_GRIDS` (``attention``, ``fp8-scaled``, ``moe``, ``classes-smoke``); ``bench`` and
``tune`` take them as ``--grid NAME``, and a model's forward pass as ``--grid model:NAME[@TOKENS]``
(:mod:`gemmzoo.problems.model_grids`).

Plugins may add grids through the ``gemmzoo_register_grids(register)`` hook. Custom points come
from text (``512x512x512``, optionally ``-float16-NT`` as in :attr:`GridPoint.id`) or from a CSV or
JSON file (:func:`load_points`).
"""

from __future__ import annotations

import csv
import glob
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gemmzoo.config import environment_value
from gemmzoo.contract.dtypes import DTYPES
from gemmzoo.errors import GemmError

LAYOUTS = ("NN", "NT", "TN", "TT")

Shape = tuple[int, int, int]


class GridError(GemmError, ValueError):
    """A grid name, shape text or grid file that cannot be understood."""


@dataclass(frozen=True, order=True)
class GridPoint:
    """One GEMM problem: C (MxN) = A (MxK) · B (KxN) in ``dtype``; ``layout`` says whether A and B
    are stored as given (N) or transposed (T), BLAS-style."""

    m: int
    n: int
    k: int
    dtype: str = "float32"
    layout: str = "NN"

    def __post_init__(self) -> None:
        for label, value in (("M", self.m), ("N", self.n), ("K", self.k)):
            if isinstance(value, bool) or not hasattr(value, "__index__") or value < 1:
                raise GridError(f"grid point {self.m}x{self.n}x{self.k}: {label} must be a positive integer")
        if self.dtype not in DTYPES:
            raise GridError(f"grid point {self.m}x{self.n}x{self.k}: unknown dtype {self.dtype!r}; "
                            f"known: {', '.join(DTYPES)}")
        if self.layout not in LAYOUTS:
            raise GridError(f"grid point {self.m}x{self.n}x{self.k}: unknown layout {self.layout!r}; "
                            f"known: {', '.join(LAYOUTS)}")

    @property
    def shape(self) -> Shape:
        """``(M, N, K)``."""
        return (self.m, self.n, self.k)

    @property
    def flops(self) -> int:
        """2·M·N·K."""
        return 2 * self.m * self.n * self.k

    @property
    def id(self) -> str:
        """``4096x4096x4096-float16-NN``."""
        return f"{self.m}x{self.n}x{self.k}-{self.dtype}-{self.layout}"


@dataclass(frozen=True)
class Grid:
    """A named list of (M, N, K) shapes."""

    name: str
    description: str
    shapes: tuple[Shape, ...]


def _square(sizes: Iterable[int]) -> tuple[Shape, ...]:
    return tuple((s, s, s) for s in sizes)


# (N, K) of the projections of one transformer layer: C = X·W with X (tokens x K), W (K x N).
LLM_PROJECTIONS: dict[str, tuple[int, int]] = {
    "llama2-7b q/k/v/o": (4096, 4096),
    "llama2-7b qkv fused": (12288, 4096),
    "llama2-7b gate/up": (11008, 4096),
    "llama2-7b down": (4096, 11008),
    "llama3-8b k/v": (1024, 4096),
    "llama3-8b gate/up": (14336, 4096),
    "llama3-8b down": (4096, 14336),
}
LLM_TOKENS = (1, 16, 64, 128, 512, 2048, 4096)

# Shapes beyond powers of two that docs/results measures: misaligned, decode and prefill, short K.
_REFERENCE_SHAPES: tuple[Shape, ...] = (
    (4097, 4097, 4097), (1000, 1000, 1000), (16, 4096, 4096), (16, 14336, 4096),
    (128, 11008, 4096), (4096, 4096, 128),
)

# Rows not 16-byte aligned for 16-bit types (K or N not a multiple of 8), square and not, one
# where M alone is odd (aligned rows), and the aligned 4096³ for contrast: where cuBLAS slows down
# and torch-padded / triton-grouped's aligned route are meant to help.
_MISALIGNED: tuple[Shape, ...] = (
    (4097, 4097, 4097), (4096, 4096, 4097), (4096, 4097, 4096), (4097, 4096, 4096), (2049, 2049, 2049),
    (1021, 2039, 4093), (2048, 11008, 4100), (512, 4097, 4096), (1031, 1029, 4097), (1025, 1025, 1025),
    (8191, 8191, 8191), (4096, 4096, 4096),
)
# (N, K) of Llama-style attention, MLP up/gate and MLP down weights, for the decode grid.
_DECODE_WEIGHTS = ((4096, 4096), (14336, 4096), (4096, 14336), (11008, 4096))

_BUILTIN_GRIDS = (
    Grid("smoke", "a few tiny shapes, odd ones included (CI)",
         ((32, 32, 32), (64, 48, 80), (17, 33, 9), (1, 64, 64))),
    Grid("cpu", "shapes a CPU answers in seconds (default without a GPU)",
         (*_square((128, 256, 512, 1024)), (1, 1024, 1024), (16, 1024, 1024), (128, 2048, 512),
          (1000, 1000, 1000), (127, 257, 509))),
    Grid("gpu", "powers of two 256..8192 and the reference-table shapes (default with a GPU)",
         (*_square((256, 512, 1024, 2048, 4096, 8192)), *_REFERENCE_SHAPES)),
    Grid("square", "M = N = K from 256 to 4096 in steps of 128 (Triton tutorial)",
         _square(range(256, 4096 + 1, 128))),
    Grid("llm", "Llama-2-7B / Llama-3-8B projections, M (tokens) from 1 to 4096",
         tuple((m, n, k) for m in LLM_TOKENS for n, k in dict.fromkeys(LLM_PROJECTIONS.values()))),
    Grid("fp8", "float8_e4m3fn on Hopper: squares 1024..8192, Llama-3-8B projections, sizes off 16",
         (*_square((1024, 2048, 4096, 8192)), (16, 14336, 4096), (128, 4096, 14336), (2048, 14336, 4096),
          (4097, 4097, 4097), (4096, 4096, 4104), (1000, 1000, 1000))),
    Grid("misaligned", "rows not 16-byte aligned (K or N not a multiple of 8) and an aligned 4096³",
         _MISALIGNED),
    Grid("decode", "decode products: M (tokens) 1..64 against Llama-style weights (memory-bound)",
         tuple((m, n, k) for m in (1, 8, 16, 32, 64) for n, k in _DECODE_WEIGHTS)),
    Grid("longk", "small square outputs over a long K (16384, 65536): split-K territory",
         tuple((s, s, k) for s in (16, 64, 128, 256, 512) for k in (16384, 65536))),
    Grid("odd", "misaligned and prime sizes",
         ((1, 1, 1), (3, 3, 3), (1000, 1000, 1000), (4097, 4097, 4097), (4097, 4096, 4096),
          (4096, 4096, 4097), (1, 4096, 4097), (127, 257, 509), (1021, 2039, 4093), (3, 1000, 4097))),
)


def _plugin_grids() -> list[Grid]:
    """Grids registered by plugins through ``gemmzoo_register_grids``; a failing plugin warns."""
    from gemmzoo.config import active, current_config
    from gemmzoo.plugins.registry import get_registry, warn_at_plugin
    from gemmzoo.plugins.source import plugin_roots, raised_at

    found: list[Grid] = []
    session = active()  # the current session's registry; with none yet, the process's
    registry = get_registry(current_config()) if session is None else session.registry
    hook = registry.plugin_manager.hook.gemmzoo_register_grids

    for impl in hook.get_hookimpls():
        pending: list[Grid] = []

        def register(name: str, shapes: Iterable[Sequence[int]], description: str = "",
                     _pending: list[Grid] = pending) -> None:
            _pending.append(Grid(str(name), description, tuple(_shape(s, f"grid {name!r}") for s in shapes)))

        try:
            impl.function(**{arg: register for arg in impl.argnames})
        except Exception as error:  # one broken plugin must not hide the other grids
            info = registry.plugin_info(impl.plugin_name)
            location = raised_at(error, plugin_roots(impl.plugin))
            at = f" (raised at {location[0]}:{location[1]})" if location else ""
            warn_at_plugin(f"gemmzoo plugin {info.describe()}: gemmzoo_register_grids raised "
                           f"{type(error).__name__}: {error}{at}", location, info)
            continue
        found += pending
    return found


#: Named grids of the classes beyond gemm: problems in their text forms (:mod:`gemmzoo.problems.classes`).
CLASS_GRIDS: dict[str, tuple[str, ...]] = {
    "classes-smoke": ("bmm:4x32x32x16", "bmm:2x1x24x40x16", "scaled:rowwise:32x48x64",
                      "scaled:blockwise:32x256x256", "grouped:g4:32x48:m=8", "grouped:32x48:m=5,0,1,20"),
    "attention": ("bmm:32x2048x2048x128", "bmm:32x2048x128x2048", "bmm:256x512x512x64",
                  "bmm:64x4096x4096x128", "bmm:8x4096x4096x4096", "bmm:128x1x4096x128"),
    "fp8-scaled": ("scaled:rowwise:8192x8192x8192", "scaled:rowwise:4096x7168x16384",
                   "scaled:rowwise:3000x5000x7000", "scaled:rowwise:16x14336x4096",
                   "scaled:blockwise:4096x7168x16384", "scaled:blockwise:4096x2112x7168",
                   "scaled:blockwise:4096x24576x1536", "scaled:blockwise:4096x7168x2048"),
    "moe": ("grouped:g8:4096x7168:m=512", "grouped:4096x7168:m=128,900,64,1024,333,0,700,1024",
            "grouped:g8:28672x4096:m=1024", "grouped:g8:4096x14336:m=1024", "grouped:g256:4096x7168:m=128",
            "grouped:g256:7168x2048:m=128"),
}


def grids() -> dict[str, Grid]:
    """Every named grid: the built-in ones, then those plugins register (built-ins win a clash)."""
    table = {grid.name: grid for grid in _BUILTIN_GRIDS}
    for grid in _plugin_grids():
        table.setdefault(grid.name, grid)
    return table


def grid_names() -> list[str]:
    """The names :func:`get_grid` accepts (``default`` included)."""
    return ["default", *grids()]


def gpu_present() -> bool:
    """Whether this machine seems to have an NVIDIA GPU, without importing a CUDA framework.

    Looks for the driver's device files and honours ``CUDA_VISIBLE_DEVICES`` set to nothing or -1.
    """
    visible = environment_value("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def _on_gpu(device: str | None) -> bool:
    return gpu_present() if device is None else device == "cuda"


def backends_device(backends: Iterable[Any]) -> str | None:
    """The device every one of ``backends`` runs on; ``None`` when they differ or there are none.
    Commands pass it to :func:`resolve_points`, so a run of CPU backends alone defaults to the CPU
    grid and dtype on a machine with a GPU too."""
    devices = {getattr(b, "device", None) for b in backends}
    return devices.pop() if len(devices) == 1 else None


def default_grid_name(device: str | None = None) -> str:
    """``gpu`` for ``device`` ``"cuda"``, ``cpu`` for ``"cpu"``; with no device, ``gpu`` where a GPU
    is present, else ``cpu``."""
    return "gpu" if _on_gpu(device) else "cpu"


def default_dtypes(device: str | None = None) -> tuple[str, ...]:
    """``float16`` on the GPU (what its tensor cores are for), else ``float32``; ``device`` as in
    :func:`default_grid_name`."""
    return ("float16",) if _on_gpu(device) else ("float32",)


def _check_choices(values: Sequence[str], known: Sequence[str], what: str) -> None:
    unknown = [v for v in values if v not in known]
    if unknown:
        raise GridError(f"unknown {what} {', '.join(map(repr, unknown))}; known: {', '.join(known)}")


def expand(shapes: Iterable[Shape], dtypes: Sequence[str] | None = None,
           layouts: Sequence[str] = ("NN",)) -> list[GridPoint]:
    """Every shape crossed with every dtype and layout (shape-major order, duplicates dropped)."""
    dtypes = tuple(dtypes) if dtypes else default_dtypes()
    _check_choices(dtypes, DTYPES, "dtype")
    _check_choices(layouts, LAYOUTS, "layout")
    points = [GridPoint(m, n, k, d, lay) for m, n, k in shapes for d in dtypes for lay in layouts]
    return list(dict.fromkeys(points))


def get_grid(name: str = "default", dtypes: Sequence[str] | None = None,
             layouts: Sequence[str] = ("NN",), device: str | None = None) -> list[GridPoint]:
    """The points of grid ``name`` for each dtype (default: :func:`default_dtypes` of ``device``)
    and layout.

    ``default`` means :func:`default_grid_name` of ``device``. An unknown name raises
    :class:`GridError` listing the known ones.
    """
    table = grids()
    dtypes = dtypes or default_dtypes(device)
    key = default_grid_name(device) if name == "default" else name
    if key not in table:
        raise GridError(f"unknown grid {name!r}; known: {', '.join(['default', *table])}")
    return expand(table[key].shapes, dtypes, layouts)


def _shape(values: Sequence[int] | Sequence[str], where: str) -> Shape:
    if len(values) != 3:
        raise GridError(f"{where}: a shape needs three sizes M, N, K; got {len(values)}")
    try:
        m, n, k = (int(v) for v in values)
    except (TypeError, ValueError):
        raise GridError(f"{where}: sizes must be whole numbers; got {list(values)}") from None
    if min(m, n, k) < 1:
        raise GridError(f"{where}: sizes must be positive; got {m}x{n}x{k}")
    return (m, n, k)


_POINT_TEXT = re.compile(  # x, the multiplication sign or a comma between the sizes
    r"^\s*(\d+)\s*[x×,]\s*(\d+)\s*[x×,]\s*(\d+)\s*(?:-([a-z0-9_]+))?(?:-([NT]{2}))?\s*$"
)


def parse_point(text: str) -> tuple[Shape, str | None, str | None]:
    """``"512x256x128"`` → ((512, 256, 128), None, None); ``"512x256x128-float16-NT"`` also gives
    the dtype and layout (the form of :attr:`GridPoint.id`). A single number means a cube."""
    if text.strip().isdigit():
        size = _shape([text.strip()] * 3, f"shape {text!r}")
        return size, None, None
    match = _POINT_TEXT.match(text)
    if not match:
        raise GridError(f"shape {text!r}: expected MxNxK (e.g. 512x512x512), optionally -DTYPE-LAYOUT "
                        f"(e.g. 512x512x512-float16-NT)")
    m, n, k, dtype, layout = match.groups()
    shape = _shape((m, n, k), f"shape {text!r}")
    if dtype is not None:
        _check_choices([dtype], DTYPES, f"dtype in shape {text!r}:")
    return shape, dtype, layout


def _points(rows: Iterable[tuple[Shape, str | None, str | None]], dtypes: Sequence[str] | None,
            layouts: Sequence[str]) -> list[GridPoint]:
    points: list[GridPoint] = []
    for shape, dtype, layout in rows:
        points += expand([shape], [dtype] if dtype else dtypes, [layout] if layout else layouts)
    return list(dict.fromkeys(points))


def points_from_text(texts: Iterable[str], dtypes: Sequence[str] | None = None,
                     layouts: Sequence[str] = ("NN",)) -> list[GridPoint]:
    """Points from ``--shape`` texts; a text without dtype/layout takes each of ``dtypes``/``layouts``."""
    return _points((parse_point(t) for t in texts), dtypes, layouts)


def _json_rows(data: object, where: str) -> list[tuple[Shape, str | None, str | None]]:
    if isinstance(data, dict) and "points" in data:
        data = data["points"]
    if not isinstance(data, list):
        raise GridError(f"{where}: expected a list of points (or {{'points': [...]}})")
    rows = []
    for index, item in enumerate(data):
        at = f"{where}: point {index}"
        if isinstance(item, str):
            rows.append(parse_point(item))
        elif isinstance(item, list | tuple):
            rows.append((_shape(item, at), None, None))
        elif isinstance(item, dict):
            lowered = {str(key).lower(): value for key, value in item.items()}
            missing = [key for key in "mnk" if key not in lowered]
            if missing:
                raise GridError(f"{at}: missing {', '.join(missing)}")
            rows.append((_shape([lowered["m"], lowered["n"], lowered["k"]], at),
                         lowered.get("dtype") or None, lowered.get("layout") or None))
        else:
            raise GridError(f"{at}: expected [M, N, K], {{'m':..,'n':..,'k':..}} or 'MxNxK'")
    return rows


def _csv_rows(text: str, where: str) -> list[tuple[Shape, str | None, str | None]]:
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        return []
    reader = csv.reader(lines)
    header = [h.strip().lower() for h in next(reader)]
    if not {"m", "n", "k"} <= set(header):
        raise GridError(f"{where}: the first line must name the columns m,n,k[,dtype][,layout]; got {header}")
    rows = []
    for number, record in enumerate(reader, start=2):
        fields = dict(zip(header, (value.strip() for value in record), strict=False))
        sizes = [fields.get("m", ""), fields.get("n", ""), fields.get("k", "")]
        shape = _shape(sizes, f"{where}: row {number}")
        rows.append((shape, fields.get("dtype") or None, fields.get("layout") or None))
    return rows


def load_points(path: str | Path, dtypes: Sequence[str] | None = None,
                layouts: Sequence[str] = ("NN",)) -> list[GridPoint]:
    """Points from a ``.json`` or ``.csv`` file.

    CSV: a header naming ``m,n,k`` and optionally ``dtype`` and ``layout``; ``#`` lines are
    comments. JSON: a list (or ``{"points": [...]}``) of ``[M, N, K]``, ``{"m":.., "n":.., "k":..,
    "dtype":.., "layout":..}`` or ``"MxNxK[-dtype-layout]"``. A point that names no dtype or
    layout takes each of ``dtypes`` / ``layouts``.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise GridError(f"grid file {str(path)!r}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise GridError(f"grid file {str(path)!r}: not UTF-8 text (byte {error.start}: "
                        f"{error.object[error.start:error.start + 1]!r})") from None
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise GridError(f"grid file {str(path)!r}: not valid JSON ({error})") from None
        except RecursionError:
            raise GridError(f"grid file {str(path)!r}: JSON nested too deeply to be a grid") from None
        rows = _json_rows(data, f"grid file {str(path)!r}")
    else:
        rows = _csv_rows(text, f"grid file {str(path)!r}")
    try:
        return _points(rows, dtypes, layouts)
    except GridError as error:
        raise GridError(f"grid file {str(path)!r}: {error}") from None


def resolve_points(grid: str | None = None, shapes: Sequence[str] = (), files: Sequence[str | Path] = (),
                   dtypes: Sequence[str] | None = None, layouts: Sequence[str] = ("NN",),
                   device: str | None = None) -> list[GridPoint]:
    """The points a command line asks for: the named ``grid`` plus ``--shape`` texts plus grid
    files; the default grid when none of them is given. ``device`` (``"cpu"`` or ``"cuda"``) sets
    the default grid and dtype when the backends to run are all on one device; without it they
    follow whether this machine has a GPU."""
    points: list[GridPoint] = []
    dtypes = dtypes or default_dtypes(device)
    if grid or not (shapes or files):
        points += get_grid(grid or "default", dtypes, layouts, device)
    points += points_from_text(shapes, dtypes, layouts)
    for file in files:
        points += load_points(file, dtypes, layouts)
    return list(dict.fromkeys(points))

