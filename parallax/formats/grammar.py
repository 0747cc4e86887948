"""EBNF grammars (xgrammar's GBNF dialect, ``root ::= ...``) generated from a :class:`FormatSpec`.

The grammar is what the format *writes*: it accepts exactly the texts that
:func:`parallax.formats.parser.parse` accepts in strict mode and whose tree the format writes
(:func:`parallax.formats.tree.is_written`: the summary only at ``spec.summary_placement``, no release alias
``<Outline>`` / ``<Conclusion>``; the parser reads those too, so free text holds none of them):

* free text (main chain, Path/Summary/outline/Thread text) is any string containing **no tag
  string of the format** (the content alphabet rule of :mod:`parallax.formats.parser`).  Because every tag
  is ``'<' + name + '>'`` with a single ``<``, that language is regular and unambiguous:
  ``text ::= [^<]* ("<" r)*`` where ``r`` (generated from a trie of the tags' tails) matches any
  ``<``-free string that does not start with a tag's tail;
* only ``[ \\t\\r\\n]*`` may appear between structural tags inside a block;
* branch counts lie in ``[min_branches, max_branches]``; Parason has one Thread per outline
  entry (an alternative per count) and Threads nest blocks up to ``max_depth`` levels
  (one rule family per depth level, so the grammar has no recursion).

:func:`ebnf` needs nothing; :func:`compile_grammar` and :class:`GrammarChecker` import xgrammar
lazily (CPU is enough).
"""

from __future__ import annotations

from functools import lru_cache

from parallax.formats.parser import resolve_spec
from parallax.formats.spec import FormatSpec

__all__ = ["GrammarChecker", "compile_grammar", "ebnf", "starts"]


def _lit(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _cls_char(c: str) -> str:
    if c in "\\]^-[":
        return "\\" + c
    if c == "\n":
        return "\\n"
    if c == "\t":
        return "\\t"
    if c == "\r":
        return "\\r"
    return c


def _text_rules(tags: tuple[str, ...]) -> list[str]:
    """Rules ``text`` (tag-free strings) and its trie helpers ``tf_*``."""
    tails = sorted({t[1:] for t in tags})
    # trie over tails; node = prefix string
    children: dict[str, dict[str, bool]] = {}
    for tail in tails:
        for i in range(len(tail)):
            pre, ch = tail[:i], tail[i]
            leaf = i == len(tail) - 1
            d = children.setdefault(pre, {})
            d[ch] = d.get(ch, False) or leaf
    names: dict[str, str] = {}

    def name(pre: str) -> str:
        if pre not in names:
            names[pre] = f"tf_{len(names)}"
        return names[pre]

    rules = ['text ::= [^<]* ("<" ' + name("") + ")*"]
    todo = [""]
    seen = set()
    while todo:
        pre = todo.pop()
        if pre in seen:
            continue
        seen.add(pre)
        kids = children.get(pre, {})
        excluded = "<" + "".join(sorted(kids))
        alts = ['""', "[^" + "".join(_cls_char(c) for c in excluded) + "] [^<]*"]
        for ch in sorted(kids):
            if kids[ch] and ch == ">":
                continue  # completing a tag: forbidden
            if kids[ch]:
                # a tail ends here but the char is not '>' (cannot happen for valid specs)
                continue
            alts.append(f"{_lit(ch)} {name(pre + ch)}")
            todo.append(pre + ch)
        rules.append(f"{name(pre)} ::= " + " | ".join(alts))
    return rules


def _rep(item: str, lo: int, hi: int) -> str:
    """``item`` repeated ``lo..hi`` times, separated by ``ws``."""
    parts = [item] + [f"ws {item}"] * (lo - 1)
    s = " ".join(parts)
    if hi > lo:
        s += f" (ws {item}){{0,{hi - lo}}}"
    return s


def starts(spec: FormatSpec | str) -> tuple[str, ...]:
    """Where a grammar may start (`ebnf(start=...)`): the response (`main`), or inside one branch
    request: Parallel-R1 `path` / `summary` bodies, Parason `thread_<d>` bodies at depth d; and
    Parason outlines resumed part-way (a request cut inside one): `outline_pre` (after
    `<Parallel>`), `outline_<k>` (k entries closed), `subtask_<k>` / `trial_<k>` (inside entry k+1);
    each ends at `</Outlines>`, with the entry count still within the spec's bounds."""
    spec = resolve_spec(spec)
    if spec.is_parason:
        outline = ("outline_pre",) + tuple(f"{kind}_{k}" for k in range(spec.max_branches)
                                           for kind in ("outline", "subtask", "trial"))
        return ("main",) + tuple(f"thread_{d}" for d in range(1, spec.max_depth + 1)) + outline
    return ("main", "path", "summary")


def _more_entries(spec: FormatSpec, done: int) -> str:
    """Entries after `done` closed ones, each then whitespace, then `</Outlines>`."""
    lo, hi = max(0, spec.min_branches - done), spec.max_branches - done
    more = f"(entry ws){{{lo},{hi}}} " if hi > 0 else ""
    return f"{more}{_lit(spec.outlines_close)}"


def _root(spec: FormatSpec, start: str) -> str:
    if start == "outline_pre":
        return f"root ::= ws {_lit(spec.outlines_open)} ws {_more_entries(spec, 0)}"
    kind, _, k = start.rpartition("_")
    if kind == "outline":
        return f"root ::= ws {_more_entries(spec, int(k))}"
    if kind in ("subtask", "trial"):
        close = spec.subtask_close if kind == "subtask" else spec.trial_close
        return f"root ::= text {_lit(close)} ws {_more_entries(spec, int(k) + 1)}"
    if start == "main":
        return "root ::= text (block text)*" if not spec.is_parason else "root ::= text (block_1 text)*"
    if start == "path":
        return f"root ::= text {_lit(spec.path_close)}"
    if start == "summary":
        return f"root ::= text {_lit(spec.summary_close)}"
    return f"root ::= body_{start.removeprefix('thread_')} {_lit(spec.thread_close)}"


@lru_cache(maxsize=64)
def _ebnf(spec: FormatSpec, start: str = "main") -> str:
    if start not in starts(spec):
        raise ValueError(f"grammar start {start!r} for format {spec.name!r}; valid: {starts(spec)}")
    rules: list[str] = [_root(spec, start)]
    lo, hi = spec.min_branches, spec.max_branches
    if not spec.is_parason:
        paths = f"{_lit(spec.parallel_open)} ws {_rep('path', lo, hi)} ws"
        if spec.summary_placement == "after":
            rules.append(f"block ::= {paths} {_lit(spec.parallel_close)} ws summary")
        else:
            rules.append(f"block ::= {paths} summary ws {_lit(spec.parallel_close)}")
        rules.append(f"path ::= {_lit(spec.path_open)} text {_lit(spec.path_close)}")
        rules.append(f"summary ::= {_lit(spec.summary_open)} text {_lit(spec.summary_close)}")
    else:
        D = spec.max_depth
        rules.append(
            f"entry ::= {_lit(spec.subtask_open)} text {_lit(spec.subtask_close)}"
            f" | {_lit(spec.trial_open)} text {_lit(spec.trial_close)}"
        )
        for d in range(1, D + 1):
            alts = []
            for n in range(lo, hi + 1):
                entries = " ws ".join(["entry"] * n)
                threads = " ws ".join([f"thread_{d}"] * n)
                alts.append(f"{entries} ws {_lit(spec.outlines_close)} ws {threads}")
            rules.append(
                f"block_{d} ::= {_lit(spec.parallel_open)} ws {_lit(spec.outlines_open)} ws "
                f"({' | '.join(alts)}) ws {_lit(spec.parallel_close)}"
            )
            rules.append(f"thread_{d} ::= {_lit(spec.thread_open)} body_{d} {_lit(spec.thread_close)}")
            if d < D:
                rules.append(f"body_{d} ::= text (block_{d + 1} text)*")
            else:
                rules.append(f"body_{d} ::= text")
    rules.append("ws ::= [ \\t\\r\\n]*")
    rules.extend(_text_rules(spec.parse_tags))  # free text holds no tag the parser reads
    return "\n".join(rules) + "\n"


def ebnf(spec: FormatSpec | str, start: str = "main") -> str:
    """The EBNF grammar (xgrammar dialect, starting at ``root``) of a format spec or name.

    `start` (see :func:`starts`): ``main`` is the whole response; the others are what one branch
    request of the request executor writes after its opening tag (and thread header): its body,
    then its closing tag -- the same rules, another root."""
    return _ebnf(resolve_spec(spec), start)


def compile_grammar(spec: FormatSpec | str, tokenizer, *, compiler=None):
    """Compile the format's grammar with xgrammar for an HF tokenizer (CPU); returns ``CompiledGrammar``."""
    import xgrammar as xgr

    if compiler is None:
        compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(tokenizer))
    return compiler.compile_grammar(ebnf(spec))


class GrammarChecker:
    """Accept/reject whole strings with xgrammar's ``GrammarMatcher``.

    ``accepts(text)`` feeds the string with ``GrammarMatcher.accept_string`` and requires the
    grammar to be complete at the end (the stop token is accepted); ``accepts_tokens(text)``
    tokenises the text with the tokenizer and feeds token ids with ``accept_token`` -- the path a
    constrained decoder takes.
    """

    def __init__(self, spec: FormatSpec | str, tokenizer):
        import xgrammar as xgr

        self._xgr = xgr
        self.spec = resolve_spec(spec)
        self.tokenizer = tokenizer
        self.tokenizer_info = xgr.TokenizerInfo.from_huggingface(tokenizer)
        self.compiler = xgr.GrammarCompiler(self.tokenizer_info)
        self.compiled = self.compiler.compile_grammar(ebnf(self.spec))
        self._stop = list(self.tokenizer_info.stop_token_ids)

    def _matcher(self):
        return self._xgr.GrammarMatcher(self.compiled)

    def _finish(self, m) -> bool:
        if not self._stop:
            return m.is_completed() if hasattr(m, "is_completed") else True
        return bool(m.accept_token(self._stop[0])) and m.is_terminated()

    def accepts(self, text: str) -> bool:
        m = self._matcher()
        if text and not m.accept_string(text):
            return False
        return self._finish(m)

    def accepts_tokens(self, text: str) -> bool:
        m = self._matcher()
        for tid in self.tokenizer.encode(text, add_special_tokens=False):
            if not m.accept_token(tid):
                return False
        return self._finish(m)
