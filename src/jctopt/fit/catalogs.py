"""A calibration written into catalogs: the fitted values in every GPU's YAML and in the training
presets, and the record ``calibration.yaml`` beside them, into the user's config directory
(``config.resources.user_config_dir``, the default) or the shipped catalog (``target=package``),
all files or none (``config.resources.write_together``)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ..config import ConfigError
from ..config.resources import (
    CONF_DIR,
    calibration_record,
    conf_file,
    package_unwritable,
    user_config_dir,
    why_unwritable,
    write_together,
)

TRAINING_PRESETS = ("megatron", "modern")
TARGETS = ("user", "package")  # calibrate.target


def set_values(text: str, values: dict, note: str, spec: dict, where: Path) -> str:
    """``text`` of a catalog YAML file with its ``key: value`` lines replaced, its other lines
    kept; the spec value the calibration started from stays in the comment."""
    for key, value in values.items():
        pattern = re.compile(rf"^{key}:[ \t]*([^#\n]*?)[ \t]*(#[^\n]*)?$", re.MULTILINE)
        match = pattern.search(text)
        if match is None:
            raise ConfigError(f"{where}: no line `{key}: ...` to calibrate")
        comment = re.sub(r"^#\s*(calibrated[^;]*;\s*)?((was|spec) [^;\s]+(;\s*|$))*", "", match.group(2) or "")
        line = f"{key}: {value:.4g}".ljust(29) + f"# {note}; spec {spec[key]:.4g}; {comment}".rstrip("; ")
        text = text[:match.start()] + line + text[match.end():]
    return text


def target_dir(cfg: DictConfig) -> Path | None:
    """Where ``calibrate.apply=true`` writes: the user's config directory (``calibrate.target=user``)
    or the shipped catalog (``package``); None without apply. Checked before any fit: a target
    that cannot be written, or a package that is installed, is a ConfigError."""
    target = cfg.calibrate.get("target", "user")
    if target not in TARGETS:
        raise ConfigError(f"calibrate.target={target!r} is not allowed: {' | '.join(TARGETS)}")
    if not cfg.calibrate.apply:
        return None
    if target == "package":
        problem = package_unwritable()
        if problem:
            raise ConfigError(f"calibrate.target='package' is not allowed: {problem}; calibrate.target=user writes "
                              f"the calibration into {user_config_dir()}")
        return CONF_DIR
    problem = why_unwritable(user_config_dir())
    if problem:
        raise ConfigError(f"calibrate.apply=true: cannot write into {user_config_dir()} ({problem}); set "
                          "XDG_CONFIG_HOME to a writable directory")
    return user_config_dir()


def catalog_files(doc: dict, conf_dir: Path) -> dict[Path, str]:
    """{path: text} of a calibration's files under ``conf_dir`` (the user's config directory or
    the package's conf/): every GPU's YAML and every training preset with the fitted values
    (and the fitted MoE launch floor where ``doc`` has one), each from the file in force
    (``resources.conf_file``; the package's own for the package), and the record
    ``calibration.yaml`` (``record_text``)."""
    record = conf_dir / "calibration.yaml"
    shown = "conf/calibration.yaml" if conf_dir == CONF_DIR else str(record)
    note = f"calibrated {doc['calibration']['date']} ({shown})"

    def source(group, name):
        return CONF_DIR / group / f"{name}.yaml" if conf_dir == CONF_DIR else conf_file(group, name)

    files = {}
    for name, values in doc["gpu"].items():
        path = source("gpu", name)
        files[conf_dir / "gpu" / f"{name}.yaml"] = set_values(
            path.read_text(), {k: v for k, v in values.items() if k != "from"}, note, doc["spec"]["gpu"][name], path)
    for preset in TRAINING_PRESETS:
        path = source("training", preset)
        text = set_values(path.read_text(), doc["training"], note, doc["spec"]["training"], path)
        if doc.get("moe_host", {}).get("fitted_now"):
            text = set_values(text, {"moe_host_s": doc["moe_host"]["moe_host_s"]},
                              f"calibrated {doc['calibration']['date']} ({shown}, moe_host)", {"moe_host_s": 0.0}, path)
        files[conf_dir / "training" / f"{preset}.yaml"] = text
    files[record] = record_text(doc)
    return files


def record_text(doc: dict, header: bool = True) -> str:
    """A calibration document as YAML (as the record ``calibration.yaml``, with its ``header``)."""
    body = copy.deepcopy(doc)
    body.get("moe_host", {}).pop("fitted_now", None)
    top = ("# Written by `jctopt task=calibrate calibrate.apply=true`; the catalogs carry these values; `spec` "
           "holds the values every calibration starts from.\n") if header else ""
    return top + OmegaConf.to_yaml(OmegaConf.create(body))


def apply(doc: dict, conf_dir: Path) -> list[Path]:
    """Make a calibration the one in force: its files (``catalog_files``) written under
    ``conf_dir``, all or none (``resources.write_together``); the paths written."""
    return write_together(catalog_files(doc, conf_dir))


def carry_over(doc: dict) -> None:
    """What a calibration on a user's runs does not measure, kept from the record in force
    (``resources.calibration_record``): the model error of the bases its runs cannot leave out
    (one source or one die; the MoE runs, not refitted) and the MoE launch floor."""
    path = calibration_record()
    if not path.is_file():
        return
    before = OmegaConf.to_container(OmegaConf.load(path))
    for basis, entry in before.get("model_error", {}).items():
        if basis != "levels" and basis not in doc["model_error"]:
            doc["model_error"][basis] = {**entry, "kept_from": str(path)}
    if "moe_host" in before and "moe_host" not in doc:
        doc["moe_host"] = {**before["moe_host"], "kept_from": str(path)}
