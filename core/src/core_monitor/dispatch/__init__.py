"""How a ``Monitor``'s calls reach its backends: one fan-out, one channel per backend.

``fanout.FanOut`` validates nothing (the ``Monitor`` did) and encodes each call at most once;
it hands the call to one channel per backend, in one pass that reaches every channel or none,
under one failure policy (``policy``) and one set of counts. A channel is chosen per backend
(``channel``):

=============  ========================================  ==================================
channel kind   where the backend's hooks run             class
=============  ========================================  ==================================
``process``    a writer process of its own               ``processes.WriterChannel``
``thread``     a worker thread of its own                ``threads.ThreadChannel``
``inline``     the caller's thread, before ``log()``     ``sync.InlineChannel``
=============  ========================================  ==================================

``Monitor(dispatch=...)`` picks the default kind (``MODES``: ``"process"``, the default;
``"thread"``, alias ``"background"``; ``"sync"``, in-line); a backend class that a fresh
interpreter may not import by module path gets a thread channel while its neighbours keep
their writer processes. Backends start the same way in every channel (``backends``) and media
are routed the same way (``core_monitor.media.MediaRoutes``).

The names below are imported on first use (PEP 562), as in ``core_monitor`` itself: a writer
process (``writer``) imports ``wire`` and ``backends`` of this package, never the fan-out, the
channels or the policy, which run in the training process only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import first_use

if TYPE_CHECKING:
    from .channel import BackendSpec, Channel
    from .fanout import FanOut, ProcessDispatch, SyncDispatch, ThreadDispatch
    from .modes import (
        DEFAULT_DISPATCH,
        DISPATCH_ENV,
        MODES,
        ON_FULL,
        Dispatch,
        check_dispatch,
        default_dispatch,
        new_dispatch,
    )
    from .policy import Policy
    from .threads import DEFAULT_QUEUE_SIZE

#: Public name -> the module of this package defining it.
_EXPORTS = {
    "BackendSpec": ".channel",
    "Channel": ".channel",
    "FanOut": ".fanout",
    "ProcessDispatch": ".fanout",
    "SyncDispatch": ".fanout",
    "ThreadDispatch": ".fanout",
    "DEFAULT_DISPATCH": ".modes",
    "DISPATCH_ENV": ".modes",
    "MODES": ".modes",
    "ON_FULL": ".modes",
    "Dispatch": ".modes",
    "check_dispatch": ".modes",
    "default_dispatch": ".modes",
    "new_dispatch": ".modes",
    "Policy": ".policy",
    "DEFAULT_QUEUE_SIZE": ".threads",
}

__all__ = ["DEFAULT_DISPATCH", "DEFAULT_QUEUE_SIZE", "DISPATCH_ENV", "MODES", "ON_FULL",
           "BackendSpec", "Channel", "Dispatch", "FanOut", "Policy", "ProcessDispatch",
           "SyncDispatch", "ThreadDispatch", "check_dispatch", "default_dispatch",
           "new_dispatch"]


__getattr__, __dir__ = first_use(__name__, globals(), _EXPORTS)
