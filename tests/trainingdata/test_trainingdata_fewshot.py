"""`data.fewshot`: solved toy problems shown before each prompt as earlier chat turns, the same in
training, in the held-out evaluation and in `python -m parallax.evaluation checkpoint --toy-fewshot`."""

from __future__ import annotations

import pytest

from parallax.contract.config import DataConfig
from parallax.trainingdata.prompts import fewshot_prompt, toy_shots

CHATML = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
          "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture
def chat_tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    tok.chat_template = CHATML
    return tok


def test_shots_are_solved_serially_and_never_the_question_itself():
    shots = toy_shots("Q: 1+1\nA:", 3)
    assert len(shots) == 3 and len({q for q, _ in shots}) == 3
    for q, a in shots:
        assert q.startswith("Q: ") and "####" in a and "<Parallel>" not in a  # the format is not shown
    first = shots[0][0]
    again = toy_shots(first, 3)  # asked about the first shot itself: it is skipped, the next ones stand in
    assert first not in [q for q, _ in again] and [q for q, _ in again][:2] == [q for q, _ in shots][1:]
    assert toy_shots("Q: 1+1\nA:", 3) == shots  # deterministic: the same wherever the question is asked


def test_the_prompt_is_the_shots_as_earlier_turns_then_the_question(chat_tokenizer):
    shots = toy_shots("Q: 2*3+4*5\nA:", 2)
    text = fewshot_prompt(chat_tokenizer, "Q: 2*3+4*5\nA:", shots)
    expected = "".join(f"<|user|>{q}<|end|><|assistant|>{a}<|end|>" for q, a in shots)
    assert text == expected + "<|user|>Q: 2*3+4*5\nA:<|end|><|assistant|>"


def test_a_model_without_a_chat_template_is_refused(tiny_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    with pytest.raises(ValueError, match="data.fewshot needs a model with a chat template"):
        fewshot_prompt(tok, "Q: 1+1\nA:", toy_shots("Q: 1+1\nA:", 1))


@pytest.mark.parametrize("bad", [1.5, True, "2"])
def test_the_count_is_a_whole_number(bad):  # its range (0..8) is parallax/contract/ranges.py's, tested from the table
    with pytest.raises(ValueError, match="data.fewshot"):
        DataConfig(fewshot=bad)


def test_training_and_the_checkpoint_cli_show_the_same_prompts(chat_tokenizer):
    """The held-out prompts a run trains beside equal what `python -m parallax.evaluation checkpoint --toy-fewshot 2`
    sends for the same split, so its figures can be reproduced from a checkpoint."""
    from parallax import toyworld
    from parallax.evaluation.runner import prompts_for
    from parallax.trainingdata.loaders import toyworld_problems
    from parallax.trainingdata.streams import show_examples

    cfg = DataConfig(n_train=20, n_test=6, seed=3, fewshot=2)
    train, test = toyworld.make_splits(cfg.n_train, cfg.n_test, cfg.seed, cfg.difficulty, family=cfg.family)
    ran = show_examples(test, cfg, chat_tokenizer)
    cli = prompts_for(toyworld_problems(n=6, seed=3, fewshot=2), "raw", "parallel_r1", chat_tokenizer)
    assert [p.prompt for p in ran] == cli
    assert all(p.prompt.endswith(f"<|user|>{t.prompt}<|end|><|assistant|>") for p, t in zip(ran, test))
    assert [(p.uid, p.answer, p.traces) for p in ran] == [(p.uid, p.answer, p.traces) for p in test]
    assert show_examples(train, DataConfig(n_train=20, n_test=6, seed=3), chat_tokenizer) == train  # 0: raw


def test_a_run_whose_model_has_no_chat_template_is_refused_before_ray(refused):
    err = refused("+experiment=smoke", "data.fewshot=2")  # the tiny model reads raw text
    assert "data.fewshot=2" in err and "chat template" in err, err[-1500:]
