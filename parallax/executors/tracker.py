"""Structure tracking for the parallel executor: which tag token means fork, join, close or force.

The executor never parses text: it watches the *tag tokens* one request emits (every tag of a
format is one token of the tokenizer; `TagIds.from_tokenizer` checks it) and keeps a small
stack of frames per request. `Tracker.observe(token)` returns what the executor must do next:
nothing, force some tokens, fork `n` branches, or end the branch request. (EOS and stop tokens are the
executor's business.)

Tag strings come from `parallax.formats.get_spec`; the grammar in `parallax.formats.grammar` is the full contract,
this module only follows the few transitions the executor acts on. Both modes use the same
tracker so that, for the same sampled tokens, they force exactly the same tags:

* ``executed``: at a fork point the request forks (Parason: `</Outlines>` with n entries;
  Parallel-R1: `<Parallel>`, n = `num_paths`); a branch request ends at its own closing tag;
* ``sequential``: the same request goes on and writes the branches one after another.

Forced tags (the executor writes them, they are not sampled): each branch's opening tag
(`<Thread>` / `<Path>`), Parason's `</Parallel>` after the last thread, Parallel-R1's summary
tags where `spec.summary_placement` puts them (after: `</Parallel><Summary>` after the last path;
inside: `<Summary>` after the last path and `</Parallel>` after `</Summary>`); `</Outlines>` once
`max_branches` entries are closed; and the closing sequence when a cap or EOS is hit ("closing
mode").

Thread headers (Parason). An executed thread sees the shared prefix — the whole outline — and
its own tokens only: every thread of a block has the same context, so nothing would tell thread
k to work on entry k (greedy threads would all be the same). So the k-th `<Thread>` of a block
is followed by a forced *header*: the tokens of outline entry k (copied, tags excluded), then
`THREAD_HEADER_SEP`. In text, ``<Thread>`` + `thread_header(entry)` + the thread's own work.
Both modes force it (same text); teacher traces write it (`with_thread_headers`), so SFT teaches
threads to continue from it; records mark it forced (context for later tokens, no loss).
The header belongs to the thread's token budget, but is always written whole (caps only stop
sampled text), like the closing tags.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from parallax.formats import THREAD_HEADER_SEP, FormatSpec

# Frame kinds.
SEQ = "seq"  # free text: the main chain (depth 0) or a branch body (Thread / Path)
OUTLINE = "outline"  # Parason: after <Parallel>, until </Outlines>
BRANCHES = "branches"  # between branches of a block (threads / paths); never sampled in
SUMMARY = "summary"  # Parallel-R1: from the forced <Summary> to the block's last tag


@dataclass(frozen=True)
class TagIds:
    """Token id of every tag of one format (tags must be single tokens)."""

    spec: FormatSpec
    ids: dict[str, int]  # tag string -> token id
    header_sep: tuple[int, ...] = ()  # THREAD_HEADER_SEP's tokens (Parason)

    @classmethod
    def from_tokenizer(cls, spec: FormatSpec, tokenizer) -> TagIds:
        ids = {}
        for tag in spec.tags:
            enc = tokenizer.encode(tag, add_special_tokens=False)
            if len(enc) != 1:
                raise ValueError(
                    f"tag {tag!r} is {len(enc)} tokens for this tokenizer; the executor needs every tag of "
                    f"format {spec.name!r} as one added token (tokenizer.add_tokens(spec.tags))")
            ids[tag] = enc[0]
        return cls(spec, ids, tuple(tokenizer.encode(THREAD_HEADER_SEP, add_special_tokens=False)))

    def __getitem__(self, tag: str) -> int:
        return self.ids[tag]


@dataclass
class Frame:
    kind: str
    depth: int  # parallel-block depth this frame lives at (main chain: 0)
    close: int | None = None  # SEQ: the token that closes this branch body; OUTLINE: open entry's close
    n: int = 0  # BRANCHES: number of branches; OUTLINE: closed entries
    entries: list = field(default_factory=list)  # OUTLINE, BRANCHES: each entry's non-tag tokens
    done: int = 0  # BRANCHES: branches finished
    flag: bool = False  # OUTLINE: <Outlines> seen; SUMMARY: </Summary> seen
    tokens: int = 0  # SEQ branch bodies: tokens this branch request emitted (its own budget)


@dataclass
class Event:
    """What the executor does after a token: force tokens, fork, or end the branch request."""

    force: list[int] = field(default_factory=list)
    fork: int = 0  # number of branches to fork (executed mode), after the token is fed
    branch_done: bool = False  # this branch request closed its body (fed, then joined)


class Tracker:
    """Frame stack of one request. A branch request's stack starts as a copy of its parent's."""

    def __init__(self, tags: TagIds, eos_id: int, executed: bool, num_paths: int = 2, headers: bool = True):
        self.t = tags
        self.spec = tags.spec
        self.eos = eos_id
        self.executed = executed
        self.num_paths = num_paths
        self.headers = headers and self.spec.is_parason  # force thread headers (see the module docstring)
        self._tag_ids = frozenset(tags.ids.values())
        self.frames: list[Frame] = [Frame(SEQ, 0)]
        self.base = 0  # frames below this index belong to the parent request
        self.closing_level: int | None = None  # close every frame at index >= this

    # ---- forks and joins (executed mode) -----------------------------------------------------
    def branch(self, k: int) -> tuple[Tracker, int]:
        """Tracker of branch k of the block this request just forked, and its forced opening tag."""
        child = copy.copy(self)
        child.frames = copy.deepcopy(self.frames)
        child.base = len(child.frames)  # the BRANCHES frame is the parent's
        child.frames[-1].done = k  # this child's copy only: which thread (header) it writes
        if self.closing_level is not None:
            child.closing_level = child.base  # a closing parent forks empty branches
        return child, self._open_tag()

    def join(self) -> list[int]:
        """Every branch of the top BRANCHES frame finished: the tokens the continuation is forced to."""
        top = self.frames[-1]
        assert top.kind == BRANCHES, "join without an open block"
        top.done = top.n
        return self._after_last_branch()

    # ---- the state machine -------------------------------------------------------------------
    def observe(self, tok: int) -> Event:
        """Account for `tok`, just emitted by this request (sampled or forced)."""
        top = self.frames[-1]
        body = self._branch_body()
        if body is not None:
            body.tokens += 1
        if top.kind == SEQ:
            return self._in_seq(top, tok)
        if top.kind == OUTLINE:
            return self._in_outline(top, tok)
        if top.kind == BRANCHES:
            if tok == self._open_tag():
                self.frames.append(Frame(SEQ, top.depth, close=self._close_tag()))
                if self.headers:
                    return Event(force=[*top.entries[top.done], *self.t.header_sep])
            return Event()
        return self._in_summary(top, tok)

    def _in_seq(self, top: Frame, tok: int) -> Event:
        s, t = self.spec, self.t
        if tok == t[s.parallel_open] and self.fork_allowed():
            if s.is_parason:
                self.frames.append(Frame(OUTLINE, top.depth + 1))
                return Event()
            self.frames.append(Frame(BRANCHES, top.depth + 1, n=self.num_paths))
            return self._start_branches()
        if top.close is not None and tok == top.close:
            self._pop()
            if self.executed and len(self.frames) == self.base:
                return Event(branch_done=True)
            parent = self.frames[-1]
            parent.done += 1
            return Event(force=[self._open_tag()] if parent.done < parent.n else self._after_last_branch())
        return Event()

    def _in_outline(self, top: Frame, tok: int) -> Event:
        s, t = self.spec, self.t
        if tok == t[s.outlines_open]:
            top.flag = True
        elif top.close is None and tok in (t[s.subtask_open], t[s.trial_open]):
            top.close = t[s.subtask_close] if tok == t[s.subtask_open] else t[s.trial_close]
            top.entries.append([])
        elif top.close is not None and tok == top.close:
            top.close, top.n = None, top.n + 1
            if top.n >= s.max_branches:  # cap: no more entries
                return Event(force=[t[s.outlines_close]])
        elif top.close is not None:
            if tok not in self._tag_ids:  # a tag in an entry (no grammar) must not be copied into a thread
                top.entries[-1].append(tok)
        elif tok == t[s.outlines_close] and top.close is None:
            self.frames[-1] = Frame(BRANCHES, top.depth, n=top.n, entries=top.entries[: top.n])
            if top.n == 0:  # nothing to run: close the empty block (the text will not parse)
                self._pop()
                return Event(force=[t[s.parallel_close]])
            return self._start_branches()
        return Event()

    def _in_summary(self, top: Frame, tok: int) -> Event:
        s, t = self.spec, self.t
        if not top.flag and tok == t[s.summary_close]:
            if s.summary_placement == "after":  # </Summary> ends the block
                self._pop()
                return Event()
            top.flag = True
            return Event(force=[t[s.parallel_close]])
        if top.flag and tok == t[s.parallel_close]:
            self._pop()
        return Event()

    def _start_branches(self) -> Event:
        top = self.frames[-1]
        return Event(fork=top.n) if self.executed else Event(force=[self._open_tag()])

    def _after_last_branch(self) -> list[int]:
        s, t = self.spec, self.t
        if s.is_parason:
            self._pop()  # the forced </Parallel> closes the block
            return [t[s.parallel_close]]
        depth = self._pop().depth
        self.frames.append(Frame(SUMMARY, depth))
        if s.summary_placement == "after":
            return [t[s.parallel_close], t[s.summary_open]]
        return [t[s.summary_open]]

    # ---- caps -------------------------------------------------------------------------------
    def fork_allowed(self) -> bool:
        """A new block may open here (depth cap; Parallel-R1 never nests)."""
        depth = self.frames[-1].depth
        if self.spec.is_parason:
            return depth < self.spec.max_depth
        return len(self.frames) == 1

    def banned(self) -> list[int]:
        """Tokens that must not be sampled now (an opening tag past the depth cap)."""
        if self.frames[-1].kind == SEQ and not self.fork_allowed():
            return [self.t[self.spec.parallel_open]]
        return []

    def branch_tokens(self) -> int:
        """Tokens the innermost branch body of this request emitted (0 on the main chain)."""
        body = self._branch_body()
        return body.tokens if body is not None else 0

    def start_closing(self, whole_request: bool) -> None:
        """Close the innermost branch body (or, with `whole_request`, everything this request owns)."""
        level = self.base
        if not whole_request:
            idx = [i for i, f in enumerate(self.frames) if f.kind == SEQ and f.close is not None]
            level = idx[-1] if idx else 0
        self.closing_level = level if self.closing_level is None else min(level, self.closing_level)

    def closing_token(self) -> int | None:
        """In closing mode, the next token to force; None when the main chain itself must end."""
        s, t = self.spec, self.t
        top = self.frames[-1]
        if top.kind == SEQ:
            return top.close  # None: main chain, stop
        if top.kind == OUTLINE:
            if top.close is not None:
                return top.close
            if not top.flag:
                return t[s.outlines_open]
            return t[s.outlines_close] if top.n >= s.min_branches else t[s.subtask_open]  # empty entries
        if top.kind == SUMMARY:
            return t[s.parallel_close] if top.flag else t[s.summary_close]
        return self._open_tag()  # BRANCHES: open the next (empty) branch

    @property
    def closing(self) -> bool:
        return self.closing_level is not None

    @property
    def in_branch(self) -> bool:
        """Inside some branch body (Thread / Path) of this request's structure."""
        return self._branch_body() is not None

    @property
    def in_main_text(self) -> bool:
        """On the main chain's free text: where EOS and stop tokens end the request."""
        return len(self.frames) == 1

    # ---- helpers ------------------------------------------------------------------------------
    def _pop(self) -> Frame:
        frame = self.frames.pop()
        if self.closing_level is not None and len(self.frames) <= self.closing_level:
            self.closing_level = None  # the capped frame is closed: sample again
        return frame

    def _branch_body(self) -> Frame | None:
        for f in reversed(self.frames):
            if f.kind == SEQ and f.close is not None:
                return f
        return None

    def _open_tag(self) -> int:
        s = self.spec
        return self.t[s.thread_open if s.is_parason else s.path_open]

    def _close_tag(self) -> int:
        s = self.spec
        return self.t[s.thread_close if s.is_parason else s.path_close]
