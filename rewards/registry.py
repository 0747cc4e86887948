"""Reward registry: rewards are registered by name with a typed parameter dataclass.

A config picks a reward per stage as ``name`` + ``params`` dict (:class:`RewardSpec`);
:func:`make_params` turns that dict (or CLI ``key=value`` strings) into the typed params,
rejecting unknown keys and bad values with a clear ``ValueError``.

Example:
    >>> import rewards  # registers the built-ins
    >>> get_reward("tiered").name
    'tiered'
    >>> make_params("tiered", {"parallel_correct": "1.5"}).parallel_correct
    1.5
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from rewards.types import BaseParams

__all__ = ["RewardEntry", "RewardSpec", "get_reward", "make_params", "register", "reward_names"]


@dataclass(frozen=True)
class RewardEntry:
    """A registered reward: the group function, its params class and what it needs.

    ``needs_accuracy``: samples must be answer-verified; ``needs_parse``: samples must be
    parsed by the format package.  Analysis skips what no reward asks for (format-only
    rewards never pay for math verification).
    """

    name: str
    fn: Callable[..., Any]
    params_cls: type[BaseParams]
    needs_accuracy: bool
    needs_parse: bool

    @property
    def doc(self) -> str:
        return (self.fn.__doc__ or "").strip()


@dataclass(frozen=True)
class RewardSpec:
    """A reward choice as configs write it: ``RewardSpec("pa_grpo", {"beta_sub": 0.1})``."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def resolve(self) -> tuple[RewardEntry, BaseParams]:
        """The registry entry and typed params; raises ``ValueError`` on a bad spec."""
        return get_reward(self.name), make_params(self.name, self.params)


_REGISTRY: dict[str, RewardEntry] = {}


def register(
    name: str, *, params: type[BaseParams] = BaseParams, needs_accuracy: bool = True, needs_parse: bool = True
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering ``fn(samples, ctx, params) -> GroupScore`` under ``name``.

    Raises ``ValueError`` if ``name`` is taken (a silent override would change an experiment).
    """
    if not dataclasses.is_dataclass(params) or not issubclass(params, BaseParams):
        raise TypeError(f"params must be a dataclass subclassing BaseParams, got {params!r}")

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in _REGISTRY:
            raise ValueError(f"reward {name!r} is already registered ({_REGISTRY[name].fn.__module__})")
        _REGISTRY[name] = RewardEntry(name, fn, params, needs_accuracy, needs_parse)
        return fn

    return deco


def get_reward(name: str) -> RewardEntry:
    """The entry registered as ``name``; ``ValueError`` listing valid names otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown reward {name!r}; registered: {', '.join(reward_names())}") from None


def reward_names() -> list[str]:
    """Registered reward names, sorted."""
    return sorted(_REGISTRY)


def _coerce(value: Any, typ: Any, key: str) -> Any:
    """Coerce a config/CLI value to the field type (str -> float/int/bool)."""
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return value.lower() in ("1", "true", "yes", "on")
        raise ValueError(f"param {key!r} expects a bool, got {value!r}")
    if typ in (int, float):
        if isinstance(value, bool):
            raise ValueError(f"param {key!r} expects {typ.__name__}, got bool {value!r}")
        try:
            out = typ(value)
        except (TypeError, ValueError):
            raise ValueError(f"param {key!r} expects {typ.__name__}, got {value!r}") from None
        if typ is int and isinstance(value, float) and value != out:
            raise ValueError(f"param {key!r} expects an int, got {value!r}")
        return out
    if typ is str:
        if not isinstance(value, str):
            raise ValueError(f"param {key!r} expects a str, got {value!r}")
        return value
    return value


def make_params(name: str, params: Mapping[str, Any] | BaseParams | None = None) -> BaseParams:
    """Typed params for reward ``name`` from a dict (values may be strings, as from the CLI).

    Passing an instance of the right class returns it unchanged.
    """
    cls = get_reward(name).params_cls
    if isinstance(params, cls):
        return params
    if isinstance(params, BaseParams):
        raise ValueError(f"reward {name!r} takes {cls.__name__}, got {type(params).__name__}")  # noqa: TRY004 - bad input, one error type
    params = dict(params or {})
    hints = get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"unknown param(s) {unknown} for reward {name!r}; valid: {sorted(known)}")
    kwargs = {k: _coerce(v, hints[k], k) for k, v in params.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise ValueError(f"bad params for reward {name!r}: {e}") from None


def stage_spec(stage: Any, run_reward: Any, fmt: Any) -> RewardSpec:
    """The reward a curriculum stage scores with: its own (`stage.reward`, `stage.reward_params`), else the
    run's (`run_reward.name`, `run_reward.params`), parsing text in the run's trajectory format `fmt` (a
    name or a FormatSpec, with its options) unless the params name one. Rewards parse the text (answer,
    structure) in that format, and their default, Parallel-R1, would score every Parason answer wrong."""
    from parallax.formats.spec import format_options, resolve_spec

    name, params = ((stage.reward, dict(stage.reward_params)) if stage.reward
                    else (run_reward.name, dict(run_reward.params)))
    spec = resolve_spec(fmt)
    return RewardSpec(name, {"format": spec.name, **format_options(spec), **params})
