"""Fuzz (hypothesis, small budgets): hostile TOML files, .npz files and command lines end in a
result or one error line, never another exception, and never touch the disk while failing.

The same properties run with big budgets, and as real subprocess runs, in tests/test_stress.py.
"""

import fuzzing
from hypothesis import HealthCheck, given, settings

FAST = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


@FAST
@given(fuzzing.toml_documents())
def test_fuzz_toml_files(tmp_path_factory, text):
    fuzzing.check_toml(tmp_path_factory.mktemp("toml"), text)


@FAST
@given(fuzzing.npz_files())
def test_fuzz_npz_files(tmp_path_factory, payload):
    fuzzing.check_npz(tmp_path_factory.mktemp("npz"), payload)


@FAST
@given(fuzzing.command_lines())
def test_fuzz_command_lines(tmp_path_factory, argv):
    fuzzing.check_command_line(tmp_path_factory.mktemp("argv"), argv)
