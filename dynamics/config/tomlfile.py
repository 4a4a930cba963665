"""Config files: TOML with the tables [data] [model] [optim] [sweep], optionally a preset under them."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from dynamics.config.overrides import apply_overrides
from dynamics.config.presets import OWN_RUNNERS, preset
from dynamics.config.sections import Config
from dynamics.errors import ConfigError


def load_toml(path: str | Path, base: Config | None = None) -> Config:
    """A TOML file of sections [data] [model] [optim] [sweep], optionally ``preset = "fig2"`` on top."""
    doc, name = read_toml(path)
    if name is not None:
        base = preset(name)
    return apply_overrides(base or Config(), doc, f"config {Path(path).name}")


def read_toml(path: str | Path) -> tuple[dict[str, Any], str | None]:
    """A config file's tables and its ``preset`` name (None if it names none), read with the size,
    folder and empty-path checks; a bottleneck preset is refused (it runs its own experiment)."""
    path = Path(path)
    doc = tomllib.loads(_read_toml_text(path))
    if "preset" not in doc:
        return doc, None
    name = str(doc.pop("preset"))
    if name in OWN_RUNNERS:
        raise ConfigError(
            f"config file {str(path)!r}: preset {name!r} runs its own experiment; "
            f"give it on the command line: --preset {name}"
        )
    return doc, name


MAX_TOML_BYTES = 1 << 20  # a config is a few hundred bytes; more is not a config file


def _read_toml_text(path: Path) -> str:
    """The text of a TOML config file, read at most MAX_TOML_BYTES (``/dev/zero`` is refused)."""
    if not str(path).strip():
        raise ConfigError("--config '' is empty: give the path of a TOML file")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TOML_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {str(path)!r} is a folder, not a TOML file") from None
    except OSError as err:
        raise ConfigError(f"config file {str(path)!r} cannot be read: {err.strerror or err}") from None
    if len(raw) > MAX_TOML_BYTES:
        raise ConfigError(f"config file {str(path)!r} is larger than {MAX_TOML_BYTES} bytes: not a config")
    try:
        text = raw.decode()
        tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {err}") from None
    return text
