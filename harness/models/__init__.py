"""Model builders: the default real model from a registry GGUF, and the small trained CI model."""
