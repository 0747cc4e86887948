"""What every config module shares: the error type of config checks, the checks that raise it, and
OmegaConf's missing marker."""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A config value is invalid; the message names the key."""


def _check(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{key}: {msg}")


def _check_reward(key: str, name: str, params: dict[str, Any]) -> None:
    """Unknown reward names and parameters fail at composition, before Ray starts."""
    from rewards import make_params

    try:
        make_params(name, params)
    except (KeyError, ValueError) as e:
        raise ConfigError(f"{key}: {e}") from None


def _check_resources(key: str, resources: dict[str, float]) -> None:
    import math

    for name, amount in resources.items():
        _check(isinstance(amount, (int, float)) and math.isfinite(amount) and amount > 0, f"{key}.{name}",
               f"must be a finite amount > 0, got {amount!r}")
        _check(name not in ("CPU", "GPU"), f"{key}.{name}", "CPU and GPU are num_cpus / num_gpus")


# OmegaConf's marker of a required value (omegaconf.MISSING), spelled out so that the schemas import
# without Hydra: the executors read their slice of it on machines that have only torch.
MISSING = "???"
