"""python -m dynamics.run end to end in a temporary folder, and its error handling."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import child_env, cli_error, cli_run

from dynamics.cli import run as cli
from dynamics.core.engine import METRICS
from dynamics.sweeps.devices import cpu_cores

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "--heads",
    "1,2",
    "--steps",
    "6",
    "--trials",
    "2",
    "--n-train",
    "16",
    "--n-test",
    "20",
    "--log-every",
    "2",
    "--quiet",
]


def check_schema(out: Path, heads, trials, steps):
    meta = json.loads((out / "results.json").read_text())
    for key in ("config", "config_hash", "versions", "device", "wall_time_s", "summary", "steps", "heads"):
        assert key in meta, key
    assert {"jax", "jaxlib", "optax"} <= set(meta["versions"])
    assert [row["H"] for row in meta["summary"]] == list(heads)
    for row in meta["summary"]:
        for name in ("train_loss", "test_loss", "train_error", "test_error"):
            assert set(row[name]) == {"mean", "std"}
            assert np.isfinite(row[name]["mean"])
        assert row["n_diverged"] == 0 and row["diverged"] is False
    with np.load(out / "curves.npz") as z:
        assert list(z["heads"]) == list(heads)
        assert z["steps"][0] == 0 and z["steps"][-1] == steps
        for name in METRICS:
            assert z[name].shape == (len(heads), trials, len(z["steps"])), name
    return meta


@pytest.mark.slow
def test_cli_end_to_end(tmp_path, capsys):
    """The command in this process (the same run in a fresh interpreter: test_cold_start's; the
    module entry point python -m dynamics.run: test_resume's)."""
    out = tmp_path / "run"
    code, stdout, stderr = cli_run([*TINY, "--out", str(out)], capsys, tmp_path)
    assert code == 0, stderr
    assert "train loss" in stdout and "test err" in stdout
    check_schema(out, [1, 2], 2, 6)
    assert (out / "figure.png").stat().st_size > 1000
    assert (out / "figure.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_cli_user_data_and_config_file(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X, Xt = rng.normal(size=(12, 4, 6)), rng.normal(size=(9, 4, 6))
    np.savez(
        tmp_path / "my.npz",
        X_train=X,
        y_train=rng.integers(0, 2, 12),
        X_test=Xt,
        y_test=rng.choice([-1, 1], 9),
    )
    (tmp_path / "c.toml").write_text('[optim]\noptimizer = "gd"\nlr = 0.5\nsteps = 5\n[sweep]\ntrials = 1\n')
    args = ["--data", "my.npz", "--heads", "1,3", "--config", "c.toml", "--quiet", "--out", "o"]
    code, _, stderr = cli_run(args, capsys, tmp_path)
    assert code == 0, stderr
    meta = check_schema(tmp_path / "o", [1, 3], 1, 5)
    assert meta["config"]["data"]["model"] == "npz" and meta["config"]["optim"]["lr"] == 0.5


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--heads", "0"], "sweep.heads=0"),
        (["--heads", "-2"], "sweep.heads=-2"),
        (["--heads", "1,x"], "heads"),
        (["--lr", "-1"], "optim.lr=-1"),
        (["--lr", "nan"], "optim.lr=nan"),
        (["--lr", "inf"], "optim.lr=inf"),
        (["--steps", "0"], "optim.steps=0"),
        (["--steps", "100000000", "--log-every", "1"], "logs 100000001 steps"),  # refused before the schedule
        (["--preset", "fig9"], "unknown preset 'fig9'"),
        (["--preset", "phase-dg"], "did you mean 'phase-gd'"),  # the grid presets are named too
        (["--optimizer", "rmsprop"], "--optimizer: optim.optimizer='rmsprop' is not one of 'gd', 'adam'"),
        (["--optimizer", "gd,rmsprop"], "--optimizer: optim.optimizer='rmsprop' is not one of 'gd', 'adam'"),
        (["--optimizer", "sgd"], "optim.optimizer='sgd' needs optim.batch_size"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--data", "missing.npz"], "missing.npz"),
        (["--data", "bad.npz"], "bad.npz"),
        (["--width", "4"], "data.d=4"),
        (["--init", "zero", "--key-query", "factored"], "factored"),
        (["--config", "nope.toml"], "nope.toml"),
        (["--lr", "0.1", "--lr", "0.2"], "--lr is given twice ('0.1', then --lr '0.2'): give it once"),
        (["--heads=1,2", "--heads", "4"], "--heads is given twice ('1,2', then --heads '4')"),
        (["--preset", "fig2", "--steps", "5", "--ste", "6"], "--steps is given twice ('5', then --ste '6')"),
    ],
)
def test_bad_input_is_one_line_error(tmp_path, capsys, args, needle):
    """Exit status 2, one line on stderr naming the bad value, nothing written (in this process:
    the subprocess path of the same code is test_cold_start's and test_resume's)."""
    (tmp_path / "bad.npz").write_bytes(b"not a zip file")
    assert needle in cli_error([*args, "--quiet"], capsys, tmp_path)


def test_unknown_toml_key_suggests(tmp_path):
    (tmp_path / "c.toml").write_text("[optim]\nlearning_rate = 0.1\n")
    args = cli.build_parser().parse_args(["--config", str(tmp_path / "c.toml")])
    with pytest.raises(ValueError, match="unknown field optim.learning_rate"):
        cli.config_from_args(args)


def test_list_presets(capsys):
    assert cli.main(["--list-presets"]) == 0
    out = capsys.readouterr().out
    for name in ("fig2", "fig3-gd", "fig3-adam", "planted-gd", "planted-adam"):
        assert name in out


def test_atomic_write_replaces_whole_file_and_leaves_no_temp(tmp_path, monkeypatch):
    import os

    from dynamics.infra.files import atomic_write_bytes

    target = tmp_path / "f.json"
    atomic_write_bytes(target, b"old")
    assert target.read_bytes() == b"old" and oct(target.stat().st_mode & 0o777) != oct(0o600)

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        atomic_write_bytes(target, b"new contents")
    assert target.read_bytes() == b"old"  # the old file is intact...
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]  # ...and no temp file is left


@pytest.mark.slow
def test_diverging_step_is_reported_not_plotted(tmp_path, capsys):
    out = tmp_path / "div"
    args = [*TINY, "--lr", "1e15", "--loss", "exp", "--out", str(out)]
    code, stdout, stderr = cli_run(args, capsys, tmp_path)
    assert code == 0, stderr
    assert "diverged" in stdout and "2/2" in stdout
    meta = json.loads((out / "results.json").read_text())
    for row in meta["summary"]:
        assert row["diverged"] and row["n_diverged"] == 2 and row["train_loss"]["mean"] is None
        assert all(0 <= s <= 6 for s in row["diverged_at"])
    with np.load(out / "curves.npz") as z:
        for i, at in enumerate(z["diverged_at"]):
            for trial, step in enumerate(at):
                assert np.isnan(z["train_loss"][i, trial, z["steps"] >= step]).all()
    assert (out / "figure.png").stat().st_size > 1000


@pytest.mark.stress  # long: `make stress` and CI run it
def test_command_line_splits_the_cpu_into_one_device_per_core(tmp_path):
    """python -m dynamics.run shards over max(2, cores) CPU devices by default; any count >= 2
    gives the same numbers bit for bit, --cpu-devices 1 differs in the last bits only."""
    base = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    env = child_env(base)
    args = [sys.executable, "-m", "dynamics.run", "--quiet", "--no-figure", "--init", "normal"]
    args += ["--heads", "1,3", "--steps", "6", "--trials", "3", "--n-train", "16", "--n-test", "20"]
    runs = {}
    for name, extra in (("auto", []), ("three", ["--cpu-devices", "3"]), ("one", ["--cpu-devices", "1"])):
        out = tmp_path / name
        proc = subprocess.run(
            [*args, *extra, "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs[name] = (json.loads((out / "results.json").read_text()), np.load(out / "curves.npz"))
    assert runs["auto"][0]["device"] == f"cpu:cpu x{max(2, cpu_cores())}"
    assert runs["three"][0]["device"] == "cpu:cpu x3"
    assert runs["one"][0]["device"] == "cpu:cpu x1"
    for name in METRICS:
        np.testing.assert_array_equal(runs["auto"][1][name], runs["three"][1][name], err_msg=name)
        np.testing.assert_allclose(runs["auto"][1][name], runs["one"][1][name], rtol=2e-6, atol=1e-6)
    bad = subprocess.run(
        [*args, "--cpu-devices", "0", "--out", str(tmp_path / "bad")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --cpu-devices=0 must be a positive integer"
    assert not (tmp_path / "bad").exists()


def test_every_command_line_uses_the_shared_parser():
    from dynamics.cli import bottleneck as bottleneck_cli
    from dynamics.cli.common import OneLineParser
    from dynamics.cli.figures import build_parser as figures_parser
    from dynamics.demo.__main__ import build_parser as demo_parser

    for p in (cli.build_parser(), bottleneck_cli.build_parser(), demo_parser(), figures_parser([])):
        assert isinstance(p, OneLineParser)


def test_a_flag_repeated_with_another_value_is_refused_by_every_command_line():
    """argparse keeps the last of two values without a word; every command line refuses the pair
    instead, and lets pass what is harmless: the same value twice, flags without a value, flags
    that collect, and anything after ``--``."""
    import argparse

    from dynamics.cli import bottleneck as bottleneck_cli
    from dynamics.cli.common import OneLineParser, repeated_flag
    from dynamics.cli.figures import build_parser as figures_parser
    from dynamics.demo.__main__ import build_parser as demo_parser

    for p, flag in [
        (cli.build_parser(), "--steps"),
        (bottleneck_cli.build_parser(), "--steps"),
        (demo_parser(), "--steps"),
        (figures_parser([]), "--out"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            p.parse_args([flag, "7", flag, "8"])
        assert exit_.value.code == 2
        assert repeated_flag(p, [flag, "7", f"{flag}=7"]) is None  # the same value twice

    p = OneLineParser(prog="t")
    p.add_argument("--x")
    p.add_argument("--tag", action="append")
    p.add_argument("--names", nargs="+")
    p.add_argument("--quiet", action="store_true")
    assert repeated_flag(p, ["--quiet", "--quiet", "--tag", "a", "--tag", "b"]) is None
    assert repeated_flag(p, ["--names", "a", "b", "--names", "a", "b"]) is None
    assert "--names is given twice (('a', 'b'), then --names ('a',))" in repeated_flag(
        p, ["--names", "a", "b", "--names", "a"]
    )
    assert repeated_flag(p, ["--x", "1", "--", "--x", "2"]) is None
    assert repeated_flag(p, ["--x", "-1", "--x", "-1"]) is None  # a negative value is a value
    assert "--x is given twice ('-1', then --x '2')" in repeated_flag(p, ["--x", "-1", "--x", "2"])
    assert p.parse_args(["--x", "1", "--x=1"]).x == "1"
    assert isinstance(p, argparse.ArgumentParser)


def test_with_flags_sets_a_flag_of_a_base_command_line_once():
    from dynamics.cli.common import repeated_flag, with_flags

    base = ["--steps", "5", "--heads=1,2", "--quiet", "--lr", "1"]
    argv = with_flags(base, "--heads", "4", "--trials", "2")
    assert argv == ["--steps", "5", "--quiet", "--lr", "1", "--heads", "4", "--trials", "2"]
    assert repeated_flag(cli.build_parser(), argv) is None
    assert vars(cli.build_parser().parse_args(argv))["sweep.heads"] == (4,)
    with pytest.raises(ValueError, match="pairs of strings"):
        with_flags(base, "--heads")  # a flag without its value
    with pytest.raises(ValueError, match="pairs of strings"):
        with_flags(base, "--heads", 4)  # a value that is not a string
    with pytest.raises(ValueError, match="'heads' is not a long flag"):
        with_flags(base, "heads", "4")
