"""The rule that decides a hostile case (written from the documentation, not from the code):

- mhsim refuses: a ``ValueError`` or ``TypeError`` (``ConfigError``, ``DataError`` are
  ``ValueError``s), raised by mhsim's own code (not from inside JAX, numpy or optax: a deep
  error), whose message's first line names the offending value (one of the case's words); or
- mhsim runs, and the numbers it returns equal one of the case's admissible numpy
  interpretations (none for a value nothing can simulate: running then fails the case).
"""

from __future__ import annotations

import os
import re
import traceback

import numpy as np

DEEP = ("/jax/", "/jaxlib/", "/numpy/", "/optax/", "/scipy/", "/zipfile", "/json/")


class Accepted(AssertionError):
    pass


def refusal(exc: BaseException, words) -> str:
    """'' when ``exc`` is a clear refusal naming one of ``words``, else why not."""
    if not isinstance(exc, (ValueError, TypeError)):
        return f"{type(exc).__name__} is not a documented refusal type: {exc}"
    frames = traceback.extract_tb(exc.__traceback__)
    if frames and any(part in frames[-1].filename for part in DEEP):
        return f"raised deep inside {frames[-1].filename}: {type(exc).__name__}: {str(exc)[:300]}"
    msg = str(exc).strip()
    if not msg:
        return "empty message"
    first = msg.splitlines()[0]
    words = [str(w) for w in words if str(w)]
    if words and not any(
        re.search(rf"(?<![A-Za-z0-9_]){re.escape(str(w))}(?![A-Za-z0-9_])", first, re.I) for w in words
    ):
        return f"message names none of {list(words)}: {first[:300]}"
    return ""


def decide(call, words, check=None):
    """Run ``call``; a refusal naming one of ``words`` passes; a result passes only when
    ``check(result)`` (the numpy comparison) passes; ``check`` None: any result fails."""
    try:
        result = call()
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001 - every exception is judged
        why = refusal(exc, words)
        if why:
            raise AssertionError(why) from exc
        _log(f"{os.environ.get('PYTEST_CURRENT_TEST', '?').split(' ')[0]}\t{type(exc).__name__}: {exc}")
        return "refused"
    if check is None:
        raise Accepted(f"accepted a value nothing can simulate; returned {type(result).__name__}")
    check(result)
    return "matched"


def close(got, want, what, rtol=2e-4, atol=2e-5):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {got.shape} != numpy's {want.shape}")
    if not np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
        raise AssertionError(f"{what}: {got} != numpy's {want}")


def any_of(*checks):
    """A result check that passes when one of the admissible interpretations matches."""

    def check(result):
        errors = []
        for c in checks:
            try:
                c(result)
                return
            except AssertionError as e:
                errors.append(str(e))
        raise AssertionError(" | ".join(errors))

    return check


def _log(line: str) -> None:
    """With HOSTILE_LOG=FILE, each refusal's message is appended there (to review the words)."""
    path = os.environ.get("HOSTILE_LOG")
    if path:
        with open(path, "a") as f:
            f.write(line.replace("\n", " ")[:400] + "\n")
