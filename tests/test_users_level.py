"""The suite compiles at XLA:CPU's backend optimisation level 0 (conftest.py: the compiles take about
half as long); users run the default level. These tests run again, in a fresh interpreter at the
default level, the tests whose property could depend on the code LLVM generates: the numbers
stored from the default level (bit for bit there), the bit-identity properties (zero-init heads
equal to the last bit, packed equals alone, resume equals the whole run, the same seed the same
numbers) and the engine against its plain loop and its float64 references.
``MHSIM_TEST_XLA=default pytest`` runs the whole suite at the default level.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import LEVEL_FLAG, USERS_LEVEL, at_users_level, child_env

ROOT = Path(__file__).resolve().parents[1]
HERE = "tests/test_users_level.py::test_the_session_knows_its_level"
QUICK_CASES = [  # their quick cases (-m "not stress and not slow")
    HERE,
    "tests/test_rng.py::test_make_data_draws_the_reference_arrays_bit_for_bit",
    "tests/test_engine.py::test_engine_matches_plain_loop",
    "tests/test_engine.py::test_zero_init_heads_stay_identical_to_the_last_bit",
    "tests/test_engine.py::test_same_seed_same_numbers_and_seed_matters",
    "tests/test_scale.py::test_on_point_and_skip_heads_resume_to_the_same_numbers",
    "tests/test_properties.py::test_a_run_in_a_pack_gives_the_numbers_of_the_run_alone",
    "tests/test_properties.py::test_the_fast_path_gives_the_full_paths_numbers",
    "tests/test_properties.py::test_every_part_with_every_optimiser_trains_as_the_float64_reference",
    "tests/test_saturation.py::test_normalised_gd_follows_the_reference_where_the_softmax_saturates",
]
SLOW_DRAWS = [HERE, "tests/test_datamodels.py::test_generators_draw_the_reference_arrays_bit_for_bit"]


def test_the_session_knows_its_level():
    # what helpers.assert_users_numbers rests on: level 0 (conftest.py) unless MHSIM_TEST_XLA=default
    flags = os.environ.get("XLA_FLAGS", "").split()
    if os.environ.get("MHSIM_TEST_XLA") == "default":
        assert USERS_LEVEL and not any(f.startswith(LEVEL_FLAG) for f in flags)
    else:
        assert not USERS_LEVEL and f"{LEVEL_FLAG}=0" in flags


@pytest.mark.stress
@pytest.mark.parametrize(
    ("marks", "tests"),
    [("not stress and not slow", QUICK_CASES), ("slow or not slow", SLOW_DRAWS)],
    ids=["quick-cases", "slow-draws"],
)
def test_the_level_dependent_tests_pass_at_the_users_level(marks, tests):
    # a fresh pytest at the users' level (the first test it runs checks that it is)
    args = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-m", marks, *tests]
    proc = subprocess.run(args, cwd=ROOT, env=at_users_level(child_env()), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = proc.stdout.strip().splitlines()[-1]  # -m leaves out the other tier's cases
    assert " passed" in summary and "skipped" not in summary, summary
