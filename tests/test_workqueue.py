"""A grid spread over several processes (``dynamics.sweeps.workqueue``): the merged result of two
processes equals one process's grid bit for bit, a call whose process died is run again, and a
claim is taken over only when its process is gone (or with ``reclaim`` when it predates the run)."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from dynamics.errors import ConfigError
from dynamics.sweeps.workqueue import HOST, WorkQueue
from tests.helpers import child_env, cli_error

# A tiny grid of 2 data groups (noise) × 2 step sizes × H ∈ {1, 2} × 2 trials: 8 compiled calls with
# two CPU devices (one pack of a zero-init run per call). MODE: "one" runs it alone
# (run_grid_checkpointed), "queue" through the work queue, "die" through the queue but exits (as a
# killed process would) after claiming its second call, before writing it.
CHILD = """
import os, sys
from dynamics.config.grid_axes import resolve_grid
from dynamics.config.schema import Config, apply_overrides
from dynamics.sweeps import workqueue
from dynamics.sweeps.grid_runner import run_grid_checkpointed

mode, out = sys.argv[1], sys.argv[2]
tiny = {"data": {"n_train": 12, "n_test": 8, "T": 4, "d": 8}, "optim": {"steps": 6},
        "sweep": {"heads": (1, 2), "trials": 2, "log_every": 2}}
grid = resolve_grid(apply_overrides(Config(name="g"), tiny, "test"), {"noise": [0.5, 1.5], "lr": [0.5, 1.0]})
if mode == "one":
    run_grid_checkpointed(grid, out, progress=False)
    sys.exit(0)
if mode == "die":
    claim = workqueue.WorkQueue.claim
    held = []
    def dying(self, unit):
        if claim(self, unit) and unit != "merge":
            held.append(unit)
            if len(held) == 2:
                os._exit(3)
            return True
        return False
    workqueue.WorkQueue.claim = dying
result = workqueue.run_grid_shared(grid, out, progress=False)
print("merged" if result is not None else "left", flush=True)
"""


def _start(mode: str, out) -> subprocess.Popen:
    env = child_env(XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2")
    cmd = [sys.executable, "-c", CHILD, mode, str(out)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait(proc: subprocess.Popen) -> tuple[int, str]:
    stdout, stderr = proc.communicate(timeout=300)
    return proc.returncode, stdout + stderr


def _assert_same_arrays(a, b) -> None:
    with np.load(a / "curves.npz") as x, np.load(b / "curves.npz") as y:
        assert sorted(x.files) == sorted(y.files)
        for name in x.files:
            np.testing.assert_array_equal(x[name], y[name], err_msg=name)  # NaN == NaN, bit for bit


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    out = tmp_path_factory.mktemp("alone")
    rc, text = _wait(_start("one", out))
    assert rc == 0, text
    return out


@pytest.mark.slow
def test_two_processes_merge_to_the_one_process_grid_bit_for_bit(alone, tmp_path):
    out = tmp_path / "shared"
    procs = [_start("queue", out), _start("queue", out)]
    done = [_wait(p) for p in procs]
    assert all(rc == 0 for rc, _ in done), done
    said = sorted(text.split()[-1] for _, text in done)
    assert said == ["left", "merged"], said  # one process merged, the other left it
    _assert_same_arrays(alone, out)
    meta = json.loads((out / "results.json").read_text())
    assert (
        meta["complete"] is True
        and meta["config_hash"] == json.loads((alone / "results.json").read_text())["config_hash"]
    )
    assert 1 <= meta["calls_run"] <= 8  # the merger's own share of the 8 calls
    assert not (out / "queue").exists()


@pytest.mark.slow
def test_a_process_that_dies_mid_call_leaves_its_call_to_the_next(alone, tmp_path):
    out = tmp_path / "shared"
    rc, text = _wait(_start("die", out))
    assert rc == 3, text
    claims = sorted(p.name for p in (out / "queue").glob("*.claim*"))
    written = sorted(p.name for p in (out / "queue").glob("g*-c*.npz"))
    assert len(claims) == 2 and len(written) == 1  # its second call claimed, never written
    rc, text = _wait(_start("queue", out))  # same host, its pid gone: the claim is stale
    assert rc == 0 and text.split()[-1] == "merged", text
    _assert_same_arrays(alone, out)


def _claim_of(queue: WorkQueue, unit: str, **info) -> None:
    (queue.root / f"{unit}.claim0").write_text(json.dumps(info))


def test_a_claim_is_taken_over_only_when_its_process_is_gone(tmp_path):
    queue = WorkQueue(tmp_path / "queue", "h1")
    assert queue.claim("a") and not queue.claim("a")  # our own live claim stays ours
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: its pid no longer runs
    _claim_of(queue, "b", host=HOST, pid=dead.pid, time=time.time())
    _claim_of(queue, "c", host=HOST, pid=os.getppid(), time=time.time())  # alive
    _claim_of(queue, "d", host="elsewhere", pid=dead.pid, time=time.time() - 60)
    assert queue.claim("b") and (queue.root / "b.claim1").exists()
    assert not queue.claim("b")  # the new claim is ours and alive
    assert not queue.claim("c")
    assert not queue.claim("d")  # another host's: its process cannot be checked
    later = WorkQueue(tmp_path / "queue", "h1", reclaim=True)  # a rerun after a crash elsewhere
    assert later.claim("d")
    _claim_of(later, "e", host="elsewhere", pid=1, time=time.time() + 60)
    assert not later.claim("e")  # made after the rerun started: a live process's


def test_a_done_call_is_never_claimed_and_another_grids_queue_is_refused(tmp_path):
    queue = WorkQueue(tmp_path / "queue", "h1")
    queue.write("g0-c0", [(0, 0)], {"train_loss": np.zeros((1, 2, 3))}, np.full((1, 2), -1))
    assert not queue.claim("g0-c0")
    items, metrics, div = queue.read("g0-c0")
    assert items == [(0, 0)] and metrics["train_loss"].shape == (1, 2, 3) and div.shape == (1, 2)
    with pytest.raises(ConfigError, match="work queue of another grid"):
        WorkQueue(tmp_path / "queue", "h2")
    with pytest.raises(ConfigError, match=r"run on , this one on cpu:cpu x4: .* give every process the same"):
        WorkQueue(tmp_path / "queue", "h1", devices="cpu:cpu x4")


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--heads", "1", "--work-queue"], "--work-queue spreads a grid's points"),
        (["--lr", "1,2", "--work-queue", "--distributed"], "exclude each other"),
        (["--heads", "1", "--reclaim"], "--reclaim applies to --work-queue"),
        (["--lr", "1,2", "--work-queue", "--diagnostics", "sharpness"], "computed per grid point"),
        (["--lr", "1,2", "--work-queue", "--checkpoint-every", "10"], "--checkpoint-every does not apply"),
    ],
)
def test_the_command_line_refuses_a_work_queue_it_cannot_run_in_one_line(argv, said, capsys, tmp_path):
    assert said in cli_error(argv, capsys, tmp_path)
