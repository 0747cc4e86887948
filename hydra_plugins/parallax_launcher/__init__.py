"""Hydra launcher `parallax_ray`: a multirun's jobs run at once on one Ray cluster (parallax_launcher.py)."""
