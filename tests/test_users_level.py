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
from helpers import USERS_LEVEL, at_users_level, child_env

ROOT = Path(__file__).resolve().parents[1]
AT_USERS_LEVEL = [
    "tests/test_rng.py::test_make_data_draws_the_reference_arrays_bit_for_bit",
    "tests/test_datamodels.py::test_generators_draw_the_reference_arrays_bit_for_bit",
    "tests/test_engine.py::test_engine_matches_plain_loop",
    "tests/test_engine.py::test_zero_init_heads_stay_identical_to_the_last_bit",
    "tests/test_engine.py::test_same_seed_same_numbers_and_seed_matters",
    "tests/test_scale.py::test_on_point_and_skip_heads_resume_to_the_same_numbers",
    "tests/test_properties.py::test_a_run_in_a_pack_gives_the_numbers_of_the_run_alone",
    "tests/test_properties.py::test_the_fast_path_gives_the_full_paths_numbers",
    "tests/test_properties.py::test_every_part_with_every_optimiser_trains_as_the_float64_reference",
    "tests/test_saturation.py::test_normalised_gd_follows_the_reference_where_the_softmax_saturates",
]


@pytest.mark.skipif(os.environ.get("MHSIM_TEST_XLA") == "default", reason="the suite is at the users' level")
def test_the_suite_runs_below_the_users_level_and_knows_it():
    # what helpers.assert_users_numbers rests on: conftest.py set level 0 for this process
    assert not USERS_LEVEL
    assert "--xla_backend_optimization_level=0" in os.environ["XLA_FLAGS"].split()


@pytest.mark.stress
@pytest.mark.parametrize(
    ("marks", "tests"),
    [("not stress and not slow", AT_USERS_LEVEL[:1] + AT_USERS_LEVEL[2:]), ("slow", AT_USERS_LEVEL[1:2])],
    ids=["quick-cases", "slow-draws"],
)
def test_the_level_dependent_tests_pass_at_the_users_level(marks, tests):
    env = at_users_level(child_env())
    probe = "from helpers import USERS_LEVEL; print(USERS_LEVEL)"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT / "tests", env=env, capture_output=True, text=True
    )
    assert out.stdout.strip() == "True", out.stderr[-2000:]
    args = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-m", marks, *tests]
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = proc.stdout.strip().splitlines()[-1]  # -m leaves out the other tier's cases
    assert " passed" in summary and "skipped" not in summary, summary
