"""The package as a user installs it: a built wheel in a fresh virtual environment, run from
an empty directory, carries its config and its data; the compilation cache speeds a repeated
run and never breaks one."""

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from jctopt.config import cache as _cache
from jctopt.config.resources import CONF_DIR, VALIDATION_DIR, validation_file

REPO = Path(__file__).resolve().parents[1]


def _cli(*args, cwd, env=None, python=sys.executable):
    return subprocess.run([python, "-c", "from jctopt.app import main; main()", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def _answer(run_dir: Path) -> dict:
    """estimate.json without the echo of the config (which names the cache setting)."""
    record = json.loads((run_dir / "estimate.json").read_text())
    record.pop("config")
    return record


def test_config_and_data_live_in_the_package():
    package = REPO / "src" / "jctopt"
    assert CONF_DIR == package / "conf" and (CONF_DIR / "config.yaml").is_file()
    assert VALIDATION_DIR == package / "data" / "validation"
    for name in ("runs_dev.csv", "runs_dev2.csv", "runs_moe_dev.csv", "runs_mbridge_dense.csv", "runs_mbridge_moe.csv",
                 "hardware.csv", "collectives.csv", "reliability.csv"):
        assert validation_file(name).stat().st_size > 1000
    assert "source" in (VALIDATION_DIR / "README.md").read_text()
    with pytest.raises(FileNotFoundError, match="runs_dev.csv"):
        validation_file("nope.csv")


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_runs_from_an_empty_directory(tmp_path):
    src = tmp_path / "src"  # a copy, so the build leaves the checkout as it was
    shutil.copytree(REPO / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(src)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = wheels.glob("jctopt-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)],
                               capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stderr[-2000:]
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), PATH=f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}")
    jctopt = str(env_dir / "bin" / "jctopt")
    out = subprocess.run([jctopt, "task=estimate", "hydra.run.dir=run"], cwd=empty, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads((empty / "run" / "estimate.json").read_text())["feasible"] is True
    assert (tmp_path / "cache" / "jctopt").is_dir()  # the compilation cache went to XDG_CACHE_HOME
    helped = subprocess.run([jctopt, "--help"], cwd=empty, env=env, capture_output=True, text=True, timeout=300)
    assert helped.returncode == 0 and "task: " in helped.stdout
    # The ready multiruns and the sweeper that runs them ship too (hydra_plugins beside jctopt).
    ready = subprocess.run([jctopt, "--config-dir", "sweeps", "--config-name", "deadlines", "--cfg", "hydra"], cwd=empty,
                           env=env, capture_output=True, text=True, timeout=300)
    assert ready.returncode == 0 and "hydra_plugins.jctopt_sweeper.jobwise_sweeper.JobwiseSweeper" in ready.stdout, \
        ready.stderr[-2000:]
    # The config and the published runs come from the installed package, not from a checkout.
    where = subprocess.run([str(python), "-c", "from jctopt.config.resources import CONF_DIR, validation_file; "
                            "print(CONF_DIR); print(validation_file('runs_dev.csv'))"],
                           cwd=empty, env=env, capture_output=True, text=True, timeout=300)
    assert where.returncode == 0, where.stderr
    for line in where.stdout.split():
        assert Path(line).is_relative_to(env_dir) and Path(line).exists(), line


def test_cache_dir_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _cache.cache_dir("auto") == tmp_path / "jctopt"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert _cache.cache_dir("auto") == Path.home() / ".cache" / "jctopt"
    assert _cache.cache_dir("off") is None and _cache.cache_dir(None) is None
    assert _cache.cache_dir(str(tmp_path / "x")) == tmp_path / "x"


@pytest.mark.slow
def test_repeated_run_loads_its_kernels_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    first = _cli("task=estimate", f"compile_cache={cache}", f"hydra.run.dir={tmp_path}/a", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    entries = {p.name for p in cache.iterdir() if p.name.endswith("-cache")}
    assert entries  # compiled kernels were written
    second = _cli("task=estimate", f"compile_cache={cache}", f"hydra.run.dir={tmp_path}/b", cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-2000:]
    assert {p.name for p in cache.iterdir() if p.name.endswith("-cache")} == entries  # all loaded, none new
    assert _answer(tmp_path / "a") == _answer(tmp_path / "b")
    # A cache copied elsewhere is the same cache: no entry's key holds the directory's path.
    moved = tmp_path / "moved"
    shutil.copytree(cache, moved)
    third = _cli("task=estimate", f"compile_cache={moved}", f"hydra.run.dir={tmp_path}/c", cwd=tmp_path)
    assert third.returncode == 0, third.stderr[-2000:]
    assert {p.name for p in moved.iterdir() if p.name.endswith("-cache")} == entries
    assert _answer(tmp_path / "c") == _answer(tmp_path / "a")


@pytest.mark.slow
def test_corrupt_unwritable_or_disabled_cache_still_answers(tmp_path):
    cache = tmp_path / "cache"
    good = _cli("task=estimate", f"compile_cache={cache}", f"hydra.run.dir={tmp_path}/good", cwd=tmp_path)
    assert good.returncode == 0, good.stderr[-2000:]
    expected = _answer(tmp_path / "good")
    entries = [p for p in cache.iterdir() if p.is_file()]
    assert entries
    for p in entries:  # every entry (and its access-time record) overwritten with junk
        p.write_bytes(b"\x00not an executable\xff" * 7)
    blocker = tmp_path / "a_file"
    blocker.write_text("a regular file where the cache directory would go")
    for name, setting in (("corrupt", str(cache)), ("unwritable", str(blocker / "cache")), ("off", "off")):
        out = _cli("task=estimate", f"compile_cache={setting}", f"hydra.run.dir={tmp_path}/{name}", cwd=tmp_path)
        assert out.returncode == 0, (name, out.stderr[-2000:])
        assert _answer(tmp_path / name) == expected, name
        if name == "unwritable":
            assert "compiling without a cache" in out.stdout + out.stderr  # Hydra logs to stdout
        if name == "corrupt":
            assert "Error reading persistent compilation cache" in out.stderr
    # The damaged entries were replaced by that run's compilations: the next run reads them all.
    healed = _cli("task=estimate", f"compile_cache={cache}", f"hydra.run.dir={tmp_path}/healed", cwd=tmp_path)
    assert healed.returncode == 0 and "persistent compilation cache" not in healed.stderr, healed.stderr[-2000:]
    assert _answer(tmp_path / "healed") == expected
