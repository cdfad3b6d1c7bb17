"""Root conftest: the fixture modules that build Gatehouse's artifacts (the plugin itself is an entry point)."""

pytest_plugins = ["fixtures.models", "fixtures.streaming", "fixtures.behavior", "fixtures.browser", "pytester"]
