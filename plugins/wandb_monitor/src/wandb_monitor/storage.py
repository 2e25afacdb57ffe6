"""How the plugin names what it stores in a wandb run: the step metric and the escaping of
tags and config keys wandb reserves. Imports no wandb.

The backend, the reader and the media writer all import this module, and it imports none of
them: naming lives here once, so writing and reading cannot drift apart. The run's display name
is ``RunInfo.ranked_name`` (``<name>-rank<r>`` on a rank ``r > 0``).
"""

from __future__ import annotations

#: Name of the metric that holds the caller's step in every row (the charts' x-axis).
DEFAULT_STEP_METRIC = "global_step"
#: Prefix added to a tag that wandb reserves (``_*``), to the step metric's own name, and to a
#: tag that already starts with it: ``_x`` is stored as ``~_x``, ``global_step`` as
#: ``~global_step``, ``~a`` as ``~~a``. Config keys get the same escaping. The reader removes it.
ESCAPE = "~"
#: First characters of the names that get the ``ESCAPE`` prefix.
ESCAPED_FIRST = "_" + ESCAPE


def escaped(key: str, step_metric: str) -> str:
    """The key a tag or config key is stored under in a run whose step metric is
    ``step_metric``: ``ESCAPE + key`` when wandb reserves it, it starts with ``ESCAPE`` or it is
    ``step_metric``; else ``key`` itself."""
    return ESCAPE + key if (key and key[0] in ESCAPED_FIRST) or key == step_metric else key


def unescaped(key: str) -> str:
    """Undo ``escaped``: the tag or config key a stored key stands for."""
    return key[len(ESCAPE):] if key.startswith(ESCAPE) else key


def is_own_key(key: str) -> bool:
    """Whether a stored key is wandb's own (``_step``, ``_runtime``, ``_timestamp``,
    ``_wandb``, ...) rather than one the plugin logged (those never start with ``_``)."""
    return key.startswith("_")
