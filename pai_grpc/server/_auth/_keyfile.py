"""A key file that is re-read when it changes, keeping the last good keys."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from pai_grpc.config import ConfigError

log = logging.getLogger("pai_grpc.auth")

K = TypeVar("K")
#: Seconds between two looks at a key file's metadata (a stat, on the event loop).
CHECK_INTERVAL_SECONDS = 1.0


class KeyFile(Generic[K]):
    """The keys parsed from ``path``, reloaded when the file changes.

    The file's stat (mtime, size, inode, so an atomic rename counts too) is
    looked at most once per :data:`CHECK_INTERVAL_SECONDS`, when a key is
    needed. A new version that cannot be read or parsed keeps the previous
    keys in service and is logged once (each broken version once).
    """

    def __init__(self, path: str, parse: Callable[[bytes], K], *, what: str) -> None:
        self._path = Path(path)
        self._parse = parse
        self._what = what
        try:
            stamp = self._stat()
            self._keys = parse(self._path.read_bytes())
        except (OSError, ValueError) as e:
            raise ConfigError(f"{what} {self._path}: {e}") from None
        self._stamp = stamp
        self._failed: object = None
        self._checked = time.monotonic()

    def _stat(self) -> tuple[int, ...]:
        st = os.stat(self._path)
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def current(self) -> K:
        """The keys in service (re-reading the file first if it changed).

        Called on the event loop: a stat a second is cheaper than a thread
        hop, and key files are small enough to read in place when they change.
        """
        now = time.monotonic()
        if now - self._checked >= CHECK_INTERVAL_SECONDS:
            self._checked = now
            self._refresh()
        return self._keys

    def _refresh(self) -> None:
        stamp: tuple[int, ...] | None = None
        try:
            stamp = self._stat()
            if stamp == self._stamp:
                return
            keys = self._parse(self._path.read_bytes())
        except (OSError, ValueError) as e:
            failed = (stamp, str(e))
            if failed != self._failed:  # each broken version is reported once
                self._failed = failed
                log.warning(
                    "%s %s: %s; the previous keys stay in service", self._what, self._path, e
                )
            return
        self._keys = keys
        self._stamp = stamp
        self._failed = None
        log.info("%s %s reloaded", self._what, self._path)
