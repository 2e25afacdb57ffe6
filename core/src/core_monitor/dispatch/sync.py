"""The in-line channel: a backend's hooks run on the caller's thread before ``log()`` returns
(every backend's channel with ``dispatch="sync"``)."""

from __future__ import annotations

from typing import Any, ClassVar

from .backends import Backend
from .channel import Channel


class InlineChannel(Channel):
    """A backend constructed in this process and called on the caller's thread.

    The fan-out calls ``hooks[hook](**kwargs)`` itself, after the one pass that reaches the
    other channels, under the failure policy (``policy.Policy.failed``): there is no buffer,
    so no room to wait for and nothing to flush but the backend itself.

    Args:
        backend: the started backend.

    Attributes:
        backend: as given.
        hooks: the backend's hook functions (``Backend.hooks``).
    """

    kind: ClassVar[str] = "inline"

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend.name)
        self.backend = backend
        self.hooks = backend.hooks

    def request_flush(self) -> Any:
        """Nothing waits anywhere: the fan-out calls ``monitor_flush`` itself."""
        return None
