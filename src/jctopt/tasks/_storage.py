"""Where an Optuna study lives: ``optimize.storage`` read as a storage, refused by name when it cannot hold one."""

from __future__ import annotations

import json
from pathlib import Path

import optuna

from ..config import ConfigError

STORAGE_FORMS = ("memory, journal:PATH (a JournalFileBackend log), sqlite:///PATH (sqlite:////ABSOLUTE/PATH), "
                 "or a server's database URL (postgresql://..., mysql://...)")
SERVER_SCHEMES = ("postgresql", "mysql", "oracle", "mssql")
SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite file (sqlite.org/fileformat.html)


def storage(url: str):
    """An Optuna storage from a URL: ``memory`` (not persisted), ``journal:PATH``, ``sqlite:///PATH``
    or a database server's URL. The directory of a file storage is created; a form, a place that
    cannot hold the study, or a file that holds something else (a user's text file is never
    appended to) is a ConfigError naming ``optimize.storage``."""
    bad = f"optimize.storage={url!r} is not allowed"
    if url == "memory":
        return None
    if url.startswith("journal:") or url.startswith("sqlite:///"):
        journal = url.startswith("journal:")
        path = Path(url[len("journal:"):] if journal else url[len("sqlite:///"):])
        try:
            if path.is_file() and path.stat().st_size and not _holds_a_study(path, journal):
                kind = "an Optuna journal" if journal else "an SQLite database"
                raise ConfigError(f"{bad}: {str(path)!r} is not {kind}; name a new file or the study's own")
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a"):  # created (or kept) here, so a place that cannot hold it fails now
                pass
        except OSError as err:
            raise ConfigError(f"{bad}: cannot write {str(path)!r} ({err.strerror or err})") from None
    if url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        return JournalStorage(JournalFileBackend(str(path)))
    if url.startswith("sqlite:///"):
        import sqlalchemy

        # WAL with synchronous=NORMAL: a commit survives the process being killed (not a power
        # loss) without an fsync per write, which otherwise dominates the run time.
        storage = optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}})
        sqlalchemy.event.listen(storage.engine, "connect", _sqlite_pragmas)
        storage.engine.dispose()  # reconnect with the pragmas
        return storage
    if url.split("://", 1)[0].split("+", 1)[0] not in SERVER_SCHEMES:
        raise ConfigError(f"{bad}: one of {STORAGE_FORMS}")
    return url


def _holds_a_study(path: Path, journal: bool) -> bool:
    """Whether a non-empty file is an SQLite database, or an Optuna journal (JSON lines, each an
    operation with an ``op_code``), judged from its first bytes or line."""
    with path.open("rb") as f:
        if not journal:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
        first = f.readline(1 << 20)
    try:
        return "op_code" in json.loads(first)
    except (ValueError, TypeError):
        return False


def _sqlite_pragmas(connection, _record) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
