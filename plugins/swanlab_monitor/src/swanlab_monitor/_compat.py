"""Every use of SwanLab internals, in one place, with a check that they are still there.

Three things have no public API in SwanLab: (1) a library's run that must not become the
user's: ``swanlab.init()`` makes its run the process's current run (``swanlab.log``,
``swanlab.get_run()``) and refuses a second one while it is alive, and ``Run.finish()``
clears the current run whoever owns it; ``detached`` keeps the plugin's run out of that
slot and puts back a run the user had (``swanlab.sdk.internal.run.set_run``/``clear_run``).
(2) Quiet: SwanLab prints its banner and its ``swanlab sync`` hint through one console
function, ``swanlab.sdk.internal.pkg.console.info``; ``quiet_info`` silences that function
(not SwanLab's warnings and errors) while the plugin starts and finishes its run. (3) Reading
a run back: SwanLab's record file (``run-<id>.swanlab``, what ``swanlab sync`` uploads) is read
with SwanLab's own ``DataStoreReader`` into its ``Record`` protobuf messages.

``problems()`` lists what this SwanLab lacks of that; the backend's ``check_sdk()`` reports it
and the core turns it into a ``BackendLoadError`` naming the tested range
(``core_monitor.sdk``). Nothing here imports SwanLab at module import.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: The SwanLab versions this plugin is tested with (``nox -s lowest`` runs the lowest,
#: ``nox -s newest`` the newest on the index). The install requirement names only the lowest;
#: outside this range the core warns once, and ``problems()`` decides whether the plugin runs.
TESTED = "swanlab>=0.10,<0.11"

_RUN = "swanlab.sdk.internal.run"
_CONSOLE = "swanlab.sdk.internal.pkg.console"
_STORE = "swanlab.sdk.internal.core_python.store"
_RECORD = "swanlab.proto.swanlab.record.v1.record_pb2"
#: Module -> the names used from it.
_USED = {_RUN: ("set_run", "clear_run", "has_run", "get_run"), _CONSOLE: ("info",),
         _STORE: ("DataStoreReader", "LEVELDBLOG_HEADER_LEN"), _RECORD: ("Record",)}
#: The ``Record`` fields the reader reads.
_RECORD_FIELDS = ("start", "scalar", "finish")


def problems() -> list[str]:
    """Import SwanLab; what it lacks of the internals this plugin uses (``[]``: nothing)."""
    found = []
    for module, names in _USED.items():
        try:
            loaded = importlib.import_module(module)
        except ImportError:
            found.append(f"no module {module}")
            continue
        found += [f"no {module}.{name}" for name in names if not hasattr(loaded, name)]
    if not found:
        fields = importlib.import_module(_RECORD).Record.DESCRIPTOR.fields_by_name
        found += [f"no Record.{name}" for name in _RECORD_FIELDS if name not in fields]
    return found


@contextmanager
def detached() -> Iterator[None]:
    """Run the body (``swanlab.init`` or ``Run.finish`` of the plugin's run) with no current
    run, then put back the run that was current before (the user's, or none): the plugin's
    run never becomes ``swanlab.get_run()``."""
    runs = importlib.import_module(_RUN)
    before = runs.get_run() if runs.has_run() else None
    runs.clear_run()
    try:
        yield
    finally:
        if before is not None:
            runs.set_run(before)
        else:
            runs.clear_run()


@contextmanager
def quiet_info(quiet: bool) -> Iterator[None]:
    """With ``quiet``, SwanLab's ``console.info`` lines (banner, folder, ``swanlab sync`` hint)
    are not printed during the body; warnings and errors still are."""
    if not quiet:
        yield
        return
    console: Any = importlib.import_module(_CONSOLE)
    info = console.info
    console.info = _silent
    try:
        yield
    finally:
        console.info = info


def _silent(*args: Any, **kwargs: Any) -> None:
    return None


def read_records(path: Path) -> Iterator[Any]:
    """Yield the ``Record`` messages of a ``run-<id>.swanlab`` file in order, read with
    SwanLab's own ``DataStoreReader`` (what ``swanlab sync`` reads).

    A file shorter than its header (SwanLab's writer has created it and not yet written
    the header: a run being started) yields nothing, where SwanLab's reader fails an
    ``assert``.

    Raises:
        FileNotFoundError: no such file.
        swanlab.exceptions.DataStoreError: not a SwanLab record file, or a corrupt one.
    """
    if not path.is_file():
        raise FileNotFoundError(f"no SwanLab record file at {str(path)!r}")
    store = importlib.import_module(_STORE)
    if path.stat().st_size < store.LEVELDBLOG_HEADER_LEN:
        return
    record_class = importlib.import_module(_RECORD).Record
    reader = store.DataStoreReader()
    reader.open(str(path))
    try:
        for data in reader:
            record = record_class()
            record.ParseFromString(data)
            yield record
    finally:
        reader.close()
