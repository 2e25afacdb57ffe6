"""The ``aim server`` fixture of ``aim_servers`` (a module of its own), for test_remote.py."""

from aim_servers import aim_server  # noqa: F401  (fixture)
