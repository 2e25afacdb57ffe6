"""The errors the core raises. All are importable from ``core_monitor``."""

from __future__ import annotations


class ConfigError(ValueError):
    """The monitor's configuration is wrong: an unknown backend or option, a bad config file."""


class UnknownBackendError(ConfigError):
    """No installed distribution declares the selected backend name.

    Attributes:
        name: the name asked for.
        installed: the names that are installed.
    """

    def __init__(self, name: str, installed: list[str], suggestion: str | None) -> None:
        self.name = name
        self.installed = installed
        hint = f" Did you mean {suggestion!r}?" if suggestion else ""
        have = ", ".join(installed) if installed else "none"
        super().__init__(
            f"unknown backend {name!r}.{hint} Installed backends: {have}. "
            f"To add one, install its plugin, e.g. `pip install {name}-monitor`; "
            "`monitors list` shows what is installed."
        )


class BackendLoadError(ImportError):
    """A selected backend's plugin module, or the SDK it needs, failed to import.

    Attributes:
        name: the backend name.
        distribution: the distribution that declares it, e.g. ``"trackio-monitor"``.
        version: that distribution's version.
        missing: the module that could not be found (``ModuleNotFoundError.name``), or ``None``.
    """

    def __init__(
        self, name: str, distribution: str, version: str, target: str, error: BaseException
    ) -> None:
        self.name = name  # type: ignore[misc]  # ImportError.name is the module; ours is clearer
        self.distribution = distribution
        self.version = version
        self.missing = getattr(error, "name", None) if isinstance(error, ImportError) else None
        if self.missing:
            fix = (
                f"the package {self.missing!r} is missing: `pip install {self.missing}` "
                f"(or reinstall the plugin with its dependencies: `pip install {distribution}`)"
            )
        else:
            fix = f"the plugin is broken; reinstall or upgrade it: `pip install -U {distribution}`"
        super().__init__(
            f"backend {name!r} ({distribution} {version}, {target}) could not be loaded: "
            f"{type(error).__name__}: {error}. Fix: {fix}."
        )



class BackendWarning(RuntimeWarning):
    """A backend raised in a hook and the others carried on. Issued once per backend and monitor;
    every failure is counted in ``Monitor.failures``."""
