"""Parallax orchestrator: the Hydra app, the driver loop and the batch contract."""
