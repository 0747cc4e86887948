"""How fragile is an SFT checkpoint? Sample accuracy after moving every weight by +-s at random.

The README's RL-vs-SFT section compares this with Adam's first GRPO step, which moves every
weight by +-LR along the sign of the gradient: at LR 5e-4 that step takes the sample accuracy of
the difficulty-[1,2] checkpoint from 0.46 to 0.17, while random signs of the same size leave it
unchanged. So what breaks the model is the direction of the step, not its size.

Usage: ``python bench/bench_perturb.py CHECKPOINT_MODEL_DIR [--scales 0 1e-4 5e-4 1e-3]
[--difficulty 1 2] [--problems 96] [--samples 8]``. The problems are the first training problems
of ``make_splits(20000, 256, seed=0, difficulty)`` (the ones RL would draw from), sampled at
T=1.0 with a fixed seed, so every scale sees the same sampling stream. Prints a table and one
JSON line (``"bench": "perturb"``).
"""

from __future__ import annotations

import argparse
import json
import re

import torch

ANSWER = re.compile(r"#### (-?\d+)")


def sample_accuracy(model, tok, problems, samples: int, max_new_tokens: int = 64) -> tuple[float, list[str]]:
    """(accuracy, the sampled texts) at T=1.0 from a fixed seed."""
    torch.manual_seed(0)
    correct, texts = 0, []
    for p in problems:
        ids = tok(p.prompt, add_special_tokens=False)["input_ids"]
        x = torch.tensor([ids] * samples)
        with torch.no_grad():
            out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=True, temperature=1.0,
                                 top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                                 pad_token_id=tok.pad_token_id or 0)
        for row in out:
            texts.append(tok.decode(row[len(ids):], skip_special_tokens=True))
            m = ANSWER.search(texts[-1])
            correct += bool(m) and m.group(1) == p.answer
    return correct / (len(problems) * samples), texts


def perturbed(path: str, scale: float, seed: int = 1):
    """The checkpoint with every parameter moved by +-scale (independent fair signs)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for prm in model.parameters():
            prm.add_(scale * (torch.randint(0, 2, prm.shape, generator=g).to(prm.dtype) * 2 - 1))
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a checkpoint's model/ directory (Hugging Face format)")
    ap.add_argument("--scales", type=float, nargs="+", default=[0.0, 1e-4, 5e-4, 1e-3])
    ap.add_argument("--difficulty", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--problems", type=int, default=96)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from transformers import AutoTokenizer

    from parallax import toyworld

    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(args.model)
    train, _ = toyworld.make_splits(20000, 256, 0, tuple(args.difficulty))
    problems = train[: args.problems]
    base = sample_accuracy(perturbed(args.model, 0.0), tok, problems, args.samples)[1]
    rows = []
    for s in args.scales:
        acc, texts = sample_accuracy(perturbed(args.model, s), tok, problems, args.samples)
        rows.append((s, acc, sum(a != b for a, b in zip(texts, base)) / len(base)))
    print(f"{'+-scale':>10} | sample accuracy ({args.problems} problems x {args.samples}) | samples changed")
    for s, acc, changed in rows:
        print(f"{s:>10g} | {acc:.3f} | {changed:.3f}")
    print(json.dumps({"bench": "perturb", "model": args.model, "problems": args.problems, "samples": args.samples,
                      "accuracy": {str(s): a for s, a, _ in rows}, "changed": {str(s): c for s, _, c in rows}}))


if __name__ == "__main__":
    main()
