"""Every use of DVCLive internals, in one place, with a check that they are still there.

``dvclive.Live()`` looks for the DVC repository around the current folder and, inside a Git
repository that has none, runs ``dvc init`` there (it creates ``.dvc/`` and ``.dvcignore`` in
the user's repository and prints "Initialized DVC repository."); it also reads a DVC Studio
token from the environment or DVC's config and then posts live metrics to Studio. Neither has a
public switch (``Live(save_dvc_exp=False, dvcyaml=None)`` still does both), and a logging
backend must write nothing outside its ``log_dir`` nor send anything by default. So the plugin
runs a ``Live`` whose two private steps of ``__init__`` that do this, ``_init_dvc`` and
``_init_studio``, do nothing but set what the rest of ``Live`` reads. ``problems()`` checks
that ``Live`` still has them and calls them from ``__init__``; the backend's ``check_sdk()``
reports what is missing and the core turns it into a ``BackendLoadError`` naming the tested
range (``core_monitor.sdk``). Nothing here imports DVCLive at module import.
"""

from __future__ import annotations

from typing import Any

#: The DVCLive versions this plugin is tested with (``nox -s lowest`` runs the lowest,
#: ``nox -s newest`` the newest on the index). The install requirement names only the lowest;
#: outside this range the core warns once, and ``problems()`` decides whether the plugin runs.
TESTED = "dvclive>=3.48,<3.50"

#: The private steps of ``Live.__init__`` replaced (see the module's docstring).
_REPLACED = ("_init_dvc", "_init_studio")
#: The private attributes those steps set and the rest of ``Live`` reads.
_SET = ("_dvc_file", "_studio_events_to_skip", "_dvc_studio_config")


def problems() -> list[str]:
    """Import DVCLive; what it lacks of the internals this plugin uses (``[]``: nothing)."""
    from dvclive import Live

    found = [f"no Live.{name}" for name in _REPLACED if not callable(getattr(Live, name, None))]
    names = set(Live.__init__.__code__.co_names)
    found += [f"Live.__init__ no longer calls {name}" for name in _REPLACED if name not in names]
    step = vars(Live).get("step")
    if not isinstance(step, property) or step.fset is None:
        found.append("no settable Live.step")
    return found


def local_live(**kwargs: Any) -> Any:
    """A ``dvclive.Live(**kwargs)`` that neither looks for nor creates a DVC repository, nor
    posts to DVC Studio: it writes only under ``kwargs["dir"]``.

    Everything else is DVCLive's own: ``log_metric``, ``log_params``, ``log_image``,
    ``make_summary``, resume (``resume=True``), the files and their format.
    """
    from dvclive import Live

    class _LocalLive(Live):
        def _init_dvc(self) -> None:
            # What Live reads of _init_dvc's work: the dvc.yaml path (unused with dvcyaml=None)
            # and no repository (_dvc_repo stays None, as Live.__init__ set it).
            self._dvc_file = "dvc.yaml"

        def _init_studio(self) -> None:
            self._dvc_studio_config = {}
            self._studio_events_to_skip = {"start", "data", "done"}

    return _LocalLive(**kwargs)
