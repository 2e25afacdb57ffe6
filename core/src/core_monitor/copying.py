"""``monitors copy``: one run from any backend with a reader to any backend, step-exact.

The run is read through the source plugin's reader (``core_monitor.readers``) and written
through a normal ``Monitor``, so every rule of ``log()`` applies (steps exactly as read, media
the destination does not store skipped and counted), one ``log()`` per step (a row per step in
Trackio and wandb, whatever the source reader's order). Afterwards the destination is read back
through its own reader and compared: one summary line per kind (points, config keys, media).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, cast

from . import discovery
from .capabilities import Capabilities
from .errors import ConfigError
from .readers import Reader, check_config, check_media, check_rows, load_reader, same_value
from .run import RunInfo

#: Total items (points + media values) from which the progress bar shows (on a terminal).
PROGRESS_FROM = 2000


class CopyError(RuntimeError):
    """The source run cannot be read: it does not exist, or its reader broke the contract."""


@dataclass
class CopyReport:
    """What a copy did, per kind.

    Attributes:
        points, config, media: ``(found in the source, arrived in the destination)``;
            ``arrived`` is ``None`` when the destination has no reader (not verified).
        skipped: media kind -> values not sent (the destination does not store the kind).
        unstorable: the points not sent because the destination's tracker cannot store them
            (its ``Capabilities.repeated_steps``, ``max_step`` and ``history``), in words;
            ``""``: none.
        config_skipped: config keys not sent (the destination has ``stores_config`` off).
        lines: the summary lines printed.
    """

    points: tuple[int, int | None] = (0, None)
    config: tuple[int, int | None] = (0, None)
    media: tuple[int, int | None] = (0, None)
    skipped: dict[str, int] = field(default_factory=dict)
    unstorable: str = ""
    config_skipped: int = 0
    lines: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether everything sent arrived (``True`` when not verified)."""
        return all(arrived is None or arrived >= found
                   for found, arrived in (self.points, self.config, self.media))


def parse_options(pairs: list[str] | None, flag: str) -> dict[str, Any]:
    """``["K=V", ...]`` -> ``{K: V}``; ``V`` is read as JSON when it is JSON (``5``, ``true``,
    ``null``, ``[1, 2]``), else kept as text.

    Raises:
        ConfigError: an item without ``=`` or with an empty key (naming it and ``flag``).
    """
    import json

    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} {pair!r} is not KEY=VALUE, e.g. {flag} mode=offline")
        try:
            options[key] = json.loads(text)
        except ValueError:
            options[key] = text
    return options


def _read(reader: Reader, run: RunInfo, options: Mapping[str, Any], what: str) -> Any:
    function = getattr(reader, what)
    if function is None:
        return [] if what != "read_config" else {}
    return function(run, **reader.options_for(function, options))


def _dtype(name: str) -> str:
    try:
        cls = discovery.load_backend(discovery.find_backend(name))
    except Exception:  # a reader without a loadable backend: compare exactly
        return "float64"
    return Capabilities.of(cls).value_dtype


def _capabilities(name: str) -> Capabilities:
    return Capabilities.of(discovery.load_backend(discovery.find_backend(name)))


def _storable(rows: list[tuple[str, int, float]], caps: Capabilities,
              ) -> tuple[list[tuple[str, int, float]], str]:
    """The points of ``rows`` the destination's tracker stores (its ``repeated_steps``,
    ``max_step`` and ``history``), and why the others are not sent (``""`` when all are)."""
    kept, seen = [], set()
    repeated = beyond = 0
    for tag, step, value in rows:
        if step > caps.max_step:
            beyond += 1
        elif caps.repeated_steps == "first" and (tag, step) in seen:
            repeated += 1
        else:
            seen.add((tag, step))
            kept.append((tag, step, value))
    why = [f"{repeated} repeated (tag, step) (it keeps the first)"] if repeated else []
    why += [f"{beyond} beyond step {caps.max_step}"] if beyond else []
    if caps.history == "latest":  # only the last point of each tag is kept
        last = {tag: i for i, (tag, _, _) in enumerate(kept)}
        earlier = len(kept) - len(last)
        kept = [row for i, row in enumerate(kept) if last[row[0]] == i]
        why += [f"{earlier} earlier points (it keeps the latest of each tag)"] if earlier else []
    return kept, "; ".join(why)


def copy_run(
    source: str, dest: str, *, project: str, name: str,
    log_dir: str | os.PathLike[str] | None = None,
    to_log_dir: str | os.PathLike[str] | None = None,
    to_project: str | None = None, to_name: str | None = None,
    source_options: Mapping[str, Any] | None = None,
    dest_options: Mapping[str, Any] | None = None,
    dry_run: bool = False, out: TextIO | None = None,
) -> CopyReport:
    """Copy the run ``project``/``name`` (under ``log_dir``) from backend ``source`` to ``dest``.

    Args:
        source: a backend with a reader (``monitors list`` shows them).
        dest: any installed backend.
        project, name, log_dir: the source run, as it was given to its ``Monitor``.
        to_log_dir, to_project, to_name: the destination run; default: the source's.
        source_options: keyword options of the source reader (e.g. MLflow's
            ``tracking_uri``, TensorBoard's ``run_dir``); unknown ones are ignored per function.
        dest_options: the destination backend's options (``Monitor(..., dest=options)``);
            those its reader accepts are used to read it back.
        dry_run: read the source and print what would be copied; write nothing.
        out: where the summary goes (default ``sys.stdout``).

    Returns:
        The ``CopyReport``; ``complete`` is ``False`` when something did not arrive.

    Raises:
        ConfigError: ``source`` has no reader; ``dest`` is unknown; a bad option; the
            destination run is the source run itself.
        CopyError: the source run does not exist, holds nothing, or its reader returns what
            the reader contract does not allow.
    """
    from .monitor import Monitor

    out = out or sys.stdout
    source_options, dest_options = dict(source_options or {}), dict(dest_options or {})
    reader = load_reader(source)
    run = RunInfo(project=project, name=name,
                  log_dir=Path(log_dir) if log_dir is not None else None)
    try:
        rows = _read(reader, run, source_options, "read_rows")
        config = _read(reader, run, source_options, "read_config")
        media = _read(reader, run, source_options, "read_media")
    except (FileNotFoundError, LookupError) as error:
        raise CopyError(f"{source}: no run {name!r} in project {project!r}: {error}") from None
    problems = check_rows(rows) + check_config(config) + check_media(media)
    if problems:
        raise CopyError(f"{source}'s reader ({reader.module}) breaks the reader contract "
                        f"(core_monitor.readers): {'; '.join(problems)}")
    if not rows and not config and not media:
        raise CopyError(f"{source}: run {name!r} of project {project!r} holds nothing to copy "
                        f"(log_dir={os.fspath(log_dir) if log_dir else None!r})")
    caps = _capabilities(dest)
    kinds = caps.media_kinds
    sent_media = [(t, s, v) for t, s, v in media if v.kind in kinds]
    report = CopyReport(skipped=dict(Counter(v.kind for _, _, v in media if v.kind not in kinds)))
    rows, report.unstorable = _storable(rows, caps)
    if not caps.stores_config:  # e.g. prometheus: nothing to send it to, nothing to miss
        report.config_skipped, config = len(config), {}
    report.points, report.config, report.media = ((len(rows), None), (len(config), None),
                                                  (len(sent_media), None))
    steps = sorted({s for _, s, _ in rows})
    span = f", steps {steps[0]}..{steps[-1]}" if steps else ""
    if dry_run:
        report.lines = [
            f"would copy {source} -> {dest}: {len(rows)} points ({len({t for t, _, _ in rows})} "
            f"tags{span}), {len(config)} config keys, {len(sent_media)} media values"
            + _skipped_text(report.skipped, dest) + _unstorable_text(report.unstorable, dest)]
        print(report.lines[0], file=out)
        return report

    to = RunInfo(project=to_project or project, name=to_name or name,
                 log_dir=Path(to_log_dir) if to_log_dir is not None else run.log_dir)
    if dest == source and (to.project, to.name, to.log_dir) == (run.project, run.name,
                                                              run.log_dir):
        raise ConfigError(f"monitors copy {source} {dest} would write the run {name!r} into "
                          "itself; give --to-log-dir, --to-project or --to-name")
    monitor = Monitor([dest], project=to.project, name=to.name, config=config,
                      log_dir=to.log_dir, strict=True, **cast(dict[str, Any], {dest: dest_options}))
    try:
        _write(monitor, rows, sent_media)
    finally:
        monitor.close()
    _verify(report, monitor.run, dest, dest_options, rows, config, sent_media,
            _dtype(source), span)
    for line in report.lines:
        print(line, file=out)
    return report


def _write(monitor: Any, rows: list[tuple[str, int, float]],
           media: list[tuple[str, int, Any]]) -> None:
    """One ``log()`` per call of ``_calls(rows + media)``, with a progress bar on a terminal
    for long runs."""
    bar = _progress(len(rows) + len(media))
    for step, values in _calls([*rows, *media]):
        monitor.log(values, step=step)
        bar.update(len(values))
    bar.close()


def _calls(points: list[tuple[str, int, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """``(step, {tag: value})`` per ``log()`` call that writes ``points`` (``(tag, step,
    value)``, in any order): every point of a step in one call, so a tracker that stores one
    row per call (Trackio, wandb) gets one row per step, whichever order the source's reader
    returns (TensorBoard's is tag by tag).

    A step that holds a tag twice (logged twice at one step) takes one call per repetition:
    the k-th point of a tag at a step goes into the k-th call at that step, which keeps each
    tag's points in the order read (the reader contract's order). Steps ascend.
    """
    by_step: dict[int, list[dict[str, Any]]] = {}
    seen: Counter[tuple[str, int]] = Counter()  # (tag, step) -> its points placed so far
    for tag, step, value in points:
        calls = by_step.setdefault(step, [])
        k = seen[(tag, step)]
        seen[(tag, step)] += 1
        if k == len(calls):
            calls.append({})
        calls[k][tag] = value
    return [(step, call) for step in sorted(by_step) for call in by_step[step]]


def changed_values(sent: Mapping[str, Any], stored: Mapping[str, Any]) -> list[str]:
    """``key: value (type) -> value (type)`` for each key of ``sent`` that ``stored`` holds with
    another type or value (an int stored as a float, a list as its text), in key order.

    A tracker's config store may keep only some types (MLflow's params are text, for one):
    the copy arrived, but not as it was given, and the report says so. A list and a tuple
    count as the same type (readers give back lists); an int equal to a float does not.
    """
    found = []
    for key in sorted(k for k in sent if k in stored):
        before, after = sent[key], stored[key]
        if _same_config_value(before, after):
            continue
        found.append(f"{key} {before!r} ({type(before).__name__}) -> {after!r} "
                     f"({type(after).__name__})")
    return found


def _same_config_value(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(map(_same_config_value, a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same_config_value(a[k], b[k]) for k in a)
    if type(a) is not type(b):
        return False
    return bool(a == b) or (isinstance(a, float) and a != a and b != b)  # NaN == NaN here


def _unstorable_text(why: str, dest: str) -> str:
    return f"; not sent, as {dest} cannot store them: {why}" if why else ""


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int) -> Any:
    if total < PROGRESS_FROM:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency; a broken install still copies
        return _NoBar()
    # disable=None: no bar when stderr is not a terminal (a CI log, a pipe)
    return tqdm(total=total, unit="value", desc="copying", disable=None, leave=False,
                file=sys.stderr)


def _skipped_text(skipped: Mapping[str, int], dest: str) -> str:
    if not skipped:
        return ""
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(skipped.items()))
    return f"; skipped (not stored by {dest}): {kinds}"


def _verify(report: CopyReport, to: RunInfo, dest: str, dest_options: Mapping[str, Any],
            rows: list[tuple[str, int, float]], config: Mapping[str, Any],
            media: list[tuple[str, int, Any]], source_dtype: str, span: str) -> None:
    """Read the destination back; fill ``report``'s arrived counts and summary lines."""
    try:
        reader = load_reader(dest)
    except ConfigError:
        report.lines = [f"points: {len(rows)} sent{span}", f"config: {len(config)} keys sent",
                        f"media: {len(media)} sent" + _skipped_text(report.skipped, dest),
                        f"(not verified: {dest} has no reader)"]
        return
    dtype = "float32" if "float32" in (source_dtype, _dtype(dest)) else "float64"
    stored = _read(reader, to, dest_options, "read_rows")
    stored_config = _read(reader, to, dest_options, "read_config") if config else {}
    stored_media = _read(reader, to, dest_options, "read_media") if media else []

    by_key: dict[tuple[str, int], list[float]] = {}
    for tag, step, value in stored:
        by_key.setdefault((tag, step), []).append(value)
    arrived, wrong = 0, []
    for tag, step, value in rows:
        found = by_key.get((tag, step), [])
        match = next((i for i, v in enumerate(found) if same_value(v, value, dtype)), None)
        if match is None:
            wrong.append(f"{tag}@{step}")
        else:
            found.pop(match)
            arrived += 1
    report.points = (len(rows), arrived)
    line = (f"points: {arrived} of {len(rows)} arrived{span} (compared at {dtype})"
            + _unstorable_text(report.unstorable, dest))
    if wrong:
        line += f"; missing or different: {', '.join(wrong[:5])}" + (
            f" and {len(wrong) - 5} more" if len(wrong) > 5 else "")
    report.lines.append(line)

    missing_keys = sorted(k for k in config if k not in stored_config)
    report.config = (len(config), len(config) - len(missing_keys))
    line = f"config: {report.config[1]} of {len(config)} keys arrived"
    changed = changed_values(config, stored_config)
    if changed:
        line += (f", {len(changed)} of them changed by {dest}: " + "; ".join(changed[:5])
                 + (f" and {len(changed) - 5} more" if len(changed) > 5 else ""))
    if missing_keys:
        line += f"; missing: {', '.join(missing_keys[:5])}"
    if report.config_skipped:
        line += f"; not sent (not stored by {dest}): {report.config_skipped} keys"
    report.lines.append(line)

    have = Counter((t, s, v.kind) for t, s, v in stored_media)
    got, lost = 0, []
    for tag, step, value in media:
        if have[(tag, step, value.kind)] > 0:
            have[(tag, step, value.kind)] -= 1
            got += 1
        else:
            lost.append(f"{value.kind} {tag}@{step}")
    report.media = (len(media), got)
    line = f"media: {got} of {len(media)} arrived" + _skipped_text(report.skipped, dest)
    if lost:
        line += f"; missing: {', '.join(lost[:5])}"
    report.lines.append(line)
