"""``ConfigError``: the one error type of a bad setting, shared by every layer (no imports)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad configuration value; the message names the field. Always one line: a newline
    inside a quoted value (a TOML key, a path) is shown escaped."""

    def __init__(self, message: object = ""):
        super().__init__(str(message).replace("\r", "\\r").replace("\n", "\\n"))
