"""The server fixtures of ``prometheus_servers`` (a module of its own: every test folder's
``conftest`` shares one module name on ``sys.path``, so tests import the helpers from there)."""

from prometheus_servers import prometheus, pushgateway, scrape_port

__all__ = ["prometheus", "pushgateway", "scrape_port"]
