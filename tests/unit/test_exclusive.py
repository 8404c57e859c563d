"""The host-wide turn behind `--exclusive-timing`, across real processes: turns never overlap,
the lock file can be removed while others still take turns, and a holder that dies does not
leave the others waiting."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from itertools import pairwise
from pathlib import Path

from opbench.exclusive import HostTurns, lock_path

# spawn, not fork: the test process may hold torch's threads, which fork does not carry safely.
SPAWN = mp.get_context("spawn")


def take_turns(path: str, log: str, turns: int, hold_s: float, start) -> None:
    lock = HostTurns(Path(path))
    start.wait()
    intervals = []
    for _ in range(turns):
        with lock.slot():
            entered = time.monotonic_ns()
            time.sleep(hold_s)
            left = time.monotonic_ns()
        intervals.append((entered, left))
        # Every process removes the file after every turn, the way a finishing rank does, while
        # the others keep taking turns: the lock must stay exclusive across re-creations.
        lock.remove()
    Path(log).write_text("".join(f"{a} {b}\n" for a, b in intervals))


def hold_forever(path: str, held) -> None:
    with HostTurns(Path(path)).slot():
        held.set()
        time.sleep(600)


def enter_once(path: str, entered) -> None:
    with HostTurns(Path(path)).slot():
        entered.set()


def test_turns_of_several_processes_never_overlap(tmp_path: Path) -> None:
    path = tmp_path / "turns.lock"
    start = SPAWN.Barrier(3)
    logs = [tmp_path / f"log-{i}.txt" for i in range(3)]
    procs = [
        SPAWN.Process(target=take_turns, args=(str(path), str(log), 6, 0.01, start)) for log in logs
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    intervals = sorted(
        tuple(int(t) for t in line.split())
        for log in logs
        for line in log.read_text().split("\n")
        if line
    )
    assert len(intervals) == 18
    for (_, left), (entered, _) in pairwise(intervals):
        assert entered >= left, "two processes held the turn at once"
    assert not path.exists()  # the last process to finish removed it


def test_a_holder_killed_mid_turn_does_not_block_the_others(tmp_path: Path) -> None:
    path = tmp_path / "turns.lock"
    held, entered = SPAWN.Event(), SPAWN.Event()
    holder = SPAWN.Process(target=hold_forever, args=(str(path), held))
    holder.start()
    assert held.wait(30)
    waiter = SPAWN.Process(target=enter_once, args=(str(path), entered))
    waiter.start()
    try:
        # The waiter blocks while the holder lives...
        assert not entered.wait(1.0)
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(10)
        # ...and gets its turn once the kernel has released the dead holder's lock.
        assert entered.wait(10)
        waiter.join(10)
        assert waiter.exitcode == 0
    finally:
        for proc in (holder, waiter):
            if proc.is_alive():
                proc.kill()
                proc.join()


def test_lock_file_is_per_run_and_per_host_in_the_given_folder(tmp_path: Path) -> None:
    one = lock_path(tmp_path / "run-a", tmp_path, host="node1")
    assert one == lock_path(tmp_path / "run-a", tmp_path, host="node1")
    assert one.parent == tmp_path and "node1" in one.name
    assert one != lock_path(tmp_path / "run-b", tmp_path, host="node1")
    assert one != lock_path(tmp_path / "run-a", tmp_path, host="node2")
    # A host name is not trusted to be a safe file name.
    assert lock_path(tmp_path / "run-a", tmp_path, host="../x").parent == tmp_path
