"""``sweep.log``: what a run logs. ``losses`` logs the train and test loss and nothing else, to the
bit the same curves as ``default`` (zero init's fast path and random init's packs, the fused and
the unfused loop); ``all`` adds the per-head metrics at every H and the head–head matrices. The
knob is one of the config's identity (a default run never reuses or resumes a losses-only folder),
on every surface (flag, TOML key, keyword), and refuses the per-head switches it decides."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
from helpers import cli_error, cli_run, small

from dynamics import api
from dynamics.config.schema import Config, SweepConfig, resolve
from dynamics.config.tomlfile import load_toml
from dynamics.errors import ConfigError
from dynamics.parts.metrics import LOSS_METRICS, head_metrics_on, metrics_of
from dynamics.sweeps import sweep
from figures.own import unavailable

LOSSES = set(LOSS_METRICS)


def _with_log(cfg: Config, log: str) -> Config:
    return dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, log=log))


@pytest.mark.slow_cases("zero-init", "random-init")
@pytest.mark.parametrize(
    "knobs",
    [
        dict(init="zero", heads=(1, 3)),  # the fast path, the fused loop
        dict(init="normal", heads=(1, 3)),  # packed random-init heads
        dict(init="normal", heads=(2,), temperature_decay=0.1),  # the unfused loop (β_t)
    ],
    ids=["zero-init", "random-init", "unfused"],
)
def test_losses_only_gives_the_default_runs_loss_curves_bit_for_bit(knobs):
    base = small(log_every=1, **knobs)
    runs = {
        log: sweep.run_sweep(resolve(_with_log(base, log)), progress=False) for log in ("losses", "default")
    }
    assert set(runs["losses"].curves) == LOSSES  # the engine logged nothing else
    assert LOSSES < set(runs["default"].curves)  # (the default logs more: errors, norms, …)
    for name in LOSS_METRICS:
        a, b = runs["losses"].curves[name], runs["default"].curves[name]
        assert np.isfinite(a).all()
        assert np.array_equal(a, b), name
    assert np.array_equal(runs["losses"].diverged_at, runs["default"].diverged_at)


@pytest.mark.slow  # three compiles
def test_all_adds_the_per_head_metrics_and_the_head_matrices_at_every_H():
    cfg = small(heads=(1, 17), init="zero")  # auto: no per-head metrics above 16 heads
    assert not head_metrics_on(resolve(cfg).config)
    every = resolve(_with_log(cfg, "all")).config
    assert head_metrics_on(every)
    result = sweep.run_sweep(resolve(_with_log(small(heads=(1, 3), init="zero"), "all")), progress=False)
    default = sweep.run_sweep(resolve(small(heads=(1, 3), init="zero")), progress=False)
    extra = set(result.curves) - set(default.curves)
    assert extra == {"head_u_sim", "head_key_sim", "head_attn_sim"}
    for name in default.curves:  # every default curve unchanged by the extra ones
        np.testing.assert_array_equal(result.curves[name], default.curves[name], err_msg=name)


def test_the_knob_is_in_the_hash_only_away_from_its_default():
    cfg = small()
    assert resolve(cfg).config.hash() == resolve(_with_log(cfg, "default")).config.hash()
    assert "log" not in resolve(cfg).config.to_dict()["sweep"]  # old configs keep their hash
    hashes = {resolve(_with_log(cfg, log)).config.hash() for log in ("losses", "default", "all")}
    assert len(hashes) == 3
    assert metrics_of(resolve(_with_log(cfg, "losses")).config) == LOSS_METRICS


def test_a_default_run_never_reuses_a_losses_only_folder(capsys, tmp_path):
    argv = ["--heads", "1", "--trials", "1", "--steps", "3", "--n-train", "8", "--n-test", "8", "--no-figure"]
    out = tmp_path / "run"
    code, _, err = cli_run([*argv, "--log", "losses", "--out", str(out)], capsys, tmp_path)
    assert code == 0, err
    code, _, err = cli_run([*argv, "--out", str(out)], capsys, tmp_path)
    assert code == 2
    assert "holds another config (sweep.log losses there, default here)" in err
    code, stdout, err = cli_run([*argv, "--log", "losses", "--out", str(out)], capsys, tmp_path)
    assert code == 0 and "already holds this config's finished results" in stdout, err


def test_every_surface_sets_it(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('[sweep]\nlog = "losses"\n')
    assert load_toml(toml).sweep.log == "losses"
    assert api.with_overrides(Config(), log="all").sweep.log == "all"
    assert SweepConfig().log == "default"


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--log", "loss"], "invalid choice: 'loss'"),
        (["--log", "losses", "--head-metrics", "on"], "sweep.log='losses' logs the train and test loss only"),
        (["--log", "all", "--head-metrics", "off"], "sweep.log='all' logs every per-head metric"),
        (["--log", "all", "--head-sims"], "sweep.log='all' logs every per-head metric"),
        (["--log", "losses", "--head-every", "2"], "sweep.log='losses' logs the train and test loss only"),
        (  # no readout U to read: 'all' adds nothing (it once ended in a KeyError inside the engine)
            [
                *("--data-model", "positional-semantic", "--output", "sequence", "--query", "all"),
                *("--key-query", "tied", "--head-size", "1", "--loss", "mse", "--log", "all"),
            ],
            "sweep.log='all' was given but has no effect: model.output='sequence' has no readout U",
        ),
    ],
)
def test_what_the_knob_decides_is_refused_beside_it_in_one_line(argv, says, capsys, tmp_path):
    assert says in cli_error(argv, capsys, tmp_path)


def test_sequence_outputs_never_log_per_head_metrics_whatever_the_log():
    cfg = Config()
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, output="sequence"))
    assert [head_metrics_on(_with_log(cfg, log)) for log in ("losses", "default", "all")] == [False] * 3
    assert head_metrics_on(_with_log(Config(), "all"))


def test_the_api_refuses_a_contradiction_in_one_error():
    with pytest.raises(ConfigError, match="sweep.head_metrics='on' was given but has no effect"):
        resolve(Config(sweep=SweepConfig(log="losses", head_metrics="on")))


def test_an_own_figure_whose_curves_were_not_logged_is_named():
    cfg = _with_log(Config(), "losses")
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, model="emergence"))
    lacking = types.SimpleNamespace(config=cfg, heads=[1], curves={"train_loss": 0, "test_loss": 0})
    note = unavailable(lacking)
    assert note.startswith("the emergence figure needs excess_risk, attn_relevant, not logged")
    assert "\n" not in note
    logged = types.SimpleNamespace(config=cfg, heads=[1], curves={"excess_risk": 0, "attn_relevant": 0})
    assert unavailable(logged) is None
