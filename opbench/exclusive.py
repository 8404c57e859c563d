"""Turn-taking for the timed loops of a torchrun run (`opbench run --exclusive-timing`).

GPUs of one host share its CPUs, PCIe and power, so a rank timing a kernel while another rank
times its own may see its median move. With exclusive timing, the ranks of one run on one host
take turns for the timed loops (warm-up and rounds) and go on building, compiling and checking
concurrently.

The turn is an `fcntl.flock` on a lock file: the kernel releases it when its holder dies, so a
killed rank never leaves the others waiting, and a waiter sleeps in the kernel instead of
polling. The file lives in the host's temporary folder, not in the run folder: the run folder of
a multi-node run is on a shared filesystem, where flock is either refused or (NFS) becomes a
cluster-wide lock, which would serialise hosts that do not disturb each other. Its name carries
the run folder, so two unrelated runs on one host do not wait for each other: the promise is
that the ranks of *this* run never time at once, not that nothing else runs on the host.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def lock_path(
    run_dir: Path | str, folder: Path | str | None = None, host: str | None = None
) -> Path:
    """The host-local lock file shared by the ranks of the run that writes into `run_dir`."""
    host = re.sub(r"[^A-Za-z0-9._-]", "_", host or socket.gethostname())
    key = hashlib.sha256(str(Path(run_dir).absolute()).encode()).hexdigest()[:16]
    return Path(folder or tempfile.gettempdir()) / f"opbench-timing-{host}-{key}.lock"


def _is_linked_at(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)


class HostTurns:
    """One turn at a time among the processes of one host that use the same lock file."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.turns = 0
        self.waited_s = 0.0

    def _acquire(self, wait: bool = True) -> int | None:
        """A descriptor holding the lock; None, when not waiting, if another process holds it."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    return None
                # A process that finished may have removed the file between our open and our
                # lock; a lock on a removed file excludes nobody, so start again on the new one.
                if _is_linked_at(fd, self.path):
                    return fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold the host's turn for the duration of the block."""
        start = time.perf_counter()
        fd = self._acquire()
        assert fd is not None
        self.waited_s += time.perf_counter() - start
        self.turns += 1
        try:
            yield
        finally:
            os.close(fd)  # closing the only descriptor releases the lock

    def summary(self) -> dict[str, Any]:
        return {"turns": self.turns, "waited_s": round(self.waited_s, 3)}

    def remove(self) -> None:
        """Delete the lock file, once this process has no more turns to take.

        Done under the lock, so that a rank still running re-creates the file and locks that
        (see `_acquire`) instead of sharing a removed one with a rank that came later. When
        another rank holds the lock, it is still running and removes the file when it finishes:
        no need to wait for it.
        """
        fd = self._acquire(wait=False)
        if fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)
