"""The minimal PyTorch loop of ``benchmarks.ratio`` (``benchmarks.torch_minimal``): the train and
test loss of mhsim's ``--log losses`` run on the same data from the same θ(0), and the FLOP count
the benchmark's rate is computed from. Skipped without torch (the ``bench`` extra)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from benchmarks import loop_inputs, torch_minimal  # noqa: E402
from benchmarks.logging_cost import forward_flops, step_flops  # noqa: E402
from benchmarks.ratio import model_flops  # noqa: E402

SWEEP = (
    "--data-model dm1 --n-train 24 --n-test 40 --optimizer gd --lr 1 --heads 1,3 --trials 2 --steps 25 "
    "--log-every 1 --log losses"
).split()


@pytest.mark.slow  # a sweep's compile
@pytest.mark.parametrize("init", ["zero", "normal"])
def test_the_losses_agree_with_mhsim(init):
    from dynamics.api import run_sweep
    from dynamics.cli.run import build_parser, config_from_args

    argv = [*SWEEP, "--init", init]
    result = run_sweep(config_from_args(build_parser().parse_args(argv)).config, progress=False)
    assert set(result.curves) == {"train_loss", "test_loss"}
    torch.set_num_threads(1)
    ours = torch_minimal.run(loop_inputs.build(argv))
    trained = np.asarray(result.curves["train_loss"])
    assert trained[..., -1].max() < trained[..., 0].min()  # it trained
    for name in ("train_loss", "test_loss"):
        mh = np.asarray(result.curves[name], np.float64)
        got = ours[name].astype(np.float64).reshape(mh.shape)
        np.testing.assert_allclose(got, mh, rtol=1e-5, atol=0, err_msg=name)


def test_the_model_flops_count_every_head_of_every_run():
    """S updates, S + 1 test-set forwards and the last training-set forward, per head, H summed."""
    n, m, T, d, S, heads, trials = 24, 40, 10, 32, 25, (1, 3), 2  # DM1's T and d
    per_head = S * step_flops(n, T, d, 1) + (S + 1) * forward_flops(m, T, d, 1) + forward_flops(n, T, d, 1)
    assert model_flops(SWEEP) == trials * sum(heads) * per_head
