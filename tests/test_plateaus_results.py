"""Drops and plateaus in a sweep's summaries: a number and a JSON string in the frames and in a
grid's summary.csv, a JSON structure in results.json, older folders still loading, and a real run
whose curve has no drop reported as such."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dynamics import load_results, run_sweep
from dynamics.cli.run import build_parser, format_table
from dynamics.config.grid_axes import resolve_grid
from dynamics.config.schema import Config, apply_overrides
from dynamics.config.validation import log_schedule
from dynamics.parts.metrics import metrics_of
from dynamics.sweeps.grid_runner import GridResult, write_grid
from dynamics.sweeps.plateaus import DEPTH, FLAT, RULE
from dynamics.sweeps.result_files import write_results
from dynamics.sweeps.sweep_result import SweepResult

STEPS = np.array(log_schedule(2000))  # 200 log-spaced points


def stairs(falls: list[int], levels: list[float]) -> np.ndarray:
    y = np.full(STEPS.shape, np.log(levels[0]))
    for at, a, b in zip(falls, levels, levels[1:], strict=False):
        y -= np.log(a / b) * (STEPS >= at)
    return np.exp(y)


def hand_made() -> SweepResult:
    """H = 1: trials with 2 and 1 drops, and one that diverges at step 500 after 1 drop; H = 2: three
    smooth decays (no drop)."""
    diverges = np.where(STEPS < 500, stairs([100], [0.7, 0.2]), np.nan)
    loss = np.stack(
        [
            [stairs([30, 300], [0.7, 0.3, 0.05]), stairs([100], [0.7, 0.1]), diverges],
            [0.7 * (1 + STEPS / s) ** -1.0 for s in (20, 30, 40)],
        ]
    )  # (H, trials, L)
    div = np.array([[-1, -1, 500], [-1, -1, -1]])
    return SweepResult(Config(), np.array([1, 2]), STEPS, {"train_loss": loss}, div)


def test_the_summary_counts_drops_per_trial_that_did_not_diverge():
    result = hand_made()
    rows = result.summary()
    assert [len(p["drops"]) for p in rows[0]["plateaus"]] == [2, 1, 1]  # the diverged trial: before it
    assert rows[0]["drops"] == 1.5 and rows[1]["drops"] == 0.0
    assert rows[0]["plateaus"][0]["drops"][1]["step"] == STEPS[STEPS >= 300][0]  # first logged at it
    assert json.loads(json.dumps(rows)) == rows  # what results.json holds


def test_the_frame_has_drops_as_a_number_and_plateaus_as_json():
    result = hand_made()
    frame = result.summary_frame()
    assert frame["drops"].dtype == np.float64 and list(frame["drops"]) == [1.5, 0.0]
    for h, row in zip(result.heads, result.summary(), strict=True):
        assert json.loads(frame.loc[h, "plateaus"]) == row["plateaus"]
    result.diverged_at[0] = 100  # every trial at H = 1 diverged: no count
    assert np.isnan(result.summary_frame().loc[1, "drops"])
    assert format_table(result).splitlines()[2].split()[-2] == "-"  # the table's drops cell


def test_a_grids_summary_csv_reads_back_as_numbers_and_json(tmp_path):
    cfg = Config(name="g")
    grid = resolve_grid(cfg, {"lr": [0.1, 1.0]})
    one = hand_made()
    loss = np.stack(
        [one.curves["train_loss"], one.curves["train_loss"][:, ::-1]], axis=1
    )  # (H, G, trials, L)
    div = np.stack([one.diverged_at, one.diverged_at[:, ::-1]], axis=1)
    result = GridResult(grid, one.heads, STEPS, {"train_loss": loss}, div, extra={"complete": True})
    write_grid(result, tmp_path)
    frame = pd.read_csv(tmp_path / "summary.csv")
    assert frame["drops"].dtype == np.float64
    assert sorted(frame["drops"]) == [0.0, 0.0, 1.5, 1.5]
    for row, want in zip(frame.itertuples(), result.summary(), strict=True):
        assert json.loads(row.plateaus) == want["plateaus"]
    meta = json.loads((tmp_path / "results.json").read_text())
    assert [r["drops"] for r in meta["summary"]] == list(frame["drops"])


def test_an_older_results_folder_still_loads(tmp_path):
    """results.json files written before this rule held each trial's plateaus as lists and no
    ``drops`` count; the summary is computed from the curves again, so they load as before."""
    result = hand_made()
    sizes = {"optim": {"steps": 2000}, "sweep": {"heads": (1, 2), "trials": 3, "head_metrics": "off"}}
    result.config = apply_overrides(Config(), sizes, "test")  # the config these curves are a run of
    loss = result.curves["train_loss"]
    result.curves = {m: loss.copy() for m in metrics_of(result.config)}
    write_results(result, tmp_path)
    meta = json.loads((tmp_path / "results.json").read_text())
    for row in meta["summary"]:
        row.pop("drops")
        row["plateaus"] = [{"plateaus": [[0, 6, 0.69]], "drops": [[1, 2, 0.7, 0.6]]} for _ in range(3)]
    (tmp_path / "results.json").write_text(json.dumps(meta))
    back = load_results(tmp_path)
    assert back.summary() == result.summary()
    pd.testing.assert_frame_equal(back.summary_frame(), result.summary_frame())
    assert list(back.summary_frame()["drops"]) == [1.5, 0.0]


@pytest.mark.slow
def test_the_adam_planted_run_reports_the_drops_its_curve_has():
    """``--data-model planted --optimizer adam --lr 0.001 --heads 1,8 --steps 500``: each trial's
    train loss falls from log 2 without a break, slowly at first and then ever faster (H = 1: to
    about 0.53, H = 8: to about 0.38), and never flattens again: one plateau (the slow start) and
    no drop. The rule of a 1 % band reported 3 drops at H = 1."""
    result = run_sweep(
        data_model="planted", optimizer="adam", lr=0.001, heads=[1, 8], steps=500, progress=False
    )
    loss = result.curves["train_loss"]  # (H, trials, L)
    assert np.all(np.diff(loss, axis=-1) <= 0)  # falls at every step
    fall = -np.diff(np.log(loss), axis=-1)  # per step
    assert np.all(fall[..., -50:].mean(-1) > 2 * fall[..., :50].mean(-1))  # faster at the end
    assert list(result.summary_frame()["drops"]) == [0.0, 0.0]
    for row in result.summary():
        for trial in row["plateaus"]:
            (first,) = trial["plateaus"]
            assert first["start"] == 0 and trial["drops"] == []


def test_the_help_states_the_rule_in_one_line():
    lines = [line for line in build_parser().format_help().splitlines() if "drops" in line]
    assert lines == [f"The table's {RULE}."]
    assert f">= {DEPTH:g} in log train loss" in RULE and f"<= {FLAT:g} ×" in RULE
