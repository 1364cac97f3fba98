"""Watching a running llama-server: the engine contract over HTTP, and its slots and metrics."""
