"""What ``core_monitor`` exports: every error and warning the core raises, from one place."""

from __future__ import annotations

import inspect

import core_monitor
from core_monitor import distributed, errors


def test_every_error_of_the_core_is_exported_from_core_monitor():
    raised = {name for name, value in vars(errors).items()
              if inspect.isclass(value) and issubclass(value, BaseException)
              and value.__module__ == errors.__name__}
    assert {"FlushTimeout", "TagMismatchError", "BackendLoadError", "ConfigError"} <= raised
    missing = sorted(raised - set(core_monitor.__all__))
    assert not missing, f"core_monitor.__all__ lacks {missing}: add them to _EXPORTS and __all__"
    for name in raised:
        assert getattr(core_monitor, name) is getattr(errors, name), name


def test_tag_mismatch_error_is_still_importable_from_distributed():
    assert distributed.TagMismatchError is core_monitor.TagMismatchError


def test_every_name_in_all_resolves():
    for name in core_monitor.__all__:
        assert getattr(core_monitor, name) is not None, name
    assert set(core_monitor.__all__) - {"__version__"} <= set(dir(core_monitor))
