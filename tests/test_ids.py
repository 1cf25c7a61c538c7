"""Ids: unique, time ordered, and never shared with a forked process."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from pai_grpc.domain import is_valid_id, new_id


@settings(max_examples=20, deadline=None)
@given(st.integers(min_value=1, max_value=2_000))
def test_ids_are_well_formed_unique_and_in_creation_order(count: int) -> None:
    ids = [new_id("run") for _ in range(count)]
    assert all(is_valid_id("run", i) for i in ids)
    assert len(set(ids)) == count
    # Many ids per millisecond, and more than one read of random bytes from the OS.
    assert ids == sorted(ids)


def test_a_forked_child_makes_ids_its_parent_does_not() -> None:
    new_id("run")  # random bytes are read ahead now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next ids and leave at once
        os.close(read)
        os.write(write, ",".join(new_id("run")[-16:] for _ in range(20)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split(","))
    os.waitpid(pid, 0)
    parent = {new_id("run")[-16:] for _ in range(20)}
    # The random part (the last 16 characters) is never the same in both processes.
    assert len(child) == 20
    assert not child & parent


def test_a_child_forked_while_another_thread_makes_an_id_can_make_ids() -> None:
    """The id lock, held at the fork by a thread that does not exist in the child, is renewed."""
    import select
    import signal

    from pai_grpc.domain import _ids

    read, write = os.pipe()
    with _ids._lock:  # as if another thread were making an id at that moment
        pid = os.fork()
        if pid == 0:
            os.close(read)
            os.write(write, new_id("run").encode())
            os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], 10.0)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        made = pipe.read()
    assert ready, "the forked child could not make an id"
    assert is_valid_id("run", made)
