"""One tidy frame everywhere: the head count is the column ``H`` in every frame of a sweep and of a
grid (whose long frame is its points' own sweep frames with a column per axis), old result folders
that call it ``heads`` still load, ``--heads`` takes a log range as every count does, and
``load_runs`` puts many run folders into one frame."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

import dynamics
from dynamics.api import load_results, load_runs, with_overrides
from dynamics.cli.main import main as mhsim
from dynamics.cli.run import build_parser, config_from_args
from dynamics.config.grid_axes import resolve_grid
from dynamics.config.schema import ConfigError, load_toml
from dynamics.parts.metrics import logged_per_head, metrics_of
from dynamics.parts.values import parse_heads
from dynamics.sweeps.grid_runner import GridResult, write_grid
from dynamics.sweeps.result_files import write_results
from dynamics.sweeps.sweep_result import reserved_columns
from tests.helpers import cli_error, cli_run

TINY = {"heads": [1, 2], "steps": 4, "trials": 2, "n_train": 8, "n_test": 8}


# --heads: lists and log ranges


@pytest.mark.parametrize(
    "text, want",
    [("1:8:4", (1, 2, 4, 8)), ("1:64:7", (1, 2, 4, 8, 16, 32, 64)), ("3:3:1", (3,)), ("1, 2,4", (1, 2, 4))],
)
def test_heads_take_a_log_range_of_whole_numbers(text, want):
    assert parse_heads(text) == want
    args = build_parser().parse_args(["--heads", text])
    assert config_from_args(args).config.sweep.heads == tuple(sorted(want))
    assert with_overrides(heads=text).sweep.heads == want  # the API keyword reads the flag's text


@pytest.mark.parametrize(
    "text, says",
    [
        ("1:10:3", "1, 3.16228, 10: not all whole numbers"),  # log-spaced 1..10 in three: 3.16 heads
        ("1:3:4", "4 distinct whole numbers do not fit between 1 and 3"),  # repeats once rounded
        ("2:2:2", "2 distinct whole numbers do not fit between 2 and 2"),
        ("0:8:4", "a > 0, b > 0 and k >= 1"),
        ("1:1e300:99999999999", "more than 10000 in one sweep"),  # refused before the list is built
        ("1e-300:1e300:3", "1e-300, inf, inf: not all whole numbers"),  # b/a overflows
        ("1:8", "must be a:b:k"),
        ("1:8:x", "must be a:b:k"),
    ],
)
def test_a_heads_range_of_fractions_or_repeats_is_one_line_naming_it(text, says, capsys, tmp_path):
    line = cli_error(["--heads", text, "--steps", "2"], capsys, tmp_path)
    assert line.startswith("error: argument --heads:") and f"heads={text!r}" in line and says in line
    with pytest.raises(ConfigError, match=f"^heads={text!r}"):  # the keyword: its own message, once
        with_overrides(heads=text)


def test_a_toml_file_takes_the_heads_range(tmp_path):
    path = tmp_path / "h.toml"
    path.write_text('[sweep]\nheads = "1:8:4"\n')
    assert load_toml(path).sweep.heads == (1, 2, 4, 8)


# H in every frame; a grid's frames in the sweep's long format


def made_grid(axes: dict, draw: int = 0, **knobs) -> GridResult:
    """A grid's result over ``axes`` with random curves (every value tells apart its H, grid point,
    trial and step, as a tiny run's often do not): the frames are bookkeeping, checked on it.
    ``knobs``: the base config's, beside ``TINY``'s."""
    grid = resolve_grid(with_overrides(**{**TINY, "head_metrics": "on", **knobs}), axes)
    cfg, steps = grid.base.config, np.array(grid.base.steps)
    rng = np.random.default_rng(draw)
    lead = (len(cfg.sweep.heads), *grid.shape, cfg.sweep.trials, len(steps))
    curves = {m: rng.random(lead) for m in metrics_of(cfg)}
    for m in logged_per_head(cfg):
        if m.kind == "head":
            curves[m.name] = rng.random((*lead, max(cfg.sweep.heads)))
    curves["head_steps"] = steps
    div = np.full(lead[:-1], -1, dtype=np.int32)
    return GridResult(grid, np.array(cfg.sweep.heads), steps, curves, div, extra={"complete": True})


@pytest.fixture(scope="module")
def grid():
    """A grid over a number (η₀) and a name (the attention activation): each becomes a column."""
    return made_grid({"lr": [0.5, 2.0], "attention": ["softmax", "softmax1"]})


@pytest.fixture(scope="module")
def sweep(grid):
    """A sweep: the grid's first point, the SweepResult of its config run alone."""
    return grid.point(0)


def frames_of(result) -> dict[str, pd.DataFrame]:
    frames = {"to_dataframe": result.to_dataframe(), "summary_frame": result.summary_frame()}
    if isinstance(result, dynamics.SweepResult):  # indexed by H; a grid's has an H per grid point
        frames.update(summary_frame=result.summary_frame().reset_index())
        frames.update(head_frame=result.head_frame(), emergence_frame=result.emergence_frame())
    return frames


def test_the_head_count_is_the_column_H_in_every_frame(sweep, grid):
    assert sweep.summary_frame().index.name == "H"
    for result in (sweep, grid, grid.point(3)):
        for name, frame in frames_of(result).items():
            assert frame.columns[0] == "H" and "heads" not in frame.columns, name
            assert sorted(set(frame["H"])) == [1, 2], name
    assert [row["H"] for row in sweep.summary()] == [1, 2]
    assert {"H", "heads"} <= reserved_columns()  # a user metric may take neither: H now, heads in old files


def test_a_grid_frame_is_its_points_sweep_frames_with_a_column_per_axis(grid):
    df, summary = grid.to_dataframe(), grid.summary_frame()
    n_h, trials, L = len(grid.heads), grid.config.sweep.trials, len(grid.steps)
    assert len(df) == 4 * n_h * trials * L and len(summary) == 4 * n_h  # grid point × H (× trial × step)
    point_frame = grid.point(0).to_dataframe()
    rest = [c for c in point_frame.columns if c not in ("H", "lr")]
    assert list(df.columns) == ["H", "lr", "attention", *rest]
    sweep_summary = grid.point(0).summary_frame().reset_index()
    assert list(summary.columns) == ["H", "lr", "attention", *sweep_summary.columns[1:]]
    for k, (lr, act) in enumerate([(0.5, "softmax"), (0.5, "softmax1"), (2.0, "softmax"), (2.0, "softmax1")]):
        for got, want in (
            (df, grid.point(k).to_dataframe()),
            (summary, grid.point(k).summary_frame().reset_index()),
        ):
            rows = got[(got["lr"] == lr) & (got["attention"] == act)].reset_index(drop=True)
            pd.testing.assert_frame_equal(rows[want.columns], want)  # values and dtypes
    # and against the curves themselves: (H, lr, attention, trial, step)
    for row in df.sample(20, random_state=0).itertuples():
        at = ([1, 2].index(row.H), [0.5, 2.0].index(row.lr), ["softmax", "softmax1"].index(row.attention))
        s = list(grid.steps).index(row.step)
        np.testing.assert_array_equal(row.test_loss, grid.curves["test_loss"][(*at, row.trial, s)])
    assert df["attention"].dtype == object or str(df["attention"].dtype) in ("str", "string")


def test_the_grid_files_say_H_and_load_back_as_the_same_frames(grid, tmp_path):
    write_grid(grid, tmp_path)
    csv = pd.read_csv(tmp_path / "summary.csv")
    assert list(csv.columns[:3]) == ["H", "lr", "attention"] and len(csv) == 8
    assert all(
        "H" in row and "heads" not in row
        for row in json.loads((tmp_path / "results.json").read_text())["summary"]
    )
    again = load_results(tmp_path)
    pd.testing.assert_frame_equal(again.to_dataframe(), grid.to_dataframe())
    pd.testing.assert_frame_equal(again.summary_frame(), grid.summary_frame())


def _old_format(folder) -> None:
    """Edit a fresh run folder's results.json as an older mhsim wrote it: the summary rows' head
    count under ``heads``."""
    path = folder / "results.json"
    meta = json.loads(path.read_text())
    meta["summary"] = [{"heads": row.pop("H"), **row} for row in meta["summary"]]
    path.write_text(json.dumps(meta, indent=2))


def test_an_old_folder_whose_summary_says_heads_loads_with_H(sweep, grid, tmp_path):
    write_results(sweep, tmp_path / "sweep")
    write_grid(grid, tmp_path / "grid")
    for name, fresh in (("sweep", sweep), ("grid", grid)):
        _old_format(tmp_path / name)
        assert "heads" in json.loads((tmp_path / name / "results.json").read_text())["summary"][0]
        old = load_results(tmp_path / name)
        for kind, frame in frames_of(old).items():
            pd.testing.assert_frame_equal(frame, frames_of(fresh)[kind], obj=f"{name} {kind}")
    runs = load_runs(tmp_path)
    assert list(runs["H"]) == [1, 2] * 5 and "heads" not in runs.columns


# load_runs and `mhsim runs`


def junk_and_damage(root) -> None:
    (root / "junk").mkdir()
    (root / "junk" / "notes.txt").write_text("not a run")
    (root / "damaged").mkdir()
    (root / "damaged" / "results.json").write_text('{"config": ')


def listed(root) -> tuple[pd.DataFrame, list[str]]:
    """load_runs(root) and its warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = load_runs(root)
    return frame, sorted(str(w.message) for w in caught)


def assert_own_numbers(frame, root) -> None:
    """Each run's rows hold the numbers of that run's own summary frame."""
    for run, rows in frame.groupby("run", sort=False):
        own = load_results(root / run).summary_frame()
        own = own.reset_index() if own.index.name == "H" else own
        for column in ("H", "trials", "n_diverged", "train_loss_mean", "test_loss_mean", "test_error_std"):
            np.testing.assert_array_equal(rows[column].to_numpy(), own[column].to_numpy(), err_msg=column)


def test_load_runs_gives_one_frame_over_run_folders_and_skips_junk(grid, tmp_path, capsys):
    root = tmp_path / "runs"
    write_results(made_grid({"lr": [0.5]}, 1, seed=3).point(0), root / "sweep")
    write_grid(grid, root / "more" / "grid")
    junk_and_damage(root)
    frame, said = listed(root)
    assert len(said) == 2 and said[0].startswith(f"{root / 'damaged'}: skipped") and "junk" in said[1]
    assert list(frame["run"]) == ["more/grid"] * 8 + ["sweep"] * 2 and list(frame["H"]) == [1, 2] * 5
    assert list(frame["kind"]) == ["grid"] * 8 + ["sweep"] * 2 and frame["complete"].all()
    assert list(frame["lr"]) == [0.5] * 4 + [2.0] * 4 + [0.5] * 2 and list(frame["seed"]) == [0] * 8 + [3] * 2
    acts = ["softmax", "softmax", "softmax1", "softmax1"]
    assert list(frame["attention"]) == acts * 2 + ["softmax"] * 2
    assert {"steps", "n_train", "data_model", "optimizer"} <= set(frame.columns)
    assert "heads" not in frame.columns
    assert_own_numbers(frame, root)

    capsys.readouterr()
    assert mhsim(["runs", str(root)]) == 0
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert lines[0].split()[:3] == ["run", "kind", "H"] and {"lr", "seed", "attention"} <= set(
        lines[0].split()
    )
    assert len(lines) == 11 and lines[-1].split()[:3] == ["sweep", "sweep", "2"]
    warned = err.strip().splitlines()
    assert len(warned) == 2 and all(w.startswith("warning: ") for w in warned) and "Traceback" not in err


@pytest.mark.slow
def test_load_runs_lists_the_command_lines_own_folders(tmp_path, capsys):
    root = tmp_path / "runs"
    tiny = "--heads 1 --steps 5 --trials 1 --no-figure --quiet".split()
    assert cli_run([*tiny, "--out", str(root / "sweep")], capsys, tmp_path)[0] == 0
    assert cli_run([*tiny, "--lr", "0.5,2", "--out", str(root / "grid")], capsys, tmp_path)[0] == 0
    junk_and_damage(root)
    frame, said = listed(root)
    assert (
        len(said) == 2 and list(frame["run"]) == ["grid", "grid", "sweep"] and list(frame["H"]) == [1, 1, 1]
    )
    assert list(frame["lr"]) == [0.5, 2.0, 1.0] and list(frame["optimizer"]) == ["gd"] * 3
    assert_own_numbers(frame, root)


def test_load_runs_refuses_a_root_that_is_not_a_folder_in_one_line(tmp_path, capsys):
    with pytest.raises(ConfigError, match="does not exist"):
        load_runs(tmp_path / "nowhere")

    assert mhsim(["runs", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip().startswith("error: runs folder")
