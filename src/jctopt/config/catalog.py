"""The catalogs under conf/ (one YAML per GPU, fabric, model ...) and composing a config from them."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from .errors import ConfigError
from .resources import CONF_DIR
from .schema import FabricConf, GPUConf, ModelConf, register_configs


def as_dict(value: Any) -> dict:
    """A mapping-valued setting (DictConfig, dict or None) as a plain dict."""
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else dict(value or {})


def catalog_names(group: str) -> list[str]:
    """The entries of a catalog group (``conf/<group>/*.yaml``), sorted."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def load_option(group: str, name: str) -> DictConfig:
    """One catalog entry, e.g. ``load_option("gpu", "b200")`` or ``("model", "deepseek_v3")``, typed by its schema."""
    schema = {"gpu": GPUConf, "fabric": FabricConf, "model": ModelConf}[group]
    # Looked up among the catalog's names, never built into a path: any string (a long or
    # odd cell of a runs file) is either a catalog entry or a ConfigError.
    options = catalog_names(group)
    if name not in options:
        shown = name if len(str(name)) <= 60 else f"{str(name)[:57]}..."
        raise ConfigError(f"{group}={shown!r} is not allowed: one of {', '.join(options)}")
    return OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.load(CONF_DIR / group / f"{name}.yaml"))


def compose(overrides: list[str] | None = None) -> DictConfig:
    """Compose the app config from ``conf/`` (for Python users and tests)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides or []))
