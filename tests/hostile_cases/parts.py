"""User parts (``"tests.hostile_cases.parts:NAME"``) that a hostile user names: one that raises
when called, one that is not callable, one that returns nothing."""

from __future__ import annotations

NOT_CALLABLE = 3.5  # a number where a part's function is expected


def raises(*args, **kwargs):
    """Any part's function that fails whenever it is called."""
    raise RuntimeError("a user part that always raises")


def returns_none(*args, **kwargs):
    """Any part's function that returns nothing."""
    return None
