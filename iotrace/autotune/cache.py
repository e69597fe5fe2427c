"""The tuning cache: one SQLite row per measured config, under ``$XDG_CACHE_HOME/iotrace/tune.sqlite3``.

Key: card fingerprint (name, CC, SM count, driver, CUDA), Triton version, kernel source hash, kernel, backend,
method (``gpu`` timing or ``interpreter`` check), shape bucket, dtype, config; a row serves only the exact shape it
was measured at (another shape of its bucket re-measures and replaces it). A changed space therefore re-measures
only configs it has not seen; an edited kernel (new source hash) or a new driver measures afresh.

Safety, from SQLite's own guarantees (https://www.sqlite.org/wal.html, https://www.sqlite.org/atomiccommit.html):
WAL journaling lets readers run beside one writer; ``busy_timeout`` makes a second writer wait rather than fail;
each result is its own ``BEGIN IMMEDIATE … COMMIT`` transaction, so Ctrl-C or SIGKILL between two results leaves
every committed row intact and no half row. A rerun reads what is there and measures the rest (resume).

Failures are rows too (``status`` ``wrong`` for an output that differs from the reference, ``failed`` for a launch
that raised), as Kernel Tuner stores its ``InvalidConfig`` sentinels: a wrong config is never measured again. To
retry everything, delete the file (it is only a cache) or pass ``--no-cache``.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from iotrace.autotune.space import config_key
from iotrace.errors import DataFileError

if TYPE_CHECKING:
    from iotrace.autotune.backends import Measurement
    from iotrace.plugins.spec import Config, KernelSpec

__all__ = ["SCHEMA_VERSION", "CacheKey", "TuneCache", "default_path", "kernel_source_hash"]

#: Bumped when the table changes; an older file is refused with a message, not silently misread.
SCHEMA_VERSION = "1"

#: How long a writer waits for another process's transaction before giving up (SQLite ``busy_timeout``): a row
#: commits in milliseconds, so 30 s only runs out when another process holds the file locked for good.
BUSY_TIMEOUT_MS = 30_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    card TEXT NOT NULL, triton TEXT NOT NULL, source_hash TEXT NOT NULL, kernel TEXT NOT NULL,
    backend TEXT NOT NULL, method TEXT NOT NULL, shape_bucket TEXT NOT NULL, dtype TEXT NOT NULL,
    config TEXT NOT NULL,
    shape TEXT NOT NULL, status TEXT NOT NULL, time_us REAL, p20_us REAL, p80_us REAL, verified INTEGER,
    note TEXT NOT NULL, timing TEXT NOT NULL, run_id TEXT NOT NULL, recorded_at REAL NOT NULL,
    PRIMARY KEY (card, triton, source_hash, kernel, backend, method, shape_bucket, dtype, config)
);
"""


def default_path() -> Path:
    """``$XDG_CACHE_HOME/iotrace/tune.sqlite3`` (``~/.cache`` when unset), beside the compile cache; both move to
    ``$IOTRACE_CACHE_DIR`` when that is set (the test suite points it at a session folder)."""
    from iotrace.compiler import iotrace_cache_root

    return iotrace_cache_root() / "tune.sqlite3"


def kernel_source_hash(spec: KernelSpec) -> str:
    """SHA-256 (first 16 hex digits) of the spec's module and its package siblings, as the compile cache reads them:
    a change to a shared @triton.jit helper changes every kernel that calls it."""
    from iotrace.compiler import package_source

    return hashlib.sha256(package_source(type(spec).__module__)).hexdigest()[:16]


@dataclass(frozen=True)
class CacheKey:
    """Everything but the config that a cached measurement is valid for."""

    card: str
    triton: str
    source_hash: str
    kernel: str
    backend: str
    method: str
    shape_bucket: str
    dtype: str

    def values(self) -> tuple[str, ...]:
        return (self.card, self.triton, self.source_hash, self.kernel, self.backend, self.method, self.shape_bucket,
                self.dtype)


_KEY_WHERE = ("card = ? AND triton = ? AND source_hash = ? AND kernel = ? AND backend = ? AND method = ? AND "
              "shape_bucket = ? AND dtype = ?")


class TuneCache:
    """The cache file, opened for one tuning run (``run_id`` marks the rows this run wrote)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()
        self.run_id = uuid.uuid4().hex[:12]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db, row = self._open()
        except (OSError, sqlite3.Error) as exc:
            raise DataFileError(f"the tuning cache {self.path} cannot be opened ({exc})",
                                "pass --cache PATH to use another file, or --no-cache") from exc
        if row is not None and row[0] != SCHEMA_VERSION:
            self._db.close()
            raise DataFileError(f"the tuning cache {self.path} has schema {row[0]}, this iotrace writes "
                                f"{SCHEMA_VERSION}", f"delete {self.path} (it is only a cache) or pass --cache PATH")

    def _open(self) -> tuple[sqlite3.Connection, tuple[str] | None]:
        """Connect, switch to WAL and create the tables, retrying while another process does the same.

        Switching a new file to WAL needs it to itself, and when two processes race to do it SQLite can answer
        "database is locked" at once, busy timeout or not (seen in tests/test_autotune_cache.py about one run in
        five before this loop). WAL then persists in the file (https://www.sqlite.org/wal.html, "Persistence of
        WAL mode"), so only the first opens can race.
        """
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        pause = 0.01
        while True:
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            try:
                db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    db.execute("PRAGMA journal_mode = WAL")
                db.execute("BEGIN IMMEDIATE")  # two processes creating the tables at once: one waits
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    db.execute(statement)
                row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
                if row is None:
                    db.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
                db.execute("COMMIT")
                return db, row
            except sqlite3.Error as exc:  # any failure closes the connection; only a lock is waited out
                db.close()
                if not isinstance(exc, sqlite3.OperationalError) or "locked" not in str(exc) \
                        or time.monotonic() > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.5)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> TuneCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, key: CacheKey, config: Config, shape: dict[str, int]) -> Measurement | None:
        """The stored result for ``config`` at exactly ``shape``. Rows are keyed by the shape's bucket (one row per
        config and bucket), but a row measured at another shape of the bucket is a miss: its time is another
        shape's, and its check never saw this shape's ragged edges. Measuring again replaces it."""
        from iotrace.autotune.backends import Measurement

        row = self._db.execute(f"SELECT status, time_us, p20_us, p80_us, verified, note, timing, shape FROM results "
                               f"WHERE {_KEY_WHERE} AND config = ?", (*key.values(), config_key(config))).fetchone()
        if row is None or json.loads(row[7]) != dict(shape):
            return None
        status, time_us, p20, p80, verified, note, timing, _ = row
        return Measurement(status, time_us, p20, p80, None if verified is None else bool(verified), timing, note,
                           cached=True)

    def put(self, key: CacheKey, config: Config, shape: dict[str, int], found: Measurement) -> None:
        """Store one result in its own transaction (committed before the next config starts)."""
        values = (*key.values(), config_key(config), json.dumps(shape), found.status, found.time_us, found.p20_us,
                  found.p80_us, None if found.verified is None else int(found.verified), found.note, found.timing,
                  self.run_id, time.time())
        try:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("INSERT OR REPLACE INTO results VALUES (" + ",".join("?" * len(values)) + ")", values)
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise DataFileError(f"cannot write to the tuning cache {self.path} ({exc})",
                                "check the disk, or pass --no-cache") from exc

    def rows(self, key: CacheKey) -> Iterator[tuple[str, str, str]]:
        """(config, status, run_id) of every row under ``key``."""
        yield from self._db.execute(f"SELECT config, status, run_id FROM results WHERE {_KEY_WHERE}", key.values())
