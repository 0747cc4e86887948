"""Command line: ``python -m formats stats FILE.jsonl --format {parallel_r1,parason} [--tokenizer DIR]``.

Reads one trajectory per line (``{"text": ...}``; ``FILE`` may be ``-`` for stdin) and prints one
JSON object per input line, in order: ``line`` (1-based), ``id`` (copied when the input has one),
every metric of :mod:`formats.metrics`, ``valid``, ``status`` and ``error``.  A bad line (invalid
UTF-8, not JSON, not an object, no string ``text``) yields ``valid: false`` with ``status:
"bad_line"`` and an error object instead of stopping the run.  Exit status 0 unless the file or
tokenizer cannot be opened (2).
"""

from __future__ import annotations

import argparse
import json
import sys

from formats.metrics import METRIC_FIELDS, text_stats
from formats.spec import FORMAT_NAMES, get_spec


def _bad(lineno: int, code: str, message: str) -> dict:
    out = {"line": lineno}
    out.update(dict.fromkeys(METRIC_FIELDS))
    out.update(valid=False, status="bad_line", error={"code": code, "message": message})
    return out


def _line_stats(lineno: int, raw: bytes, spec, tokenizer) -> dict:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return _bad(lineno, "bad_utf8", str(e))
    if not line.strip():
        return _bad(lineno, "empty_line", "empty line")
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as e:
        return _bad(lineno, "bad_json", str(e)[:200])
    if not isinstance(obj, dict):
        return _bad(lineno, "no_text", f"expected a JSON object, got {type(obj).__name__}")
    text = obj.get("text")
    if not isinstance(text, str):
        return _bad(lineno, "no_text", "missing or non-string 'text' field")
    out = {"line": lineno}
    if "id" in obj:
        out["id"] = obj["id"]
    out.update(text_stats(text, spec, tokenizer))
    return out


def stats_command(path: str, fmt: str, tokenizer_dir: str | None, out=None) -> int:
    out = out or sys.stdout
    spec = get_spec(fmt)
    tokenizer = None
    if tokenizer_dir:
        import os

        if not os.path.isdir(tokenizer_dir):
            print(f"error: tokenizer directory {tokenizer_dir!r} does not exist", file=sys.stderr)
            return 2
        try:
            if os.path.isfile(os.path.join(tokenizer_dir, "tokenizer.json")):
                # a fast tokenizer file is all that token counting needs (and loads quickest)
                from transformers import PreTrainedTokenizerFast as _Tok
            else:
                from transformers import AutoTokenizer as _Tok
            tokenizer = _Tok.from_pretrained(tokenizer_dir, local_files_only=True)
        except Exception as e:  # noqa: BLE001 -- report any loader failure
            print(f"error: cannot load tokenizer from {tokenizer_dir!r}: {e}", file=sys.stderr)
            return 2
    try:
        fh = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115 -- closed below
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        with fh:
            for i, raw in enumerate(fh, 1):
                raw = raw.rstrip(b"\r\n")
                out.write(json.dumps(_line_stats(i, raw, spec, tokenizer)) + "\n")
            out.flush()
    except BrokenPipeError:  # e.g. piped into `head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m formats", description="Parallel-trajectory format tools.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("stats", help="per-line metrics of a JSONL file of trajectories")
    st.add_argument("file", help='JSONL file, one {"text": ...} per line ("-" for stdin)')
    st.add_argument("--format", required=True, choices=FORMAT_NAMES)
    st.add_argument(
        "--tokenizer", default=None, help="HF tokenizer directory (default: whitespace/tag units)"
    )
    args = ap.parse_args(argv)
    if args.cmd == "stats":
        return stats_command(args.file, args.format, args.tokenizer)
    return 2  # pragma: no cover
