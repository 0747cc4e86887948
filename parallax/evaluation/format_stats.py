"""``python -m parallax.evaluation stats FILE --format {parallel_r1,parason} [--tokenizer DIR] [--text-field PATH]``
``[--summary-placement {after,inside}] [--summary-accept after,inside] [--no-aliases] [--outline-kind KIND]``.

Reads one trajectory per row of a JSONL file (``{"text": ...}``; ``FILE`` may be ``-`` for stdin), a
JSON list or a parquet file (verl's datasets; rollout dumps), the text at ``--text-field`` (a dotted
path; default the first of ``parallax.trainingdata.fields.TEXT_FIELDS``; a chat-message list is its last
message), and prints one JSON object per input row, in order: ``line`` (1-based), ``id`` (copied when
the input has one), every metric of :mod:`parallax.formats.metrics`, ``valid``, ``status`` and ``error``.  A bad
line (invalid UTF-8, not JSON, not an object, no string ``text``) yields ``valid: false`` with
``status: "bad_line"`` and an error object instead of stopping the run.  Exit status 0 unless the file
or tokenizer cannot be opened (2).
"""

from __future__ import annotations

import argparse
import json
import sys

from parallax.formats.metrics import METRIC_FIELDS, text_stats
from parallax.formats.spec import FORMAT_NAMES, PLACEMENTS, get_spec, parse_options
from parallax.trainingdata.fields import TEXT_FIELDS, FieldError, field, find_field, text_of
from parallax.trainingdata.rows import read_rows


def add_format_options(ap: argparse.ArgumentParser) -> None:
    """The format options every CLI that parses trajectories takes (:class:`parallax.formats.FormatSpec`)."""
    ap.add_argument("--summary-placement", choices=PLACEMENTS, default="after",
                    help="where the format writes the Parallel-R1 summary (default: after </Parallel>, "
                         "the public convention)")
    ap.add_argument("--summary-accept", default="after,inside",
                    help="comma-separated summary placements the parser accepts (default: after,inside)")
    ap.add_argument("--no-aliases", dest="aliases", action="store_false",
                    help="reject the Parason release's <Outline> entries and <Conclusion>")
    ap.add_argument("--outline-kind", choices=("outline", "subtask", "trial"), default="outline",
                    help="what an untyped <Outline> entry counts as (default: neither subtask nor trial)")


def spec_from_args(fmt: str, args: argparse.Namespace):
    """The FormatSpec of `fmt` with the options of :func:`add_format_options`; ValueError if bad."""
    return get_spec(fmt, **parse_options({"summary_placement": args.summary_placement,
                                          "summary_accept": args.summary_accept,
                                          "aliases": args.aliases, "outline_kind": args.outline_kind}))


def _bad(lineno: int, code: str, message: str) -> dict:
    out = {"line": lineno}
    out.update(dict.fromkeys(METRIC_FIELDS))
    out.update(valid=False, status="bad_line", error={"code": code, "message": message})
    return out


def _row_stats(row, spec, tokenizer, text_field: str | None) -> dict:
    if row.error is not None:
        return _bad(row.line, "no_text" if row.error == "not_object" else row.error, row.message)
    obj = row.data
    path = text_field or find_field(obj, TEXT_FIELDS)
    if path is None:
        return _bad(row.line, "no_text", f"none of the text fields {TEXT_FIELDS} (or --text-field)")
    try:
        text = text_of(field(obj, path))
    except FieldError as e:
        return _bad(row.line, "no_text", str(e))
    if text is None:
        return _bad(row.line, "no_text", f"field {path!r} is neither a string nor a chat-message list")
    out = {"line": row.line}
    if "id" in obj:
        out["id"] = obj["id"]
    out.update(text_stats(text, spec, tokenizer))
    return out


def stats_command(path: str, fmt, tokenizer_dir: str | None, out=None, text_field: str | None = None) -> int:
    """`fmt`: a format name or a FormatSpec."""
    out = out or sys.stdout
    spec = get_spec(fmt) if isinstance(fmt, str) else fmt
    tokenizer = None
    if tokenizer_dir:
        import os

        if not os.path.isdir(tokenizer_dir):
            print(f"error: tokenizer directory {tokenizer_dir!r} does not exist", file=sys.stderr)
            return 2
        try:
            from parallax.models.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(tokenizer_dir)
        except Exception as e:  # noqa: BLE001 -- report any loader failure
            print(f"error: cannot load tokenizer from {tokenizer_dir!r}: {e}", file=sys.stderr)
            return 2
    try:
        rows = read_rows(path, keep_empty=True)
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        for row in rows:
            out.write(json.dumps(_row_stats(row, spec, tokenizer, text_field)) + "\n")
        out.flush()
    except BrokenPipeError:  # e.g. piped into `head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def add_cli(sub) -> None:
    """Register ``stats`` on the ``python -m parallax.evaluation`` parser."""
    st = sub.add_parser("stats", help="per-row format metrics of a file of trajectories")
    st.add_argument("file", help='JSONL (one {"text": ...} per line; "-" for stdin), JSON or parquet file')
    st.add_argument("--text-field", default=None,
                    help=f"dotted path of the trajectory (default: the first of {', '.join(TEXT_FIELDS)}); "
                         "a chat-message list is read as its last message")
    st.add_argument("--format", required=True, choices=FORMAT_NAMES)
    st.add_argument("--tokenizer", default=None, help="HF tokenizer directory (default: whitespace/tag units)")
    add_format_options(st)
    st.set_defaults(run=_run)


def _run(args) -> int:
    return stats_command(args.file, args.format, args.tokenizer, out=args.stream, text_field=args.text_field)
