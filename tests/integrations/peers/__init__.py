"""Peers' own test suites, replayed unchanged against this project's servers.

Each ``<peer>/upstream`` directory holds files copied byte for byte from the peer's repository
(its license beside them, the origin in ``<peer>/ORIGIN``); the ``conftest.py`` next to it is
this project's and says how the files are run.
"""
