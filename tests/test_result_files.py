"""Result files are checked whole before use: a malformed one is refused with one plain line that
names the file, the entry and the field, exit 2, by ``compare`` and by ``bench --merge`` alike."""

from __future__ import annotations

import copy
import json
import math
import random

import pytest

from gemmzoo.cli import main
from gemmzoo.results.runs import load_run
from gemmzoo.results.schema import FORMAT, MAX_RESULTS, VERSION, ResultFileError, load_document


@pytest.fixture(autouse=True)
def wide(wide_tables):
    """Every test here prints wide tables."""


def _result(backend="numpy", m=64, median=1e-4, status="ok"):
    return {"backend": backend, "device": "cpu", "point": f"{m}x{m}x{m}-float32-NN", "m": m, "n": m, "k": m,
            "dtype": "float32", "layout": "NN", "accuracy": "componentwise", "status": status,
            "median_s": median, "q1_s": median * 0.98, "q3_s": median * 1.02, "samples": 50,
            "method": "perf_counter", "error_ratio": 0.01, "rel_error": 1e-7, "detail": "",
            "gpu": {"index": 0, "throttle_reasons": []}}


def _document(results=None, **top):
    data = {"format": FORMAT, "version": VERSION, "created": "2026-11-25T10:00:00+00:00",
            "command": "gemmzoo bench", "environment": {"cpu": {"device_name": "test cpu", "libraries": {}}},
            "results": results if results is not None else [_result(), _result("torch-cpu"), _result(m=128)]}
    data.update(top)
    return data


def _set(path):
    """A mutation that sets ``data[path...] = value``."""
    def mutate(data, value):
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return data
    return mutate


def _nested(depth):
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


# (name, mutation of a valid document or raw text, words the message must hold)
CASES = [
    ("results not a list", lambda d: {**d, "results": {"a": 1}}, "results"),
    ("document a list", lambda d: [d], "not an object"),
    ("result a string", lambda d: _set(["results", 1])(d, "fast"), "result 1"),
    ("median a string", lambda d: _set(["results", 1, "median_s"])(d, "fast"), "median_s"),
    ("negative median", lambda d: _set(["results", 0, "median_s"])(d, -1e-3), "median_s"),
    ("zero median", lambda d: _set(["results", 0, "median_s"])(d, 0), "median_s"),
    ("quartiles reversed", lambda d: _set(["results", 0, "q1_s"])(d, 5.0), "q1_s"),
    ("m a string", lambda d: _set(["results", 2, "m"])(d, "abc"), "'m'"),
    ("m huge", lambda d: _set(["results", 2, "m"])(d, 10**30), "'m'"),
    ("m zero", lambda d: _set(["results", 2, "m"])(d, 0), "'m'"),
    ("m bool", lambda d: _set(["results", 2, "m"])(d, True), "'m'"),
    ("k float", lambda d: _set(["results", 2, "k"])(d, 64.5), "'k'"),
    ("unknown dtype", lambda d: _set(["results", 0, "dtype"])(d, "float128"), "dtype"),
    ("unknown layout", lambda d: _set(["results", 0, "layout"])(d, "XX"), "layout"),
    ("unknown status", lambda d: _set(["results", 0, "status"])(d, "great"), "status"),
    ("ok without a time", lambda d: _set(["results", 0, "median_s"])(d, None), "median_s"),
    ("backend missing", lambda d: (d["results"][0].pop("backend"), d)[1], "backend"),
    ("backend a list", lambda d: _set(["results", 0, "backend"])(d, ["numpy"]), "backend"),
    ("backend with an escape", lambda d: _set(["results", 0, "backend"])(d, "num\x1b[31mpy"), "backend"),
    ("backend too long", lambda d: _set(["results", 0, "backend"])(d, "x" * 5000), "backend"),
    ("detail huge", lambda d: _set(["results", 0, "detail"])(d, "y" * 200_000), "detail"),
    ("samples negative", lambda d: _set(["results", 0, "samples"])(d, -4), "samples"),
    ("samples a string", lambda d: _set(["results", 0, "samples"])(d, "many"), "samples"),
    ("gpu a string", lambda d: _set(["results", 0, "gpu"])(d, "H100"), "gpu"),
    ("gpu nested deep", lambda d: _set(["results", 0, "gpu"])(d, {"x": _nested(50)}), "nested"),
    ("environment nested deep", lambda d: {**d, "environment": {"cpu": _nested(40)}}, "environment"),
    ("environment a list", lambda d: {**d, "environment": [1]}, "environment"),
    ("newer version", lambda d: {**d, "version": VERSION + 1}, "version"),
    ("other format", lambda d: {**d, "format": "something-else"}, "format"),
    ("shard count 10^9", lambda d: {**d, "shard": {"index": 1, "count": 10**9, "grid": "g", "points": 3}},
     "count"),
    ("shard index beyond count", lambda d: {**d, "shard": {"index": 4, "count": 3, "grid": "g", "points": 3}},
     "index"),
    ("shard a string", lambda d: {**d, "shard": "1/2"}, "shard"),
    ("shard without grid", lambda d: {**d, "shard": {"index": 1, "count": 2, "points": 3}}, "grid"),
    ("threads a string", lambda d: _set(["results", 0, "threads"])(d, "many"), "threads"),
    ("converged a string", lambda d: _set(["results", 0, "converged"])(d, "yes"), "converged"),
    ("too many results", lambda d: {**d, "results": [1] * (MAX_RESULTS + 1)}, "results"),
]

RAW = [
    ("Infinity", lambda text: text.replace('"median_s": 0.0001', '"median_s": Infinity', 1), "Infinity"),
    ("NaN", lambda text: text.replace('"median_s": 0.0001', '"median_s": NaN', 1), "NaN"),
    ("1e999", lambda text: text.replace('"median_s": 0.0001', '"median_s": 1e999', 1), "does not fit"),
    ("long integer", lambda text: text.replace('"m": 128', '"m": ' + "9" * 5000, 1), "digits"),
    ("nesting 100000", lambda text: "[" * 100_000 + "]" * 100_000, "nested"),
    ("truncated", lambda text: text[: len(text) // 2], "not JSON"),
    ("not UTF-8", lambda text: text.replace("test cpu", "test \udcff cpu"), "UTF-8"),
    ("empty", lambda text: "", "not JSON"),
]


def _write(path, data):
    path.write_text(json.dumps(data))
    return str(path)


def _good(tmp_path):
    return _write(tmp_path / "good.json", _document())


def _refused(capsys, argv, path, words):
    code = main(argv)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, (argv, captured)
    assert "Traceback" not in captured.err + captured.out
    assert len(lines) == 1 and path in lines[0] and words in lines[0], lines
    return lines[0]


@pytest.mark.parametrize(("name", "mutate", "words"), CASES, ids=[c[0] for c in CASES])
def test_malformed_documents_are_refused_whole(tmp_path, capsys, name, mutate, words):
    bad = _write(tmp_path / "bad.json", mutate(copy.deepcopy(_document())))
    good = _good(tmp_path)
    _refused(capsys, ["compare", good, bad], bad, words)
    _refused(capsys, ["compare", bad, good], bad, words)
    _refused(capsys, ["bench", "--merge", good, bad], bad, words)


@pytest.mark.parametrize(("name", "mutate", "words"), RAW, ids=[c[0] for c in RAW])
def test_malformed_text_is_refused(tmp_path, capsys, name, mutate, words):
    text = mutate(json.dumps(_document()))
    bad = tmp_path / "bad.json"
    bad.write_bytes(text.encode("utf-8", "surrogateescape"))
    good = _good(tmp_path)
    _refused(capsys, ["compare", good, str(bad)], str(bad), words)
    _refused(capsys, ["bench", "--merge", str(bad)], str(bad), words)


def test_a_message_names_the_entry_and_the_field(tmp_path):
    data = _document()
    data["results"][1]["median_s"] = "fast"
    path = _write(tmp_path / "r.json", data)
    with pytest.raises(ResultFileError) as caught:
        load_run(path)
    message = str(caught.value)
    assert message.startswith(path) and "result 1 (backend 'torch-cpu', 64x64x64)" in message
    assert "field 'median_s'" in message and "'fast'" in message


def test_random_corruptions_never_trace_back(tmp_path, capsys):
    """Random single-value corruptions of a valid file: each is accepted or refused cleanly."""
    rng = random.Random(20261125)
    values = [None, True, -1, 0, 2**63, 1e308, -0.5, "", "x" * 300, "[/]", [], {}, [[[]]], {"a": {"b": 1}}]
    good = _good(tmp_path)
    for number in range(60):
        data = _document()
        record = rng.choice(data["results"])
        key = rng.choice(sorted(record))
        record[key] = rng.choice(values)
        bad = _write(tmp_path / f"bad{number}.json", data)
        code = main(["compare", good, bad, "--all"])
        captured = capsys.readouterr()
        assert code in (0, 1, 2) and "Traceback" not in captured.err
        if code == 2:
            assert bad in captured.err


def test_markup_in_names_is_printed_as_text(tmp_path, capsys):
    names = ["[/]", "[bold red]x[/]", "[link=http://a]y"]
    base = _write(tmp_path / "a.json", _document([_result(n) for n in names]))
    new = _write(tmp_path / "b.json", _document([_result(n, median=2e-4) for n in names],
                                               environment={"cpu": {"device_name": "[/] cpu"}}))
    assert main(["compare", base, new]) == 1
    out = capsys.readouterr().out
    assert all(name in out for name in names) and "[/] cpu" in out
    assert main(["bench", "--merge", base]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in names)


def test_merge_of_parts_claiming_a_billion_parts_is_refused_quickly(tmp_path, capsys):
    parts = []
    for index in (1, 2):
        data = _document([_result(m=64 * index)], shard={"index": index, "count": 10**9, "grid": "g",
                                                            "points": 2})
        parts.append(_write(tmp_path / f"p{index}.json", data))
    _refused(capsys, ["bench", "--merge", *parts], parts[0], "count")


def test_a_valid_document_loads(tmp_path):
    data = _document(settings={"threads": 1}, shard={"index": 1, "count": 2, "grid": "g", "points": 3})
    data["results"][0].update(threads={"blas": 1, "openmp": 1}, converged=True, noise=0.004, throttled=False)
    data["results"][1].update(threads=2)
    path = _write(tmp_path / "ok.json", data)
    data = load_document(path)
    run = load_run(path)
    assert len(run.results) == len(data["results"]) == 3
    assert run.meta["shard"]["count"] == 2 and run.meta["settings"] == {"threads": 1}
    assert run.extras[0]["gpu"]["index"] == 0 and run.extras[0]["converged"] is True
    assert run.extras[0]["threads"] == {"blas": 1, "openmp": 1} and run.extras[1]["threads"] == 2
    # a file from before the format was versioned reads as version 1
    legacy = _document()
    del legacy["format"], legacy["version"]
    assert len(load_run(_write(tmp_path / "legacy.json", legacy)).results) == 3


def test_written_files_carry_the_format_and_read_back(tmp_path, capsys):
    path = tmp_path / "run.json"
    argv = ["bench", "--shape", "8x8x8", "--backend", "numpy", "--budget", "0.002", "--json", str(path)]
    assert main(argv) == 0
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT and data["version"] == VERSION
    assert load_document(path)["results"][0]["backend"] == "numpy"


def _pytest_benchmark(median=1e-4, **info):
    extra = {"backend": "numpy", "m": 64, "n": 64, "k": 64, "dtype": "float32", "layout": "NN",
             "device": "cpu", "timing": "wall clock", **info}
    return {"datetime": "2026-11-25T10:00:00", "benchmarks": [
        {"name": "test_gemm[64x64x64-float32-NN-numpy]", "extra_info": extra,
         "stats": {"median": median, "q1": None, "q3": None, "rounds": 20}}]}


PYTEST_CASES = [
    ("benchmarks not a list", {"datetime": "x", "benchmarks": {"a": 1}}, "benchmarks"),
    ("a benchmark not an object", {"benchmarks": ["x"]}, "benchmark 0"),
    ("median a string", _pytest_benchmark(median="fast"), "median_s"),
    ("median negative", _pytest_benchmark(median=-1.0), "median_s"),
    ("m a string", _pytest_benchmark(m="abc"), "'m'"),
    ("unknown dtype", _pytest_benchmark(dtype="float128"), "dtype"),
    ("backend too long", _pytest_benchmark(backend="x" * 300), "backend"),
    ("extra_info a list", {"benchmarks": [{"name": "t", "extra_info": [1], "stats": {}}]}, "extra_info"),
    ("no gemmzoo benchmarks", {"benchmarks": [{"name": "t", "extra_info": {}, "stats": {"median": 1}}]},
     "without gemmzoo"),
]


@pytest.mark.parametrize(("name", "data", "words"), PYTEST_CASES, ids=[c[0] for c in PYTEST_CASES])
def test_malformed_pytest_benchmark_files_are_refused(tmp_path, capsys, name, data, words):
    good = _write(tmp_path / "good.json", _pytest_benchmark())
    bad = _write(tmp_path / "bad.json", data)
    _refused(capsys, ["compare", good, bad], bad, words)


def test_written_files_never_hold_non_finite_numbers(tmp_path, capsys):
    """A worker's or the engine's extra record with NaN or infinity (a noise that never
    converged) is written as null, so gemmzoo reads back what it wrote."""
    from gemmzoo.cli.merge import write_outputs
    from gemmzoo.results.runs import load_run as read

    source = load_run(_write(tmp_path / "a.json", _document()))
    args = type("Args", (), {"json": str(tmp_path / "out.json"), "csv": None, "plot": None})()
    extras = [{**extra, "noise": math.inf, "gpu": {"power_w": math.nan}} for extra in source.extras]
    assert write_outputs(args, source.results, {"cpu": {"x": math.inf}}, "test", extras=extras) == 0
    again = read(args.json)
    assert [e["noise"] for e in again.extras] == [None] * 3 and again.extras[0]["gpu"]["power_w"] is None


def test_a_file_too_large_is_refused_before_parsing(tmp_path, capsys):
    from gemmzoo.results.schema import MAX_FILE_BYTES

    big = tmp_path / "big.json"
    with open(big, "wb") as handle:
        handle.write(b"[" + b" " * MAX_FILE_BYTES + b"]")
    _refused(capsys, ["compare", str(big), str(big)], str(big), "larger than")


def test_names_from_files_are_plotted_as_text(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    base = _write(tmp_path / "a.json", _document([_result("$\\frac{$"), _result("x$y$")],
                                                 environment={"cpu": {"device_name": "$\\bad{$"}}))
    new = _write(tmp_path / "b.json", _document([_result("$\\frac{$", median=2e-4), _result("x$y$")]))
    plot = tmp_path / "p.png"
    assert main(["compare", base, new, "--plot", str(plot)]) == 1
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_merge_plots_names_from_files_as_text(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    part = _write(tmp_path / "a.json", _document([_result("$\\frac{$"), _result("numpy", m=128)]))
    plot = tmp_path / "p.png"
    assert main(["bench", "--merge", part, "--plot", str(plot)]) == 0
    assert plot.read_bytes()[:4] == b"\x89PNG"
