"""Gatehouse: a pytest-native measurement suite that qualifies on-device model variants."""

__version__ = "0.1.0"
