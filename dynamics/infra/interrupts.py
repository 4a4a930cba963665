"""Ctrl-C and SIGTERM end every command with one line on stderr and exit code 130.

The handler (SIGINT and SIGTERM alike) prints the command's one line and ends the process
at once with ``os._exit(130)``:

- *Before the command's code runs* (``early``, installed by the ``dynamics`` and ``figures``
  packages when Python starts them with ``-m``) the line says that nothing was written.
- *While the command runs* (``command``) the line is the command's own (what it kept, how to
  resume). Inside ``shielded()`` (writing result files) the signal is held until the block
  ends, so a results.json and its curves.npz are always written as a pair.

A Python signal handler runs only when the main thread executes Python, not while it waits
in a long compiled XLA call (a 3·10⁶-step run ignored Ctrl-C for its whole minute). So the
signal also wakes a watcher thread (``signal.set_wakeup_fd``: CPython's C-level handler
writes the signal number to a pipe at once), which ends the process the same way; the
shield's state is read under one lock by both.

Why exit from the handler rather than raise ``KeyboardInterrupt``: a handler runs at the
next bytecode of the main thread, which may be inside a garbage-collector or weakref
callback of JAX, where Python prints "Exception ignored" and drops the exception (the run
then went on to the end, exit 0); and an orderly interpreter teardown while XLA's threads
still ran a compiled call (async dispatch) is what segfaulted. Every file is written
atomically (``files.atomic_write_bytes``) and every results pair under the shield, so
ending the process at any other moment loses nothing that was finished. A
``KeyboardInterrupt`` raised some other way is still caught by ``command`` (same line, 130).
This module imports no JAX.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_CODE = 130

_state = {"shield": 0, "pending": False, "fired": False, "message": None, "active": False}
_lock = threading.RLock()  # the shield's state, shared by the main thread and the watcher
_watcher: dict[str, int] = {}  # the pipe's read end, once the watcher thread runs


def _leave(message: str) -> None:
    """Print one line and end the process now, without the interpreter's teardown."""
    if not _leaving.acquire(blocking=False):  # the main thread and the watcher may both come
        return
    try:
        sys.stdout.flush()
    except Exception:  # a closed or broken stdout must not stop the exit
        pass
    try:
        line = message.replace("\n", " ") + "\n"
        os.write(2, (("\n" if _bar_on_screen() else "") + line).encode(errors="replace"))
    finally:
        os._exit(EXIT_CODE)


def _bar_on_screen() -> bool:
    """A tqdm progress bar is open: its line has no newline yet, so the message starts a new one."""
    std = sys.modules.get("tqdm.std")  # never imported here: only looked at if the command did
    try:
        return bool(std and len(std.tqdm._instances))
    except Exception:  # tqdm's internals changed: one line may follow the bar, nothing worse
        return False


_leaving = threading.Lock()


def _nothing_written() -> str:
    return "interrupted before the command started: nothing was written"


def _handler(signum, frame) -> None:
    with _lock:
        if not _state["active"]:
            return
        _state["fired"] = True
        if _state["shield"]:
            _state["pending"] = True  # honoured when the write in progress is done
            return
    _leave_with_message()


def _watch(read_fd: int) -> None:
    """The watcher thread: a byte on the wakeup pipe is a signal, even while Python waits in C."""
    while True:
        try:
            if not os.read(read_fd, 1):
                return
        except OSError:
            return
        _handler(None, None)


def _arm() -> None:
    """Start the watcher thread and point the wakeup fd at its pipe (once per process)."""
    if _watcher or threading.current_thread() is not threading.main_thread():
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    _watcher["read"] = read_fd
    threading.Thread(target=_watch, args=(read_fd,), name="mhsim-interrupts", daemon=True).start()


def _leave_with_message() -> None:
    try:
        text = _state["message"]()
    except Exception:
        text = "interrupted"
    _leave(text)


def _install(handler) -> None:
    for sig in SIGNALS:
        _install_one(sig, handler)


def _install_one(sig, handler) -> None:
    if threading.current_thread() is threading.main_thread():  # signal.signal's own rule
        signal.signal(sig, handler)


def early() -> None:
    """An interrupt before the command's code runs exits 130 with one line."""
    _state.update(message=_nothing_written, active=True)
    _install(_handler)
    _arm()


@contextmanager
def shielded():
    """Hold SIGINT/SIGTERM while the block runs (a write of result files); exit 130 after it."""
    with _lock:
        _state["shield"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["shield"] -= 1
            leave = not _state["shield"] and _state["pending"]
        if leave:
            _leave_with_message()


def command(main: Callable[[], int], message: Callable[[], str]) -> int:
    """Run ``main()`` with the handler; on a signal print ``message()`` and exit 130.

    Any other outcome (a return code, ``SystemExit``, an error) is passed on unchanged.
    """
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    saved = _state["message"], _state["active"]
    with _lock:
        _state.update(shield=0, pending=False, fired=False, message=message, active=True)
    _install(_handler)
    _arm()
    try:
        return main()
    except KeyboardInterrupt:  # raised by other code than our handler: the same ending
        _leave_with_message()
        raise
    finally:
        with _lock:
            _state["message"], _state["active"] = saved  # in a library caller: inactive again
        if previous[signal.SIGINT] is not None:
            for sig, handler in previous.items():
                _install_one(sig, handler)


def finish(code: int) -> None:
    """``sys.exit(code)`` for a command's ``__main__``: a signal from here on, after the command
    has finished, is ignored rather than shown as a traceback."""
    _state["active"] = False
    _install(signal.SIG_IGN)
    sys.exit(code)
