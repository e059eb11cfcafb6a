"""calibrate never writes into the package: `calibrate.apply=true` writes the user's config
directory ($XDG_CONFIG_HOME/jctopt), all files or none, and later runs find them there ahead of
the shipped catalog; a user's runs file is checked for its columns and leaves the shipped MoE
launch floor alone."""

import hashlib
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

import jctopt
from jctopt.config import ConfigError, catalog_names, load_option, resources
from jctopt.config.resources import (
    CONF_DIR,
    PACKAGE_CALIBRATION_RECORD,
    package_unwritable,
    validation_file,
)
from jctopt.fit import catalogs
from jctopt.runs import REQUIRED_COLUMNS
from jctopt.tasks import calibrate

RUNS = pd.read_csv(validation_file("runs_dev.csv"))
THREE = RUNS[RUNS.id.str.startswith("mpt_h100bf16_1b_")].head(3).reset_index(drop=True)
NEEDED = ", ".join((*REQUIRED_COLUMNS, "source"))


def package_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(CONF_DIR.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(CONF_DIR)).encode() + p.read_bytes())
    return h.hexdigest()


def cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "jctopt.app", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


@pytest.fixture
def xdg(tmp_path, monkeypatch):
    """An empty user config home: $XDG_CONFIG_HOME for this test and its subprocesses."""
    home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home


def shipped_doc() -> dict:
    """A calibration document: the shipped record with one value moved."""
    doc = OmegaConf.to_container(OmegaConf.load(PACKAGE_CALIBRATION_RECORD))
    doc["gpu"]["h100_sxm"]["matmul_eff"] = 0.5
    return doc


def test_write_together_writes_all_files_or_none(tmp_path, monkeypatch):
    paths = [tmp_path / "a.yaml", tmp_path / "sub" / "b.yaml", tmp_path / "c.yaml"]
    paths[0].write_text("old a\n")
    real = resources.write_temp
    calls = []

    def fail_after_first(path, text):
        calls.append(path)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real(path, text)

    monkeypatch.setattr(resources, "write_temp", fail_after_first)
    with pytest.raises(OSError, match="No space left on device"):
        resources.write_together({p: f"new {p.name}\n" for p in paths})
    assert paths[0].read_text() == "old a\n" and not paths[1].exists() and not paths[2].exists()
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["a.yaml"]  # no temporary file left
    monkeypatch.setattr(resources, "write_temp", real)
    assert resources.write_together({p: f"new {p.name}\n" for p in paths}) == paths
    assert [p.read_text() for p in paths] == ["new a.yaml\n", "new b.yaml\n", "new c.yaml\n"]


def test_apply_writes_the_user_directory_never_the_package(xdg, monkeypatch):
    before = package_digest()
    user = resources.user_config_dir()
    assert user == xdg / "jctopt"
    written = catalogs.apply(shipped_doc(), user)
    assert package_digest() == before
    expected = ([user / "gpu" / f"{g}.yaml" for g in shipped_doc()["gpu"]]
                + [user / "training" / f"{t}.yaml" for t in catalogs.TRAINING_PRESETS] + [user / "calibration.yaml"])
    assert written == expected and all(p.is_file() for p in expected)
    # load_option and Hydra both take the user's file ahead of the shipped one.
    assert load_option("gpu", "h100_sxm").matmul_eff == 0.5
    assert jctopt.compose(["gpu=h100_sxm"]).gpu.matmul_eff == 0.5
    assert resources.calibration_record() == user / "calibration.yaml"


def test_a_failed_apply_leaves_every_file_as_it_was(xdg, monkeypatch):
    before = package_digest()
    user = resources.user_config_dir()
    (user / "gpu").mkdir(parents=True)
    mine = user / "gpu" / "h100_sxm.yaml"
    mine.write_text((CONF_DIR / "gpu" / "h100_sxm.yaml").read_text())
    real, calls = resources.write_temp, []

    def fail_after_first(path, text):
        calls.append(path)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real(path, text)

    monkeypatch.setattr(resources, "write_temp", fail_after_first)
    with pytest.raises(OSError):
        catalogs.apply(shipped_doc(), user)
    assert [p for p in user.rglob("*") if p.is_file()] == [mine]
    assert mine.read_text() == (CONF_DIR / "gpu" / "h100_sxm.yaml").read_text()
    assert package_digest() == before


def test_the_package_target_is_refused_for_an_installed_package(tmp_path):
    installed = tmp_path / "lib" / "python3.11" / "site-packages" / "jctopt" / "conf"
    installed.mkdir(parents=True)
    assert package_unwritable(installed) == f"{installed} is an installed package (under site-packages)"
    assert package_unwritable(tmp_path) is None


def test_a_user_directory_entry_is_found_by_name(xdg):
    """An entry only the user has (a GPU of their own) is a catalog name like the shipped ones."""
    user = resources.user_config_dir()
    (user / "gpu").mkdir(parents=True)
    (user / "gpu" / "my_h100.yaml").write_text((CONF_DIR / "gpu" / "h100_sxm.yaml").read_text()
                                               .replace("name: h100_sxm", "name: my_h100"))
    assert "my_h100" in catalog_names("gpu") and "h100_sxm" in catalog_names("gpu")
    assert load_option("gpu", "my_h100").name == "my_h100"
    proc = cli("task=estimate", "gpu=my_h100", "--cfg", "job", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "  name: my_h100\n" in proc.stdout


@pytest.mark.parametrize("column", ["source", "measured_iter_time_s"])
def test_a_missing_column_is_named_with_the_file(tmp_path, column):
    THREE.drop(columns=[column]).to_csv(tmp_path / "mine.csv", index=False)
    proc = cli("task=calibrate", f"calibrate.runs=[{tmp_path / 'mine.csv'}]", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"configuration error: calibrate.runs='{tmp_path / 'mine.csv'}' is not allowed: missing columns {column} "
        f"(needed: {NEEDED})")


def test_blank_sources_and_unplaceable_files_are_config_errors(tmp_path, compose):
    THREE.assign(source=[THREE.source[0], None, THREE.source[2]]).to_csv(tmp_path / "blank.csv", index=False)
    with pytest.raises(ConfigError) as err:
        calibrate.problem_from_runs(compose("task=calibrate"), tmp_path / "blank.csv")
    assert str(err.value) == (f"calibrate.runs: rows ['{THREE.id[1]}'] have a blank source (each source weighs the "
                              "same in the fit: name every row's)")
    THREE.assign(gpu="no_such_gpu").to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ConfigError, match=r"calibrate.runs=\[.*bad.csv'\]: no row can be placed \("
                                          f"{THREE.id[0]}: gpu='no_such_gpu' is not in the catalog"):
        calibrate.problem_from_runs(compose("task=calibrate"), tmp_path / "bad.csv")


def test_an_empty_runs_list_is_refused(tmp_path):
    proc = cli("task=calibrate", "calibrate.runs=[]", f"hydra.run.dir={tmp_path}", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "configuration error: calibrate.runs=[] is not allowed: name at least one runs CSV (a path or a shipped "
        "file's name), or leave calibrate.runs unset for runs_dev.csv, runs_dev2.csv")


def test_an_unknown_target_is_refused_before_fitting(tmp_path):
    proc = cli("task=calibrate", "calibrate.apply=true", "calibrate.target=site", f"hydra.run.dir={tmp_path}",
               timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "configuration error: calibrate.target='site' is not allowed: user | package")


def test_only_the_shipped_files_refit_the_moe_floor(tmp_path):
    THREE.to_csv(tmp_path / "mine.csv", index=False)
    assert calibrate.shipped_runs([validation_file("runs_dev.csv"), validation_file("runs_dev2.csv")])
    assert not calibrate.shipped_runs([validation_file("runs_dev.csv"), tmp_path / "mine.csv"])


@pytest.mark.slow
def test_apply_on_a_users_runs_writes_their_config_dir_and_later_runs_use_it(tmp_path, xdg):
    before = package_digest()
    THREE.to_csv(tmp_path / "my3rows.csv", index=False)
    proc = cli("task=calibrate", f"calibrate.runs=[{tmp_path / 'my3rows.csv'}]", "calibrate.apply=true",
               f"hydra.run.dir={tmp_path / 'run'}", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert package_digest() == before
    user = xdg / "jctopt"
    printed = [Path(line.strip()) for line in proc.stdout.splitlines() if line.strip().startswith(str(user))]
    assert printed[-1] == user / "calibration.yaml" and user / "gpu" / "h100_sxm.yaml" in printed
    assert all(p.is_file() for p in printed)
    assert "the MoE launch floor (training.moe_host_s) is not refitted" in " ".join(proc.stdout.split())
    assert "moe_host_s=" not in proc.stdout
    # One source, one die: no left-out error, and the nan printed for it is explained.
    said = " ".join(proc.stdout.split())
    assert "no leave-one-source-out error (nan below): the runs span 1 source(s)" in said
    assert "no leave-one-die-out error (nan below): the runs span 1 die(s)" in said
    assert "leave_one_source_out=nan leave_one_die_out=nan n=3" in said
    record = OmegaConf.load(user / "calibration.yaml")
    fitted = record.gpu.h100_sxm.matmul_eff
    shipped = OmegaConf.load(PACKAGE_CALIBRATION_RECORD)
    assert record.moe_host.moe_host_s == shipped.moe_host.moe_host_s  # kept, not refitted
    assert {"rows", "specs", "moe"} <= set(record.model_error)  # bases one source cannot measure: kept
    later = cli("task=estimate", "gpu=h100_sxm", "--cfg", "job", timeout=120)
    assert later.returncode == 0, later.stderr[-2000:]
    assert f"  matmul_eff: {float(f'{fitted:.4g}')}\n" in later.stdout


def test_the_package_target_refusal_names_why_and_the_way_out(compose, monkeypatch, xdg):
    monkeypatch.setattr(catalogs, "package_unwritable", lambda: "/x/site-packages/jctopt/conf is an installed package "
                        "(under site-packages)")
    cfg = compose("task=calibrate", "calibrate.apply=true", "calibrate.target=package")
    with pytest.raises(ConfigError) as err:
        catalogs.target_dir(cfg)
    assert str(err.value) == ("calibrate.target='package' is not allowed: /x/site-packages/jctopt/conf is an installed "
                              f"package (under site-packages); calibrate.target=user writes the calibration into "
                              f"{xdg / 'jctopt'}")
    assert catalogs.target_dir(compose("task=calibrate", "calibrate.apply=true")) == xdg / "jctopt"
    assert catalogs.target_dir(compose("task=calibrate")) is None


def test_values_in_force_are_seen_before_they_are_written():
    """calibrate's MoE fit runs under the GPU values it is about to apply, none written yet."""
    from jctopt.config.catalog import values_in_force

    shipped, other = load_option("gpu", "h100_sxm").matmul_eff, load_option("gpu", "b200").matmul_eff
    assert shipped != 0.5
    with values_in_force({"gpu": {"h100_sxm": {"matmul_eff": 0.5}}}):
        assert load_option("gpu", "h100_sxm").matmul_eff == 0.5
        assert load_option("gpu", "b200").matmul_eff == other
    assert load_option("gpu", "h100_sxm").matmul_eff == shipped


def test_a_refitted_moe_floor_goes_into_every_training_preset(xdg):
    doc = shipped_doc()
    doc["moe_host"] = {**doc["moe_host"], "moe_host_s": 0.0042, "fitted_now": True}
    files = catalogs.catalog_files(doc, xdg / "jctopt")
    for preset in catalogs.TRAINING_PRESETS:
        assert OmegaConf.create(files[xdg / "jctopt" / "training" / f"{preset}.yaml"]).moe_host_s == 0.0042
    record = OmegaConf.create(files[xdg / "jctopt" / "calibration.yaml"])
    assert record.moe_host.moe_host_s == 0.0042 and "fitted_now" not in record.moe_host
