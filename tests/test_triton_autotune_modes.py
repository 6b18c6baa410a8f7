"""The Triton plugin's two autotuning modes: ``quick`` (a model's best few configs) for a problem
met for the first time, ``full`` (every config, the pick kept on disk) for ``gemmzoo tune``.

Under the interpreter Triton cannot time configs, so the tests that need timing replace the
autotuner's launch with a stand-in that records which configs it was given and picks one.
"""

# ruff: noqa: N803 - M, N, K and upper-case constexprs, as the plugin's kernels name them

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from sessions import reconfigure  # noqa: E402

from gemmzoo_triton.core import autotune, picks_store  # noqa: E402
from gemmzoo_triton.core.env import AUTOTUNE_ENV, autotune_mode, interpreter_mode  # noqa: E402
from gemmzoo_triton.fp8.backend import TritonFp8Backend  # noqa: E402
from gemmzoo_triton.grouped.backend import TritonGroupedBackend, TritonGroupedTmaBackend  # noqa: E402


def config(bm: int, bn: int, bk: int = 32, stages: int = 3, warps: int = 4, **extra: int) -> triton.Config:
    blocks = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 1}
    return triton.Config({**blocks, **extra}, num_stages=stages, num_warps=warps)


def cost(c: triton.Config, m: int, n: int, k: int, size: int = 2, sms: int = 132) -> float:
    return autotune.estimated_cost(c, m, n, k, size, sms)


CONFIGS = [config(16, 16), config(32, 32), config(64, 64), config(32, 64)]


@autotune.autotuned(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def stamp_kernel(out_ptr, M, N, K, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                 BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
    """Writes the config it was compiled with, so a test sees which one ran."""
    tl.store(out_ptr, BLOCK_SIZE_M)
    tl.store(out_ptr + 1, BLOCK_SIZE_N)


@autotune.autotuned(configs=CONFIGS, key=["M", "N", "K"], quick_configs=1)
@triton.jit
def stamp_one_kernel(out_ptr, M, N, K, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                     BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
    """``stamp_kernel`` whose quick autotune keeps one config: the model's best."""
    tl.store(out_ptr, BLOCK_SIZE_M)
    tl.store(out_ptr + 1, BLOCK_SIZE_N)


KERNELS = ("stamp_kernel", "stamp_one_kernel")


@pytest.fixture(autouse=True)
def forget_picks(empty_cache):
    """Each test starts as a new process would: no picks in memory, the disk file (in the test's
    own cache directory) read again."""
    def clear() -> None:
        for key in [k for k in autotune.PICKED if k[0] in KERNELS]:
            del autotune.PICKED[key]
            autotune.FULL_PICKS.discard(key)
        picks_store.forget()

    clear()
    yield
    clear()


def launch(m: int, mode: str, kernel=stamp_kernel) -> tuple[triton.Config, tuple[int, int]]:
    # the interpreter runs kernels on host tensors; a compiled kernel needs the GPU's
    out = torch.zeros(2, dtype=torch.float32, device="cpu" if interpreter_mode() else "cuda")
    picked = autotune.launch_tuned(kernel, lambda meta: (1,), (out, m, m, m), {}, (m, m, m), mode)
    return picked, (int(out[0]), int(out[1]))


class FakeTuner:
    """Stands in for an autotuner's launch: records the configs it would time, picks ``choose``."""

    def __init__(self, tuner, monkeypatch, choose):
        self.timed: list[list[triton.Config]] = []
        self._tuner, self._choose = tuner, choose
        monkeypatch.setattr(tuner, "run", self.run)

    def run(self, *args, **kwargs):
        named = dict(zip(self._tuner.arg_names, args, strict=False))
        pruned = self._tuner.early_config_prune(self._tuner.configs, named, **kwargs)
        self.timed.append(pruned)
        self._tuner.best_config = self._choose(pruned)
        self._tuner.fn.run(*args, **kwargs, **self._tuner.best_config.all_kwargs())


# The mode -----------------------------------------------------------------------------------------


def test_the_mode_is_the_option_else_the_environment_else_quick(monkeypatch):
    monkeypatch.delenv(AUTOTUNE_ENV, raising=False)
    assert autotune_mode() == "quick"
    assert autotune_mode("full") == "full"
    monkeypatch.setenv(AUTOTUNE_ENV, " Full ")
    reconfigure()  # settings are read once per session
    assert autotune_mode() == "full"
    assert autotune_mode("quick") == "quick"  # the option wins


def test_a_bad_mode_is_a_clear_error(monkeypatch):
    with pytest.raises(ValueError, match=r"autotune='fast'.*quick, full"):
        TritonGroupedBackend(autotune="fast")
    monkeypatch.setenv(AUTOTUNE_ENV, "always")
    reconfigure()  # settings are read once per session
    with pytest.raises(ValueError, match=rf"{AUTOTUNE_ENV}='always'"):
        TritonGroupedBackend()


def test_backends_take_the_mode_when_made(monkeypatch):
    monkeypatch.setenv(AUTOTUNE_ENV, "full")
    reconfigure()  # settings are read once per session
    made_full = TritonGroupedBackend()
    monkeypatch.delenv(AUTOTUNE_ENV)
    reconfigure()
    assert made_full.autotune == "full"  # read once, when the backend was made
    assert TritonGroupedBackend().autotune == "quick"
    assert TritonGroupedTmaBackend(autotune="full").autotune == "full"
    assert TritonFp8Backend(autotune="full").autotune == "full"


def test_a_plan_passes_its_backends_mode_to_the_kernel(monkeypatch):
    from gemmzoo_triton.grouped import pointer_kernel

    seen = []
    real = pointer_kernel.launch

    def spy(*args, **kwargs):
        seen.append(args[5] if len(args) > 5 else kwargs.get("mode"))
        return real(*args, **kwargs)

    monkeypatch.setattr(pointer_kernel, "launch", spy)
    gen = torch.Generator().manual_seed(11)
    for mode in ("quick", "full"):
        backend = TritonGroupedBackend(autotune=mode)
        x, y = torch.randn(29, 31, generator=gen), torch.randn(31, 27 + len(seen), generator=gen)
        x, y = x.to(backend.device), y.to(backend.device)  # the host under the interpreter, else the GPU
        c = backend.matmul(x, y)
        torch.testing.assert_close(c, x @ y, rtol=1e-4, atol=1e-4)
    assert seen == ["quick", "full"]


# The model ---------------------------------------------------------------------------------------


def test_the_model_prefers_reuse_on_large_problems_and_little_waste_on_small_ones():
    big, small = config(128, 256, 64), config(64, 64, 64)
    assert cost(big, 4096, 4096, 4096) < cost(small, 4096, 4096, 4096)
    # 130 x 130: a 128-wide tile computes almost four times C, the 64-wide ones a third more
    assert cost(small, 130, 130, 4096) < cost(big, 130, 130, 4096)


def test_the_model_counts_waves_over_the_sms():
    tile = config(128, 128, 64)
    one_wave = cost(tile, 128 * 11, 128 * 12, 1024)  # 132 tiles
    two_waves = cost(tile, 128 * 11 + 1, 128 * 12, 1024)  # 144 tiles
    assert two_waves == pytest.approx(2 * one_wave)
    persistent = config(128, 128, 64, PROGRAMS_PER_SM=2)
    assert cost(persistent, 128 * 11, 128 * 24, 1024) == pytest.approx(2 * one_wave)  # 2 programs an SM


def test_the_model_charges_narrow_k_steps_and_idle_stages():
    wide, narrow = config(128, 128, 64), config(128, 128, 32)
    assert cost(narrow, 1024, 1024, 4096) > cost(wide, 1024, 1024, 4096)
    long_pipe, short_pipe = config(128, 128, 64, stages=5), config(128, 128, 64, stages=2)
    assert cost(long_pipe, 1024, 1024, 64) > cost(short_pipe, 1024, 1024, 64)


def test_quick_pruning_keeps_the_models_best_few_of_what_full_pruning_keeps():
    named = {"a": torch.empty(1, dtype=torch.float16), "M": 2000, "N": 3000, "K": 1000}
    full = autotune.prune_configs(CONFIGS, named)
    quick = autotune.quick_prune(CONFIGS, named)
    assert len(quick) == autotune.QUICK_CONFIGS < len(full)
    assert all(c in full for c in quick)
    costs = {id(c): cost(c, 2000, 3000, 1000, 2, autotune.DEFAULT_SMS) for c in full}
    assert sorted(costs[id(c)] for c in quick) == sorted(costs.values())[: autotune.QUICK_CONFIGS]
    assert quick[0] is CONFIGS[2]  # 64x64: the most reuse, no edge to speak of
    assert autotune.quick_prune(CONFIGS, named, keep=len(full)) == full  # keep= all: nothing dropped
    assert autotune.quick_prune(CONFIGS, named, keep=1) == [CONFIGS[2]]


# Quick and full launches -------------------------------------------------------------------------


def test_quick_times_only_the_models_best_configs(monkeypatch):
    fake = FakeTuner(autotune._TUNERS["stamp_kernel"].quick, monkeypatch, lambda configs: configs[-1])
    picked, ran = launch(500, "quick")
    assert [len(t) for t in fake.timed] == [autotune.QUICK_CONFIGS]
    assert picked is fake.timed[0][-1]
    assert ran == (picked.kwargs["BLOCK_SIZE_M"], picked.kwargs["BLOCK_SIZE_N"])
    again, ran_again = launch(500, "quick")  # tuned once: launched directly
    assert again is picked and ran_again == ran and len(fake.timed) == 1


def test_quick_with_one_config_left_launches_it_without_the_autotuner(monkeypatch):
    fake = FakeTuner(autotune._TUNERS["stamp_one_kernel"].quick, monkeypatch, lambda configs: configs[0])
    picked, ran = launch(500, "quick", stamp_one_kernel)
    best = min(CONFIGS, key=lambda c: cost(c, 500, 500, 500, 4, autotune.DEFAULT_SMS))  # fp32 stamps
    assert fake.timed == [] and picked is best
    assert ran == (best.kwargs["BLOCK_SIZE_M"], best.kwargs["BLOCK_SIZE_N"])


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_a_kernel_keeps_at_least_one_quick_config(bad):
    with pytest.raises(ValueError, match=f"quick_configs: a whole number of configs, at least 1; got {bad}"):
        autotune.autotuned(configs=CONFIGS, key=["M"], quick_configs=bad)


def test_full_times_every_config_and_later_quick_processes_launch_its_pick(monkeypatch):
    fake = FakeTuner(stamp_kernel, monkeypatch, lambda configs: configs[0])  # 16x16: not quick's pick
    picked, ran = launch(500, "full")
    named = {"a": torch.empty(1), "M": 500, "N": 500, "K": 500}
    assert [len(t) for t in fake.timed] == [len(autotune.prune_configs(CONFIGS, named))] == [len(CONFIGS)]
    assert picked is CONFIGS[0] and ran == (16, 16)
    assert picks_store.path().is_file()
    # a later process: nothing in memory; quick launches the full pick from disk, nothing timed
    for key in [k for k in autotune.PICKED if k[0] == "stamp_kernel"]:
        del autotune.PICKED[key]
        autotune.FULL_PICKS.discard(key)
    picks_store.forget()
    quick = FakeTuner(autotune._TUNERS["stamp_kernel"].quick, monkeypatch, lambda configs: configs[0])
    again, ran_again = launch(500, "quick")
    assert again is CONFIGS[0] and ran_again == (16, 16) and quick.timed == []


def test_a_full_request_tunes_again_after_a_quick_pick(monkeypatch):
    quick = FakeTuner(autotune._TUNERS["stamp_kernel"].quick, monkeypatch, lambda configs: configs[0])
    launch(500, "quick")
    full = FakeTuner(stamp_kernel, monkeypatch, lambda configs: configs[-1])
    picked, _ = launch(500, "full")
    assert len(quick.timed) == 1 and len(full.timed) == 1 and picked is full.timed[0][-1]
    assert launch(500, "quick")[0] is picked  # quick takes the full pick from now on


def test_a_stored_pick_that_is_no_config_any_more_is_ignored():
    key = ("stamp_kernel", 7, 7, 7)
    picks_store.save(key, config(256, 256))
    picks_store.forget()
    assert picks_store.load(key, CONFIGS) is None
    picks_store.save(key, CONFIGS[3])
    picks_store.forget()
    assert picks_store.load(key, CONFIGS) is CONFIGS[3]


def test_an_unreadable_picks_file_means_tuning_again():
    picks_store.path().parent.mkdir(parents=True, exist_ok=True)
    picks_store.path().write_text("{not json")
    picks_store.forget()
    assert picks_store.load(("stamp_kernel", 1, 2, 3), CONFIGS) is None


# gemmzoo tune ------------------------------------------------------------------------------------


def test_a_tuning_run_measures_the_full_twin_of_a_quick_backend():
    quick = TritonGroupedBackend(contiguous_c=True)
    twin = quick.for_tuning()
    assert twin.autotune == "full" and quick.autotune == "quick"
    assert twin.name == quick.name and twin.contiguous_c and twin.gluon == quick.gluon
    assert twin._plans is not quick._plans and quick.for_tuning() is twin
    assert twin.for_tuning() is twin
    full = TritonFp8Backend(autotune="full")
    assert full.for_tuning() is full


def test_gemmzoo_tune_measures_triton_backends_in_full_mode(empty_cache, monkeypatch):
    import importlib

    import gemmzoo
    from gemmzoo.problems.grids import GridPoint

    tune = importlib.import_module("gemmzoo.tuning.tune")  # the module: the package exports the function

    measured = []

    def fake_measure(backends, point, budget_s, verify):
        measured.extend(backends)
        return []

    monkeypatch.setattr(tune, "measure_records", fake_measure)
    monkeypatch.setattr(tune, "conformance_verdict", lambda store, backend, dtype, run=True: True)
    tune.tune([GridPoint(8, 8, 8, "float32", "NN")], ["triton-grouped", "numpy"])
    by_name = {b.name: b for b in measured}
    assert by_name["triton-grouped"].autotune == "full"
    assert by_name["triton-grouped"] is gemmzoo.get_backend("triton-grouped").for_tuning()
    assert by_name["numpy"] is gemmzoo.get_backend("numpy")  # backends without the hook as they are


def test_each_mode_has_its_own_autotuner_over_one_kernel():
    full, quick = autotune.tuner(stamp_kernel, "full"), autotune.tuner(stamp_kernel, "quick")
    assert full is stamp_kernel and quick is not full
    assert quick.fn is full.fn  # one triton.jit function: its compiled kernels are shared
