"""vgpud's configuration file (TOML): one package, a room per concern.

- ``schema``: the typed, frozen shapes a parsed file becomes (``Config``
  and its tables, ``SliceSpec``, ``Limits``, ``Window``...), their bounds,
  ``ConfigError`` and the precedence of a slice's settings (explicit >
  profile or schedule window > [defaults]);
- ``parse``: ``load_config`` / ``parse_config``, every error message about
  the file (docs/config.md, config/vgpud.example.toml);
- ``diff``: ``describe_changes``, what a reload changed.

Standard library only.  The names below are the package's interface
(``from vgpu.daemon.config import parse_config, SliceSpec``).
"""
from vgpu.common.values import POLICIES, PRIORITIES
from vgpu.daemon.config.diff import RESTART_KEYS, describe_changes
from vgpu.daemon.config.parse import load_config, parse_config
from vgpu.daemon.config.schema import (DAYS, DEFAULT_CONFIG_PATH, AuditSpec, Config, ConfigError,
                                       ForecastSpec, History, Kubernetes, Limits, Node, Paths,
                                       SliceSpec, Window)

__all__ = [
    "DEFAULT_CONFIG_PATH", "ConfigError", "Config", "Paths", "Node", "SliceSpec", "Limits",
    "AuditSpec", "Window", "Kubernetes", "History", "ForecastSpec", "load_config",
    "parse_config", "describe_changes", "RESTART_KEYS", "DAYS", "PRIORITIES", "POLICIES",
]
