"""A hostile user's pass over the work queue, the float bounds and the user parts' probes: damaged
files in a grid's ``queue/`` refused in one line (or taken over with ``reclaim``), a data model's
knob bounded by its float32 draw under ``--x64``, and user parts that use numpy or return NaN
refused before anything runs. Each case failed (a traceback, a wrong refusal or runs that all
"diverged") before its fix."""

from __future__ import annotations

import json
import os
import shutil
import time

import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import gpu_study
from dynamics import api
from dynamics.cli.run import _interrupted
from dynamics.config.grid_axes import resolve_grid
from dynamics.config.validation import resolve
from dynamics.errors import ConfigError
from dynamics.parts import floats
from dynamics.sweeps import checkpoint, midrun
from dynamics.sweeps.folders import sweep_claim
from dynamics.sweeps.workqueue import WorkQueue

HERE = "tests.test_hostile_today"


# ------------------------------------------------------------------ the work queue's files


def test_a_damaged_call_file_is_refused_in_one_line_naming_it(tmp_path):
    queue = WorkQueue(tmp_path / "queue", "h1")
    queue.write("g0-c0", [(0, 0)], {"train_loss": np.ones((1, 3), np.float32)}, np.zeros(1, np.int32))
    assert queue.read("g0-c0")[0] == [(0, 0)]  # the file as written reads back
    whole = queue.file("g0-c0").read_bytes()
    queue.file("g0-c0").write_bytes(whole[:100])  # truncated by hand (a full disk, a copy cut short)
    with pytest.raises(ConfigError, match=r"g0-c0\.npz is damaged \(BadZipFile\): remove it and rerun"):
        queue.read("g0-c0")


def test_a_call_of_another_grid_is_still_refused_as_such(tmp_path):
    theirs = tmp_path / "queue" / "g0-c0.npz"
    checkpoint.write_point(theirs, "h2", {"train_loss": np.ones((1, 3))}, np.zeros(1), items=np.zeros((1, 2)))
    with pytest.raises(ConfigError, match="is another grid's call"):
        WorkQueue(tmp_path / "queue", "h1").read("g0-c0")


@pytest.mark.parametrize("text", ["null", "[]", '{"devices": ""}'])
def test_a_damaged_grid_record_is_refused_as_damaged_not_as_another_grid(tmp_path, text):
    root = tmp_path / "queue"
    root.mkdir()
    (root / "grid.json").write_text(text)
    with pytest.raises(ConfigError, match=r"grid\.json is damaged .*remove that file and rerun"):
        WorkQueue(root, "h1")


@pytest.mark.parametrize("text", ["", '{"host": "x", "pi', "[1, 2]"])
def test_reclaim_takes_over_a_damaged_claim_made_before_it_started(tmp_path, text):
    queue = WorkQueue(tmp_path / "queue", "h1")
    claim = queue.root / "a.claim0"
    claim.write_text(text)  # a process killed between creating its claim and writing it
    an_hour_ago = time.time() - 3600
    os.utime(claim, (an_hour_ago, an_hour_ago))
    assert not queue.claim("a")  # without reclaim: possibly a live claim being written
    assert WorkQueue(queue.root, "h1", reclaim=True).claim("a")
    assert json.loads((queue.root / "a.claim1").read_text())["pid"] == os.getpid()


def test_reclaim_leaves_a_damaged_claim_made_after_it_started(tmp_path):
    later = WorkQueue(tmp_path / "queue", "h1", reclaim=True)
    (later.root / "a.claim0").write_text("")  # a newer process's claim, being written
    assert not later.claim("a")


# ------------------------------------------------------------------ a long run's state kept mid-run


def _truncated_state(out) -> None:
    store = midrun.MidRun(out, "h1", resume=True)
    store.save([1, 2], [np.zeros(3, np.float32)], done=4, steps_done=40, steps=100)
    path = midrun.midrun_file(out, [1, 2])
    path.write_bytes(path.read_bytes()[:200])  # cut short by hand (written atomically, never by a crash)


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # numpy leaves a BadZipFile's file to the collector
def test_a_truncated_running_file_is_started_anew_with_a_warning(tmp_path):
    """Before: BadZipFile (no OSError) escaped both the resume and the interrupt's line."""
    _truncated_state(tmp_path)
    assert midrun.kept(tmp_path) is None  # the interrupt's line: nothing kept
    with pytest.warns(UserWarning, match=r"running-H1-2\.npz is damaged \(BadZipFile\): starting that point"):
        assert midrun.MidRun(tmp_path, "h1", resume=True).load([1, 2], [np.zeros(3, np.float32)]) is None


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_a_folder_of_damaged_point_files_is_not_called_another_configs(tmp_path):
    """Before: 'holds the unfinished points of another config (config_hash unreadable there, …)'."""
    _truncated_state(tmp_path)
    with pytest.raises(
        ConfigError, match=r"holds only damaged files in points/, whose config cannot be read"
    ):
        sweep_claim(resolve(api.with_overrides())).decide(tmp_path)


def test_a_grid_interrupted_before_a_point_finished_is_resumed_not_refused(tmp_path):
    """Before: a grid with --checkpoint-every, stopped before its first grid point was saved, said
    'rerun the same command to finish' and the rerun was refused: its group's state is keyed
    '<hash>:<group>:<point>' (MidRun.within), read as another config's."""
    cfg = api.with_overrides(heads=[1, 2], steps=20)
    grid = resolve_grid(cfg, {"lr": [0.5, 1.0]})
    store = midrun.MidRun(tmp_path, grid.hash(), resume=True).within("G0-", "0,1").within("P5-", "5")
    store.save([2], [np.zeros(3, np.float32)], done=4, steps_done=8, steps=20)
    assert [p.name for p in (tmp_path / "points").iterdir()] == ["running-G0-P5-H2.npz"]
    assert sweep_claim(grid).decide(tmp_path) == "resume"
    other = resolve_grid(cfg, {"lr": [0.5, 2.0]})
    with pytest.raises(ConfigError, match="unfinished points of another config"):
        sweep_claim(other).decide(tmp_path)  # another grid's state is still refused


# ------------------------------------------------------------------ float bounds under --x64


def test_a_data_knob_under_x64_is_bounded_by_its_float32_draw():
    """--signal 1e39 --x64 was accepted (float64's bound for a token scale is 1e73) and the float32
    draw overflowed: 'X_train has 384 non-finite values' after the draw."""
    top = floats.held_drawn(4, True)
    assert top == floats.held(1, False) < floats.held(4, True)
    api.with_overrides(signal=top, x64=True)  # at the bound: accepted
    for past in (5e31, 1e39, 1e73):
        with pytest.raises(ConfigError, match=r"data\.signal=.* must be <= 4e\+31, the most float32 holds"):
            api.with_overrides(signal=past, x64=True)
    with pytest.raises(ConfigError, match=r"must be <= 7e\+07, .*\(float64 runs, --x64: up to 4e\+31\)"):
        api.with_overrides(signal=8e7)  # float32: the token scale's own bound, naming the x64 one
    assert floats.held_drawn(4, False) == floats.held(4, False)  # float32's bounds are unchanged


def test_a_model_knob_under_x64_keeps_float64s_bound():
    api.with_overrides(init="normal", init_scale=1e20, x64=True)  # σ₀: no data model's knob
    with pytest.raises(ConfigError, match=r"model\.init_scale=1e\+20 must be <= 6e\+15"):
        api.with_overrides(init="normal", init_scale=1e20)


# ------------------------------------------------------------------ user parts


def numpy_loss(z):
    return np.log1p(np.exp(-np.asarray(z)))  # numpy: fine on numbers, refused by a tracer


def nan_loss(z):
    return z * jnp.nan


def numpy_attention(scores):
    e = np.exp(np.asarray(scores))
    return e / e.sum(-1, keepdims=True)


def nan_attention(scores):
    return jnp.full_like(scores, jnp.nan)


def loud_loss(z):
    print("a user loss that prints")  # allowed: its output is the user's
    return jnp.log1p(jnp.exp(-z))


@pytest.mark.parametrize(
    "keyword,name,said",
    [
        ("loss", "numpy_loss", "fails when called as loss(z)"),
        ("loss", "nan_loss", "returned losses with 7 non-finite values for finite input"),
        ("attention", "numpy_attention", "fails when called as sigma(scores)"),
        ("attention", "nan_attention", "returned weights with 30 non-finite values for finite input"),
    ],
)
def test_a_user_part_that_uses_numpy_or_returns_nan_is_refused_before_running(keyword, name, said):
    """Before: numpy's part passed the probe and raised TracerArrayConversionError in the compile; a
    NaN part ran and every run read as 'diverged'."""
    with pytest.raises(ConfigError) as info:
        api.with_overrides(**{keyword: f"{HERE}:{name}"})
    message = str(info.value)
    assert said in message and "\n" not in message, message
    if name.startswith("numpy"):
        assert "TracerArrayConversionError" in message, message


def test_a_user_part_that_prints_is_accepted(capsys):
    cfg = api.with_overrides(loss=f"{HERE}:loud_loss")
    assert cfg.optim.loss == f"{HERE}:loud_loss"
    assert "a user loss that prints" in capsys.readouterr().out


# ------------------------------------------------------------------ benchmarks/gpu_study.py


def test_the_gpu_studys_heads_are_refused_in_one_line_when_not_integers(capsys):
    """Before: ValueError's traceback (int('x'))."""
    with pytest.raises(SystemExit) as info:
        gpu_study.build_parser().parse_args(["--heads", "1,x"])
    assert info.value.code == 2
    assert "argument --heads: '1,x' is not comma-separated integers" in capsys.readouterr().err
    assert gpu_study.build_parser().parse_args(["--heads", "1,4"]).heads == (1, 4)


def test_the_gpu_studys_crossover_of_two_equal_sizes_is_a_note_not_a_division_by_zero():
    """--trials below 10 makes the tenth size the full one; before: ZeroDivisionError after the
    whole GPU study had run, so nothing was printed."""
    size = {"runs": 40, "warm_s": 2.0, "cold_s": 9.0, "slot_step_s": 1e-6}
    note = gpu_study.crossover(size, dict(size), {"slot_step_s": 1e-5, "fixed_s": 1.0})
    assert set(note) == {"note"} and "same number of runs" in note["note"]


# ------------------------------------------------------------------ an interrupted --work-queue process


def test_an_interrupted_queue_process_says_whether_any_call_had_finished(tmp_path):
    """Before: 'the finished calls are in …/queue' when queue/ held only grid.json."""
    queue = WorkQueue(tmp_path / "queue", "h1")
    said = _interrupted({"out": tmp_path})
    assert said.startswith("interrupted before a call had finished") and "holds none yet" in said, said
    queue.write("g0-c0", [(0, 0)], {"train_loss": np.ones((1, 3), np.float32)}, np.zeros(1, np.int32))
    said = _interrupted({"out": tmp_path})
    assert said == f"interrupted: the finished calls are in {queue.root}; rerun the same command to finish"


def nan_init(keys, index, d, scale, head_size, learned):
    return {"U": jnp.full((keys.shape[0], d), jnp.nan), "W": jnp.zeros((keys.shape[0], d, d))}


def test_a_user_init_that_draws_nan_is_refused_before_running():
    """Before: traced only, it passed, and every run of the sweep read as 'diverged'."""
    with pytest.raises(ConfigError, match=r"returned U with 15 non-finite values for finite input"):
        api.with_overrides(init=f"{HERE}:nan_init")


def test_a_late_process_whose_queue_was_merged_and_removed_claims_nothing(tmp_path):
    """A process that opened the queue just before another merged it and removed queue/: before,
    its first claim raised FileNotFoundError (a traceback) and set_calls made queue/ again."""
    queue = WorkQueue(tmp_path / "queue", "h1")
    shutil.rmtree(queue.root)  # the merger's last step
    assert not queue.claim("g0-c0")
    queue.set_calls(0, 3)
    assert not queue.root.exists()
