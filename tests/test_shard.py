"""``--shard I/N``: disjoint, balanced, deterministic parts of a grid, and their results merged."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from gemmzoo.cli import main
from gemmzoo.problems.grids import get_grid, resolve_points
from gemmzoo.scale.shards import Shard, ShardError, assign, parse_shard, point_cost, shard_points
from gemmzoo.tuning import state

pytestmark = pytest.mark.usefixtures("empty_cache")


def test_parse_shard():
    assert parse_shard("2/3") == Shard(2, 3) and str(parse_shard(" 1 / 1 ")) == "1/1"
    for bad in ("0/3", "4/3", "3", "1/0", "a/b", "-1/2", ""):
        with pytest.raises(ShardError, match="--shard"):
            parse_shard(bad)


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_parts_cover_the_grid_exactly_once(count):
    grid = [*get_grid("llm", ["float16", "bfloat16"]), *get_grid("odd", ["float32"], ["NN", "TN"])]
    parts = [shard_points(grid, Shard(i, count)) for i in range(1, count + 1)]

    seen = Counter(p for part in parts for p in part)
    assert set(seen) == set(grid) and set(seen.values()) == {1}
    for part in parts:  # each part keeps the grid's order
        assert part == [p for p in grid if p in set(part)]
    # balanced: no part exceeds the lightest by more than the costliest point
    loads = [sum(point_cost(p) for p in part) for part in parts]
    assert max(loads) - min(loads) <= max(point_cost(p) for p in grid)


def test_the_split_is_deterministic_and_depends_only_on_the_grid():
    grid = resolve_points("gpu", dtypes=["float16", "tf32"])
    again = resolve_points("gpu", dtypes=["float16", "tf32"])
    assert assign(grid, 3) == assign(again, 3)
    assert shard_points(grid, Shard(2, 3)) == shard_points(again, Shard(2, 3))
    assert shard_points(grid, None) == grid and shard_points(grid, Shard(1, 1)) == grid
    # more parts than points: the extra parts are empty, the rest hold one point each
    small = get_grid("smoke", ["float32"])
    sizes = sorted(len(shard_points(small, Shard(i, 6))) for i in range(1, 7))
    assert sizes == [0, 0, 1, 1, 1, 1]


SHAPES = ["--shape", "8x8x8", "--shape", "16x8x24", "--shape", "40x24x56", "--shape", "5x7x9", "--shape",
          "64x32x16"]


def _bench(tmp_path, name, *extra):
    path = tmp_path / f"{name}.json"
    code = main(["bench", *SHAPES, "--backend", "numpy", "--budget", "0.002", "--json", str(path), *extra])
    return code, path


def test_bench_shards_merge_into_the_whole_grid(tmp_path, capsys):
    paths = []
    for index in (1, 2, 3):
        code, path = _bench(tmp_path, f"part{index}", "--shard", f"{index}/3")
        assert code == 0
        paths.append(str(path))
    parts = [json.loads(open(p).read()) for p in paths]
    ids = [r["point"] for part in parts for r in part["results"]]
    whole = {f"{s}-float32-NN" for s in ("8x8x8", "16x8x24", "40x24x56", "5x7x9", "64x32x16")}
    assert sorted(ids) == sorted(whole)  # exactly once each
    assert {part["shard"]["grid"] for part in parts} == {parts[0]["shard"]["grid"]}
    assert [part["shard"]["index"] for part in parts] == [1, 2, 3]
    assert all(part["shard"]["count"] == 3 and part["shard"]["points"] == 5 for part in parts)
    capsys.readouterr()

    merged = tmp_path / "merged.json"
    assert main(["bench", "--merge", *paths, "--json", str(merged)]) == 0
    out = capsys.readouterr()
    assert "merged 5 results from 3 files" in out.out and "missing" not in out.err
    data = json.loads(merged.read_text())
    assert sorted(r["point"] for r in data["results"]) == sorted(whole)
    assert all(r["status"] == "ok" and r["median_s"] > 0 for r in data["results"])
    assert data["merged_from"] == paths

    # a missing part is said, and merging still works
    assert main(["bench", "--merge", paths[0], paths[2]]) == 0
    assert "parts 2 of 3 are missing" in capsys.readouterr().err


def test_merge_refuses_parts_that_do_not_belong_together(tmp_path, capsys):
    _, one = _bench(tmp_path, "one", "--shard", "1/2")
    _, again = _bench(tmp_path, "again", "--shard", "1/2")
    _, other = _bench(tmp_path, "other", "--shard", "2/2", "--shape", "3x3x3")  # another grid
    _, whole = _bench(tmp_path, "whole")
    capsys.readouterr()
    assert main(["bench", "--merge", str(one), str(again)]) == 2
    assert "part 1 appears twice" in capsys.readouterr().err
    assert main(["bench", "--merge", str(one), str(other)]) == 2
    assert "different grids" in capsys.readouterr().err
    assert main(["bench", "--merge", str(one), str(whole)]) == 2
    assert "hold no --shard part" in capsys.readouterr().err
    assert main(["bench", "--merge", str(whole), str(whole)]) == 2
    assert "is in both" in capsys.readouterr().err
    (tmp_path / "junk.json").write_text("[1, 2]")
    assert main(["bench", "--merge", str(tmp_path / "junk.json")]) == 2
    assert "not a gemmzoo bench result file" in capsys.readouterr().err


def test_bad_shard_is_a_usage_error(capsys):
    assert main(["bench", *SHAPES, "--backend", "numpy", "--shard", "4/3"]) == 2
    assert "I must be between 1 and N" in capsys.readouterr().err
    assert main(["tune", *SHAPES, "--backend", "numpy", "--shard", "x"]) == 2
    assert "expected I/N" in capsys.readouterr().out


def test_tune_measures_only_its_part(capsys):
    stored = []
    for index in (1, 2):
        args = ["tune", *SHAPES, "--backend", "numpy", "--budget", "0.002", "--shard", f"{index}/2"]
        assert main(args) == 0
        out = capsys.readouterr().out
        stored.append(int(out.split("stored ")[1].split()[0]))
    assert sum(stored) == 5 and min(stored) >= 1
    assert state.store().count() == 5
