"""``python -m parallax.studies NAME [options] [-- hydra overrides]``: run a study end to end and print its
table (see ``studies``); ``python -m parallax.studies report DIR`` rebuilds the report from the runs on disk."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from parallax.studies.report import write_report
from parallax.studies.run import StudyError, run_study
from parallax.studies.specs import STUDIES


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m parallax.studies", description=__doc__)
    ap.add_argument("name", choices=[*STUDIES, "report"], help="the study to run, or 'report' to rebuild one from disk")
    ap.add_argument("path", nargs="?", help="with 'report': the study's output directory")
    ap.add_argument("--out", default="runs/studies",
                    help="parent directory of the study's output (default runs/studies)")
    ap.add_argument("--seeds", type=int, nargs="+", help="RL seeds (default: the study's)")
    ap.add_argument("--sft-steps", type=int, help="SFT steps (default: the study's)")
    ap.add_argument("--rl-steps", type=int, help="RL steps per arm (default: the study's)")
    ap.add_argument("--switch", type=int, help="the scaffold's S2 steps (default: the study's)")
    ap.add_argument("--eval-every", type=int, help="held-out evaluation every N RL steps (default: the study's)")
    ap.add_argument("--parallel", type=int, default=0,
                    help="arms run at once on one shared Ray cluster (default 0: every arm; 1: one after another)")
    ap.add_argument("--reuse-sft", action="store_true", help="reuse the SFT checkpoint already in the output directory")
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args, overrides = ap.parse_args(argv[:cut]), argv[cut + 1:]  # after --: Hydra overrides for every job
    if args.name == "report":
        if not args.path:
            ap.error("report needs the study's output directory")
        out = Path(args.path)
        study = STUDIES[json.loads((out / "results.json").read_text())["study"]] if (out / "results.json").exists() \
            else STUDIES[out.name]
        write_report(out, study)
        print((out / "results.md").read_text())
        return 0
    study = STUDIES[args.name]
    changes = {k: v for k, v in (("sft_steps", args.sft_steps), ("rl_steps", args.rl_steps), ("switch", args.switch),
                                 ("eval_every", args.eval_every)) if v is not None}
    study = replace(study, **changes, seeds=tuple(args.seeds or study.seeds))
    out = Path(args.out) / study.name
    t0 = time.monotonic()
    try:
        times = run_study(study, out, study.seeds, reuse_sft=args.reuse_sft, extra=overrides,
                           parallel=args.parallel or len(study.arms))
        write_report(out, study, times)
    except (StudyError, FileNotFoundError) as e:
        print(f"studies: {e}", file=sys.stderr)
        return 1
    print((out / "results.md").read_text())
    print(f"{study.name}: {time.monotonic() - t0:.0f} s in all "
          f"({', '.join(f'{k} {v:.0f} s' for k, v in times.items())}); "
          f"{out / 'summary.png'}, {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
