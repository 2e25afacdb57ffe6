"""Checking a plugin's SDK: installed, inside the tested range, and still of the shape it uses.

A plugin that reaches into its SDK's private API fences that access in its ``_compat.py`` and
declares, on its backend class, what it was tested with and what it relies on::

    class MySdkMonitor:
        #: The SDK versions this plugin is tested with (a PEP 508 requirement). The
        #: distribution's install requirement names only the lowest (``mysdk>=1.2``).
        capabilities: ClassVar[Capabilities] = Capabilities(tested_sdk="mysdk>=1.2,<1.4")

        #: What the SDK lacks, one phrase each (``_compat.py``: ``import mysdk; return [] if
        #: hasattr(mysdk.Run, "_flush") else ["no mysdk.Run._flush"]``); ``[]``: nothing.
        check_sdk = staticmethod(_compat.problems)

A backend without an SDK writes ``check_sdk = staticmethod(no_sdk)``.

The core runs the checks; a plugin calls none of them:

* at ``Monitor()``, in the training process, from metadata alone (``check_installed``): the
  distribution ``tested_sdk`` names is installed, else a ``BackendLoadError`` naming it and
  ``pip install <it>``, before any backend starts and without importing the SDK;
* before it first constructs the backend in a process (``dispatch.backends.start_backend``)
  and in ``monitors list --check`` (``discovery.check_backend``): ``ensure_sdk``, which runs
  ``check_sdk()`` once per process. A problem reported is a ``BackendLoadError`` naming the
  plugin, the SDK version and the tested range; an SDK outside the tested range that has
  every internal the plugin uses is one ``SdkVersionWarning``, and the run goes on.

This is how OpenTelemetry's instrumentations declare the library versions they instrument
(``_instruments``) and check them at run time, rather than capping the install requirement: a
new SDK release installs beside the plugin, and the check says whether it fits.

Nothing here imports an SDK; ``packaging`` is imported only when a tested range is compared.
"""

from __future__ import annotations

import importlib.metadata
import threading
import warnings
from collections.abc import Sequence

from .capabilities import Capabilities, sdk_distribution
from .errors import BackendLoadError, SdkVersionWarning
from .plugins import Plugin, packages_distributions

# ``require_sdk`` is no longer exported: it stays importable for one release only to tell a
# third-party plugin still calling it what replaces it.
__all__ = ["Plugin", "check_installed", "ensure_sdk", "no_sdk", "packages_distributions",
           "sdk_error"]

_lock = threading.Lock()
#: backend class -> the error its check raised (``None``: it passed). One check per process.
_checked: dict[type, BackendLoadError | None] = {}


def no_sdk() -> list[str]:
    """The ``check_sdk`` of a backend without an SDK: nothing can be missing, ``[]``
    (``check_sdk = staticmethod(no_sdk)``)."""
    return []


def require_sdk(module: str, distribution: str) -> None:
    """Removed: declare ``Capabilities(tested_sdk="<sdk>>=X")`` instead.

    The core checks, from metadata alone, that the distribution ``tested_sdk`` names is
    installed before the backend starts (``check_installed``), so a plugin calls nothing.
    Kept for one release so a third-party plugin still calling it fails with this message.

    Raises:
        TypeError: always, naming the replacement.
    """
    raise TypeError(
        f"core_monitor.compat.require_sdk({module!r}, {distribution!r}) is removed: delete the "
        f"call and declare the SDK on the backend class, capabilities = Capabilities("
        f"tested_sdk='<{module} distribution>>=<lowest tested version>'); the core checks it is "
        "installed before the backend starts (see the plugin guide, 'Checking the SDK')"
    )


def _tested(backend: type) -> tuple[str, str] | None:
    """``(sdk distribution, specifier as written)`` from ``backend.tested_sdk``, or ``None``.

    Raises:
        packaging.requirements.InvalidRequirement: ``tested_sdk`` is no PEP 508 requirement.
    """
    tested = _tested_sdk(backend)
    if tested is None or not tested.strip():
        return None
    from packaging.requirements import Requirement

    name = Requirement(tested).name
    return name, tested.strip()[len(name):].strip()


def _installed(sdk: str) -> str:
    try:
        return importlib.metadata.version(sdk)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def sdk_error(backend: type, problems: Sequence[str],
              plugin: Plugin | None = None) -> BackendLoadError:
    """The error for an SDK that lacks what ``backend`` relies on, naming the tested range.

    Args:
        backend: the backend class; its ``tested_sdk`` names the SDK and the tested range.
        problems: what is missing or changed, one short phrase each (at least one).
        plugin: who the plugin is; found from ``backend`` (``Plugin.of``) when not given.

    Returns:
        A ``BackendLoadError`` (for the caller to raise) whose message reads ``"<sdk>
        <version> is not supported (<problems>); this plugin supports <range>: `pip install
        '<range>'`"``; its ``cause`` is that ``RuntimeError``.
    """
    plugin = Plugin.of(backend) if plugin is None else plugin
    tested = _tested(backend)
    if tested is None:
        detail = f"the SDK lacks what {plugin.distribution} uses ({'; '.join(problems)})"
    else:
        sdk, specifier = tested
        wanted = f"{sdk}{specifier}"
        detail = (f"{sdk} {_installed(sdk)} is not supported ({'; '.join(problems)}); this "
                  f"plugin supports {wanted}: `pip install '{wanted}'`")
    return BackendLoadError(*plugin.who, RuntimeError(detail))


def _outside_range(backend: type, plugin: Plugin) -> str | None:
    """The warning text when the installed SDK is outside ``backend.tested_sdk``; else None."""
    tested = _tested(backend)
    if tested is None:
        return None
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion

    sdk, specifier = tested
    installed = _installed(sdk)
    try:
        if SpecifierSet(specifier).contains(installed, prereleases=True):
            return None
    except InvalidVersion:
        pass
    return (f"{sdk} {installed} is outside the range {plugin.distribution} {plugin.version} "
            f"was tested with ({sdk}{specifier}); it has every {sdk} internal the plugin "
            f"checks, so backend {plugin.backend!r} runs. If it misbehaves: `pip install "
            f"'{sdk}{specifier}'`, or upgrade {plugin.distribution}")


def _tested_sdk(backend: type) -> str | None:
    """``Capabilities.of(backend).tested_sdk``; ``None`` when the class declares a capability
    wrongly (the contract kit names that; the SDK checks need only this field)."""
    try:
        return Capabilities.of(backend).tested_sdk
    except TypeError:
        return None


def check_installed(backend: type, plugin: Plugin | None = None) -> None:
    """Check, from metadata alone, that the SDK distribution ``backend`` declares
    (``Capabilities.tested_sdk``) is installed; importing nothing.

    Args:
        backend: the backend class.
        plugin: who the plugin is, when the caller knows (``Plugin.from_info``).

    Raises:
        BackendLoadError: the distribution is not installed; ``missing`` is its name and the
            message says ``pip install <it>`` (its cause, a ``ModuleNotFoundError``, is kept
            in ``cause``).
    """
    sdk = sdk_distribution(_tested_sdk(backend))
    if sdk is None or _is_installed(sdk):
        return
    who = plugin or Plugin.of(backend)
    raise BackendLoadError(*who.who, ModuleNotFoundError(
        f"the SDK distribution {sdk!r} is not installed ({who.distribution} needs it)", name=sdk))


def _is_installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def ensure_sdk(backend: type, plugin: Plugin | None = None) -> type:
    """Check the SDK of ``backend`` once per process: its version, then its shape.

    Runs ``backend.check_sdk()`` (if the class has one) the first time and remembers the
    outcome: later calls raise the same error, or return at once. When it reports nothing, an
    installed SDK outside ``backend.tested_sdk`` gives one ``SdkVersionWarning`` (the run goes
    on: the plugin's own check found every internal it uses).

    Args:
        backend: the backend class. The core calls this (``dispatch.backends.start_backend``,
            ``discovery.check_backend``); a plugin calls nothing.
        plugin: who the plugin is, when the caller knows (``discovery.check_backend``).

    Returns:
        The backend class.

    Raises:
        BackendLoadError: ``check_sdk()`` reported problems (the message names the SDK version,
            the problems and the tested range), or raised (wrapped, naming the plugin; a
            ``BackendLoadError`` it raised is kept as it is).
        TypeError: ``backend`` is not a class (a plugin's ``_compat.py`` passing its
            ``__package__``, the way before this release: delete that call, the core runs
            the check).
    """
    if not isinstance(backend, type):
        raise TypeError(
            f"core_monitor.compat.ensure_sdk({backend!r}) takes the backend class, and a plugin "
            "no longer calls it: delete the call (the core runs the backend's check_sdk() once "
            "per process before constructing it)"
        )
    cls = backend
    with _lock:
        if cls in _checked:
            error = _checked[cls]
            if error is not None:
                raise error
            return cls
        error = _run_check(cls, plugin)
        _checked[cls] = error
    if error is not None:
        raise error
    return cls


def _run_check(cls: type, plugin: Plugin | None) -> BackendLoadError | None:
    check = getattr(cls, "check_sdk", None)
    if not callable(check) and _tested_sdk(cls) is None:
        return None
    who = plugin or Plugin.of(cls)
    try:
        problems = check() if callable(check) else None
    except BackendLoadError as error:
        return error
    except Exception as error:  # ImportError, or a check that raised instead of reporting
        load_error = BackendLoadError(*who.who, error)
        load_error.__cause__ = error
        return load_error
    if problems:
        return sdk_error(cls, list(problems), who)
    message = _outside_range(cls, who)
    if message is not None:
        warnings.warn(message, SdkVersionWarning, stacklevel=4)
    return None
