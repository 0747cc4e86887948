"""EBNF grammars (xgrammar's GBNF dialect, ``root ::= ...``) generated from a :class:`FormatSpec`.

The grammar accepts exactly the texts that :func:`formats.parser.parse` accepts in strict mode:

* free text (main chain, Path/Summary/outline/Thread text) is any string containing **no tag
  string of the format** (the content alphabet rule of :mod:`formats.parser`).  Because every tag
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

from formats.parser import resolve_spec
from formats.spec import FormatSpec

__all__ = ["GrammarChecker", "compile_grammar", "ebnf"]


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


@lru_cache(maxsize=32)
def _ebnf(spec: FormatSpec) -> str:
    rules: list[str] = []
    lo, hi = spec.min_branches, spec.max_branches
    if not spec.is_parason:
        rules.append("root ::= text (block text)*")
        rules.append(
            f"block ::= {_lit(spec.parallel_open)} ws {_rep('path', lo, hi)} ws summary ws {_lit(spec.parallel_close)}"
        )
        rules.append(f"path ::= {_lit(spec.path_open)} text {_lit(spec.path_close)}")
        rules.append(f"summary ::= {_lit(spec.summary_open)} text {_lit(spec.summary_close)}")
    else:
        D = spec.max_depth
        rules.append("root ::= text (block_1 text)*")
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
    rules.extend(_text_rules(spec.tags))
    return "\n".join(rules) + "\n"


def ebnf(spec: FormatSpec | str) -> str:
    """The EBNF grammar (xgrammar dialect, starting at ``root``) of a format spec or name."""
    return _ebnf(resolve_spec(spec))


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
