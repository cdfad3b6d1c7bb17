"""The rolling-trim streaming protocol gate: profiles, validator, metrics, capture and the reference engine."""
