"""``monitors sync``: deliver what a run's journal holds past each backend's cursor.

The journal (``core_monitor.journal``) keeps every call a ``Monitor`` accepted, and one cursor
per backend: how far its tracker confirmed. ``sync_journal`` constructs each backend that is
behind in this process, from the journal's last ``START`` record (its class, options and the
``RunInfo``), continuing the same run (``resume="allow"``, ``core_monitor.resume``), hands it
every call from its cursor on, in order, and moves the cursor after each flush
(``SYNC_FLUSH_CALLS`` calls) and at the end: run twice, nothing is delivered twice. ``to``
names other backends (installed ones), each with a cursor of its own in the same journal: the
offline-to-online path (a compute node without network writes the journal, a login node that
shares the filesystem syncs it to a tracking server).

A journal whose writing process still runs (same host, its process alive, no ``CLOSE`` after
its ``START``) is refused unless ``follow``: its own writers deliver it. With ``follow`` the
sync reads on as records arrive, until the journal's last monitor closed.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import journal
from .dispatch.backends import StartedBackend, new_manager, start_backend
from .errors import ConfigError
from .journal import CLOSE, START
from .media import MediaRoutes
from .stored import already_stored, without

#: Calls delivered between two flushes (each moves the cursor).
SYNC_FLUSH_CALLS = 1000
#: Seconds between two looks at a live journal (``follow``).
FOLLOW_SECONDS = 1.0
#: Seconds a sync waits for a writer of the run that still holds a backend's cursor (its
#: training process died; it writes what its pipe held, then ends: ``wire.DRAIN_SECONDS``).
HOLD_SECONDS = 60.0


class SyncError(Exception):
    """A journal that cannot be synced (none there, still written, a backend that fails)."""


@dataclass
class SyncReport:
    """What ``sync_journal`` delivered: backend name -> calls handed over, calls found already
    stored (``already_stored``: not handed over again), and the failures."""

    delivered: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Whether every backend got everything (no failure)."""
        return not self.failed


def leftovers(folder: str | os.PathLike[str]) -> dict[str, int]:
    """Backend name -> calls of the journal in ``folder`` its cursor has not passed (the
    backends its ``START`` records name); empty when there is no journal."""
    if not journal.segment_paths(folder):
        return {}
    names = {name for start in journal.starts(folder) for name, *_ in start.backends}
    return journal.journal_left(folder, sorted(names))


def live(start: journal.Start) -> bool:
    """Whether the process that wrote ``start`` still runs (on this host)."""
    if start.host != os.uname().nodename:
        return False
    try:
        os.kill(start.pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def sync_journal(folder: str | os.PathLike[str], *, to: Iterable[str] = (),
                 options: Mapping[str, Mapping[str, Any]] | None = None,
                 follow: bool = False, progress: bool = False,
                 say: Callable[[str], None] = lambda text: None) -> SyncReport:
    """Deliver the journal in ``folder`` past each backend's cursor (module docstring).

    Args:
        folder: the run's journal folder (``core_monitor.journal.journal_folder``).
        to: installed backend names to deliver to instead of the run's own backends.
        options: backend name -> options overriding those the journal recorded.
        follow: wait for a live run's records until its monitor closed.
        progress: show a ``tqdm`` progress bar per backend (when ``tqdm`` is installed).
        say: called with one line per backend.

    Returns:
        What each backend got; a backend that failed to start or raised keeps its cursor
        where it stopped and is named in ``failed``.

    Raises:
        SyncError: ``folder`` holds no journal, or its writer still runs (without
            ``follow``).
        ConfigError: a backend of ``to`` is not installed.
    """
    folder = Path(folder)
    found = journal.starts(folder)
    if not found:
        raise SyncError(f"{folder} holds no run journal (no segment with a start record); "
                        "a journal lives in <log_dir>/.journal/<project>/<run name>")
    last = found[-1]
    if not follow and live(last) and not journal.closed(folder):
        raise SyncError(f"the run writing {folder} is still running (process {last.pid}); "
                        "its writers deliver it. Use --follow to deliver it as it is written")
    specs: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for start in found:
        for name, module, qualname, recorded in start.backends:
            specs[name] = (module, qualname, dict(recorded))
    names = list(to) or list(specs)
    report = SyncReport()
    for name in names:
        delivered, skipped, error = _sync_one(folder, name, specs.get(name), last,
                                              dict((options or {}).get(name) or {}), follow,
                                              progress)
        report.delivered[name], report.skipped[name] = delivered, skipped
        if error is not None:
            report.failed[name] = error
            say(f"{name}: failed after {delivered} call(s): {error}")
        else:
            say(f"{name}: {delivered} call(s) delivered"
                + (f", {skipped} found already stored" if skipped else ""))
    if not list(to) and not any(start.keep for start in found):
        journal.collect(folder, specs)
    return report


def _backend_class(name: str, spec: tuple[str, str, dict[str, Any]] | None) -> type:
    """The class of backend ``name``: as the journal recorded it, else the installed one."""
    import importlib

    from . import discovery

    if spec is not None:
        try:
            found: Any = importlib.import_module(spec[0])
            for part in spec[1].split("."):
                found = getattr(found, part)
            if isinstance(found, type):
                return found
        except (ImportError, AttributeError):
            pass
    selected = discovery.select([name], strict=True)[name]
    return selected if isinstance(selected, type) else discovery.load_backend(selected)


def _sync_one(folder: Path, name: str, spec: tuple[str, str, dict[str, Any]] | None,
              last: journal.Start, options: dict[str, Any], follow: bool,
              progress: bool) -> tuple[int, int, str | None]:
    """Deliver to backend ``name`` from its cursor; ``(calls delivered, calls found already
    stored, failure or None)``."""
    deadline = time.monotonic() + HOLD_SECONDS
    lock = journal.hold(folder, name, wait=False)
    while lock is None and time.monotonic() < deadline:
        time.sleep(0.2)  # a writer of the run still writes (its trainer died): let it finish
        lock = journal.hold(folder, name, wait=False)
    if lock is None:
        return 0, 0, (f"a writer process of the run still holds its cursor after "
                      f"{HOLD_SECONDS:.0f} s; run monitors sync again once it ended")
    try:
        return _sync_held(folder, name, spec, last, options, follow, progress)
    finally:
        if lock >= 0:
            os.close(lock)


def _sync_held(folder: Path, name: str, spec: tuple[str, str, dict[str, Any]] | None,
               last: journal.Start, options: dict[str, Any], follow: bool,
               progress: bool) -> tuple[int, int, str | None]:
    """``_sync_one`` once the backend's cursor is held by this process."""
    cursor = journal.read_cursor(folder, name)
    if not follow and not journal.journal_left(folder, [name]):
        return 0, 0, None
    try:
        cls = _backend_class(name, spec)
    except ConfigError:
        raise
    except Exception as error:
        return 0, 0, f"{type(error).__name__}: {error}"
    run = dataclasses.replace(last.run, resume="allow", resumed=False, last_step=None)
    recorded = dict(spec[2]) if spec is not None else {}
    skip, held = already_stored(folder, name, run, {**recorded, **options}, cursor)
    if not follow and skip:
        end = _stored_through(folder, cursor, skip)
        if end is not None:  # its storage holds everything: no new run (SwanLab, ClearML)
            journal.write_cursor(folder, name, end)
            return 0, len(skip), None
    try:
        backend = start_backend(new_manager(), name, cls, run, {**recorded, **options})
    except Exception as error:
        return 0, 0, f"it did not start: {type(error).__name__}: {error}"
    MediaRoutes().add(name, getattr(cls, "media_kinds", ()), backend.hooks)
    bar = _bar(name, journal.journal_left(folder, [name]).get(name, 0)) if progress else None
    delivered = 0
    since = cursor
    try:
        while True:
            position, count, ended = _deliver(folder, backend, since, bar, skip, held)
            delivered += count
            since = position
            if not follow or ended:
                break
            time.sleep(FOLLOW_SECONDS)
        _call(backend, "monitor_flush")
        _call(backend, "monitor_close")
    except Exception as error:
        return delivered - len(skip), len(skip), f"{type(error).__name__}: {error}"
    finally:
        if bar is not None:
            bar.close()
    journal.write_cursor(folder, name, since)
    return delivered - len(skip), len(skip), None


def _deliver(folder: Path, backend: StartedBackend, since: int, bar: Any, skip: set[int],
             held: Mapping[int, Counter[tuple[str, int]]]) -> tuple[int, int, bool]:
    """Hand ``backend`` every call from ``since`` but those of ``skip`` (already stored), and
    of a call in ``held`` (stored in part) only the points its storage lacks, flushing and
    moving its cursor every ``SYNC_FLUSH_CALLS``; ``(the seq after the last record read,
    calls, the journal's last record is a CLOSE)``.

    Raises:
        Exception: what the backend raised (its cursor stays at its last flush).
    """
    position, count, ended, unflushed = since, 0, False, 0
    for seq, hook, kwargs in journal.calls(folder, since):
        position = seq + 1
        ended = hook == CLOSE
        if hook in (START, CLOSE):
            continue
        function = backend.hooks.get(hook)
        if function is not None and seq not in skip:
            if seq in held:
                kwargs = {**kwargs, "events": without(kwargs["events"], held[seq])}
            function(**kwargs)
        count += 1
        unflushed += 1
        if bar is not None:
            bar.update(1)
        if unflushed >= SYNC_FLUSH_CALLS:
            _call(backend, "monitor_flush")
            journal.write_cursor(folder, backend.name, position)
            unflushed = 0
    return position, count, ended


def _stored_through(folder: Path, since: int, skip: set[int]) -> int | None:
    """The seq after the journal's last record when every call from ``since`` on is in
    ``skip``; ``None`` when one is not (it must be delivered)."""
    end = since
    for seq, hook, _ in journal.calls(folder, since):
        if hook not in (START, CLOSE) and seq not in skip:
            return None
        end = seq + 1
    return end


def _call(backend: StartedBackend, hook: str) -> None:
    function = backend.hooks.get(hook)
    if function is not None:
        function()


def _bar(name: str, total: int) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=name, unit="call", leave=True)
