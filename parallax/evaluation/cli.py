"""``python -m parallax.evaluation``: evaluate saved outputs or a checkpoint; build and annotate data; the file tools.

Algorithm: load benchmarks (local files or hub names) -> k samples per problem at temperature T
through the rollout engine (sequential decoding) or read them from a JSONL -> score with the
``accuracy`` reward -> mean@k, unbiased pass@k, #Parallel, first-<Parallel> position, critical
path, speed-up, accuracy under critical-path budgets, difficulty strata -> metrics.json,
report.md, PNG plots, optional W&B (offline) logging.

Launch::

    python -m parallax.evaluation outputs runs/x/samples.jsonl --format parason --budgets 16,32,64 --out runs/x/eval
    python -m parallax.evaluation checkpoint runs/x/checkpoints/step_000020 --benchmarks toyworld --k 8 \\
        --temperature 1.0 --max-new-tokens 96 --style raw --out runs/x/eval --wandb
    python -m parallax.evaluation checkpoint Qwen3-4B-dir --benchmarks aime25,aime24,amc23,math500 --k 16 --engine vllm
    python -m parallax.evaluation stats traces.parquet --format parallel_r1      # per-row format metrics
    python -m parallax.evaluation score rollouts.jsonl --reward pa_grpo beta_sub=0.1  # per-sample rewards

A bare path also works: a directory is a checkpoint, a file a JSONL of outputs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from parallax.evaluation.format_stats import add_format_options, spec_from_args
from parallax.evaluation.metrics import PAPER_BUDGETS, evaluate_outputs
from parallax.trainingdata.fields import ANSWER_FIELDS, TEXT_FIELDS, FieldError, field, find_field, text_of
from parallax.trainingdata.rows import read_rows

__all__ = ["main", "read_outputs"]

_UID_FIELDS = ("uid", "input", "index", "extra_info.index")  # plain rows, verl rollout dumps, verl datasets


def read_outputs(path: str | Path, default_benchmark: str = "default", *, text_field: str | None = None,
                 answer_field: str | None = None, uid_field: str | None = None) -> list[dict]:
    """Samples from a JSONL, JSON or parquet file: one per row (the text at `text_field`, default the
    first of `parallax.trainingdata.fields.TEXT_FIELDS`), or a row with ``texts``/``responses`` lists. Fields are dotted
    paths; a chat-message list is its last message. The problem id grouping the k samples is `uid`
    (or `uid_field`; a verl rollout dump's prompt `input`; a verl dataset's `index`)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"outputs file not found: {p}")
    out: list[dict] = []
    for r in read_rows(p):
        if r.error is not None:
            raise ValueError(f"{p}:{r.line}: not a JSON object ({r.message})")
        row = dict(r.data)
        try:
            out += _samples(row, default_benchmark, text_field, answer_field, uid_field)
        except FieldError as e:
            raise ValueError(f"{p}:{r.line}: {e}") from None
    return out


def _samples(row: dict, benchmark: str, text_field: str | None, answer_field: str | None,
             uid_field: str | None) -> list[dict]:
    row.setdefault("benchmark", benchmark)
    apath = answer_field or find_field(row, ANSWER_FIELDS)
    if apath is not None:
        value = field(row, apath)
        row["answer"] = str(value) if isinstance(value, (int, float)) else text_of(value)
    upath = uid_field or find_field(row, _UID_FIELDS)
    if upath is None:
        raise FieldError(f"row has no 'uid' (the problem id grouping its k samples; or --uid-field), "
                         f"fields: {sorted(row)}")
    uid = field(row, upath)
    row["uid"] = str(text_of(uid) or uid)
    many = row.pop("texts", None) or row.pop("responses", None)
    if many is not None and text_field is None:
        return [{**row, "text": t} for t in many]
    tpath = text_field or find_field(row, TEXT_FIELDS)
    text = text_of(field(row, tpath)) if tpath else None
    if text is None:
        raise FieldError(f"row has none of the text fields {TEXT_FIELDS} or 'texts' (or --text-field)")
    return [{**row, "text": text}]


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from e


def _difficulty(text: str):
    from parallax.toyworld import as_difficulty

    try:
        return as_difficulty(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", default="parallel_r1", choices=("parallel_r1", "parason"))
    add_format_options(p)
    p.add_argument("--k", type=int, default=None, help="samples per problem (outputs: default = fewest present)")
    p.add_argument("--budgets", type=_ints, default=list(PAPER_BUDGETS), help="critical-path budgets, e.g. 16,32,64")
    p.add_argument("--pass-ks", type=_ints, default=None, help="pass@j values (default 1, powers of 2, k)")
    p.add_argument("--out", default="eval_out", help="output directory")
    p.add_argument("--label", default=None, help="row label in the tables (default: input name)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--wandb", action="store_true", help="log to W&B (mode from --wandb-mode)")
    p.add_argument("--wandb-mode", default="offline", choices=("offline", "online", "disabled"))
    p.add_argument("--wandb-project", default="parallax")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m parallax.evaluation", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("outputs", help="score a file of model outputs (JSONL, JSON, parquet; verl rollout dumps)")
    o.add_argument("path")
    o.add_argument("--text-field", default=None, help=f"dotted path of the text (default: first of {TEXT_FIELDS})")
    o.add_argument("--answer-field", default=None,
                   help=f"dotted path of the answer (default: first of {ANSWER_FIELDS})")
    o.add_argument("--uid-field", default=None, help=f"dotted path of the problem id (default: first of {_UID_FIELDS})")
    o.add_argument("--tokenizer", default=None, help="HF tokenizer dir for real token counts")
    o.add_argument("--benchmark", default="default", help="benchmark of rows without one")
    _common(o)
    c = sub.add_parser("checkpoint", help="generate from an HF checkpoint, then score")
    c.add_argument("path")
    c.add_argument("--benchmarks", default="toyworld", help="comma list: toyworld,gsm8k,math500,aime24,...")
    c.add_argument("--source", action="append", default=[], help="NAME=FILE_OR_HUB_NAME override (repeatable)")
    c.add_argument("--data-dir", default=None)
    c.add_argument("--limit", type=int, default=None, help="first N problems of each benchmark")
    c.add_argument("--temperature", type=float, default=1.0)
    c.add_argument("--top-p", type=float, default=1.0)
    c.add_argument("--max-new-tokens", type=int, default=256)
    c.add_argument("--style", default="parallel", choices=("parallel", "plain", "raw"))
    c.add_argument("--engine", default="hf")
    c.add_argument("--dtype", default="float32")
    c.add_argument("--batch-size", type=int, default=64)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--toy-n", type=int, default=128)
    c.add_argument("--toy-seed", type=int, default=0)
    c.add_argument("--toy-difficulty", type=_difficulty, default=1,
                   help="int, comma list (1,2,3) or per family (subtask:1,trial:6/7), as the run's data.difficulty")
    c.add_argument("--toy-family", default="mixed")
    c.add_argument("--toy-fewshot", type=int, default=0,
                   help="solved toy problems before each prompt, as the run's data.fewshot showed them")
    _common(c)
    from parallax.evaluation import format_stats, reward_scores
    from parallax.evaluation.annotate import add_cli as add_annotate_cli
    from parallax.evaluation.builder import add_cli as add_builder_cli

    add_builder_cli(sub)
    add_annotate_cli(sub)
    format_stats.add_cli(sub)
    reward_scores.add_cli(sub)
    return ap


def _finish(result: dict, args: argparse.Namespace, label: str) -> int:
    from parallax.evaluation.report import log_wandb, write_report

    files = write_report(result, args.out, label=label, plots=not args.no_plots)
    if not args.no_plots and files["plot_backend"] is None:
        print("note: neither matplotlib nor Pillow is installed; no plots written", file=sys.stderr)
    if args.wandb:
        files["wandb"] = log_wandb(result, project=args.wandb_project, run_name=label, mode=args.wandb_mode,
                                   out_dir=args.out, plot_paths=files["plots"])
    print(Path(files["markdown"]).read_text())
    print(json.dumps(files))
    return 0


def _outputs(args: argparse.Namespace) -> int:
    samples = read_outputs(args.path, args.benchmark, text_field=args.text_field, answer_field=args.answer_field,
                           uid_field=args.uid_field)
    tok = None
    if args.tokenizer:
        from parallax.models.tokenizer import load_tokenizer

        tok = load_tokenizer(args.tokenizer)
    result = evaluate_outputs(samples, args.format, args.k, budgets=args.budgets, pass_ks=args.pass_ks, tokenizer=tok)
    return _finish(result, args, args.label or Path(args.path).stem)


def model_dir(path: str | Path) -> Path:
    """The Hugging Face directory of `path`: a model directory itself, or a run's checkpoint
    (`checkpoints/step_N`, whose weights and tokenizer are in its `model/`)."""
    path = Path(path)
    for d in (path, path / "model"):
        if (d / "config.json").is_file():
            return d
    raise ValueError(f"{str(path)!r} is neither a model directory (config.json) "
                     "nor a run's checkpoint (model/config.json)")


def _checkpoint(args: argparse.Namespace) -> int:
    from parallax.evaluation.runner import generate_samples
    from parallax.trainingdata.loaders import load_benchmark

    label = args.label or Path(args.path).name  # step_000030, not its model/
    args.path = str(model_dir(args.path))
    sources = dict(s.split("=", 1) for s in args.source)
    diff = args.toy_difficulty
    problems = []
    for name in [b for b in args.benchmarks.split(",") if b]:
        toy = ({"n": args.toy_n, "seed": args.toy_seed, "difficulty": diff, "family": args.toy_family,
                "fewshot": args.toy_fewshot}
               if name == "toyworld" else {})
        problems += load_benchmark(name, sources.get(name), data_dir=args.data_dir, limit=args.limit, **toy)
    k = args.k or 1
    samples, tok = generate_samples(args.path, problems, k, temperature=args.temperature, top_p=args.top_p,
                                    max_new_tokens=args.max_new_tokens, style=args.style, fmt=args.format,
                                    seed=args.seed, engine=args.engine, dtype=args.dtype, batch_size=args.batch_size)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with open(Path(args.out) / "samples.jsonl", "w") as f:
        f.writelines(json.dumps(s) + "\n" for s in samples)
    result = evaluate_outputs(samples, args.format, k, budgets=args.budgets, pass_ks=args.pass_ks, tokenizer=tok)
    result["generation"] = {"model": str(args.path), "temperature": args.temperature, "top_p": args.top_p,
                            "max_new_tokens": args.max_new_tokens, "style": args.style, "seed": args.seed,
                            "mode": "sequential", "token_unit": "model tokenizer"}
    return _finish(result, args, label)


def main(argv: list[str] | None = None, out=None) -> int:
    """`out`: where `stats` and `score` write their JSON lines (default stdout)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in ("outputs", "checkpoint", "build-gsm8k", "annotate", "convert", "stats", "score",
                                "-h", "--help"):
        argv.insert(0, "checkpoint" if Path(argv[0]).is_dir() else "outputs")  # bare path
    ap = _parser()
    args, extra = ap.parse_known_args(argv)  # `score`'s key=value pairs may follow its options
    bad = [x for x in extra if "=" not in x or x.startswith("-")]
    if bad or (extra and args.cmd != "score"):
        ap.error(f"unrecognized arguments: {' '.join(bad or extra)}")
    if args.cmd == "score":
        args.params = list(args.params) + extra
    args.stream = out or sys.stdout
    try:
        if isinstance(getattr(args, "format", None), str) and hasattr(args, "summary_accept") and args.cmd != "score":
            args.format = spec_from_args(args.format, args)  # the format with its options
        return {"outputs": _outputs, "checkpoint": _checkpoint}.get(args.cmd, lambda a: a.run(a))(args)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
