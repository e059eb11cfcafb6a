"""The `jctopt` command: one Hydra app, `jctopt task=<name> [overrides...]`.

Config groups come from the user's config directory (``$XDG_CONFIG_HOME/jctopt``, where
``calibrate.apply=true`` writes) ahead of the package's ``conf/`` (``config.catalog.use_user_configs``).
SIGINT and SIGTERM stop every task the same way (``main``): "interrupted" and, where the task
can resume, how; no traceback; exit status 130 (SIGINT) or 143 (SIGTERM); outputs are written
whole or not at all (``tasks._output.atomic``).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import sys
import threading
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from .config import ConfigError, register_configs, unknown_keys
from .config.cache import enable_compile_cache
from .config.catalog import use_user_configs
from .config.resources import CONF_DIR, SWEEPS_DIR
from .tasks import (
    calibrate,
    deadline,
    estimate,
    gradient,
    optimize,
    procure,
    sweep,
    syncwall,
    validate,
)

TASKS = {"calibrate": calibrate.main, "deadline": deadline.main, "estimate": estimate.main, "gradient": gradient.main, "optimize": optimize.main, "procure": procure.main, "sweep": sweep.main, "syncwall": syncwall.main,
         "validate": validate.main}

register_configs()
use_user_configs()


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def _app(cfg: DictConfig) -> None:
    for noisy in ("jax", "matplotlib"):  # backend probing, font cache chatter
        logging.getLogger(noisy).setLevel(logging.WARNING)
    enable_compile_cache(cfg.compile_cache)
    name = cfg.task.name
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    (run_dir / "error.txt").unlink(missing_ok=True)  # a rerun into the same directory starts clean
    try:
        if name not in TASKS:
            raise ConfigError(f"task={name!r} is not allowed: one of {', '.join(sorted(TASKS))}")
        unknown = unknown_keys(cfg)
        if unknown:
            key, allowed = unknown[0]
            raise ConfigError(f"{key} is not a configuration key: one of {', '.join(allowed)}")
        TASKS[name](cfg, run_dir)
    except ConfigError as err:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            # One bad job of a multirun is reported and skipped; the other jobs still run.
            job = HydraConfig.get().job
            print(f"configuration error in job {job.num} ({' '.join(job.override_dirname.split(','))}): {err}",
                  file=sys.stderr)
            (run_dir / "error.txt").write_text(f"configuration error: {err}\n")
            return
        print(f"configuration error: {err}", file=sys.stderr)
        sys.exit(2)


class FailedJobs(Callback):
    """After a multirun: name the jobs that stopped on a configuration error (their run
    directories hold error.txt) and exit 2, as a single bad run does."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        failed = sorted(Path(config.hydra.sweep.dir).glob("*/error.txt"))
        if failed:
            print(f"{len(failed)} job(s) of the multirun stopped on a configuration error: "
                  f"{', '.join(str(p.parent) for p in failed)}", file=sys.stderr)
            sys.exit(2)


# Signals received, in order: the handlers ``main`` installs append to it.
_SIGNALS: list[int] = []
# How a task stopped by a signal continues (the others start over).
RESUME_HINTS = {"sweep": "run the same command with sweep.resume=true to finish it",
                "optimize": "run the same command to resume the study"}
# Seconds the main thread has to unwind after a signal before the watcher ends the process:
# Python runs a signal handler only between bytecodes, not inside a long XLA call.
GRACE_S = 3.0
_LEAVING = threading.Lock()  # held by whoever ends the process (the main thread or the watcher)
_SWALLOWED = threading.Event()  # a KeyboardInterrupt that landed where nothing can raise it
_WAKEUP: list[socket.socket] = []  # (read, write) once watched: the C signal handler writes each signal's number


def _on_signal(signum, frame) -> None:
    """SIGINT and SIGTERM alike: recorded, then the main thread unwinds as from Ctrl-C."""
    _SIGNALS.append(signum)
    raise KeyboardInterrupt


def _on_unraisable(unraisable, default=sys.unraisablehook) -> None:
    """A KeyboardInterrupt raised inside a callback that cannot raise (jax's gc callback, a
    ``__del__``) is not printed: the watcher ends the process at once instead."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        _SWALLOWED.set()
        return
    default(unraisable)


def _watch(wakeup: socket.socket, argv: list[str]) -> None:
    """Every SIGINT and SIGTERM as the C handler sees it (``signal.set_wakeup_fd``), while the
    main thread may be inside a long call: where the signal is ours to handle (no task took it
    over to stop at a safe point: sweep's SIGTERM, optimize's SIGINT) and the main thread has
    not ended the process ``GRACE_S`` later, or its interrupt was swallowed, end it here."""
    while True:
        data = wakeup.recv(1)
        if not data:
            return
        signum = data[0]
        if signum in (signal.SIGINT, signal.SIGTERM) and signal.getsignal(signum) is _on_signal:
            _SWALLOWED.wait(GRACE_S)
            _exit_interrupted(argv, signum)


def _exit_interrupted(argv: list[str], signum: int | None = None) -> None:
    """Say so, flush, and leave without the interpreter's teardown: XLA's threads may still be
    running a computation, and finalizing under them can crash (a segfault after "interrupted").
    Every output is already whole (written atomically) or absent."""
    if not _LEAVING.acquire(blocking=False):
        threading.Event().wait()  # the other thread is ending the process
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)  # another signal while leaving changes nothing
    signum = signum or (_SIGNALS[-1] if _SIGNALS else signal.SIGINT)
    tasks = [a.split("=", 1)[1] for a in argv if a.startswith("task=")]
    hint = RESUME_HINTS.get(tasks[-1] if tasks else "")
    try:
        print(f"interrupted ({signal.Signals(signum).name})" + (f"; {hint}" if hint else ""), file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
    finally:
        os._exit(128 + signum)


def _handle_signals(argv: list[str]) -> None:
    """SIGINT and SIGTERM raise KeyboardInterrupt in the main thread (``_on_signal``), watched
    from a thread of their own (``_watch``)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    sys.unraisablehook = _on_unraisable
    _WAKEUP[:] = read, write = socket.socketpair()
    write.setblocking(False)
    signal.set_wakeup_fd(write.fileno(), warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(read, argv), name="jctopt-signals", daemon=True).start()


def shipped_config_dir(argv: list[str]) -> list[str]:
    """``--config-dir sweeps`` (``-cd``, ``--config-dir=``) from any working directory: a relative
    ``sweeps`` that is not there is the package's copy of the ready multiruns."""
    out = list(argv)
    for i, arg in enumerate(out):
        joined = arg.startswith("--config-dir=")
        j = i if joined else i + 1
        if not (joined or arg in ("--config-dir", "-cd")) or j >= len(out):
            continue
        value = out[j].partition("=")[2] if joined else out[j]
        if value.rstrip("/") == SWEEPS_DIR.name and not Path(value).is_dir():
            out[j] = f"--config-dir={SWEEPS_DIR}" if joined else str(SWEEPS_DIR)
    return out


def _print_help(overrides: list[str]) -> None:
    """Every group and key with its description (``config.help``), for the config the overrides
    compose (``jctopt --help gpu=b200``: B200's values); a bad override is named as in a run."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from .config.catalog import compose
    from .config.help import help_text

    takes_value = {"--config-dir", "-cd", "--config-name", "-cn", "--config-path", "-cp"}  # Hydra's flags
    kept = [a for i, a in enumerate(overrides)
            if not a.startswith("-") and not (i and overrides[i - 1] in takes_value)]
    try:
        cfg = compose(kept)
    except (ConfigError, HydraException, OmegaConfBaseException) as err:
        print(f"configuration error: {str(err).splitlines()[0]}", file=sys.stderr)
        sys.exit(2)
    try:
        print(help_text(cfg, width=max(80, shutil.get_terminal_size((100, 24)).columns - 1)), flush=True)
    except BrokenPipeError:  # `jctopt --help | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main() -> None:
    """The console entry point. SIGINT and SIGTERM stop every task (a task may defer them to a
    safe point: sweep finishes its chunk, optimize its batch): "interrupted", where the task
    can resume how, no traceback, exit status 128 + the signal's number (130, 143)."""
    _handle_signals(sys.argv[1:])
    sys.argv[1:] = shipped_config_dir(sys.argv[1:])
    if {"--help", "-h"} & set(sys.argv[1:]):
        _print_help([a for a in sys.argv[1:] if a not in ("--help", "-h")])
        return
    try:
        _app()
    except KeyboardInterrupt:
        _exit_interrupted(sys.argv[1:])
    except SystemExit as stop:
        # A task that handled the signal and turned it into its own exit (optimize: 130).
        if _SIGNALS or stop.code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
            _exit_interrupted(sys.argv[1:], stop.code - 128 if not _SIGNALS else None)
        raise


if __name__ == "__main__":
    main()
