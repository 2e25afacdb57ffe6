"""The prometheus-client versions this plugin is tested with, and what it uses of them.

The plugin uses only prometheus-client's public API: ``CollectorRegistry``, ``Gauge``,
``Info`` (the crash mark), ``start_http_server`` (which returns the server and its thread
since 0.17), ``write_to_textfile``, ``push_to_gateway`` and the text-format parser.
``problems()`` checks that they are there. Nothing here imports prometheus-client at module
import.
"""

from __future__ import annotations

import inspect

#: The prometheus-client versions this plugin is tested with (``nox -s lowest`` runs the
#: lowest, ``nox -s newest`` the newest on the index). The install requirement names only the
#: lowest; outside this range the core warns once, and ``problems()`` decides whether the
#: plugin runs.
TESTED = "prometheus-client>=0.20,<0.27"

#: The public names of ``prometheus_client`` the plugin uses.
_USED = ("CollectorRegistry", "Gauge", "Info", "start_http_server", "write_to_textfile",
         "push_to_gateway")


def problems() -> list[str]:
    """Import prometheus-client; what it lacks of what this plugin uses (``[]``: nothing).

    Raises:
        ImportError: prometheus-client is not installed.
    """
    import prometheus_client
    from prometheus_client import parser

    found = [f"no prometheus_client.{name}" for name in _USED
             if not callable(getattr(prometheus_client, name, None))]
    if not callable(getattr(parser, "text_string_to_metric_families", None)):
        found.append("no prometheus_client.parser.text_string_to_metric_families")
    push = getattr(prometheus_client, "push_to_gateway", None)
    if callable(push) and "timeout" not in inspect.signature(push).parameters:
        found.append("push_to_gateway takes no timeout")
    return found
