"""Batching, packing, sharding and the run_sweep hooks give the numbers of each run alone."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import child_env, small

from dynamics.cli import run as cli
from dynamics.config.schema import (
    Config,
    log_schedule,
    validate,
)
from dynamics.core import engine, inits, losses, model, rng, update
from dynamics.core.data import make_data
from dynamics.sweeps import devices
from dynamics.sweeps.plan import SHRINK_STEPS
from dynamics.sweeps.sweep import pack_runs, plan_points, run_grid, run_sweep

ROOT = Path(__file__).resolve().parents[1]


def tiny(init="zero", optimizer="adam", heads=(1, 3, 4), **optim) -> Config:
    return small(init=init, init_scale=1.0, optimizer=optimizer, heads=heads, **optim)


def assert_same(a, b, rtol=0.0, atol=0.0):
    np.testing.assert_array_equal(a.diverged_at, b.diverged_at)
    for name in engine.METRICS:
        if rtol == 0 and atol == 0:
            np.testing.assert_array_equal(a.curves[name], b.curves[name], err_msg=name)
        else:
            np.testing.assert_allclose(a.curves[name], b.curves[name], rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("init", ["zero", "normal"])
def test_batched_packs_equal_one_pack_per_call(init):
    cfg = tiny(init=init)
    alone = run_sweep(cfg, progress=False, packs_per_call=1)
    # Width 1 (the CPU default): a run's numbers do not depend on its batch companions.
    assert_same(alone, run_sweep(cfg, progress=False, packs_per_call=3))
    # All packs and trials vmapped together (the accelerator layout): equal to float rounding.
    together = run_sweep(cfg, progress=False, packs_per_call=3, chunk=6)
    assert_same(alone, together, rtol=1e-5, atol=1e-6)


def test_runs_of_every_H_share_one_program_and_pack_first_fit():
    """(The packed runs' numbers against each run alone: test_properties.py.)"""
    cfg = tiny(init="normal", optimizer="adam", heads=(1, 2, 3))
    plan = plan_points(validate(cfg), [0, 1, 2], 8, log_schedule(12, 4), devices.BatchPlacer())
    assert len({p.prog for p in plan}) == 1  # one program (one compile) for every H
    assert sorted(sorted(cfg.sweep.heads[i] for i, _ in pack) for p in plan for pack in p.packs) == [
        [1, 2],
        [3],
    ]


def test_one_program_per_H_pads_no_batch_beyond_the_devices():
    """Factored split heads plan one program per H; every call's batch is its runs rounded up
    to the devices, whatever the number of programs (a reused name once doubled it per H)."""
    cfg = tiny(init="normal", optimizer="gd", heads=(1, 2, 4, 8))
    split = dataclasses.replace(cfg.model, key_query="factored", head_size="split")
    cfg = dataclasses.replace(cfg, model=split)
    two_cpus = types.SimpleNamespace(platform="cpu", n_devices=2)
    plan = plan_points(validate(cfg), [0, 1, 2, 3], 8, log_schedule(12, 4), two_cpus)
    assert sorted(p.prog.slots for p in plan) == [1, 2, 4, 8]
    assert all(p.chunk == 1 and p.batch_size == 2 for p in plan)  # 1 pack × 2 trials on 2 devices


def test_a_shorter_last_call_pads_to_its_own_runs_where_its_copies_cost_more_than_a_compile():
    """Zero init, 3 runs × 3 trials on 2 CPU devices: calls of 2 packs (6 elements); the last call,
    one pack of 3 trials, is padded to a full call's 6 (one compile) in a short run, and to its own
    4 in a run whose 2 discarded copies would run at least ``SHRINK_STEPS`` element-steps; every
    call's batch still splits over the devices."""
    cfg = validate(tiny(init="zero", optimizer="gd", heads=(1, 2, 3), trials=3))
    two_cpus = types.SimpleNamespace(platform="cpu", n_devices=2)
    short = plan_points(cfg, [0, 1, 2], 8, log_schedule(12, 4), two_cpus)
    assert [(len(p.packs), p.batch_size) for p in short] == [(2, 6), (1, 6)]
    long_steps = SHRINK_STEPS // 2  # 2 copies × long_steps: just at the limit
    long = plan_points(cfg, [0, 1, 2], 8, log_schedule(long_steps, long_steps), two_cpus)
    assert [(len(p.packs), p.batch_size) for p in long] == [(2, 6), (1, 4)]
    assert len({p.prog for p in long}) == 1
    below = plan_points(cfg, [0, 1, 2], 8, log_schedule(long_steps - 1, long_steps - 1), two_cpus)
    assert [p.batch_size for p in below] == [6, 6]
    # an even number of trials pads nothing: one pack of 2 trials per call
    even = validate(tiny(init="zero", optimizer="gd", heads=(1, 2, 3), trials=2))
    assert [p.batch_size for p in plan_points(even, [0, 1, 2], 8, log_schedule(12, 4), two_cpus)] == [2] * 3


@pytest.mark.slow
def test_a_diverging_run_leaves_its_pack_mates_alone():
    cfg = tiny(init="normal", optimizer="gd", heads=(1, 2, 3), loss="exp")
    grid = run_grid(cfg, lrs=[0.5, 1e15], progress=False, slots=12)  # every run of a trial in one pack
    ok, blown = grid
    assert (blown.diverged_at >= 0).all() and (ok.diverged_at == -1).all()
    alone = run_sweep(dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, lr=0.5)), progress=False)
    assert_same(ok, alone, rtol=1e-5, atol=1e-6)


def test_pack_runs_first_fit_decreasing():
    sizes = [1, 2, 3, 4, 6, 8, 12, 16]
    packs = pack_runs(sizes, 26)
    assert [[sizes[j] for j in p] for p in packs] == [[16, 8, 2], [12, 6, 4, 3, 1]]
    for capacity in (16, 20, 33, 52):
        packs = pack_runs(sizes, capacity)
        assert sorted(j for p in packs for j in p) == list(range(len(sizes)))
        assert all(sum(sizes[j] for j in p) <= capacity for p in packs)
    assert pack_runs([5, 5, 5], 5) == [[0], [1], [2]]  # ties keep their order
    with pytest.raises(ValueError, match="slots=8 is smaller than the largest H=16"):
        pack_runs(sizes, 8)


def test_fast_path_flag_is_respected():
    cfg = validate(tiny())
    placer = devices.BatchPlacer()
    sched = log_schedule(12, 4)
    fast = plan_points(cfg, [0, 1, 2], 8, sched, placer)
    assert all(p.prog.fast_path and p.prog.slots == 1 for p in fast)
    assert len({p.prog for p in fast}) == 1  # every H shares one compile
    off = dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, fast_path=False))
    full = plan_points(off, [0, 1, 2], 8, sched, placer)
    for p in full:
        assert not p.prog.fast_path
        assert all(p.prog.slots >= cfg.sweep.heads[i] for i in p.indices)
    args = cli.build_parser().parse_args(["--no-fast-path", "--heads", "1,3", "--steps", "3"])
    assert cli.config_from_args(args).config.sweep.fast_path is False
    # (the two paths agree: test_properties.py)


@pytest.mark.slow
def test_run_grid_equals_separate_sweeps():
    # test_a_diverging_run_leaves_its_pack_mates_alone's config: its sweep alone, these sweeps and
    # this grid (4 variants of H = 1, 2, 3 pack as 3 slots, 2 runs) are one compiled program
    cfg = tiny(init="normal", optimizer="gd", heads=(1, 2, 3), loss="exp")
    grid = run_grid(cfg, lrs=[0.2, 0.6], init_scales=[0.5, 1.5], progress=False)
    assert len(grid) == 4
    assert all((result.diverged_at == -1).all() for result in grid)  # every curve compared is finite
    for result, (lr, s) in zip(grid, [(0.2, 0.5), (0.2, 1.5), (0.6, 0.5), (0.6, 1.5)], strict=True):
        assert result.config.optim.lr == lr and result.config.model.init_scale == s
        one = dataclasses.replace(
            cfg,
            optim=dataclasses.replace(cfg.optim, lr=lr),
            model=dataclasses.replace(cfg.model, init_scale=s),
        )
        assert_same(result, run_sweep(one, progress=False), rtol=1e-5, atol=1e-6)
    assert not np.allclose(grid[0].curves["train_loss"], grid[3].curves["train_loss"])


@pytest.mark.slow
def test_on_point_and_skip_heads_resume_to_the_same_numbers():
    cfg = tiny(init="normal", heads=(1, 2, 4))
    seen = []
    full = run_sweep(cfg, progress=False, on_point=lambda hs, m, d: seen.append((list(hs), m, d)))
    assert sorted(h for hs, _, _ in seen for h in hs) == [1, 2, 4]  # H values, not positions
    for hs, metrics, div in seen:
        assert div.shape == (len(hs), 2)
        at = [list(full.heads).index(h) for h in hs]
        for name in engine.METRICS:
            assert metrics[name].shape == (len(hs), 2, len(full.steps))
            np.testing.assert_array_equal(metrics[name], full.curves[name][at])
    done = {h: ({k: m[k][j] for k in m}, d[j]) for hs, m, d in seen for j, h in enumerate(hs)}
    ran = []
    resumed = run_sweep(cfg, progress=False, skip_heads={1: done[1]}, on_point=lambda hs, *_: ran.extend(hs))
    assert sorted(ran) == [2, 4]  # H = 2 and 4 ran, H = 2 in its pack with H = 1 as before
    assert_same(full, resumed)
    assert_same(full, run_sweep(cfg, progress=False, skip_heads={1: done[1], 4: done[4]}))
    with pytest.raises(ValueError, match="H=3"):
        run_sweep(cfg, progress=False, skip_heads={3: done[1]})
    with pytest.raises(ValueError, match="shape"):
        short = {k: v[:, :2] for k, v in done[1][0].items()}
        run_sweep(cfg, progress=False, skip_heads={1: (short, done[1][1])})


SHARD_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    sys.path.insert(0, "tests")
    from test_scale import tiny
    from dynamics.sweeps.sweep import run_sweep
    out = {}
    for init in ("zero", "normal"):
        cfg = tiny(init=init)
        for n in (1, 2, 8):
            r = run_sweep(cfg, progress=False, devices=jax.devices()[:n])
            out[f"{init}-{n}"] = {k: v.tolist() for k, v in r.curves.items()}
    out["devices"] = jax.device_count()
    json.dump(out, open(sys.argv[1], "w"))
    """
)


@pytest.mark.stress  # long: `make stress` and CI run it
def test_sharded_over_8_devices_equals_unsharded(tmp_path):
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip()
    env = child_env(XLA_FLAGS=flags)
    path = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, "-c", SHARD_SCRIPT, str(path)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(path.read_text())
    assert got["devices"] == 8
    for init in ("zero", "normal"):
        here = run_sweep(tiny(init=init), progress=False)  # this process: one device, no sharding
        for name in engine.METRICS:
            one, two, eight = (np.array(got[f"{init}-{n}"][name], dtype=float) for n in (1, 2, 8))
            # Any number >= 2 of devices runs the same partitioned program: bit for bit.
            np.testing.assert_array_equal(two, eight, err_msg=name)
            np.testing.assert_array_equal(one, here.curves[name], err_msg=name)
            # One device compiles unpartitioned (another XLA pass order): equal to float32 rounding.
            np.testing.assert_allclose(one, eight, rtol=2e-6, atol=1e-6, err_msg=name)


@pytest.mark.slow_cases("adam")
@pytest.mark.parametrize("optimizer", ["gd", "adam"])
def test_x64_engine_matches_float64_loop(optimizer):
    cfg = tiny(init="normal", optimizer=optimizer, heads=(3,), head_metrics="off")  # train_loss only
    k_data, k_init = rng.split(rng.seed(cfg.sweep.seed))  # numpy: jax.random's keys, no eager compiles
    data, _ = make_data(cfg.data, k_data, cfg.sweep.trials)  # float32 draws, as without x64
    with jax.enable_x64(True):
        result = run_sweep(cfg, progress=False)
        d = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64)[1], data)  # numpy: no compile
        # the init and the optimiser's state jitted: one compile each instead of op-by-op dispatch
        init = jax.jit(inits.init_params, static_argnums=(1, 2), static_argnames=("init",))
        p = init(rng.fold_in(k_init, 1), 3, 8, init="normal")
        opt = update.make_optimizer(optimizer, cfg.optim.lr)
        state = jax.jit(opt.init)(p)

        def objective(p):
            return losses.mean_loss(d.y_train * model.logits(p, d.X_train), losses.Loss.LOGISTIC)

        @jax.jit  # one compiled step instead of op-by-op dispatch; the loop stays in Python
        def step(p, state):
            loss, g = jax.value_and_grad(objective)(p)
            u, state = opt.update(g, state, p)
            return loss, jax.tree_util.tree_map(lambda a, b: a + b, p, u), state

        want = []
        for i in range(cfg.optim.steps + 1):
            loss, p, state = step(p, state)
            if i % 4 == 0:
                want.append(float(loss))
    np.testing.assert_allclose(result.curves["train_loss"][0, 1], want, rtol=1e-12)


def test_device_flag(tmp_path, capsys):
    assert devices.select_devices("cpu") == jax.devices("cpu")
    if not any(d.platform == "gpu" for d in jax.devices()):
        args = ["--device", "gpu", "--heads", "1", "--steps", "2", "--quiet", "--out", str(tmp_path / "o")]
        code = cli.main(args)
        assert code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "no GPU" in err[0]
        assert not (tmp_path / "o").exists()
    with pytest.raises(ValueError, match="device='tpu'"):
        devices.select_devices("tpu")


@pytest.mark.slow
def test_two_processes_with_jax_distributed_equal_two_devices(tmp_path):
    """--distributed: two processes (one CPU device each, gloo) give the 2-device numbers."""
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    args = [sys.executable, "-m", "dynamics.run", "--device", "cpu", "--quiet", "--no-figure"]
    args += ["--heads", "1,3", "--steps", "6", "--trials", "2", "--n-train", "16", "--n-test", "20"]
    base = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    base = child_env(base)
    procs = [
        subprocess.Popen(
            [*args, "--distributed", "--out", str(tmp_path / f"p{i}")],
            cwd=tmp_path,
            env={
                **base,
                "JAX_COORDINATOR_ADDRESS": f"localhost:{port}",
                "JAX_NUM_PROCESSES": "2",
                "JAX_PROCESS_ID": str(i),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    assert not (tmp_path / "p1").exists()  # only process 0 writes
    two = {**base, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    proc = subprocess.run([*args, "--out", str(tmp_path / "one")], cwd=tmp_path, env=two, capture_output=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with np.load(tmp_path / "p0" / "curves.npz") as a, np.load(tmp_path / "one" / "curves.npz") as b:
        for name in engine.METRICS:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
