""":func:`dump_config`: the merged configuration, secrets masked, as HOCON or JSON."""

from __future__ import annotations

import json

from laredo.secrets import mask_secrets

from .loaded import LoadedConfig

__all__ = ["dump_config"]


def dump_config(loaded: LoadedConfig, fmt: str = "hocon") -> str:
    """The merged configuration with secrets masked (:func:`laredo.secrets.mask_secrets`), as
    HOCON (default) or JSON."""
    masked = mask_secrets(loaded.tree)
    if fmt == "json":
        return json.dumps(masked, indent=2, default=str)
    from pyhocon import ConfigFactory, HOCONConverter  # noqa: PLC0415 - lazy: pyhocon takes ~0.4 s

    return str(HOCONConverter.to_hocon(ConfigFactory.from_dict(masked)))
