"""A long run's loop as successive compiled calls (``dynamics.core.resumable``) gives the numbers of
one call bit for bit, whatever iterations each call covers; a run resumed from a mid-run file
(``dynamics.sweeps.midrun``) equals the uninterrupted run."""

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import replace

from dynamics import run_grid, run_sweep
from dynamics.api import with_overrides
from dynamics.cli.run import main
from dynamics.config.grid_axes import resolve_grid
from dynamics.config.schema import resolve
from dynamics.core import resumable
from dynamics.core.data import token_width
from dynamics.core.engine import float_dtype, train_batch
from dynamics.errors import ConfigError
from dynamics.sweeps import execute, longrun, midrun
from dynamics.sweeps.checkpoint import run_checkpointed
from dynamics.sweeps.devices import BatchPlacer
from dynamics.sweeps.execute import prepare_data
from dynamics.sweeps.grid_runner import run_grid_checkpointed, run_grid_experiment
from dynamics.sweeps.plan import make_batch, plan_points, trial_keys

SMALL = dict(heads=[1, 3], trials=2, steps=40, n_train=12, n_test=10, d=6, T=4, log_every=3)

# The engine's paths: fused logging and the per-head view (GD, zero init: the fast path), the full
# path, Adam, SGD (epoch and online batches: their keys from t), normalised GD (the zero-step watch),
# random init without the view, snapshots of θ with a bias, a diverging run (masking), a temperature
# schedule (logged with a forward of its own).
CASES = {
    "gd-fast-path": {},
    "gd-no-fast-path": dict(sweep_fast_path=False),
    "adam": dict(optimizer="adam", lr=0.05),
    "sgd-epoch": dict(optimizer="sgd", batch_size=4),
    "sgd-online": dict(optimizer="sgd", batch_size=4, sampling="online"),
    "normalized-gd": dict(optimizer="normalized-gd", lr=0.2),
    "random-init": dict(init="normal", init_scale=0.5, head_metrics="off"),
    "snapshots-bias": dict(init="normal", init_scale=0.5, save_params=True, bias=True),
    "diverging": dict(lr=1e6, loss="exp"),
    "temperature": dict(temperature_decay=0.1),
}


def _config(**knobs):
    """The small config with ``knobs`` (``sweep_fast_path``: the sweep's field, no keyword)."""
    fast = knobs.pop("sweep_fast_path", True)
    small = {k: v for k, v in SMALL.items() if k != "n_train" or knobs.get("sampling") != "online"}
    return replace(with_overrides(None, **{**small, **knobs}), fast_path=fast)


def _points(cfg):
    exp = resolve(cfg)
    cfg, placer = exp.config, BatchPlacer()
    data, shared, init_keys = prepare_data(cfg)
    placed = placer.data(data._replace(world=None) if cfg.optim.sampling != "online" else data)
    points = plan_points(cfg, list(range(len(cfg.sweep.heads))), token_width(data), exp.steps, placer)
    for point in points:
        batch, _, _ = make_batch(point, [cfg], init_keys, float_dtype(), trial_keys(cfg))
        kw = dict(mesh=placer.mesh, chunk=point.chunk, shared_data=shared)
        yield point.prog, placed, placer.batch(batch), kw, placer


def _equal(a: dict, b: dict) -> list[str]:
    assert set(a) == set(b)
    return [k for k in a if a[k].shape != b[k].shape or not np.array_equal(a[k], b[k], equal_nan=True)]


# Each case compiles three programs (one call, the first state, the calls): ~5 s each on an idle
# core; the fast path with the per-head view and fused logging is in the quick run, the rest slow.
QUICK = {"gd-fast-path"}


@pytest.mark.parametrize(
    "case", [c if c in QUICK else pytest.param(c, marks=pytest.mark.slow) for c in sorted(CASES)]
)
def test_calls_over_any_iterations_equal_one_call_bitwise(case):
    cfg = _config(**CASES[case])
    for prog, placed, batch, kw, placer in _points(cfg):
        one, div_one = placer.fetch(train_batch(prog, placed, batch, **kw))
        state = resumable.start_batch(prog, placed, batch, **kw)
        L = len(prog.segments)
        for start, end in zip([0, 1, 2, 7], [1, 2, 7, L], strict=True):  # a single iteration too
            state = resumable.advance(prog, placed, batch, state, start, end, **kw)
        calls, div_calls = resumable.outputs(prog, placer.fetch(state))
        assert not _equal(one, calls), _equal(one, calls)
        np.testing.assert_array_equal(div_one, div_calls)
        if case == "diverging":
            assert (div_calls <= sum(prog.segments)).any()  # the masking path is exercised


class CountingBar(execute.tqdm):
    moves: list = []

    def update(self, n=1):
        CountingBar.moves.append(n)
        return super().update(n)


@pytest.mark.slow
def test_a_sweep_run_in_calls_equals_one_call_and_moves_the_bar(monkeypatch):
    cfg = _config(heads=[2], steps=300, log_every=10)
    one = run_sweep(cfg, progress=False)
    monkeypatch.setattr(execute, "tqdm", CountingBar)
    CountingBar.moves = []
    calls = run_sweep(cfg, progress=True, call_seconds=1e-6)  # every call one logged step's updates
    assert not _equal(one.curves, calls.curves)
    np.testing.assert_array_equal(one.diverged_at, calls.diverged_at)
    assert len(CountingBar.moves) >= 10 and sum(CountingBar.moves) == 300, CountingBar.moves


def key_norms(params, data):  # a user's metric, per head: (H,)
    return jnp.sqrt(jnp.sum(params["W"] ** 2, axis=(-2, -1)))


@pytest.mark.slow
def test_a_user_metric_in_calls_equals_one_call(monkeypatch):
    cfg = _config(heads=[2], steps=300, log_every=10, init="normal", init_scale=0.5)
    one = run_sweep(cfg, progress=False, metrics={"key_norms": key_norms})
    monkeypatch.setattr(execute, "tqdm", CountingBar)
    CountingBar.moves = []
    calls = run_sweep(cfg, progress=True, call_seconds=1e-6, metrics={"key_norms": key_norms})
    assert len(CountingBar.moves) >= 10 and "key_norms" in calls.curves
    assert not _equal(one.curves, calls.curves)


class Crash(Exception):
    pass


def test_a_run_resumed_from_its_mid_run_file_equals_the_uninterrupted_run(tmp_path, monkeypatch):
    cfg = with_overrides(None, **{**SMALL, "heads": [2], "steps": 300, "log_every": 10})
    whole = run_sweep(cfg, progress=False)
    advance, calls = resumable.advance, []

    def crash_after_twelve(*args, **kwargs):  # a crash (or a kill) in the 13th call
        calls.append(args[4:6])
        if len(calls) > 12:
            raise Crash
        return advance(*args, **kwargs)

    monkeypatch.setattr(resumable, "advance", crash_after_twelve)
    with pytest.raises(Crash):
        run_checkpointed(cfg, tmp_path, progress=False, call_seconds=1e-6, checkpoint_every=1e-6)
    saved = midrun.midrun_file(tmp_path, [2])
    with np.load(saved) as z:
        done, steps_done = int(z["done"]), int(z["steps_done"])
    assert done == calls[11][1] and steps_done == 10 * done  # after the 12th call (10 steps each)
    resumed = []
    monkeypatch.setattr(resumable, "advance", lambda *a, **k: resumed.append(a[4:6]) or advance(*a, **k))
    result = run_checkpointed(cfg, tmp_path, resume=True, progress=False, call_seconds=1e-6)
    assert resumed[0][0] == done and not saved.exists()  # went on from the file, then removed it
    assert not _equal(whole.curves, result.curves)
    np.testing.assert_array_equal(whole.diverged_at, result.diverged_at)


def test_the_interrupt_line_says_how_far_a_long_run_got(tmp_path):
    store = midrun.MidRun(tmp_path, "abc", resume=False)
    store.save([1, 2, 4, 8, 16, 32], [np.zeros(3)], 90, 14200, 30000)
    assert midrun.kept(tmp_path) == "14200/30000 steps of H=1..32"
    store.clear([1, 2, 4, 8, 16, 32])
    assert midrun.kept(tmp_path) is None


def test_a_mid_run_file_of_another_config_or_layout_is_not_continued(tmp_path):
    leaves = [np.zeros((2, 3), np.float32)]
    midrun.MidRun(tmp_path, "other", resume=False).save([1], leaves, 5, 50, 100)
    assert midrun.MidRun(tmp_path, "mine", resume=True).load([1], leaves) is None
    midrun.MidRun(tmp_path, "mine", resume=False).save([1], leaves, 5, 50, 100)
    assert midrun.MidRun(tmp_path, "mine", resume=False).load([1], leaves) is None  # not resuming
    assert midrun.MidRun(tmp_path, "mine", resume=True).load([1], leaves)[0] == 5
    with pytest.warns(UserWarning, match="another layout"):
        assert midrun.MidRun(tmp_path, "mine", resume=True).load([1], [np.zeros((2, 4), np.float32)]) is None


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), "2", True])
def test_bad_seconds_are_refused_in_one_line(bad):
    with pytest.raises(ConfigError, match="must be a number of seconds > 0"):
        midrun.check_seconds("call_seconds", bad)
    with pytest.raises(ConfigError, match=r"call_seconds=.* must be a number of seconds > 0"):
        run_sweep(call_seconds=bad, progress=False)


@pytest.mark.slow
def test_run_grid_takes_call_seconds_for_axes_and_for_step_sizes(monkeypatch):
    """``dynamics.run_grid`` splits a long call as ``run_sweep`` does, on both of its paths (knob
    axes, and the η₀ list), with the numbers of one call; a bad value is refused before running."""
    knobs = {**SMALL, "heads": [2], "steps": 60, "log_every": 10, "trials": 1}
    monkeypatch.setattr(execute, "tqdm", CountingBar)
    for axes in ({"optimizer": ["gd", "adam"]}, {}):
        lrs = None if axes else [0.5, 1.0]
        one = run_grid(None, lrs=lrs, progress=False, **knobs, **axes)
        CountingBar.moves = []
        calls = run_grid(None, lrs=lrs, progress=True, call_seconds=1e-6, **knobs, **axes)
        assert len(CountingBar.moves) >= 6, CountingBar.moves  # moved inside the compiled run
        pairs = [(one.point(k), calls.point(k)) for k in range(2)] if axes else zip(one, calls, strict=True)
        for a, b in pairs:
            assert not _equal(a.curves, b.curves)
        with pytest.raises(ConfigError, match=r"call_seconds=0 must be a number of seconds > 0"):
            run_grid(None, lrs=lrs, progress=False, call_seconds=0, **knobs, **axes)


@pytest.mark.parametrize("flag", ["--call-seconds", "--checkpoint-every"])
@pytest.mark.parametrize("text", ["0", "-2", "inf", "soon"])
def test_bad_seconds_flags_are_refused_in_one_line(flag, text, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([f"{flag}={text}", "--out", "never-written"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "must be a number of seconds > 0" in err, err


def _grid_interrupted(monkeypatch, tmp_path, axes: dict, crash_at: int):
    """A grid of the small config over ``axes`` (H = 2, 31 logged steps) run uninterrupted (one call
    per point), then in calls of one logged step each that crash at call ``crash_at``, every call's
    state kept, then resumed: the (start, end) of the calls before and after the crash, and the
    mid-run files the crash left."""
    grid = resolve_grid(_config(heads=[2], steps=300, log_every=10), axes)
    whole = run_grid_experiment(grid, progress=False)
    advance, calls, resumed = resumable.advance, [], []

    def crash(*args, **kwargs):  # a crash (or a kill) in call ``crash_at``
        calls.append(args[4:6])
        if len(calls) == crash_at:
            raise Crash
        return advance(*args, **kwargs)

    monkeypatch.setattr(resumable, "advance", crash)
    with pytest.raises(Crash):
        run_grid_checkpointed(grid, tmp_path, progress=False, call_seconds=1e-6, checkpoint_every=1e-6)
    assert midrun.kept(tmp_path) is not None  # the states of the calls before the crash
    left = sorted(p.name for p in (tmp_path / "points").glob(midrun.PREFIX + "*"))
    monkeypatch.setattr(resumable, "advance", lambda *a, **k: resumed.append(a[4:6]) or advance(*a, **k))
    result = run_grid_checkpointed(grid, tmp_path, resume=True, progress=False, call_seconds=1e-6)
    assert midrun.kept(tmp_path) is None and not (tmp_path / "points").exists()  # all cleared
    assert not _equal(whole.curves, result.curves), _equal(whole.curves, result.curves)
    np.testing.assert_array_equal(whole.diverged_at, result.diverged_at)
    return calls, resumed, left


def test_an_interrupted_grid_resumes_mid_run_to_the_uninterrupted_numbers(tmp_path, monkeypatch):
    """Its two η₀ run as two points of the same H (31 calls each), the crash in the second's second
    call: the first point's final state and the second's first call are not run again."""
    calls, resumed, left = _grid_interrupted(monkeypatch, tmp_path, {"lr": [0.5, 2]}, crash_at=33)
    assert calls[30] == (30, 31) and calls[31] == (0, 1)  # the second point began at call 32
    assert resumed[0] == (1, 2) and len(resumed) == 30
    assert len(left) == 2 and all(name.startswith("running-G0-P") for name in left)  # one per point


@pytest.mark.slow
def test_a_grid_of_two_groups_resumes_its_second_group_mid_run(tmp_path, monkeypatch):
    """Two groups (the optimiser is static: GD, then Adam), each two points, interrupted in the
    second group's second point: the first group's grid points are saved, the second goes on from
    its own files."""
    axes = {"optimizer": ["gd", "adam"], "lr": [0.05, 0.5]}
    calls, resumed, left = _grid_interrupted(monkeypatch, tmp_path, axes, crash_at=95)
    assert calls[93] == (0, 1) and resumed[0] == (1, 2) and len(resumed) == 30
    assert len(left) == 2 and all(n.startswith("running-G2-") for n in left)  # the first group's cleared


def test_the_long_run_flags_are_taken_by_a_grid(tmp_path, capsys):
    out = tmp_path / "grid"
    argv = ["--lr", "1,2", "--heads", "1", "--steps", "20", "--n-train", "8", "--n-test", "8"]
    assert (
        main([*argv, "--checkpoint-every", "5", "--call-seconds", "1", "--out", str(out), "--no-figure"]) == 0
    )
    assert (out / "results.json").is_file() and "η₀ ∈ {1, 2}" in capsys.readouterr().out


@pytest.mark.slow
def test_adam_in_three_calls_equals_one_call_with_its_final_parameters():
    """Adam's state (moments and count of updates) crosses the calls: its curves and final θ equal
    one call's bit for bit (the count once held per pack made the bias correction's last bit differ)."""
    cfg = _config(optimizer="adam", lr=0.05, heads=[2], steps=300, log_every=10, save_params=True)
    prog, placed, batch, kw, placer = next(_points(cfg))
    assert prog.head_log[-1] == len(prog.segments) - 1  # the snapshots hold the final θ
    one, div_one = placer.fetch(train_batch(prog, placed, batch, **kw))
    state = resumable.start_batch(prog, placed, batch, **kw)
    L = len(prog.segments)
    for start, end in ((0, 4), (4, 17), (17, L)):
        state = resumable.advance(prog, placed, batch, state, start, end, **kw)
    calls, div_calls = resumable.outputs(prog, placer.fetch(state))
    params = [k for k in one if k.startswith("param")]
    assert params and not _equal(one, calls), _equal(one, calls)
    for k in params:  # the final θ, and it moved
        last = np.take(calls[k], -1, axis=2)
        assert np.array_equal(np.take(one[k], -1, axis=2), last) and np.any(
            last != np.take(calls[k], 0, axis=2)
        )
    np.testing.assert_array_equal(div_one, div_calls)


@pytest.mark.slow
def test_an_adam_sweep_runs_in_calls_with_the_numbers_of_one_call(monkeypatch):
    cfg = _config(optimizer="adam", lr=0.05, heads=[2], steps=300, log_every=10)
    one = run_sweep(cfg, progress=False)
    monkeypatch.setattr(execute, "tqdm", CountingBar)
    CountingBar.moves = []
    again = run_sweep(cfg, progress=True, call_seconds=1e-6)
    assert not _equal(one.curves, again.curves)
    assert len(CountingBar.moves) >= 10 and sum(CountingBar.moves) == 300, CountingBar.moves


def test_a_short_point_stays_one_call():
    cfg = resolve(with_overrides(None, **SMALL)).config
    prog = next(_points(cfg))[0]
    assert longrun.estimated_seconds(prog, 12, 4, 1, "cpu") < 2 * midrun.CALL_SECONDS
    assert longrun.estimated_seconds(prog, 12, 4, 1, "cpu") > 0
