"""The sakura-http pytest plugin (work in progress)."""
