"""Identifiers: a kind prefix plus a ULID (time ordered, 26 Crockford base32 chars)."""

from __future__ import annotations

import os
import re
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PREFIXES = ("thr", "msg", "run", "act", "stp")
#: Used with fullmatch: `$` alone would also accept a trailing newline.
_PATTERN = {p: re.compile(rf"{p}_[0-9A-HJKMNP-TV-Z]{{26}}") for p in _PREFIXES}

_lock = threading.Lock()
_last_ms = -1
_last_rand = 0

#: Random bytes read ahead from the OS: ``os.urandom`` is a system call
#: (≈15 µs here) and a run makes several ids, each wanting 10 bytes.
_POOL_BYTES = 4096
_pool = b""
_pool_at = 0


def _random_80() -> int:
    """80 random bits from the pool (call with ``_lock`` held)."""
    global _pool, _pool_at
    if _pool_at + 10 > len(_pool):
        _pool, _pool_at = os.urandom(_POOL_BYTES), 0
    value = int.from_bytes(_pool[_pool_at : _pool_at + 10], "big")
    _pool_at += 10
    return value


def _forget_pool() -> None:
    # A forked child must not make the ids its parent is about to make, and must
    # not inherit the lock held by a parent thread that does not exist in it.
    global _lock, _pool, _pool_at, _last_ms
    _lock = threading.Lock()
    _pool, _pool_at, _last_ms = b"", 0, -1


os.register_at_fork(after_in_child=_forget_pool)


#: Every 10-bit value as its two base32 characters: ids are made per event and step,
#: and two characters per lookup halve the work of encoding one.
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]


def _encode(value: int, length: int) -> str:
    """``value`` as ``length`` Crockford base32 characters (``length`` even)."""
    pairs = []
    for _ in range(length // 2):
        pairs.append(_PAIRS[value & 1023])
        value >>= 10
    return "".join(reversed(pairs))


def new_ulid() -> str:
    """A monotonic ULID: ids made in the same millisecond still sort in creation order."""
    global _last_ms, _last_rand
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            _last_rand = (_last_rand + 1) & ((1 << 80) - 1)
        else:
            _last_ms = ms
            _last_rand = _random_80() >> 1  # room to increment
        return _encode(ms, 10) + _encode(_last_rand, 16)


def new_id(prefix: str) -> str:
    """A new id such as ``thr_01J...``."""
    if prefix not in _PATTERN:
        raise ValueError(f"unknown id prefix {prefix!r}")
    return f"{prefix}_{new_ulid()}"


def is_valid_id(prefix: str, value: str) -> bool:
    """Whether ``value`` is a well-formed id of the given kind."""
    pattern = _PATTERN.get(prefix)
    return bool(pattern and pattern.fullmatch(value))
