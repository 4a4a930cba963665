"""Normalised GD never takes a silent zero step: a run whose float32 gradient underflows to exactly 0
is reported (``ZeroStepWarning``) naming its first zero update."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from dynamics.sweeps.execute import ZeroStepWarning, warn_zero_steps


def test_warning_names_the_earliest_zero_step_and_its_run():
    steps = np.arange(0, 101, 10)
    first = np.array([101, 57, 101, 33])  # (items × trials): two runs of two trials each
    with pytest.warns(ZeroStepWarning, match=r"2 of 4 runs .* first at update 33 \(H=1, trial 1\)"):
        warn_zero_steps(first, [(1, 0), (0, 0)], (1, 4), 2, steps)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_zero_steps(np.array([101, 101]), [(0, 0)], (1,), 2, steps)  # none: silent


@pytest.mark.stress
def test_float32_prompt_run_that_underflows_is_reported_at_its_first_zero_step():
    """The learned-prompt preset in float32: p stops moving exactly at the update the warning names
    (every logged p from there on is the same, the one before differs); in x64 no warning."""
    from dynamics import run_sweep

    kw = dict(trials=2, progress=False)
    with pytest.warns(ZeroStepWarning) as record:
        res = run_sweep("max-margin-prompt", **kw)
    # the zero-step warning (others may be recorded beside it: a compile cache that another test
    # process evicts at the same moment warns that an entry could not be written)
    message = next(str(w.message) for w in record if issubclass(w.category, ZeroStepWarning))
    first = int(re.search(r"first at update (\d+) \(H=1, trial (\d+)\)", message).group(1))
    trial = int(re.search(r"trial (\d+)\)", message).group(1))
    k = res.curves["param_k"][0, trial, :, 0]  # (L, d)
    steps = np.asarray(res.steps)
    after = k[steps >= first + 1]
    assert np.all(after == after[0]) and not np.array_equal(k[steps <= first][-1], after[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ZeroStepWarning)
        run_sweep("max-margin-prompt", x64=True, **kw)
