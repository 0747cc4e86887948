"""Format specifications: tag spellings and structural limits for both parallel formats.

A :class:`FormatSpec` is the single source of truth from which the parser, the renderer,
the metrics and the EBNF grammars are all derived.  Tag strings and limits are config;
override them with :func:`get_spec` (``get_spec("parason", max_depth=2)``) or
``dataclasses.replace``.

Parallel-R1 (the summary after the block, the public convention, or inside it)::

    <Parallel> <Path>...</Path> x [min_branches, max_branches] </Parallel> <Summary>...</Summary>
    <Parallel> <Path>...</Path> x [min_branches, max_branches] <Summary>...</Summary> </Parallel>

Parason (``<Outline>`` entries and the ``<Conclusion>`` are the release generator's spellings)::

    <Parallel> <Outlines> (<Subtask>..</Subtask> | <Trial>..</Trial> | <Outline>..</Outline>) x [min, max]
               </Outlines> <Thread>...</Thread> x (one per entry) [<Conclusion>...</Conclusion>] </Parallel>
               [<Conclusion>...</Conclusion>]

Where the summary goes is config: ``summary_accept`` lists the placements the parser accepts
(``"after"``: right after ``</Parallel>``, only whitespace between; ``"inside"``: the block's last
element), ``summary_placement`` the one the grammar, the renderer's default, teachers, the toy
world, prompts and executors write.  Parallel-R1 needs its summary; Parason's conclusion is
optional.  The public Parallel-R1 prompt, data and rollout loop write ``</Parallel><Summary>``,
hence the default ``summary_placement="after"``; both placements are accepted by default.

``aliases`` (Parason) accepts the release's ``<Outline>`` entries and ``<Conclusion>``.  They
are parsed, never emitted (:func:`parallax.formats.tree.is_written` tells a tree the format writes): the grammar and
every writer use ``<Subtask>``/``<Trial>``.  An
``<Outline>`` entry is untyped (branch kind ``"outline"``); ``outline_kind`` says what the metrics
and rewards count it as: ``"outline"`` (neither subtask nor trial), ``"subtask"`` or ``"trial"``.

Tag strings must have the shape ``<Name>`` / ``</Name>``: start with ``<``, end with ``>``,
contain no other ``<`` or ``>`` and no whitespace; tags of one format must be distinct.

Only Parason nests: a ``<Thread>`` body may contain further ``<Parallel>`` blocks, up to
``max_depth`` levels of parallel blocks in total (depth 1 = no nesting).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache

__all__ = [
    "ALL_SPECIAL_TOKENS",
    "FORMAT_NAMES",
    "FORMAT_OPTIONS",
    "PARALLEL_R1",
    "PARASON",
    "PLACEMENTS",
    "FormatSpec",
    "format_options",
    "get_spec",
    "parse_options",
    "resolve_spec",
]

FORMAT_NAMES: tuple[str, ...] = ("parallel_r1", "parason")
#: Where a summary (Parallel-R1) or conclusion (Parason) may sit: after ``</Parallel>``, or inside.
PLACEMENTS: tuple[str, ...] = ("after", "inside")

#: Upper bound for ``max_branches`` and ``max_depth``: the grammar has one rule family per depth
#: and one alternative per branch count, and renderer/metrics recurse once per nesting level.
MAX_LIMIT = 64


@dataclass(frozen=True)
class FormatSpec:
    """Tag spellings and limits of one parallel-trajectory format.

    ``name`` is ``"parallel_r1"`` or ``"parason"``.  Tag fields hold the full tag strings
    (``"<Path>"``), not bare names.  Fields unused by a format (``path_*``/``summary_*`` for
    Parason; ``outlines_*``/``subtask_*``/``trial_*``/``thread_*`` for Parallel-R1) are
    ignored by it.  ``max_depth`` only matters for Parason (Parallel-R1 never nests).
    """

    name: str
    parallel_open: str = "<Parallel>"
    parallel_close: str = "</Parallel>"
    # Parallel-R1
    path_open: str = "<Path>"
    path_close: str = "</Path>"
    summary_open: str = "<Summary>"
    summary_close: str = "</Summary>"
    # Parason
    outlines_open: str = "<Outlines>"
    outlines_close: str = "</Outlines>"
    subtask_open: str = "<Subtask>"
    subtask_close: str = "</Subtask>"
    trial_open: str = "<Trial>"
    trial_close: str = "</Trial>"
    thread_open: str = "<Thread>"
    thread_close: str = "</Thread>"
    # the Parason release's spellings (parsed when `aliases`, never written)
    outline_open: str = "<Outline>"
    outline_close: str = "</Outline>"
    conclusion_open: str = "<Conclusion>"
    conclusion_close: str = "</Conclusion>"
    aliases: bool = True
    outline_kind: str = "outline"
    # where the summary (Parallel-R1) / conclusion (Parason) goes: written, and accepted
    summary_placement: str = "after"
    summary_accept: tuple[str, ...] = ("after", "inside")
    # limits
    min_branches: int = 2
    max_branches: int = 8
    max_depth: int = 4

    def __post_init__(self) -> None:
        if self.name not in FORMAT_NAMES:
            raise ValueError(f"unknown format name {self.name!r}; valid names: {', '.join(FORMAT_NAMES)}")
        if not (1 <= self.min_branches <= self.max_branches <= MAX_LIMIT):
            raise ValueError(
                f"need 1 <= min_branches <= max_branches <= {MAX_LIMIT}, "
                f"got {self.min_branches}, {self.max_branches}"
            )
        if not (1 <= self.max_depth <= MAX_LIMIT):
            raise ValueError(f"max_depth must be in [1, {MAX_LIMIT}], got {self.max_depth}")
        if self.summary_placement not in PLACEMENTS:
            raise ValueError(f"summary_placement must be one of {PLACEMENTS}, got {self.summary_placement!r}")
        accept = self.summary_accept
        if isinstance(accept, str) or not accept or any(a not in PLACEMENTS for a in accept):
            raise ValueError(f"summary_accept must be a non-empty tuple of {PLACEMENTS}, got {accept!r}")
        if self.summary_placement not in accept:
            raise ValueError(f"summary_accept {tuple(accept)} must include summary_placement "
                             f"{self.summary_placement!r} (the parser must read what the format writes)")
        if not isinstance(accept, tuple):
            object.__setattr__(self, "summary_accept", tuple(accept))  # a list from a config file
        if self.outline_kind not in ("outline", "subtask", "trial"):
            raise ValueError(f"outline_kind must be 'outline', 'subtask' or 'trial', got {self.outline_kind!r}")
        tags = self.parse_tags
        for t in tags:
            # Every tag is '<' + name + '>' with no other '<' or '>' inside.  This keeps tag
            # occurrences non-overlapping (so one regex scan finds them all unambiguously) and
            # lets the grammar express "text that contains no tag" as a small regular language.
            if (
                not isinstance(t, str)
                or len(t) < 3
                or t[0] != "<"
                or t[-1] != ">"
                or "<" in t[1:]
                or ">" in t[:-1]
                or any(c.isspace() for c in t)
            ):
                raise ValueError(
                    f"tag {t!r}: tags must look like '<Name>' (start with '<', end with '>', "
                    "no other '<' or '>', no whitespace)"
                )
        if len(set(tags)) != len(tags):
            raise ValueError(f"tag strings of format {self.name!r} must be distinct: {tags}")

    @property
    def is_parason(self) -> bool:
        return self.name == "parason"

    def pending_tag(self, text: str) -> str:
        """Longest suffix of `text` that is a proper prefix of one of this format's tags ('' if none):
        what a following piece of text could complete into a tag spelled across tokens.

        >>> get_spec("parason").pending_tag("x </Thr")
        '</Thr'
        """
        prefixes = _tag_prefixes(self)
        for i in range(max(0, len(text) - max(map(len, self.parse_tags))), len(text)):
            if text[i:] in prefixes:
                return text[i:]
        return ""

    def accepts(self, placement: str) -> bool:
        """Whether the parser accepts a summary / conclusion at `placement` ("after" or "inside")."""
        return placement in self.summary_accept

    @property
    def uses_aliases(self) -> bool:
        """Whether the parser reads the release's ``<Outline>`` / ``<Conclusion>`` (Parason only)."""
        return self.aliases and self.is_parason

    @property
    def parse_tags(self) -> tuple[str, ...]:
        """The tags the parser splits at: :attr:`tags`, plus the aliases it accepts."""
        if not self.uses_aliases:
            return self.tags
        return self.tags + (self.outline_open, self.outline_close, self.conclusion_open, self.conclusion_close)

    @property
    def tags(self) -> tuple[str, ...]:
        """Every opening and closing tag this format writes, in a stable order (every one is a
        token of a tokenizer that runs the executors; aliases are in :attr:`parse_tags`)."""
        if self.name == "parallel_r1":
            return (
                self.parallel_open,
                self.parallel_close,
                self.path_open,
                self.path_close,
                self.summary_open,
                self.summary_close,
            )
        return (
            self.parallel_open,
            self.parallel_close,
            self.outlines_open,
            self.outlines_close,
            self.subtask_open,
            self.subtask_close,
            self.trial_open,
            self.trial_close,
            self.thread_open,
            self.thread_close,
        )


PARALLEL_R1 = FormatSpec(name="parallel_r1")
PARASON = FormatSpec(name="parason")

_DEFAULTS = {"parallel_r1": PARALLEL_R1, "parason": PARASON}


@lru_cache(maxsize=64)
def _tag_prefixes(spec: FormatSpec) -> frozenset[str]:
    return frozenset(t[:i] for t in spec.parse_tags for i in range(1, len(t)))


def get_spec(name: str, **overrides) -> FormatSpec:
    """Default spec for ``name`` (``"parallel_r1"`` or ``"parason"``) with field overrides.

    Raises ``ValueError`` for an unknown name (listing valid names) or an unknown field.
    """
    if name not in _DEFAULTS:
        raise ValueError(f"unknown format name {name!r}; valid names: {', '.join(FORMAT_NAMES)}")
    valid = {f.name for f in fields(FormatSpec)} - {"name"}
    bad = sorted(set(overrides) - valid)
    if bad:
        raise ValueError(f"unknown FormatSpec field(s) {bad}; valid: {sorted(valid)}")
    return replace(_DEFAULTS[name], **overrides) if overrides else _DEFAULTS[name]


#: The format options a user sets (CLI flags, reward params, ``data.format_options``).
FORMAT_OPTIONS: tuple[str, ...] = ("summary_placement", "summary_accept", "aliases", "outline_kind")


def format_options(spec: FormatSpec) -> dict:
    """``spec``'s :data:`FORMAT_OPTIONS` as plain values (``summary_accept`` comma-separated), the
    shape reward params and config take: ``get_spec(spec.name, **parse_options(format_options(spec)))``."""
    return {"summary_placement": spec.summary_placement, "summary_accept": ",".join(spec.summary_accept),
            "aliases": spec.aliases, "outline_kind": spec.outline_kind}


def parse_options(options: dict) -> dict:
    """FormatSpec overrides from user options: ``summary_accept`` may be a comma-separated string."""
    out = dict(options)
    acc = out.get("summary_accept")
    if isinstance(acc, str):
        out["summary_accept"] = tuple(a.strip() for a in acc.split(",") if a.strip())
    elif acc is not None:
        out["summary_accept"] = tuple(acc)
    return out


def resolve_spec(spec: FormatSpec | str) -> FormatSpec:
    """Accept a :class:`FormatSpec` or a format name."""
    if isinstance(spec, FormatSpec):
        return spec
    return get_spec(spec)


def _dedup(seq):
    seen: dict[str, None] = {}
    for s in seq:
        seen.setdefault(s, None)
    return tuple(seen)


#: Every opening and closing tag of both default formats, deduplicated, stable order.
ALL_SPECIAL_TOKENS: tuple[str, ...] = _dedup(PARALLEL_R1.tags + PARASON.tags)
