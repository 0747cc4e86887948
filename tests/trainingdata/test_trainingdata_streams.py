"""The run's streams: shuffled epochs, one prompt order per stage, the benchmarks' prompts."""

from __future__ import annotations

import pytest

from parallax.trainingdata.streams import batches


def test_batches_cover_each_epoch_once():
    it = batches(list(range(10)), 5, seed=0)
    first_epoch = next(it) + next(it)
    assert sorted(first_epoch) == list(range(10))


def test_stages_on_one_pool_draw_different_prompt_orders():
    from curricula.stage import Stage
    from parallax import toyworld
    from parallax.contract.config import DataConfig
    from parallax.tinylm import build_tokenizer
    from parallax.trainingdata.streams import StageStreams

    train = toyworld.generate("mixed", 64, seed=0)
    streams = StageStreams(DataConfig(), train, build_tokenizer([p.prompt for p in train]), seed=0)
    a, b = Stage("easy_rl", "rl", 4), Stage("acc_rl", "rl", 4)
    first_a = [p.uid for p in streams.next(a, 8)]
    assert first_a != [p.uid for p in streams.next(b, 8)]
    again = StageStreams(DataConfig(), train, build_tokenizer([p.prompt for p in train]), seed=0)
    assert [p.uid for p in again.next(a, 8)] == first_a  # deterministic per (seed, stage)


def test_benchmark_prompts_are_the_papers_prompt_in_the_chat_template(lm):
    from parallax.contract.config import DataConfig
    from parallax.trainingdata.streams import benchmark_prompts

    _, tok = lm
    prompts = benchmark_prompts("gsm8k", DataConfig(), tok, limit=3)
    assert [p.meta["benchmark"] for p in prompts] == ["gsm8k"] * 3
    assert all(p.text.startswith("Solve the following problem step by step.") for p in prompts)  # no template
    assert prompts[0].ground_truth == "18"  # GSM8K test 1: Janet's ducks, the number after ####

    class Chat:  # a tokenizer with a chat template wraps the same prompt as a user turn
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return f"<user>{messages[-1]['content']}</user><assistant>"

        def __call__(self, texts, add_special_tokens):
            return {"input_ids": [[1]] * len(texts)}

    (p,) = benchmark_prompts("gsm8k", DataConfig(), Chat(), limit=1)
    assert p.text == f"<user>{prompts[0].text}</user><assistant>"
    with pytest.raises(ValueError, match="unknown benchmark 'gsm9k'"):
        benchmark_prompts("gsm9k", DataConfig(), tok)


def test_rl_holdout_keeps_rl_problems_out_of_sft():
    """data.rl_holdout: a share of the distinct train problems (reorderings are one problem) goes to the RL
    stages only, the rest to SFT only; 0 gives every stage the whole pool."""
    from curricula.stage import Stage
    from parallax import toyworld
    from parallax.contract.config import DataConfig
    from parallax.tinylm import build_tokenizer
    from parallax.trainingdata.streams import StageStreams

    train, _ = toyworld.make_splits(2000, 128, seed=0)
    tok = build_tokenizer([p.prompt for p in train[:200]])
    sft, rl = Stage("sft", "sft", 4), Stage("rl", "rl", 4)
    held = StageStreams(DataConfig(rl_holdout=0.3), train, tok, seed=0)
    sft_keys = {p.key for _ in range(100) for p in held.next(sft, 16)}
    rl_uids = {p.uid for _ in range(100) for p in held.next(rl, 16)}
    rl_keys = {p.key for p in train if p.uid in rl_uids}
    assert sft_keys and rl_keys and not sft_keys & rl_keys
    pool = {q.uid for q in held._items(rl)}
    share = len({p.key for p in train if p.uid in pool}) / len({p.key for p in train})
    assert 0.2 < share < 0.4, share
    whole = StageStreams(DataConfig(), train, tok, seed=0)
    assert len(whole._items(sft)) == len(whole._items(rl)) == 2000
    with pytest.raises(ValueError, match="data.rl_holdout"):
        DataConfig(rl_holdout=1.0)


def test_teacher_serial_per_draw_gives_each_problem_both_forms_in_sft():
    """data.teacher_serial_per=draw: the coin falls at each SFT draw, not once per problem, so over the epochs
    one problem shows its serial trace about teacher_serial of the time (per problem: always one form); RL's
    prompts are untouched, and a second stream of the same seed (a resumed run) draws the same coins."""
    from curricula.stage import Stage
    from parallax.contract.config import DataConfig
    from parallax.tinylm import build_tokenizer
    from parallax.trainingdata.streams import StageStreams, load_problems

    sft, rl = Stage("sft", "sft", 40), Stage("rl", "rl", 4)
    cfg = {"n_train": 16, "n_test": 4, "teacher_serial": 0.5, "teacher_no_answer": 0.0}

    def forms(per: str, seed: int = 0) -> dict[str, list[bool]]:
        data = DataConfig(**cfg, teacher_serial_per=per)
        train, _ = load_problems(data)
        streams = StageStreams(data, train, build_tokenizer([p.prompt for p in train]), seed=seed)
        seen: dict[str, list[bool]] = {}
        for _ in range(40):  # 40 epochs of 16
            for p in streams.next(sft, 16):
                assert (p.traces["parason"] == p.traces["serial"]) == p.teacher_serial
                seen.setdefault(p.uid, []).append(p.teacher_serial)
        assert [q.uid for q in streams.next(rl, 4)]  # RL's prompts come from the same pool, unchanged
        return seen

    per_problem, per_draw = forms("problem"), forms("draw")
    assert all(len(set(v)) == 1 for v in per_problem.values())  # one form per problem, every draw
    assert 0 < sum(v[0] for v in per_problem.values()) < 16
    shares = [sum(v) / len(v) for v in per_draw.values()]
    assert len(shares) == 16 and all(0.2 <= s <= 0.8 for s in shares), shares  # both forms, about half each
    assert forms("draw") == per_draw and forms("draw", seed=1) != per_draw
    with pytest.raises(ValueError, match="data.teacher_serial_per"):
        DataConfig(teacher_serial_per="epoch")
