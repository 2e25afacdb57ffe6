"""``core_monitor.hookspecs``: the one hook list, read from the specifications, and the
``Backend`` protocols."""

from __future__ import annotations

import inspect

import pluggy

from core_monitor import hookimpl, hookspecs
from core_monitor.hookspecs import HOOKS, Backend, MediaBackend, hookimpl_options


def test_hooks_are_the_specifications_in_declaration_order():
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    specified = {name for name in dir(manager.hook) if not name.startswith("_")}
    assert set(HOOKS) == specified
    lines = [inspect.getsourcelines(getattr(hookspecs, hook))[1] for hook in HOOKS]
    assert lines == sorted(lines), f"HOOKS {HOOKS} is not in declaration order ({lines})"
    assert HOOKS[0] == "monitor_write"


def test_the_backend_protocols_name_only_specified_hooks():
    """The protocols list the hooks of today's backends; a hook added later needs no protocol
    member (a new member would make every existing backend fail its ``_shape`` check), but a
    protocol method named ``monitor_*`` must be a specified hook."""
    methods = {name for protocol in (Backend, MediaBackend)
               for name, value in vars(protocol).items() if inspect.isfunction(value)}
    unknown = sorted(m for m in methods if m.startswith("monitor_") and m not in HOOKS)
    assert not unknown, f"hookspecs.Backend/MediaBackend name unspecified hooks: {unknown}"
    assert {"monitor_write", "monitor_flush", "monitor_close", "monitor_config"} <= methods
    assert "monitor_write_media" in vars(MediaBackend)
    assert "check_sdk" in vars(Backend)
    assert "check_options" not in vars(Backend)  # optional: documented, not a protocol member
    # One declaration of what the class stores and needs (tested_sdk, media_kinds among it).
    assert Backend.__annotations__ == {"capabilities": "ClassVar[Capabilities]"}


class Marked:
    @hookimpl
    def monitor_write(self, events):
        pass

    @hookimpl(tryfirst=True)
    def monitor_flush(self):
        pass

    def monitor_close(self):  # no marker: the core never calls it
        pass


def test_hookimpl_options_reads_the_marker_on_a_class_and_an_instance():
    for backend in (Marked, Marked()):
        assert hookimpl_options(backend, "monitor_write")["tryfirst"] is False
        assert hookimpl_options(backend, "monitor_flush")["tryfirst"] is True
        assert hookimpl_options(backend, "monitor_close") is None
        assert hookimpl_options(backend, "monitor_config") is None  # absent
