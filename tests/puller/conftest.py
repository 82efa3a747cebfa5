"""Puller fixtures: none of their own. ``multi_cluster`` / ``multi_client`` (three stores, three PD members) are
the session's, in ``tests/conftest.py`` (the capture's fault tests use them too); the helpers the puller tests
share are ``testkit.puller`` and ``testkit.storm``."""
