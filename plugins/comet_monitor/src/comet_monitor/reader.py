"""Reading a run back from its Comet offline archives (``monitors copy`` and the contract kit
read through here; declared under ``experiment_monitor_readers``). Imports no comet_ml: the
archive is a zip of JSON files (``_compat`` names them).

Which archives: the run's folder (``storage.run_dir``) may hold several experiments (a run
started again with ``resume="never"``) and, per experiment, several archives (one per process
that wrote it: ``<key>.zip``, then ``<key>-<random>.zip`` for each resume). The reader reads
the latest experiment (by its first archive's ``start_time``), its archives in ``start_time``
order, each archive's messages in file order.
"""

from __future__ import annotations

import json
import math
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core_monitor import RunInfo
from core_monitor.media import Image, Text

from . import _compat
from .storage import CAPTION_KEY, CRASH_OTHER, GROUP_OTHER, TAG_KEY, run_dir

__all__ = ["Archive", "open_archive", "read_archives", "read_archives_in", "read_config",
           "read_crash", "read_group", "read_media", "read_others", "read_rows", "read_tags",
           "rows_of"]

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


@dataclass(frozen=True)
class Archive:
    """One offline archive: its path, its ``experiment.json`` and its messages in file order
    (each ``{"type": ..., "payload": ...}`` as Comet wrote it)."""

    path: Path
    experiment: dict[str, Any]
    messages: list[dict[str, Any]]

    @property
    def key(self) -> str:
        """The Comet experiment key (``offline_id``)."""
        return str(self.experiment.get("offline_id") or self.path.stem.split("-")[0])

    def file(self, name: str) -> bytes:
        """The bytes of the file ``name`` inside the archive (an upload's ``file_path``)."""
        with zipfile.ZipFile(self.path) as archive:
            return archive.read(name)


def open_archive(path: Path) -> Archive:
    """Read one archive.

    Raises:
        ValueError: not a Comet offline archive (no ``experiment.json``/``messages.json``, or
            not JSON); the message names the file.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            experiment = json.loads(archive.read(_compat.EXPERIMENT_FILE))
            lines = archive.read(_compat.MESSAGES_FILE).decode("utf-8").splitlines()
    except (KeyError, zipfile.BadZipFile, ValueError) as error:
        raise ValueError(f"{str(path)!r} is not a Comet offline archive ({error}); this reader "
                         f"knows the archives of {_compat.TESTED}") from error
    return Archive(path, experiment, [json.loads(line) for line in lines if line.strip()])


def read_archives(run: RunInfo) -> list[Archive]:
    """The archives of the run ``run`` names (``Monitor.run``): those of its latest experiment,
    oldest first; ``[]`` when there is none. Raises as ``open_archive``."""
    archives = read_archives_in(run_dir(run))
    firsts = [a for a in archives if a.experiment.get("resume_strategy") != "get"] or archives
    if not firsts:
        return []
    latest = firsts[-1].key
    return [a for a in archives if a.key == latest]


def read_archives_in(folder: Path) -> list[Archive]:
    """Every archive in ``folder``, by ``start_time`` (then file name); ``[]`` when there is
    no such folder. Raises as ``open_archive``."""
    if not folder.is_dir():
        return []
    return sorted((open_archive(path) for path in folder.glob("*.zip")),
                  key=lambda a: (a.experiment.get("start_time") or 0, a.path.name))


def _messages(run: RunInfo, kind: str) -> Iterator[tuple[Archive, dict[str, Any]]]:
    for archive in read_archives(run):
        for message in archive.messages:
            if message.get("type") == kind:
                yield archive, message["payload"]


def read_rows(run: RunInfo) -> list[tuple[str, int, float]]:
    """The run's scalars as ``(tag, step, value)`` in the order logged (the tags of one step
    in Comet's order, by name); ``[]`` when none.

    Each is a ``metric_msg`` of the archives (``metricName``, ``step``, ``metricValue``;
    Comet writes NaN and +-inf as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``).
    The duration metric ``Experiment.end()`` adds at the end of each archive is left out.

    Args:
        run: the ``RunInfo`` the run was written with (``Monitor.run``); for ``run.rank > 0``
            that rank's own run is read. Readable once the monitor is closed.

    Raises:
        ValueError: an archive of the run is not a Comet offline archive.
    """
    return rows_of(read_archives(run))


def rows_of(archives: list[Archive]) -> list[tuple[str, int, float]]:
    """``read_rows`` of these archives, in their order."""
    rows: list[tuple[str, int, float]] = []
    for archive in archives:
        metrics = [m["payload"]["metric"] for m in archive.messages
                   if m.get("type") == _compat.METRIC]
        if metrics and metrics[-1]["metricName"] == _compat.DURATION_METRIC:
            metrics.pop()  # Comet's own, written by end()
        for metric in metrics:
            value = metric["metricValue"]
            value = _NON_FINITE[value] if isinstance(value, str) else float(value)
            rows.append((metric["metricName"], int(metric["step"]), value))
    return rows


def read_config(run: RunInfo) -> dict[str, Any]:
    """The run's config: its Comet parameters logged by the plugin (``source`` ``"manual"``;
    Comet's own ``curr_step`` is left out), a parameter logged again taking its last value;
    ``{}`` when none. Argument and errors as for ``read_rows``."""
    config: dict[str, Any] = {}
    for _, payload in _messages(run, _compat.PARAMETER):
        param = payload["param"]
        if param.get("source", "manual") == "manual":
            config[param["paramName"]] = param["paramValue"]
    return config


def read_others(run: RunInfo) -> dict[str, Any]:
    """The run's ``log_other`` values (Comet's "Other" tab: ``Name`` is the run name), the last
    one of a key winning. Argument and errors as for ``read_rows``."""
    return {payload["key"]: payload["value"] for _, payload in _messages(run, _compat.LOG_OTHER)}


def read_group(run: RunInfo) -> str | None:
    """The job's run group the experiment holds (the ``log_other`` ``job.group``, logged with
    ``rank_zero_only=False``); ``None`` when it holds none. Argument and errors as for
    ``read_rows``."""
    group = read_others(run).get(GROUP_OTHER)
    return None if group is None else str(group)


def read_tags(run: RunInfo) -> list[str]:
    """The run's Comet tags (``experiment.json``'s ``tags`` of each archive, in order, each
    once). Argument and errors as for ``read_rows``."""
    tags: list[str] = []
    for archive in read_archives(run):
        tags += [tag for tag in archive.experiment.get("tags") or [] if tag not in tags]
    return tags


def read_crash(run: RunInfo) -> str | None:
    """The reason ``monitor_crash`` stored when the run's training process died, ``None`` for
    a run that ended normally (or does not exist). Argument and errors as for ``read_rows``."""
    reason = read_others(run).get(CRASH_OTHER)
    return None if reason is None else str(reason)


def read_media(run: RunInfo) -> list[tuple[str, int, Image | Text]]:
    """The run's images and text as ``(tag, step, value)``, in the order logged.

    An image is a Comet image upload (``upload_type`` ``"visualization"``, ``figName`` the
    tag): the PNG in the archive decoded to ``uint8`` ``(H, W, C)``, its ``caption`` from the
    upload's metadata. A text is a Comet text sample (``log_text``), its tag the ``tag`` the
    plugin put in the metadata. Argument and errors as for ``read_rows``; needs numpy and
    Pillow for images.
    """
    found: list[tuple[str, int, Image | Text]] = []
    for archive, payload in _messages(run, _compat.FILE_UPLOAD):
        params = payload.get("additional_params") or {}
        metadata = payload.get("metadata") or {}
        kind = payload.get("upload_type")
        step = params.get("step")
        if kind == _compat.TEXT_UPLOAD and TAG_KEY in metadata and step is not None:
            text = archive.file(payload["file_path"]).decode("utf-8")
            found.append((metadata[TAG_KEY], int(step), Text(text)))
        elif kind == _compat.IMAGE_UPLOAD and step is not None:
            found.append((params["figName"], int(step),
                          Image(_pixels(archive.file(payload["file_path"])),
                                caption=metadata.get(CAPTION_KEY))))
    return found


def _pixels(data: bytes) -> Any:
    import io

    import numpy as np
    from PIL import Image as PILImage

    with PILImage.open(io.BytesIO(data)) as picture:
        pixels = np.asarray(picture)
    return pixels.reshape(*pixels.shape[:2], -1)
