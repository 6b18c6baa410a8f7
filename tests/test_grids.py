"""Shape grids: contents, the default per device, custom points from text and files, bad input."""

from __future__ import annotations

import json

import pytest

from gemmzoo.problems import grids as grids_module
from gemmzoo.problems.grids import (
    LAYOUTS,
    GridError,
    GridPoint,
    get_grid,
    grid_names,
    load_points,
    parse_point,
    points_from_text,
    resolve_points,
)


def test_named_grids_exist_and_hold_valid_points():
    assert {"default", "smoke", "cpu", "gpu", "square", "llm", "odd"} <= set(grid_names())
    for name in grid_names():
        points = get_grid(name, dtypes=["float32"])
        assert points, name
        assert len(set(points)) == len(points), f"{name} has duplicates"
        assert all(p.m >= 1 and p.n >= 1 and p.k >= 1 for p in points)


def test_square_grid_is_the_tutorials():
    shapes = [p.shape for p in get_grid("square", dtypes=["float16"])]
    assert shapes == [(s, s, s) for s in range(256, 4097, 128)]
    assert len(shapes) == 31


def test_llm_grid_covers_decode_and_prefill_of_llama_projections():
    shapes = {p.shape for p in get_grid("llm", dtypes=["bfloat16"])}
    assert {m for m, _, _ in shapes} >= {1, 16, 4096}
    for n, k in [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (4096, 14336), (1024, 4096)]:
        assert (1, n, k) in shapes and (4096, n, k) in shapes


def test_odd_grid_has_misaligned_and_tiny_sizes():
    shapes = {p.shape for p in get_grid("odd", dtypes=["float32"])}
    assert {(1, 1, 1), (3, 3, 3), (1000, 1000, 1000), (4097, 4097, 4097)} <= shapes


def test_dtypes_and_layouts_multiply_the_grid():
    base = get_grid("smoke", dtypes=["float32"])
    crossed = get_grid("smoke", dtypes=["float16", "float32"], layouts=LAYOUTS)
    assert len(crossed) == 8 * len(base)
    assert {p.layout for p in crossed} == set(LAYOUTS)
    assert {p.dtype for p in crossed} == {"float16", "float32"}


def test_default_grid_follows_the_device(monkeypatch):
    monkeypatch.setattr(grids_module, "gpu_present", lambda: False)
    assert get_grid("default") == get_grid("cpu", dtypes=["float32"])
    monkeypatch.setattr(grids_module, "gpu_present", lambda: True)
    assert get_grid("default") == get_grid("gpu", dtypes=["float16"])


class _On:
    def __init__(self, device: str) -> None:
        self.device = device


def test_backends_of_one_device_choose_the_default_grid_and_dtype(monkeypatch):
    monkeypatch.setattr(grids_module, "gpu_present", lambda: True)  # a GPU machine, benching CPU backends
    cpu = grids_module.backends_device([_On("cpu"), _On("cpu")])
    assert cpu == "cpu"
    assert resolve_points(device=cpu) == get_grid("cpu", dtypes=["float32"])
    assert {p.dtype for p in resolve_points(shapes=["8x8x8"], device=cpu)} == {"float32"}
    assert resolve_points(shapes=["8x8x8"], dtypes=["bfloat16"], device=cpu)[0].dtype == "bfloat16"
    mixed = grids_module.backends_device([_On("cpu"), _On("cuda")])
    assert mixed is None and grids_module.backends_device([]) is None
    assert resolve_points(device=mixed) == get_grid("gpu", dtypes=["float16"])
    monkeypatch.setattr(grids_module, "gpu_present", lambda: False)
    assert resolve_points(shapes=["8x8x8"], device="cuda")[0].dtype == "float16"


def test_bench_of_cpu_backends_on_a_gpu_machine_runs_float32(monkeypatch, tmp_path, capsys):
    from gemmzoo.cli import main

    monkeypatch.setattr(grids_module, "gpu_present", lambda: True)
    out = tmp_path / "run.json"
    assert main(["bench", "--backend", "numpy", "--shape", "9x7x5", "--budget", "0.01", "--rounds", "1",
                 "--json", str(out)]) == 0
    points = [r["point"] for r in json.loads(out.read_text())["results"]]
    assert points == ["9x7x5-float32-NN"]


def test_gpu_detection_honours_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert grids_module.gpu_present() is False
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert grids_module.gpu_present() is False


def test_parse_point_forms():
    assert parse_point("512x256x128") == ((512, 256, 128), None, None)
    assert parse_point(" 512 X 256 x 128 ".lower()) == ((512, 256, 128), None, None)
    assert parse_point("7") == ((7, 7, 7), None, None)
    assert parse_point("4096x4096x4096-float16-NT") == ((4096, 4096, 4096), "float16", "NT")
    point = GridPoint(3, 5, 7, "bfloat16", "TT")
    (m, n, k), dtype, layout = parse_point(point.id)  # ids round-trip
    assert GridPoint(m, n, k, dtype, layout) == point


@pytest.mark.parametrize("text, words", [
    ("512x512", "MxNxK"),
    ("0x4x4", "positive"),
    ("axbxc", "MxNxK"),
    ("4x4x4-float8", "float8"),
    ("4x4x4-float16-XY", "MxNxK"),
])
def test_bad_shape_text_is_a_clear_error(text, words):
    with pytest.raises(GridError) as info:
        parse_point(text)
    assert words in str(info.value) and text in str(info.value)


def test_unknown_grid_dtype_and_layout_are_clear_errors():
    with pytest.raises(GridError, match="unknown grid 'nope'; known: default, smoke"):
        get_grid("nope")
    with pytest.raises(GridError, match="unknown dtype 'fp8'"):
        get_grid("smoke", dtypes=["fp8"])
    with pytest.raises(GridError, match="unknown layout 'NX'"):
        get_grid("smoke", layouts=["NX"])
    with pytest.raises(GridError, match="M must be a positive integer"):
        GridPoint(0, 1, 1)


def test_points_from_text_expand_only_what_the_text_leaves_open():
    points = points_from_text(["8x9x10", "8x9x10-float64-TN"], dtypes=["float32", "float16"], layouts=["NN"])
    assert [p.id for p in points] == ["8x9x10-float32-NN", "8x9x10-float16-NN", "8x9x10-float64-TN"]


def test_csv_grid_file(tmp_path):
    path = tmp_path / "grid.csv"
    path.write_text("# my shapes\nM,N,K,dtype,layout\n16,32,48,,\n5,6,7,float16,NT\n")
    points = load_points(path, dtypes=["float32"], layouts=["NN", "TT"])
    assert [p.id for p in points] == ["16x32x48-float32-NN", "16x32x48-float32-TT", "5x6x7-float16-NT"]


def test_json_grid_file_in_every_form(tmp_path):
    path = tmp_path / "grid.json"
    points = [[2, 3, 4], {"m": 5, "n": 6, "k": 7, "dtype": "float64"}, "9x9x9-tf32-TN"]
    path.write_text(json.dumps({"points": points}))
    points = load_points(path, dtypes=["float32"])
    assert [p.id for p in points] == ["2x3x4-float32-NN", "5x6x7-float64-NN", "9x9x9-tf32-TN"]


@pytest.mark.parametrize("name, text, words", [
    ("g.csv", "m,n\n1,2\n", "m,n,k"),
    ("g.csv", "m,n,k\n1,2,x\n", "row 2"),
    ("g.csv", "m,n,k,dtype\n1,2,3,half\n", "unknown dtype 'half'"),
    ("g.json", "{not json", "not valid JSON"),
    ("g.json", '[{"m": 1, "n": 2}]', "missing k"),
    ("g.json", "[[1, 2]]", "three sizes"),
    ("g.json", '{"shapes": []}', "expected a list"),
])
def test_bad_grid_files_are_clear_errors(tmp_path, name, text, words):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(GridError) as info:
        load_points(path, dtypes=["float32"])
    assert words in str(info.value) and name in str(info.value)


def test_missing_grid_file(tmp_path):
    with pytest.raises(GridError, match=r"missing\.csv"):
        load_points(tmp_path / "missing.csv")


def test_resolve_points_combines_grid_shapes_and_files(tmp_path):
    path = tmp_path / "g.csv"
    path.write_text("m,n,k\n11,12,13\n")
    only_shapes = resolve_points(None, ["4x4x4"], [], ["float32"])
    assert [p.id for p in only_shapes] == ["4x4x4-float32-NN"]  # a shape alone replaces the default grid
    combined = resolve_points("smoke", ["4x4x4"], [path], ["float32"])
    assert len(combined) == len(get_grid("smoke", ["float32"])) + 2


class _GridPlugin:
    from gemmzoo import hookimpl

    @hookimpl
    def gemmzoo_register_grids(self, register):
        register("plugin-grid", [(8, 16, 24), [2, 2, 2]], "from a plugin")
        register("smoke", [(1, 1, 1)])  # a built-in name: the built-in wins


class _BrokenGridPlugin:
    from gemmzoo import hookimpl

    @hookimpl
    def gemmzoo_register_grids(self, register):
        raise RuntimeError("boom")


def test_plugins_can_register_grids():
    from sessions import scoped

    from gemmzoo.errors import PluginWarning
    from gemmzoo.plugins.registry import PluginInfo, Registry

    registry = Registry(strict=False)
    registry.register_plugin(_GridPlugin(), PluginInfo("grids", "tests"))
    registry.register_plugin(_BrokenGridPlugin(), PluginInfo("broken-grids", "tests"))
    with scoped(registry=registry):  # a session of these plugins' registry
        with pytest.warns(PluginWarning, match="boom"):
            names = grid_names()
        assert "plugin-grid" in names
        with pytest.warns(PluginWarning):
            points = get_grid("plugin-grid", dtypes=["float32"])
            smoke = get_grid("smoke", dtypes=["float32"])
    assert [p.shape for p in points] == [(8, 16, 24), (2, 2, 2)]
    assert (1, 1, 1) not in [p.shape for p in smoke]


def test_the_study_grids_hold_what_their_names_say():
    """misaligned: every shape but the aligned control has K or N off a multiple of 8 (or M odd);
    decode: M at most 64; longk: K at least 16384 and a small output."""
    misaligned = [p.shape for p in get_grid("misaligned", dtypes=["float16"])]
    assert (4096, 4096, 4096) in misaligned
    for m, n, k in misaligned:
        assert (m, n, k) == (4096, 4096, 4096) or n % 8 or k % 8 or m % 2
    decode = [p.shape for p in get_grid("decode", dtypes=["float16"])]
    assert len(decode) == 20 and all(m <= 64 and n >= 4096 and k >= 4096 for m, n, k in decode)
    longk = [p.shape for p in get_grid("longk", dtypes=["float16"])]
    assert len(longk) == 10 and all(m == n <= 512 and k >= 16384 for m, n, k in longk)
