"""Evidence collection: run the real graphs and models and record what the gate rules judge."""
