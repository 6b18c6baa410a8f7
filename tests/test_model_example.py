"""The example transformer (examples/transformer) on the CPU: its loss and every gradient through
gemmzoo.matmul against the same model through torch.matmul, and the record-then-tune workflow on
its products, backward ones included."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sessions import restart  # noqa: E402

from gemmzoo.cli import main  # noqa: E402
from gemmzoo.problems.grids import GridPoint  # noqa: E402
from gemmzoo.tuning import state  # noqa: E402
from gemmzoo.tuning.fingerprint import device_fingerprint  # noqa: E402
from gemmzoo.tuning.select import explain  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "transformer"


def load(name: str):
    """The example's module ``name`` (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"transformer_example_{name}", EXAMPLE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


model = load("model")


@pytest.fixture(autouse=True)
def cache(empty_cache):
    yield empty_cache


def run_step(config, dtype, matmul, seed=0):
    net = model.build(config, matmul=matmul, dtype=dtype, seed=seed)
    tokens, targets = model.batch_of(config)
    loss = model.step(net, tokens, targets)
    return loss, {name: p.grad.detach().clone() for name, p in net.named_parameters()}


def errors(got, truth):
    return (got.double() - truth.double()).abs()


@pytest.mark.parametrize("backends", ["", "numpy"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_loss_and_every_gradient_match_stock_torch(backends, dtype, monkeypatch):
    if backends:  # a backend other than torch's own: the products really differ
        monkeypatch.setenv("GEMMZOO_BACKENDS", backends)
    config = model.Config.tiny()
    import gemmzoo

    loss, grads = run_step(config, dtype, gemmzoo.matmul)
    stock_loss, stock = run_step(config, dtype, torch.matmul)
    truth_loss, truth = run_step(config, torch.float64, torch.matmul)  # the reference both are held to
    assert set(grads) == set(stock) == set(truth) and len(grads) == 4 + 12 * config.n_layer
    eps = torch.finfo(dtype).eps
    # gemmzoo's error against the float64 truth is at most twice stock torch's, plus a few units
    # of the format's rounding: never less accurate than the call it replaces
    assert float(errors(loss, truth_loss)) <= 2 * float(errors(stock_loss, truth_loss)) + 16 * eps
    for name, got in grads.items():
        assert got.dtype == dtype and got.shape == stock[name].shape
        assert torch.isfinite(got).all() and float(truth[name].abs().max()) > 0, name
        stock_error = float(errors(stock[name], truth[name]).max())
        bound = 2 * stock_error + 16 * eps * float(truth[name].abs().max())
        worst = float(errors(got, truth[name]).max())
        assert bool((errors(got, truth[name]) <= bound).all()), (name, worst, bound)


def test_a_llama_shaped_swiglu_block_matches_stock_torch_and_records_gate_and_up_once():
    import gemmzoo

    config = model.Config.tiny(mlp="swiglu", n_inner=40)
    loss, grads = run_step(config, torch.float64, gemmzoo.matmul)
    stock_loss, stock = run_step(config, torch.float64, torch.matmul)
    assert len(grads) == 4 + 14 * config.n_layer  # gate and up in place of fc: two more parameters
    assert abs(float(loss) - float(stock_loss)) <= 1e-12 * abs(float(stock_loss))
    for name, got in grads.items():
        scale = float(stock[name].abs().max())
        assert scale > 0 and float((got - stock[name]).abs().max()) <= 1e-12 * scale, name
    rows = config.batch * config.seq_len
    gate = GridPoint(rows, 40, config.n_embd, "float64", "NT")
    seen = dict(state.store().recorded(device_fingerprint("cpu")))
    assert gate in seen and seen[gate] == 1  # gate and up: one problem, met by two call sites


def test_configs_parse_from_text_and_presets_give_other_models_products():
    config = model.Config.parse("n_embd=4096,n_head=32,mlp=swiglu,vocab_size=32000")
    assert config.inner == 11008 and config.n_layer == 12  # Llama's rounding; the rest from the base
    names = [name for name, *_ in config.problems()]
    assert names == ["attn.qkv", "attn.proj", "mlp.gate", "mlp.up", "mlp.proj", "lm_head"]
    assert model.PRESETS["llama-1b"].problems()[-1] == ("lm_head", 4096, 128256, 2048)
    assert model.Config(n_embd=64, n_head=4).inner == 256
    with pytest.raises(ValueError, match="not name=value"):
        model.Config.parse("hidden=3")
    with pytest.raises(ValueError, match="n_layer must be int"):
        model.Config.parse("n_layer=four")
    with pytest.raises(ValueError, match="mlp must be one of"):
        model.Config.parse("mlp=relu")


def recorded():
    return {point for point, _seen in state.store().recorded(device_fingerprint("cpu"))}


def test_every_product_of_a_step_backward_ones_included_is_recorded_tuned_then_answered_from_the_database(
        capsys):
    config = model.Config.tiny()
    import gemmzoo

    run_step(config, torch.float32, gemmzoo.matmul)
    expected = set()
    for _name, m, n, k in config.problems():
        expected |= {GridPoint(m, n, k, "float32", "NT"),  # forward: x·Wᵀ
                     GridPoint(m, k, n, "float32", "NN"),  # dX = dY·W
                     GridPoint(n, k, m, "float32", "TN")}  # dW = dYᵀ·X (W's own layout)
    assert recorded() == expected

    assert main(["tune", "--recorded", "--budget", "0.01"]) == 0
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.startswith("[")]
    assert len(lines) == len(expected) and lines[-1].startswith(f"[{len(expected)}/{len(expected)}] ")
    assert all(" vs torch-cpu" in line for line in lines), lines
    assert "torch-compile" in err and "--include-compiling" in err  # left out, and said
    assert "expected gain" in out and f"tuned {len(expected)} recorded problems" in out
    assert recorded() == set()
    for point in expected:
        choice = explain((point.m, point.n, point.k), "float32", "cpu", measure=False, layout=point.layout)
        assert choice.source == "database" and choice.backend.name in ("numpy", "torch-cpu"), point

    restart()  # a new process: the step answers every product from its own measurements
    loss, _ = run_step(config, torch.float32, gemmzoo.matmul)
    assert recorded() == set()
    stock_loss, _ = run_step(config, torch.float32, torch.matmul)
    assert abs(float(loss) - float(stock_loss)) <= 1e-4 * abs(float(stock_loss))


def test_the_example_script_runs_a_few_steps_on_the_cpu(capsys):
    script = load("train_step")
    assert script.main(["--steps", "2", "--device", "cpu"]) == 0
    assert script.main(["--steps", "1", "--device", "cpu", "--stock", "--n-embd", "48", "--n-head", "3"]) == 0
    out = capsys.readouterr().out
    losses = [float(line.split("loss ")[1].split(",")[0]) for line in out.splitlines() if "loss" in line]
    assert len(losses) == 3 and all(np.isfinite(losses)) and abs(losses[0] - np.log(101)) < 0.5
    assert "n_embd=48" in out


def test_a_config_with_sizes_that_cannot_work_is_refused_by_name():
    with pytest.raises(ValueError, match=r"n_embd .*n_head"):
        model.Config(n_embd=50, n_head=3)
    with pytest.raises(ValueError, match="vocab_size"):
        model.Config.tiny(vocab_size=0)


def test_the_benchmark_runs_both_phases_on_a_tiny_model_and_writes_its_figures(tmp_path, capsys, monkeypatch):
    from gemmzoo import native

    monkeypatch.setenv(native.ENV_SWITCH, "0")  # the benchmark sets it: restored after the test
    spec = importlib.util.spec_from_file_location(
        "model_step_benchmark", Path(__file__).resolve().parents[1] / "benchmarks" / "model_step.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    out = tmp_path / "step.json"
    # the benchmark sets GEMMZOO_CACHE_DIR for itself and its subprocess: the fixture restores it
    assert benchmark.main(["--device", "cpu", "--tiny", "--rounds", "1", "--warmup", "0",
                           "--problem-rounds", "1", "--problem-budget", "0.001",
                           "--cache-dir", str(tmp_path / "bench-cache"),
                           "--tune-arg=--budget", "--tune-arg=0.01", "--json", str(out)]) == 0
    import json

    figures = json.loads(out.read_text())
    assert figures["tune"]["exit"] == 0 and figures["tune"]["seconds"] > 0
    assert "[15/15]" in capsys.readouterr().err  # the tuner's progress came through
    assert figures["dispatch"] == "python"
    assert figures["tune"]["progress"][-1].startswith("[15/15]")
    tuned = figures["tune"]["problems"]  # the progress lines as rows: one per problem (one pass on the CPU)
    assert len(tuned) == 15 and all(row["backend"] in ("numpy", "torch-cpu") and row["seconds"] >= 0
                                    for row in tuned)
    assert all(row["baseline"] == "torch-cpu" and row["gain"] > 0 for row in tuned)
    assert set(figures["targets"]) == {"untuned x1", "tuned x1.15", "tune <= 120 s"}
    for phase in ("untuned", "tuned"):
        result = figures[phase]
        assert result["ratio"] > 0 and result["gemmzoo_step_ms"] > 0 and result["stock_step_ms"] > 0
        # every product of a step, forward and backward, each once per block or once per step
        assert sum(row["count"] for row in result["problems"]) == 3 * (4 * 2 + 1)
        assert {row["direction"] for row in result["problems"]} == {"forward", "backward"}
        assert all(row["backend"] in ("numpy", "torch-cpu") for row in result["problems"])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_lm_head_through_torch_padded_forward_and_backward_in_its_three_layouts(dtype):
    """A misaligned vocabulary (N odd): x·Eᵀ (NT), dX = dC·E (NN, K odd) and dE = dCᵀ·X (TN, M
    odd), each within the suite's bound of the float64 product, every element."""
    import gemmzoo
    from gemmzoo.conformance.bounds import error_bound

    backend = gemmzoo.get_backend("torch-padded")
    if backend.unavailable_reason():
        pytest.skip(backend.unavailable_reason())
    torch_dtype = getattr(torch, dtype)
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(256, 96, generator=generator).to("cuda", torch_dtype).requires_grad_()
    embedding = torch.randn(1001, 96, generator=generator).to("cuda", torch_dtype).requires_grad_()
    upstream = torch.randn(256, 1001, generator=generator).to("cuda", torch_dtype)
    logits = gemmzoo.matmul(x, embedding.t(), "torch-padded")
    logits.backward(upstream)
    assert embedding.grad.is_contiguous()

    def check(got, left, right):
        left64, right64 = left.detach().double().cpu().numpy(), right.detach().double().cpu().numpy()
        exact = left64 @ right64
        bound = error_bound(dtype, left.shape[1], exact, np.abs(left64) @ np.abs(right64))
        assert got.shape == exact.shape
        assert bool(np.all(np.abs(got.detach().double().cpu().numpy() - exact) <= bound))

    check(logits, x, embedding.t())
    check(x.grad, upstream, embedding)
    check(embedding.grad, upstream.t(), x)


@pytest.mark.gpu
def test_a_training_step_captured_in_a_cuda_graph_replays_as_the_eager_step():
    """The whole step (forward and backward products through gemmzoo.matmul) captured after
    warm-up steps on a side stream; replayed on new tokens, it gives the eager step's loss and
    gradients."""
    import gemmzoo

    config = model.Config.tiny(vocab_size=1001)
    net = model.build(config, device="cuda")
    tokens, targets = model.batch_of(config, device="cuda", seed=1)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model.step(net, tokens, targets)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    net.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss = net(tokens, targets)
        loss.backward()
    new_tokens, new_targets = model.batch_of(config, device="cuda", seed=2)
    tokens.copy_(new_tokens)
    targets.copy_(new_targets)
    graph.replay()
    torch.cuda.synchronize()
    replayed = (loss.detach().clone(), {n: p.grad.detach().clone() for n, p in net.named_parameters()})
    eager = model.build(config, device="cuda", matmul=gemmzoo.matmul)
    eager_loss = model.step(eager, new_tokens, new_targets)
    torch.testing.assert_close(replayed[0], eager_loss, rtol=1e-5, atol=1e-6)
    for name, parameter in eager.named_parameters():
        torch.testing.assert_close(replayed[1][name], parameter.grad, rtol=1e-4, atol=1e-6)
