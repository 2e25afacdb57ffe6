"""Every access to Aim internals, and the check that they still have the expected shape.

One private dependency: bringing a repository's index up to date before reading it. Aim
(3.29) writes each run into a chunk database of its own (``.aim/meta/chunks/<run hash>``);
``aim.Repo`` queries (``iter_runs``, ``get_run``, ``Run(hash, read_only=True)``) read the
repository's *index* (``.aim/meta/index``), which only Aim's UI server (``aim up``) and its CLI
(``aim storage reindex``, ``aim runs``) fill, through ``aim.sdk.index_manager.RepoIndexManager``.
A run written by the SDK alone is therefore invisible to ``aim.Repo`` until one of those has
run. ``index_runs`` does what ``aim up``'s indexing thread does for each run, once, in the
reading process and for its own run at close: ``RepoIndexManager(repo).index(run_hash)``.

A second, for a run on an Aim server (``repo="aim://..."``) only: how many writes Aim's client
still holds for the server. ``aim.Run.track`` hands each write to the client's request queue
(``aim.ext.transport``), which a thread sends to the server, keeping it while the server is
away; Aim's public API can only wait for that queue without a limit (``Run.close()``).
``remote_backlog`` reads the count the queue's thread has not finished
(``run.repo._client.get_queue()._queue.unfinished_tasks``), so a flush can wait for it with one.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from typing import Any

#: The Aim versions this plugin is tested with (``nox -s lowest`` runs the lowest, ``nox -s
#: newest`` the newest on the index). The install requirement names only the lowest; outside
#: this range the core warns once, and ``problems()`` decides whether the plugin runs.
TESTED = "aim>=3.29.1,<3.30"

#: The keyword arguments of ``aim.Run`` this plugin passes (system tracking off, no terminal
#: capture, no system params).
RUN_ARGUMENTS = ("repo", "experiment", "system_tracking_interval", "log_system_params",
                 "capture_terminal_logs")

def problems() -> list[str]:
    """Import Aim; what it lacks of what this plugin uses (``[]``: nothing)."""
    import aim

    found = [f"aim.{name} is missing" for name in ("Run", "Repo", "Image", "Distribution", "Text")
             if not hasattr(aim, name)]
    if hasattr(aim, "Run"):
        parameters = inspect.signature(aim.Run.__init__).parameters
        found += [f"aim.Run() takes no {name!r} argument" for name in RUN_ARGUMENTS
                  if name not in parameters]
    try:
        from aim.sdk.index_manager import RepoIndexManager
    except ImportError:
        return [*found, "aim.sdk.index_manager.RepoIndexManager is missing"]
    if not callable(getattr(RepoIndexManager, "index", None)):
        found.append("aim.sdk.index_manager.RepoIndexManager.index is missing")
    return found


#: How long ``index_runs`` waits for another process's hold on the index (seconds). The
#: index is one RocksDB database that one process at a time may open for writing, and Aim
#: (3.29) opens it with no wait (``Repo._get_index_tree('meta', 0)``): a reader indexing while
#: a writer indexes its closed run, or while ``aim up`` runs, would otherwise fail at once.
#: Aim's own container lock waits 10 s by default; so does this.
INDEX_LOCK_WAIT = 10.0


def index_runs(path: str, run_hashes: Sequence[str] | None = None) -> None:
    """Index runs of the Aim repository at ``path`` as ``aim up`` does, so that
    ``aim.Repo(path)`` queries see runs written by the SDK alone (finished
    or still being written). The backend indexes its run once closed, so a finished run is
    seen by ``aim.Repo`` with no ``aim up`` or ``aim storage reindex``. When another process
    holds the index (a writer indexing its run, ``aim up``), this waits for it, up to
    ``INDEX_LOCK_WAIT`` seconds.

    Args:
        path: the repository's folder (the one holding ``.aim``).
        run_hashes: the runs to index; ``None``: every run of the repository.

    Raises:
        aimrocks.errors.RocksIOError: the repository cannot be read, or another process held
            its index for longer than ``INDEX_LOCK_WAIT`` seconds.
    """
    import aimrocks.errors

    deadline = time.monotonic() + INDEX_LOCK_WAIT
    while True:
        try:
            _index_once(path, run_hashes)
            return
        except aimrocks.errors.RocksIOError as error:
            if "lock file" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _index_once(path: str, run_hashes: Sequence[str] | None) -> None:
    from aim import Repo
    from aim.sdk.index_manager import RepoIndexManager

    repo = Repo(path)
    manager: Any = None
    try:
        manager = RepoIndexManager(repo)  # a new one: the pooled one caches old reads
        for run_hash in repo.list_all_runs() if run_hashes is None else run_hashes:
            manager.index(run_hash)
    finally:
        # Its watchdog observers hold an inotify instance each from construction, never
        # started: stopped here, or every read leaks one (128 per user by default).
        for observer in (getattr(manager, "new_chunk_observer", None),
                         getattr(manager, "chunk_change_observer", None)):
            if observer is not None:
                observer.stop()
        repo.close()


def remote_backlog(run: Any) -> int:
    """The writes of ``run`` (an ``aim.Run`` on an Aim server) that Aim's client has not yet
    had the server take (``0``: every one was taken). See the module docstring.

    Raises:
        RuntimeError: Aim's client no longer has that shape (an Aim outside ``TESTED``); the
            message names the supported versions.
    """
    try:
        return int(run.repo._client.get_queue()._queue.unfinished_tasks)
    except AttributeError as error:
        raise RuntimeError(
            f"aim-monitor cannot read the backlog of Aim's remote client ({error}); this "
            f"plugin supports {TESTED}: install one of those, or log to a local repository"
        ) from error
