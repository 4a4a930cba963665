"""Headline numbers: declared for every preset, computed once in the library, stored in results.json,
given back by ``load_results`` and ``result.headline()``, printed under the table and read by the
figures; ``dynamics.save_results`` writes what the command line writes."""

from __future__ import annotations

import json

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import dynamics  # noqa: E402
from dynamics import ConfigError, load_results, preset, run_sweep, save_results  # noqa: E402
from dynamics.config.presets import GENERIC_HEADLINE, PRESETS, Preset, train_label  # noqa: E402
from dynamics.sweeps import headline as hl  # noqa: E402

TINY_MM = {"steps": 20, "trials": 2, "log_every": 10, "progress": False}
# The shapes of tests/test_api.py's sweep: its compiled program is reused where a worker ran it.
SMALL = dict(heads=[1, 3], steps=6, trials=2, n_train=12, n_test=10, tokens=4, width=8, irrelevant_means=2)


def test_every_preset_declares_a_headline_that_loads():
    """The one declaration: a preset is a ``Preset`` whose headline is part of it (a plain sweep
    declares the generic one; a bare tuple without one fails here), and every declared function
    can be loaded."""
    for name, declared in PRESETS.items():
        assert isinstance(declared, Preset), f"{name}: declare it as Preset(purpose, overrides, headline)"
        assert callable(hl.load(declared.headline)), f"{name}: {declared.headline} is not a function"
        assert hl.function_of(name) == declared.headline
    assert hl.function_of("no-such-preset") == hl.function_of(None) == GENERIC_HEADLINE


@pytest.fixture(scope="module")
def small():
    return run_sweep("fig2", progress=False, **SMALL)


def test_generic_headline_is_the_summary_and_round_trips(small, tmp_path):
    found = small.headline()
    for row in small.summary():
        h = row["H"]
        assert found[f"test_loss_H{h}"]["value"] == row["test_loss"]["mean"]
        assert found[f"train_loss_H{h}"]["std"] == row["train_loss"]["std"]
    written = save_results(small, tmp_path / "run")
    assert written[:2] == [tmp_path / "run" / "results.json", tmp_path / "run" / "curves.npz"]
    assert json.loads((tmp_path / "run" / "results.json").read_text())["headline"] == found
    again = load_results(tmp_path / "run")
    assert again.headline() == found
    np.testing.assert_array_equal(again.curves["test_loss"], small.curves["test_loss"])
    line = hl.format_line(found)
    assert line.startswith("headline: train loss: H=1 ") and "; test loss: H=1 " in line


def test_an_old_folder_without_a_headline_still_loads_and_computes_it(small, tmp_path):
    save_results(small, tmp_path / "old")
    path = tmp_path / "old" / "results.json"
    meta = json.loads(path.read_text())
    stored = meta.pop("headline")
    path.write_text(json.dumps(meta))
    assert load_results(tmp_path / "old").headline() == stored


def test_save_results_refuses_what_is_not_a_result_and_an_occupied_folder(small, tmp_path):
    assert dynamics.save_results is save_results
    for bad in (42, {"results": {}, "arrays": {}}, "runs/x", small.config):
        with pytest.raises(ConfigError, match="is not a result") as err:
            save_results(bad, tmp_path / "x")
        assert "\n" not in str(err.value)
    assert not (tmp_path / "x").exists()
    save_results(small, tmp_path / "x")
    with pytest.raises(ConfigError, match="already holds results.json; pass overwrite=True"):
        save_results(small, tmp_path / "x")
    save_results(small, tmp_path / "x", overwrite=True)
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        save_results(small, tmp_path / "f")


@pytest.mark.slow  # its own compiled program
def test_max_margin_headline_is_the_alignment_and_the_figure_reads_the_stored_one(tmp_path):
    from dynamics.theory.maxmargin import alignment
    from figures.max_margin import max_margin_figure

    result = run_sweep("max-margin", **TINY_MM)
    found = result.headline()
    a = alignment(result)
    assert found["maxmargin_corr"]["value"] == pytest.approx(float(np.nanmean(a.corr[:, -1])), abs=1e-12)
    assert found["param_norm"]["value"] == pytest.approx(float(np.nanmean(a.norm[:, -1])), abs=1e-12)
    assert found["maxmargin_corr"]["label"] == "corr(W, W^mm)" and found["maxmargin_corr"]["n"] == 2
    save_results(result, tmp_path / "mm")
    path = tmp_path / "mm" / "results.json"
    meta = json.loads(path.read_text())
    meta["headline"]["maxmargin_corr"]["value"] = 0.123456  # the figure must show the stored number
    path.write_text(json.dumps(meta))
    fig = max_margin_figure(tmp_path / "mm")
    assert "mean corr at t = 20: 0.1235" in fig._suptitle.get_text()
    plt.close(fig)


@pytest.mark.parametrize("name", ["max-margin", "max-margin-prompt"])
def test_max_margin_headline_reads_the_runs_diagnostic_with_the_same_numbers(name, monkeypatch):
    """With the ``maxmargin`` diagnostic on, the headline reads the view the run computed (the view
    is not computed again) and gives the numbers of the headline computed from the view."""
    from dynamics.theory import maxmargin

    tiny = {**TINY_MM, "trials": 3}
    computed = run_sweep(name, **tiny).headline()
    diagnosed = run_sweep(name, diagnostics=("maxmargin",), **tiny)
    assert diagnosed.extra["diagnostics"]["source"] == "snapshots"

    def again(*args, **kwargs):
        raise AssertionError("the max-margin view was computed again")

    monkeypatch.setattr(maxmargin, "_view", again)
    read = diagnosed.headline()
    assert set(computed) == {"maxmargin_corr", "param_norm"} and read["maxmargin_corr"]["n"] == 3
    assert {k: read[k] for k in computed} == computed  # value, std, n, label and about alike


def _emergence_result():
    """The preset's config with hand-made curves (no training): trial 0's attention reaches ½ at
    step 20, trial 1's at step 30, the test loss halves 10 steps earlier."""
    from dynamics.config.schema import resolve
    from dynamics.sweeps.sweep_result import SweepResult

    exp = resolve(dynamics.with_overrides("emergence", trials=2))
    steps = np.arange(0, 41, 2)
    at = np.array([20, 30])[:, None]
    attn = np.where(steps >= at, 0.9, 1 / 16)[None]  # (1, trials, L)
    loss = np.where(steps >= at - 10, 0.3, 1.0)[None]
    curves = {"attn_relevant": attn, "test_loss": loss, "excess_risk": loss, "train_loss": loss}
    return SweepResult(exp.config, np.array([1]), steps, curves, np.full((1, 2), -1))


def test_emergence_headline_and_the_figure_marks_the_stored_t_att():
    from dynamics.sweeps import emergence
    from figures.emergence import emergence_figure
    from figures.own import own_figure

    result = _emergence_result()
    found = result.headline()
    assert (found["t_att_H1"]["value"], found["t_att_H1"]["std"], found["t_att_H1"]["n"]) == (25.0, 5.0, 2)
    assert found["t_loss_H1"]["value"] == 15.0 and "closed_form" not in found["t_loss_H1"]
    data = emergence.data_of(result.config)
    assert found["t_att_H1"]["closed_form"] == pytest.approx(emergence.closed_form(data, 0.25))
    assert own_figure(result)[1] == "emergence"
    result.extra["headline"] = {**found, "t_att_H1": {**found["t_att_H1"], "value": 37.0, "std": 2.0}}
    fig = emergence_figure(result)  # marks the stored t_att, not one of its own
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert "t_att = 37 ± 2" in labels
    title = fig._suptitle.get_text()
    assert "batch 64, online" in title and "n = 64 train" not in title and "t_att 37 ± 2" in title
    plt.close(fig)


def test_online_sgd_is_labelled_a_batch_not_a_training_set():
    from figures.sweep import describe, sweep_figure

    result = _emergence_result()
    config = result.config.to_dict()
    assert train_label(config) == "batch 64, online"
    assert "batch 64, online / 512 test" in describe(config)
    assert train_label(preset("fig2").to_dict()) == "n = 100 train"
    fig = sweep_figure(result)
    texts = [ax.get_title() for ax in fig.axes] + [ax.get_ylabel() for ax in fig.axes]
    assert not any("n = 64" in t for t in texts) and any("batch 64, online" in t for t in texts)
    plt.close(fig)


@pytest.mark.slow  # its own compiled program
def test_emergence_preset_run_has_its_headline(tmp_path):
    from dynamics.sweeps import emergence

    result = run_sweep("emergence", T=4, d=4, steps=60, trials=2, n_test=64, progress=False)
    t = emergence.times(result.steps, result.curves)["attention"][0]
    done = t[np.isfinite(t)]
    found = result.headline()
    assert found["t_att_H1"]["n"] == done.size
    assert found["t_att_H1"]["value"] == (pytest.approx(done.mean()) if done.size else None)
    save_results(result, tmp_path / "em")
    assert load_results(tmp_path / "em").headline() == found


def test_the_table_is_followed_by_the_headline(small, tmp_path, capsys):
    from dynamics.cli.run import _report
    from dynamics.config.schema import resolve

    _report(resolve(small.config), small, tmp_path)
    printed = capsys.readouterr().out.splitlines()
    line = next(i for i, text in enumerate(printed) if text.startswith("headline: "))
    assert printed[line] == hl.format_line(small.headline())
    assert printed[line - 1].startswith("   3 ")  # right after the table's last row (H = 3)


@pytest.mark.slow  # a command line run (its own compile)
def test_the_command_prints_the_headline_under_the_table(tmp_path, capsys):
    from dynamics.cli.run import main

    out = tmp_path / "o"
    shape = ["--heads", "1,3", "--steps", "6", "--trials", "2", "--n-train", "12", "--n-test", "10"]
    shape += ["--tokens", "4", "--width", "8", "--irrelevant-means", "2", "--preset", "fig2"]
    args = [*shape, "--no-figure", "--quiet", "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out.splitlines()
    stored = json.loads((out / "results.json").read_text())["headline"]
    line = next(i for i, text in enumerate(printed) if text.startswith("headline: "))
    assert printed[line] == hl.format_line(stored)
    assert printed[line - 1].startswith("   3 ")  # right after the table's last row
    assert stored == load_results(out).headline()


@pytest.mark.slow  # its own compiled program
def test_icl_headline_gives_closed_form_levels_and_the_figure_draws_them():
    from dynamics.experiments import icl
    from figures.icl import _levels

    result = run_sweep("icl-linear", n_train=20, n_test=10, tokens=4, steps=20, trials=1, progress=False)
    found = result.headline()
    levels = icl.levels_of(result.config)
    assert [found[f"plateau_{m}"]["closed_form"] for m in range(len(levels))] == levels.tolist()
    meta = {"config": result.config.to_dict(), "headline": found}
    np.testing.assert_array_equal(_levels(meta), levels)
    found["plateau_0"]["closed_form"] = 9.0  # the figure's levels are the stored ones
    assert _levels(meta)[0] == 9.0


def test_a_preset_run_without_what_its_headline_needs_falls_back_with_a_note(small):
    import dataclasses

    from dynamics.sweeps.sweep_result import SweepResult

    named = dataclasses.replace(small.config, name="max-margin")  # no snapshots to align
    result = SweepResult(named, small.heads, small.steps, small.curves, small.diverged_at)
    found = result.headline()
    assert "maxmargin_corr" not in found and found["test_loss_H3"] == small.headline()["test_loss_H3"]
    assert "max-margin's own headline unavailable" in found["note"]["about"]
    assert "note" not in hl.format_line(found)


def test_diagnostics_and_bottleneck_headlines_from_their_summaries():
    from dynamics.experiments import bottleneck_heads, expressivity
    from dynamics.sweeps.sweep_result import SweepResult

    doc = {"names": ["sharpness", "kernel"], "heads": [1, 4], "eos_ratio_max": [0.05, 0.2],
           "kernel_distance_final": [0.7, None]}  # fmt: skip
    fake = SweepResult(preset("default"), np.array([1, 4]), np.array([0]), {}, np.zeros((2, 1)), extra={})
    fake.extra["diagnostics"] = doc
    found = hl.diagnostics_headline(fake)
    assert found["eos_ratio_max_H4"]["value"] == 0.2 and found["kernel_distance_final_H4"]["value"] is None
    assert "maxmargin_cos_final_H1" not in found
    rows = [
        {"T": 4, "reached_at": 3, "theory_threshold": 3},
        {"T": 6, "reached_at": None, "theory_threshold": 5},
    ]
    found = expressivity.headline({"summary": rows})
    assert found["threshold_T4"]["value"] == 3 and found["threshold_T6"]["value"] is None
    assert found["threshold_T6"]["closed_form"] == 5
    loss = {"mean": 0.5, "std": 0.1}
    rows = [
        {"data_model": "dm1", "layout": "split", "heads": h, "head_size": 8 // h, "train_loss": loss,
         "test_loss": {"mean": h / 10, "std": 0.0}}
        for h in (1, 2)
    ]  # fmt: skip
    found = bottleneck_heads.headline({"summary": rows})
    assert set(found) == {"dm1_split_train_loss", "dm1_split_test_loss"}
    assert (
        found["dm1_split_test_loss"]["value"] == 0.2
        and "H = 2, d_h = 4" in found["dm1_split_test_loss"]["label"]
    )


def _emergence_grid():
    """A GridResult over T from hand-made curves (no training): the attention reaches ½ at step
    2·T (trial 1: one logged step later), the test loss halves at step T; the final test loss is
    lowest at T = 8."""
    from dynamics.config.grid_axes import resolve_grid
    from dynamics.sweeps.grid_runner import GridResult

    grid = resolve_grid(dynamics.with_overrides("emergence", trials=2, steps=80), {"T": "4,8,16"})
    steps = np.arange(0, 81, 2)
    T = np.array([4.0, 8.0, 16.0])[:, None, None]
    late = np.array([0, 2])[None, :, None]
    attn = np.where(steps >= 2 * T + late, 0.9, 1 / T)[None]  # (1, 3, trials, L)
    final = np.array([0.3, 0.1, 0.2])[:, None, None]
    loss = np.where(steps >= T, final, 1.0)[None] * np.ones((1, 1, 2, 1))
    curves = {"attn_relevant": attn, "test_loss": loss, "excess_risk": loss, "train_loss": loss}
    return GridResult(grid, np.array([1]), steps, curves, np.full((1, 3, 2), -1))


def test_grid_headline_fits_the_emergence_exponent_and_finds_the_best_point():
    from dynamics.sweeps import emergence
    from figures.emergence import report

    result = _emergence_grid()
    found = result.headline()
    fit = emergence.grid_fit(result, "T", "attention")
    assert found["t_att_exponent"]["value"] == pytest.approx(fit.exponent)
    assert found["t_att_exponent"]["ci"] == pytest.approx(list(fit.ci))
    assert found["t_att_exponent"]["closed_form"] == 1.0 and found["t_att_exponent"]["n"] == 6
    assert found["t_loss_exponent"]["value"] == pytest.approx(1.0)
    best = found["best_test_loss_H1"]
    assert (best["value"], best["at"]) == (pytest.approx(0.1), {"T": 8})
    assert result.extra["headline"] is found  # complete: computed once, kept
    result.extra["headline"] = {**found, "t_att_exponent": {**found["t_att_exponent"], "value": 0.25}}
    assert report(result)[-1].startswith("t_att ∝ T^0.25 [")  # the report reads the stored fit
    assert "; t_att exponent in T 0.25 [" in "; " + hl.format_line(result.extra["headline"]).removeprefix(
        "headline: "
    )


@pytest.mark.slow  # its own compiled program
def test_a_grid_headline_round_trips_through_its_folder(tmp_path):
    from dynamics.config.grid_axes import resolve_grid
    from dynamics.sweeps.grid_runner import run_grid_experiment

    grid = resolve_grid(dynamics.with_overrides("fig2", **SMALL), {"lr": "0.5,1"})
    result = run_grid_experiment(grid, progress=False)
    found = result.headline()
    rows = [r for r in result.summary() if r["H"] == 3]
    assert found["best_test_loss_H3"]["value"] == min(r["test_loss"]["mean"] for r in rows)
    written = save_results(result, tmp_path / "g")
    assert (tmp_path / "g" / "summary.csv") in written
    assert load_results(tmp_path / "g").headline() == found


@pytest.mark.slow  # their own compiled programs
def test_single_location_and_specialisation_headlines_are_their_studies_numbers():
    from dynamics.experiments import single_location as sl
    from dynamics.experiments import specialisation as spec

    tiny = {
        "width": 8,
        "tokens": 4,
        "n_test": 64,
        "steps": 60,
        "trials": 2,
        "log_every": 20,
        "progress": False,
    }
    result = run_sweep("single-location", **tiny)
    found, final = result.headline(), sl.final_table(result)
    assert found["excess_risk"]["value"] == final["excess_risk"]
    assert found["excess_risk"]["closed_form"] == final["floor"]
    assert (found["kappa"]["value"], found["nu"]["value"]) == (final["kappa"], final["nu"])
    result = run_sweep("specialisation", width=16, steps=100, trials=2, n_test=100, progress=False)
    found, runs = result.headline(), spec.summarise(result)
    assert found["held_all"]["value"] == runs["held_all"] and found["held_all"]["n"] == runs["n_runs"] == 2
    assert hl.format_line(found).startswith(f"headline: all features held {runs['held_all']} of 2 runs; ")


def test_a_bottleneck_folder_without_a_headline_gets_its_presets(tmp_path):
    from dynamics.sweeps.result_files import write_experiment

    rows = [{"T": 4, "reached_at": 3, "theory_threshold": 3}]
    results = {"experiment": "bottleneck-expressivity", "config": {"tol": 1e-3}, "summary": rows}
    write_experiment(
        {"results": results, "arrays": {"log_steps": np.arange(3)}}, tmp_path / "b", "expressivity.npz"
    )
    run = load_results(tmp_path / "b")
    found = run["results"]["headline"]["threshold_T4"]
    assert (found["label"], found["value"], found["closed_form"]) == ("d_h that fits (T = 4)", 3, 3)
    results["summary"] = [{"T": 4}]  # a summary the headline cannot read: loaded all the same
    write_experiment(
        {"results": results, "arrays": {"log_steps": np.arange(3)}}, tmp_path / "c", "expressivity.npz"
    )
    assert load_results(tmp_path / "c")["results"]["headline"] == {}
    assert len(save_results(run, tmp_path / "d")) == 2 and load_results(tmp_path / "d")["results"]["headline"]


@pytest.mark.parametrize(
    ("name", "heads", "stem"),
    [
        ("max-margin", [1], "max-margin"),
        ("max-margin-prompt", [1], "max-margin"),
        ("emergence", [1], "emergence"),
        ("emergence", [1, 2], None),  # several H: the generic figure, a line per H
        ("single-location", [1], "single-location"),
        ("specialisation", [4], "specialisation"),
        ("fig2", [1], None),
    ],
)
def test_each_preset_with_a_question_of_its_own_draws_it(name, heads, stem):
    """``figures.own`` picks the figure from what the run is (hand-made curves: no training)."""
    from dynamics.sweeps.sweep_result import SweepResult
    from figures.own import own_figure

    cfg = dynamics.with_overrides(name, heads=heads)
    ones = np.ones((len(heads), 1, 2))
    curves = {k: ones for k in ("train_loss", "test_loss", "excess_risk", "attn_relevant")}
    curves["head_key_cos"] = ones[..., None, None]
    extra = {"directions": ["k_star_0"]}
    result = SweepResult(
        cfg, np.array(heads), np.array([0, 1]), curves, np.full((len(heads), 1), -1), extra=extra
    )
    own = own_figure(result)
    assert (own and own[1]) == stem
