"""Parallax parallel-trajectory contract: Parallel-R1 and Parason formats.

Importable without ray, torch, vllm or xgrammar (xgrammar is imported lazily by the grammar
compiler only).

Formats (tag spellings and limits are config, see :class:`FormatSpec`)::

    Parallel-R1  <Parallel> <Path>..</Path> x [min_branches, max_branches] </Parallel> <Summary>..</Summary>
                 (or the summary inside, before </Parallel>: ``FormatSpec.summary_placement/_accept``)
    Parason      <Parallel> <Outlines> (<Subtask>..</Subtask> | <Trial>..</Trial>) x [min, max] </Outlines>
                 <Thread>..</Thread> x (one per entry; may nest blocks up to max_depth) </Parallel>
                 (the release's <Outline> entries and <Conclusion> parse too: ``FormatSpec.aliases``)

Text outside blocks is the sequential main chain.  Free text anywhere may contain anything except a
tag string of the format; only whitespace (" \\t\\r\\n") may sit between structural tags in a block.

Public API
----------
Spec:      ``FormatSpec``, ``PARALLEL_R1``, ``PARASON``, ``get_spec(name, **overrides)``,
           ``ALL_SPECIAL_TOKENS`` (every tag of both default formats, for the tokenizer).
Tree:      ``Tree(nodes)`` of ``str`` and ``Block(branches, summary, gaps, placement)``;
           ``Branch(kind, body, outline)`` with kind ``PATH`` / ``SUBTASK`` (AND) / ``TRIAL`` (OR) /
           ``OUTLINE`` (untyped).
Parse:     ``parse(text, spec, strict=True, tokenizer=None) -> ParseResult`` (``.ok``, ``.status``
           in ``STATUSES``, ``.tree``, ``.error: ParseError`` with code, message, char and token
           offset, ``.prefix_end``).  Never raises; linear time; depth bounded.
Render:    ``render(tree, spec) -> str``; ``parse(render(t)).tree == t``, ``render(parse(s).tree) == s``.
Answer:    ``final_segment(tree_or_text, spec)`` -- main-chain text after the last block closes;
           ``answer_text(text, spec)`` -- the same for any text, well formed or not.
Metrics:   ``compute_metrics(tree_or_parse_result, spec, tokenizer=None) -> Metrics`` (pass the
           ``ParseResult`` for the fastest path; total / critical-path tokens,
           speedup, eta, blocks, branches, depth, first-<Parallel> position, Subtask/Trial/Path
           shares; units and conventions in :mod:`parallax.formats.metrics`); ``text_stats(text, spec,
           tokenizer=None) -> dict`` (parse + metrics + valid/status/error; never raises).
Headers:   ``thread_header(outline)``, ``with_thread_headers(tree)``: the text the executor forces
           after a Parason ``<Thread>`` (:mod:`parallax.formats.headers`).
Grammar:   ``ebnf(spec) -> str`` (xgrammar EBNF, ``root ::=``), ``compile_grammar(spec, hf_tokenizer)``,
           ``GrammarChecker(spec, hf_tokenizer).accepts(text)``.
CLI:       ``python -m parallax.evaluation stats FILE.jsonl --format {parallel_r1,parason} [--tokenizer DIR]``.
Speed:     the optional C extension ``parallax.formats._speedups`` (built by ``pip install -e .``) splits and
           counts in one pass; without it, or with ``PARALLAX_FORMATS_PURE=1``, a pure-Python path
           gives the same results (:mod:`parallax.formats.units`).

Example::

    >>> from parallax.formats import parse, compute_metrics, final_segment
    >>> r = parse("Go. <Parallel><Outlines><Subtask>a</Subtask><Trial>b</Trial></Outlines>"
    ...           "<Thread>x y</Thread><Thread>z</Thread></Parallel> #### 1", "parason")
    >>> r.ok, final_segment(r.tree)
    (True, ' #### 1')
    >>> m = compute_metrics(r.tree, "parason"); (m.total_tokens, m.critical_path_tokens)
    (20, 17)
"""

from parallax.formats.grammar import GrammarChecker, compile_grammar, ebnf
from parallax.formats.headers import THREAD_HEADER_SEP, thread_header, with_thread_headers
from parallax.formats.metrics import METRIC_FIELDS, Metrics, compute_metrics, text_stats
from parallax.formats.parser import STATUSES, ParseError, ParseResult, answer_text, final_segment, parse, render
from parallax.formats.spec import (
    ALL_SPECIAL_TOKENS,
    FORMAT_NAMES,
    PARALLEL_R1,
    PARASON,
    PLACEMENTS,
    FormatSpec,
    get_spec,
)
from parallax.formats.tree import (
    BRANCH_KINDS,
    OUTLINE,
    PATH,
    SUBTASK,
    TRIAL,
    Block,
    Branch,
    Tree,
    canonical_nodes,
    is_written,
)

__all__ = [
    "ALL_SPECIAL_TOKENS",
    "BRANCH_KINDS",
    "FORMAT_NAMES",
    "METRIC_FIELDS",
    "OUTLINE",
    "PARALLEL_R1",
    "PARASON",
    "PATH",
    "PLACEMENTS",
    "STATUSES",
    "SUBTASK",
    "THREAD_HEADER_SEP",
    "TRIAL",
    "Block",
    "Branch",
    "FormatSpec",
    "GrammarChecker",
    "Metrics",
    "ParseError",
    "ParseResult",
    "Tree",
    "answer_text",
    "canonical_nodes",
    "compile_grammar",
    "compute_metrics",
    "ebnf",
    "final_segment",
    "get_spec",
    "is_written",
    "parse",
    "render",
    "text_stats",
    "thread_header",
    "with_thread_headers",
]
