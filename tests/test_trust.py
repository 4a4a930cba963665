"""The trust cases as regression tests: interrupts, nothing touched while failing, content
hashes, memory refused before allocation, damaged files recomputed (fast, in-process where
possible; the long random-moment runs are in tests/test_stress.py)."""

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import fuzzing
import numpy as np
import pytest
from helpers import child_env, fail_after_first_point

from dynamics.cli import run as cli
from dynamics.config.schema import Config, ConfigError, DataConfig, OptimConfig, SweepConfig, digest, resolve
from dynamics.sweeps import memory as resources
from dynamics.sweeps.checkpoint import LOCK, load_points, run_checkpointed, save_point

ROOT = Path(__file__).resolve().parents[1]
SMALL = Config(
    data=DataConfig(n_train=16, n_test=16, T=4, d=8, n_irrelevant=2),
    optim=OptimConfig(steps=4),
    sweep=SweepConfig(heads=(1, 2), trials=1, log_every=2),
)


def experiment(*argv):
    return cli.config_from_args(cli.build_parser().parse_args(list(argv)))


# Interrupts


SHIELD_SCRIPT = """
import os, signal, sys, time
from dynamics.infra import interrupts
def main():
    with interrupts.shielded():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler has run: the signal is held
        open(sys.argv[1], "w").write("the write finished")
    return 0
interrupts.finish(interrupts.command(main, lambda: "held until the write was done"))
"""


def test_a_signal_inside_a_shielded_write_ends_the_process_after_it(tmp_path):
    env = child_env()
    marker = tmp_path / "marker"
    proc = subprocess.run(
        [sys.executable, "-c", SHIELD_SCRIPT, str(marker)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 130 and proc.stderr == "held until the write was done\n", proc.stderr
    assert marker.read_text() == "the write finished"


@pytest.mark.parametrize("sig, delay", [(signal.SIGINT, 0.3), (signal.SIGTERM, 0.3)])
def test_a_signal_during_the_imports_exits_130_with_one_line(tmp_path, sig, delay):
    """The issue's "SIGINT during the first second prints a traceback" (and SIGTERM's 143)."""
    env = child_env()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dynamics.run", "--steps", "100000", "--quiet", "--no-figure", "--out", "o"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(delay)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


# Nothing touched before everything is validated


def test_npz_shapes_are_checked_before_the_sweep(tmp_path):
    good = fuzzing.good_npz(tmp_path)  # d = 6
    with pytest.raises(ConfigError, match=r"sweep.heads=\[8\] exceed data.d=6"):
        experiment("--data", str(good), "--key-query", "factored", "--init", "normal", "--heads", "1,8")
    with pytest.raises(ConfigError, match="head_size=9 must be <= data.d=6"):
        experiment("--data", str(good), "--key-query", "factored", "--init", "normal", "--head-size", "9")


def test_a_small_file_claiming_a_huge_width_is_refused_from_its_header(tmp_path):
    import zipfile

    path = tmp_path / "wide.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for key, shape in (
            ("X_train", (2, 1, 100000)),
            ("y_train", (2,)),
            ("X_test", (2, 1, 100000)),
            ("y_test", (2,)),
        ):
            with z.open(key + ".npy", "w") as f:
                np.lib.format.write_array(f, np.zeros(shape, np.float32))
    with pytest.raises(ConfigError, match="data.d=100000 must be <= 4096"):
        experiment("--data", str(path))


def test_recorded_sizes_are_the_data_files_and_flags_that_do_not_apply_are_refused(tmp_path):
    good = fuzzing.good_npz(tmp_path)
    data = experiment("--data", str(good)).config.data
    assert (data.n_train, data.n_test, data.T, data.d) == (8, 6, 3, 6)
    for flag in ("--n-train", "--n-test", "--tokens", "--width"):
        with pytest.raises(ConfigError, match=f"{flag} do"):
            experiment("--data", str(good), flag, "3")


@pytest.mark.parametrize("flag", ["--data", "--config", "--preset", "--out"])
def test_empty_paths_are_errors(flag):
    with pytest.raises(ConfigError, match=f"{flag} '' is empty"):
        experiment(flag, "")


def test_bad_config_files_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="is a folder"):
        experiment("--config", str(tmp_path))
    (tmp_path / "b.toml").write_text('preset = "bottleneck-expressivity"\n')
    with pytest.raises(ConfigError, match="--preset bottleneck-expressivity"):
        experiment("--config", str(tmp_path / "b.toml"))
    (tmp_path / "n.toml").write_text('[data]\n"a\\nb" = 1\n')
    with pytest.raises(ConfigError) as err:
        experiment("--config", str(tmp_path / "n.toml"))
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="larger than"):
        experiment("--config", "/dev/zero")


def test_heads_are_sorted():
    assert experiment("--heads", "8,1,4,2").config.sweep.heads == (1, 2, 4, 8)


def test_a_failing_run_leaves_a_previous_complete_result_as_it_was(tmp_path, monkeypatch):
    out = tmp_path / "o"
    run_checkpointed(SMALL, out, progress=False)
    before = fuzzing.snapshot(out)
    fail_after_first_point(monkeypatch)
    other = SMALL.__class__(**{**SMALL.__dict__, "sweep": SweepConfig(heads=(1, 3), trials=1, log_every=2)})
    with pytest.raises(ValueError, match="after the first point"):
        run_checkpointed(other, out, progress=False)
    after = fuzzing.snapshot(out)
    assert {k: v for k, v in after.items() if not k.startswith("points")} == before


def test_a_second_run_on_the_same_out_is_refused(tmp_path):
    import filelock

    out = tmp_path / "o"
    out.mkdir()
    with filelock.FileLock(out / LOCK):  # another process's run holds it
        with pytest.raises(ConfigError, match="in use by another run"):
            run_checkpointed(SMALL, out, progress=False)
    assert not (out / "results.json").exists()


def test_out_that_is_a_file_is_refused_before_computing(tmp_path):
    (tmp_path / "f").write_text("mine")
    with pytest.raises(ConfigError, match="is a file"):
        run_checkpointed(SMALL, tmp_path / "f", progress=False)
    assert (tmp_path / "f").read_text() == "mine"


def test_stale_temporary_files_are_removed_by_the_next_run(tmp_path):
    out = tmp_path / "o"
    (out / "points").mkdir(parents=True)
    stale = [out / ".curves.npz.abc123.tmp", out / "points" / ".H1.npz.def456.tmp"]
    for path in stale:
        path.write_bytes(b"half")
    run_checkpointed(SMALL, out, progress=False)
    assert not any(p.exists() for p in stale)


# Content, not names


def test_the_hash_covers_the_data_contents_and_no_other_config_changes(tmp_path):
    path = fuzzing.good_npz(tmp_path)
    cfg = resolve(Config(data=DataConfig(model="npz", path=str(path)))).config
    first = cfg.hash()
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["y_train"] = -arrays["y_train"]  # same shapes, other labels
    np.savez(path, **arrays)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # also when mtime stays coarse
    assert cfg.hash() != first
    for synthetic in (Config(), SMALL, resolve(SMALL).config):
        assert synthetic.hash() == digest(synthetic.resolved().to_dict())  # the formula of old


# Resource estimate before allocation


@pytest.mark.parametrize(
    "argv",
    [
        ["--n-train", "10000000", "--n-test", "10000000", "--tokens", "4096", "--width", "4096"],
        ["--heads", "4096", "--init", "normal", "--width", "2048", "--tokens", "8"],
    ],
)
def test_the_issues_huge_sweeps_are_refused_naming_the_size(argv, monkeypatch):
    monkeypatch.setenv(resources.ENV, "64G")
    with pytest.raises(ConfigError, match=r"needs about [\d.]+ [TPG]B .* more than the limit 68.7 GB"):
        resources.check_sweep(experiment(*argv))


def test_the_default_sweep_fits_and_the_limit_is_overridable(monkeypatch):
    exp = experiment()
    monkeypatch.delenv(resources.ENV, raising=False)
    parts = resources.check_sweep(exp)
    monkeypatch.setenv(resources.ENV, "1K")
    with pytest.raises(ConfigError, match="limit 1.02 KB"):
        resources.check_sweep(exp)
    monkeypatch.setenv(resources.ENV, "off")
    assert resources.check_sweep(exp) == parts


def test_the_parameter_estimate_counts_what_the_model_holds():
    from dynamics.core.inits import param_count

    for key_query, d in (("full", 8), ("factored", 12)):
        cfg = resolve(
            Config(
                data=DataConfig(d=d, n_irrelevant=2),
                model={
                    "full": SMALL.model,
                    "factored": SMALL.model.__class__(key_query="factored", init="normal"),
                }[key_query],
                sweep=SweepConfig(heads=(3,), trials=2),
            )
        ).config
        parts = resources.sweep_bytes(cfg, n_logged=3)
        slots = 2 * 3  # the packing bound the estimate uses
        size = d // 3 if key_query == "factored" else None  # a full W has no head size
        expected = 2 * 4 * 4 * param_count(slots, d, key_query, size)  # trials · (θ, grad, 2 moments) · f32
        assert parts["parameters and optimiser"] == expected


def test_cpu_devices_are_capped():
    args = cli.build_parser().parse_args(["--cpu-devices", "100000"])
    with pytest.raises(ConfigError, match="--cpu-devices=100000 must be <= 256"):
        cli.apply_cpu_devices(args)


def test_head_diversity_matches_a_float64_all_pairs_reference():
    from dynamics.core.model import head_diversity

    rng = np.random.default_rng(3)
    W, U = rng.normal(size=(5, 4, 4)), rng.normal(size=(5, 4))
    W[3], U[3] = W[1], U[1]  # two identical heads
    member = np.array([True, False, True, True, False])
    flat = np.concatenate([W.reshape(5, -1), U], axis=1)
    ref = max(
        np.linalg.norm(flat[i] - flat[j]) for i in range(5) for j in range(5) if member[i] and member[j]
    )
    got = head_diversity({"W": W.astype(np.float32), "U": U.astype(np.float32)}, member)
    np.testing.assert_allclose(float(got), ref, rtol=1e-5)
    same = np.array([False, True, False, True, False])
    assert float(head_diversity({"W": W.astype(np.float32), "U": U.astype(np.float32)}, same)) == 0.0


# Damaged files


def test_a_damaged_or_wrong_shape_checkpoint_is_named_and_recomputed(tmp_path):
    exp = resolve(SMALL)
    h = exp.config.hash()
    out = tmp_path / "o"
    save_point(out, h, [1], {"train_loss": np.zeros((1, 1, 99))}, np.array([-1]))  # wrong L
    (out / "points" / "H2.npz").write_bytes(b"PK\x03\x04 truncated")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_points(out, h, (1, len(exp.steps))) == {}
    named = " ".join(str(w.message) for w in caught)
    assert "H1.npz is damaged" in named and "H2.npz is damaged" in named


def test_resume_recomputes_a_damaged_curves_npz_to_the_same_numbers(tmp_path):
    out = tmp_path / "o"
    first = run_checkpointed(SMALL, out, progress=False)
    data = (out / "curves.npz").read_bytes()
    (out / "curves.npz").write_bytes(data[: len(data) // 2])
    with pytest.warns(UserWarning, match="curves.npz is missing or damaged"):
        again = run_checkpointed(SMALL, out, resume=True, progress=False)
    np.testing.assert_array_equal(first.curves["train_loss"], again.curves["train_loss"])
    with np.load(out / "curves.npz") as z:
        np.testing.assert_array_equal(z["train_loss"], first.curves["train_loss"])
    assert json.loads((out / "results.json").read_text())["complete"] is True


def test_figures_recompute_a_missing_npz_beside_matching_results(tmp_path):
    from dynamics.sweeps.result_files import write_files
    from figures.registry import Entry, ensure_results

    calls = []

    def produce(folder, progress):
        calls.append(folder)
        write_files(folder, "curves.npz", {"a": np.arange(3)}, {"config_hash": "k", "complete": True})

    entry = Entry("test", lambda: "k", produce, lambda *a: [])
    assert ensure_results(entry, tmp_path / "r", progress=False) == "produced"
    assert ensure_results(entry, tmp_path / "r", progress=False) == "reused"
    (tmp_path / "r" / "curves.npz").unlink()
    with pytest.warns(UserWarning, match="curves.npz is missing or damaged"):
        ensure_results(entry, tmp_path / "r", progress=False)
    assert len(calls) == 2 and (tmp_path / "r" / "curves.npz").exists()


def test_the_interrupt_line_starts_below_an_open_progress_bar():
    import io

    from tqdm.auto import tqdm

    from dynamics.infra import interrupts

    before = interrupts._bar_on_screen()  # False unless another test left a bar open
    bar = tqdm(total=2, file=io.StringIO())
    try:
        assert interrupts._bar_on_screen()  # the line ends the bar's: the message takes a new one
    finally:
        bar.close()
    assert interrupts._bar_on_screen() == before
