"""Names a package imports on first use (PEP 562), for ``core_monitor`` and
``core_monitor.dispatch``: a process imports only the modules whose names it uses (a writer
process never imports the training process's engine)."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def first_use(package: str, namespace: dict[str, Any], exports: dict[str, str],
              computed: dict[str, Callable[[], Any]] | None = None,
              ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package``.

    Args:
        package: the package's ``__name__``.
        namespace: its ``globals()``: a name found is kept there, so that later look-ups do
            not reach ``__getattr__``.
        exports: public name -> the module defining it, relative to ``package`` (``".run"``).
        computed: name -> a function returning its value, called at first use (a value that
            costs something to compute, such as the installed version).

    Raises (from the ``__getattr__`` returned):
        AttributeError: the name is neither exported nor computed.
    """
    made = computed or {}

    def __getattr__(name: str) -> Any:
        if name in made:
            value = made[name]()
        elif name in exports:
            value = getattr(import_module(exports[name], package), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports, *made})

    return __getattr__, __dir__
