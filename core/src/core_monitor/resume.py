"""Continuing a run after a restart: ``Monitor(..., resume="never" | "allow" | "must")``.

A run is identified by ``(project, name, log_dir)`` and, above rank 0, the rank (each backend
names it as it always does: ``RunInfo.ranked_name``, TensorBoard's ``rank<k>`` folder). The
mode reaches every backend as ``RunInfo.resume``:

* ``"never"`` (default): what a backend always did; a new run, even when one of that identity
  exists (TensorBoard writes a new event file into the run's folder, as before).
* ``"allow"``: continue the existing run of that identity if there is one, else start it.
* ``"must"``: continue it; a backend that finds none raises ``NoRunToResume`` from its
  constructor **before it writes anything**. The core starts every backend anyway, gathers
  those errors and raises one ``NoRunToResume`` naming all of them (and closes the backends
  that did find their run, without logging to them).

The backend protocol (what a plugin implements to resume; the first-party ones do):

* ``Capabilities(supports_resume=True)`` (the class's ``capabilities``). With ``"allow"``, a
  backend without it starts a new run (one ``ConfigWarning`` names it); with ``"must"`` it is
  named in the ``NoRunToResume`` before any backend is constructed.
* in ``__init__``, read ``run.resume``; after construction set the instance attribute
  ``last_step: int | None``: the largest step already stored in the run it continued, ``None``
  when it started a new run. ``resumed: bool`` may be set as well, for a run that exists but
  holds no step (default: ``last_step is not None``).

After the start the core sets ``Monitor.run`` to a ``RunInfo`` with ``resumed`` (some backend
continued a run) and ``last_step`` (the largest step *every* continuing backend holds: the
smallest of their ``last_step``; ``None`` when nothing is to be skipped), and
``Monitor.last_steps`` (backend name -> its ``last_step``). ``log(step=None)`` continues after
the largest step any backend holds.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from ._stack import caller_level
from .capabilities import Capabilities
from .errors import ConfigError, ConfigWarning
from .run import RunInfo

#: The values of ``Monitor(resume=...)``.
RESUME_MODES = ("never", "allow", "must")


class NoRunToResume(ConfigError):
    """``resume="must"`` and a backend has no earlier run of this identity.

    A backend raises it from its constructor, before writing anything, with a message saying
    where it looked; the ``Monitor`` raises one combining every backend's.

    Attributes:
        missing: backend name -> where that backend looked (the message it raised); empty on
            the error a backend raises itself.
    """

    def __init__(self, message: str, missing: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.missing = dict(missing or {})


def check_resume(value: Any) -> str:
    """Return ``value`` when it is one of ``RESUME_MODES``.

    Raises:
        ConfigError: any other value, naming it and the accepted ones.
    """
    if not isinstance(value, str) or value not in RESUME_MODES:
        raise ConfigError(
            f"resume={value!r} is not one of {', '.join(map(repr, RESUME_MODES))}; use "
            "resume='allow' to continue the run of this project, name and log_dir if there is "
            "one (else start it), resume='must' to fail when there is none"
        )
    return value


def check_classes(run: RunInfo, classes: Mapping[str, type]) -> None:
    """Before any backend is constructed: the selected backends that cannot resume.

    Raises:
        NoRunToResume: ``run.resume == "must"`` and a backend class lacks
            ``supports_resume = True`` (nothing was constructed yet).

    Warns:
        ConfigWarning: ``run.resume == "allow"`` and such a backend: it starts a new run.
    """
    if run.resume == "never":
        return
    lacking = [name for name, cls in classes.items()
               if not Capabilities.of(cls).supports_resume]
    if not lacking:
        return
    if run.resume == "must":
        raise combined(run, {name: "it cannot resume a run (no supports_resume = True)"
                             for name in lacking})
    warnings.warn(
        f"resume='allow': backend(s) {', '.join(map(repr, lacking))} cannot continue a run "
        "(their class declares no supports_resume = True); they start a new run",
        ConfigWarning, stacklevel=caller_level(),
    )


def combined(run: RunInfo, missing: Mapping[str, str]) -> NoRunToResume:
    """The one ``NoRunToResume`` the ``Monitor`` raises for every backend without a run."""
    # a backend's own message often starts with its name already (``"trackio: no run ..."``)
    where = "; ".join(f"{name}: {text.removeprefix(f'{name}: ')}"
                      for name, text in missing.items())
    log_dir = ("the SDKs' default folders" if run.log_dir is None
               else f"log_dir={str(run.log_dir)!r}")
    return NoRunToResume(
        f"resume='must' but {len(missing)} backend(s) have no run named {run.name!r} in "
        f"project {run.project!r} ({log_dir}) to continue: {where}. Nothing was logged. Fix: "
        "check project, name and log_dir, or pass resume='allow' to start the run when it is "
        "missing", missing,
    )


def raise_missing(run: RunInfo, errors: Mapping[str, NoRunToResume]) -> None:
    """Raise one ``NoRunToResume`` for the backends that raised one (none: return).

    Raises:
        NoRunToResume: naming every backend of ``errors`` and what it said.
    """
    if errors:
        raise combined(run, {name: str(error) for name, error in errors.items()})


def backend_state(instance: object) -> tuple[bool, int | None]:
    """``(resumed, last_step)`` a started backend reports (see the module docstring)."""
    last_step = getattr(instance, "last_step", None)
    if isinstance(last_step, bool) or not isinstance(last_step, int):
        last_step = None
    resumed = getattr(instance, "resumed", None)
    return (bool(resumed) if isinstance(resumed, bool) else last_step is not None), last_step


def collect(run: RunInfo, states: Mapping[str, tuple[bool, int | None]],
            ) -> tuple[RunInfo, dict[str, int | None], int]:
    """Fold what every started backend found into the run the ``Monitor`` shows.

    Args:
        run: the run every backend was given.
        states: backend name -> ``(resumed, last_step)`` (``backend_state``).

    Returns:
        ``(run with resumed and last_step set, {backend: last_step}, the first automatic
        step)``: ``last_step`` is the smallest ``last_step`` of the backends that continued a
        run (``None`` when none did, or one holds no step); the first automatic step is one
        past the largest step any backend holds (0 when none).
    """
    continued = [step for resumed, step in states.values() if resumed]
    held = [step for _, step in states.values() if step is not None]
    last_step = None
    if continued and all(step is not None for step in continued):
        last_step = min(continued)  # type: ignore[type-var]
    info = run if (run.resumed, run.last_step) == (bool(continued), last_step) else \
        dataclasses.replace(run, resumed=bool(continued), last_step=last_step)
    return info, {name: step for name, (_, step) in states.items()}, max(held, default=-1) + 1


def max_step(steps: Iterable[int]) -> int | None:
    """The largest of ``steps``, ``None`` when there is none: a plugin's ``last_step`` from
    what its reader returns (``max_step(step for _, step, _ in read_rows(run))``)."""
    return max(steps, default=None)
