"""One root exception for the harness, with small subclasses that name what went wrong."""

from __future__ import annotations


class HarnessError(Exception):
    """Root of every error the harness raises on purpose.

    Messages name the file, the field and the value at fault, so that a user
    can fix the input without reading the harness source.
    """


class CampaignError(HarnessError):
    """A campaign file is missing, malformed, or names something unknown."""


class ArtifactError(HarnessError):
    """An artifact is missing, corrupt, or differs from its pinned SHA-256."""


class ReceiptError(HarnessError):
    """A receipt does not match the schema, or a run directory is inconsistent."""


class EvidenceError(HarnessError):
    """Recorded evidence is incomplete or inconsistent, so no verdict can be computed."""


class ScenarioError(HarnessError):
    """A behavior scenario file is malformed: unknown checker, duplicate case, prompt too long."""
