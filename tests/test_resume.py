"""Interruption and resume: SIGINT/SIGTERM to a real sweep subprocess, then the same command again."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_same_numbers, at_users_level, child_env

from dynamics.config.schema import Config, DataConfig, OptimConfig, SweepConfig
from dynamics.sweeps.checkpoint import load_points, run_checkpointed

ROOT = Path(__file__).resolve().parents[1]
# Random init: H = 1..6 fill three packs of 7 slots (6+1, 5+2, 4+3), one point each on
# 2 CPU devices (pinned, so the plan is the same on any machine); one compile for all, so
# every point must take long enough (~0.5 s) for the signal to land while one runs.
ARGS = [
    "--heads",
    "1,2,3,4,5,6",
    "--init",
    "normal",
    "--init-scale",
    "0.5",
    "--steps",
    "4000",
    "--trials",
    "2",
    "--n-train",
    "100",
    "--n-test",
    "40",
    "--log-every",
    "500",
    "--cpu-devices",
    "2",
    "--quiet",
    "--no-figure",
]


def cli(args, cwd, **kw):
    env = at_users_level(child_env())  # long runs (compiles loaded from the cache): the users' level
    return subprocess.Popen(
        [sys.executable, "-m", "dynamics.run", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_sweep_resumes_to_the_same_numbers(tmp_path, sig):
    out = tmp_path / "cut"
    proc = cli([*ARGS, "--out", str(out)], tmp_path)
    deadline = time.time() + 240
    while not list((out / "points").glob("H*.npz")) and time.time() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and f"in {out} " in err and "rerun the same command to finish" in err
    meta = json.loads((out / "results.json").read_text())  # a valid, partial results.json
    assert meta["complete"] is False and 1 <= len(meta["summary"]) < 6
    assert meta["heads_todo"] and set(meta["heads_todo"]).isdisjoint(meta["heads"])

    resumed = cli([*ARGS, "--out", str(out)], tmp_path)  # the same command: this config's points reused
    said, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert said.startswith(f"{out} holds this config's unfinished results: reusing its finished part")
    whole = cli([*ARGS, "--out", str(tmp_path / "whole")], tmp_path)
    _, err = whole.communicate(timeout=300)
    assert whole.returncode == 0, err

    a, b = np.load(out / "curves.npz"), np.load(tmp_path / "whole" / "curves.npz")
    assert sorted(a.files) == sorted(b.files)
    for name in a.files:
        assert_same_numbers(a[name], b[name], err_msg=name)  # bit-identical on the CPU
    ma, mb = (
        json.loads((out / "results.json").read_text()),
        json.loads((tmp_path / "whole" / "results.json").read_text()),
    )
    assert ma["complete"] and ma["summary"] == mb["summary"] and ma["config_hash"] == mb["config_hash"]
    assert not (out / "points").exists()


def test_resume_skips_finished_points_and_ignores_other_configs(tmp_path, monkeypatch):
    cfg = Config(
        data=DataConfig(n_train=16, n_test=16, T=4, d=8, n_irrelevant=2),
        optim=OptimConfig(steps=5),
        sweep=SweepConfig(heads=(1, 2), trials=1, log_every=5),
    )
    out = tmp_path / "o"
    first = run_checkpointed(cfg, out, progress=False)
    assert json.loads((out / "results.json").read_text())["complete"] is True

    import dynamics.sweeps.sweep

    def no_compute(*a, **k):
        raise AssertionError("a finished sweep must not be recomputed on --resume")

    monkeypatch.setattr(dynamics.sweeps.sweep, "run_points", no_compute)
    again = run_checkpointed(cfg, out, resume=True, progress=False)
    np.testing.assert_array_equal(first.curves["train_loss"], again.curves["train_loss"])
    assert load_points(out, "another-hash") == {}


@pytest.mark.slow
def test_a_new_numerics_version_invalidates_saved_results(tmp_path, monkeypatch):
    """Results of an older engine (other random draws) are recomputed, never resumed or reused."""
    import dynamics.config.sections
    from dynamics.sweeps.checkpoint import finished_heads

    cfg = Config(
        data=DataConfig(n_train=16, n_test=16, T=4, d=8, n_irrelevant=2),
        optim=OptimConfig(steps=3),
        sweep=SweepConfig(heads=(1,), trials=1, log_every=3),
    )
    out = tmp_path / "o"
    run_checkpointed(cfg, out, progress=False)
    old = cfg.hash()
    assert set(finished_heads(out, old)) == {1}
    monkeypatch.setattr(
        dynamics.config.identity, "NUMERICS_VERSION", dynamics.config.identity.NUMERICS_VERSION + 1
    )
    assert cfg.hash() != old
    assert finished_heads(out, cfg.hash()) == {}
