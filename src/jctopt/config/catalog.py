"""The catalogs under conf/ (one YAML per GPU, fabric, model ...) and composing a config from them.

A catalog entry is looked up in the user's config directory first (``resources.user_config_dir``,
``$XDG_CONFIG_HOME/jctopt``), then in the package's ``conf/``: by ``load_option`` here and by
Hydra, whose search path gets the user's directory ahead of the package's (``use_user_configs``).
"""

from __future__ import annotations

import contextlib
from typing import Any

from hydra.core.config_search_path import ConfigSearchPath, SearchPathQuery
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import DictConfig, OmegaConf

from .errors import ConfigError
from .resources import CONF_DIR, conf_file, user_config_dir
from .schema import FabricConf, GPUConf, ModelConf, register_configs

SCHEMAS = {"gpu": GPUConf, "fabric": FabricConf, "model": ModelConf}  # groups load_option types
# Values load_option lays over the files while ``values_in_force`` holds: {(group, name): {key: value}}.
_IN_FORCE: dict[tuple[str, str], dict] = {}


def as_dict(value: Any) -> dict:
    """A mapping-valued setting (DictConfig, dict or None) as a plain dict."""
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else dict(value or {})


def catalog_names(group: str) -> list[str]:
    """The entries of a catalog group (``<group>/*.yaml`` of the user's config directory and
    of the package's ``conf/``), sorted."""
    return sorted({p.stem for d in (user_config_dir(), CONF_DIR) for p in (d / group).glob("*.yaml")})


def load_option(group: str, name: str) -> DictConfig:
    """One catalog entry, e.g. ``load_option("gpu", "b200")`` or ``("model", "deepseek_v3")``,
    typed by its schema where the group has one (gpu, fabric, model). The user's
    ``<group>/<name>.yaml`` (``resources.user_config_dir``) where there is one, else the
    package's: the file Hydra would compose for ``group=name``."""
    # Looked up among the catalog's names, never built into a path: any string (a long or
    # odd cell of a runs file) is either a catalog entry or a ConfigError.
    options = catalog_names(group)
    if name not in options:
        shown = name if len(str(name)) <= 60 else f"{str(name)[:57]}..."
        raise ConfigError(f"{group}={shown!r} is not allowed: one of {', '.join(options)}")
    entry = OmegaConf.load(conf_file(group, name))
    if (group, name) in _IN_FORCE:
        entry = OmegaConf.merge(entry, _IN_FORCE[group, name])
    return OmegaConf.merge(OmegaConf.structured(SCHEMAS[group]), entry) if group in SCHEMAS else entry


@contextlib.contextmanager
def values_in_force(values: dict[str, dict[str, dict]]):
    """Inside: ``load_option(group, name)`` returns its file with ``values[group][name]``
    (``{key: value}``) laid over it. For values about to be written (``calibrate.apply``) that a
    later step must already see, before any file is written."""
    before = dict(_IN_FORCE)
    _IN_FORCE.update({(g, n): dict(v) for g, entries in values.items() for n, v in entries.items()})
    try:
        yield
    finally:
        _IN_FORCE.clear()
        _IN_FORCE.update(before)


class UserConfigSearchPath(SearchPathPlugin):
    """Hydra finds the user's config directory (``resources.user_config_dir``) ahead of the
    package's ``conf/``: ``gpu=NAME``, ``stack=NAME`` ... take the user's ``gpu/NAME.yaml``
    where there is one (a calibrated GPU, a user's stack), else the shipped one. A directory
    that does not exist is skipped."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.prepend("jctopt-user", f"file://{user_config_dir()}", anchor=SearchPathQuery(provider="main"))


def use_user_configs() -> None:
    """Register ``UserConfigSearchPath`` with Hydra (once; before composing): ``app.main``
    and ``compose`` call it."""
    from hydra.core.plugins import Plugins

    plugins = Plugins.instance()
    if UserConfigSearchPath not in plugins.discover(SearchPathPlugin):
        plugins.register(UserConfigSearchPath)


def compose(overrides: list[str] | None = None) -> DictConfig:
    """Compose the app config from ``conf/`` and the user's config directory ahead of it
    (``use_user_configs``), for Python users and tests."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_configs()
    use_user_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides or []))
