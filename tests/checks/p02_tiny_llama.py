"""Checks for p02.tiny_llama. References: Hugging Face `LlamaForCausalLM` built locally from a tiny random config
(eager attention), run in float64 (the oracle) and in the dtype under test (the baseline) with the same position ids
and the additive causal + padding mask; its `generate(do_sample=False)`; greedy decoding by full recomputation with
it; and a Meta-format checkpoint written from it by `llm_algo.references.llama.meta_checkpoint` (the inverse of
Hugging Face's conversion, derived from the RoPE pairing). Logits are compared at real tokens only."""

import copy

import torch

from llm_algo.check import Checks, expect, expect_close, expect_tensor
from llm_algo.references.hf import tiny_llama_config
from llm_algo.references.llama import additive_mask, causal_lm, interleaved_rows, meta_checkpoint, padded_batch

checks = Checks("p02.tiny_llama")

CONFIGS = {  # name -> overrides of the tiny config (2 layers, hidden 64, 4 query heads of 16, 2 KV heads, V = 128)
    "GQA 4/2, untied head": {},
    "MHA 4/4, tied head, rope_theta=5e5": {"num_key_value_heads": 4, "tie_word_embeddings": True, "rope_theta": 5e5},
    "MQA 4/1, 3 layers, hidden 48": {"num_key_value_heads": 1, "hidden_size": 48, "num_hidden_layers": 3},
}
LENGTHS, SEQ_LEN = [8, 5, 1], 8  # real tokens per row, left-padded


def model_args(ex, config):
    return ex.ModelArgs(
        dim=config.hidden_size,
        n_layers=config.num_hidden_layers,
        n_heads=config.num_attention_heads,
        n_kv_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
        hidden_dim=config.intermediate_size,
        vocab_size=config.vocab_size,
        norm_eps=config.rms_norm_eps,
        rope_theta=config.rope_parameters["rope_theta"],
        tie_embeddings=config.tie_word_embeddings,
    )


def hf_state_dict(model) -> dict:
    """Hugging Face's state dict under the lesson's names: the `model.` prefix dropped, nothing else changed."""
    return {name.removeprefix("model."): tensor for name, tensor in model.state_dict().items()}


def loaded_pair(ex, config):
    """(mine, Hugging Face's) with the same random weights, float32, eval mode."""
    reference = causal_lm(config)
    mine = ex.TinyLlama(model_args(ex, config))
    mine.load_state_dict(hf_state_dict(reference))
    return mine.eval(), reference


def hf_logits(model, input_ids, key_padding_mask, position_ids):
    dtype = next(model.parameters()).dtype
    with torch.no_grad():
        mask = additive_mask(key_padding_mask, input_ids.shape[1], dtype)
        return model(input_ids, attention_mask=mask, position_ids=position_ids).logits


def oracle_logits(model, input_ids, key_padding_mask, position_ids):
    return hf_logits(copy.deepcopy(model).double(), input_ids, key_padding_mask, position_ids)


def random_batch(config, lengths=LENGTHS, seq_len=SEQ_LEN):
    mask, positions = padded_batch(lengths, seq_len, "left")
    return torch.randint(0, config.vocab_size, (len(lengths), seq_len)), mask, positions


def expect_logits_match(got, reference, input_ids, mask, positions, label, hint, dtype=torch.float32):
    expect_tensor(got, shape=(*input_ids.shape, reference.config.vocab_size), input=label, what="logits")
    expect_close(
        got[mask],
        oracle_logits(reference, input_ids, mask, positions)[mask],
        dtype=dtype,
        input=label,
        what="logits at real tokens",
        hint=hint,
    )


# ------------------------------------------------------------------------------------------ TinyLlama


@checks("TinyLlama")
def state_dict_like_llama_for_causal_lm(ex):
    """state_dict keys and shapes equal LlamaForCausalLM's without 'model.'; a tied head shares the embedding"""
    for name, overrides in CONFIGS.items():
        config = tiny_llama_config(**overrides)
        reference = causal_lm(config)
        mine = ex.TinyLlama(model_args(ex, config))
        got = {k: tuple(v.shape) for k, v in mine.state_dict().items()}
        want = {k: tuple(v.shape) for k, v in hf_state_dict(reference).items()}
        expect(
            got == want,
            "state_dict keys or shapes differ from LlamaForCausalLM's (without the 'model.' prefix)",
            input=name,
            expected=str(sorted(set(want) - set(got)) or want),
            got=str(sorted(set(got) - set(want)) or got),
            hint="members embed_tokens, layers (nn.ModuleList of LlamaBlock), norm, lm_head (no bias)",
        )
        unique = sum(p.numel() for p in mine.parameters())
        expect(
            unique == sum(p.numel() for p in reference.parameters()),
            "wrong number of distinct parameters",
            input=name,
            expected=str(sum(p.numel() for p in reference.parameters())),
            got=str(unique),
            hint="when tied, lm_head.weight must BE embed_tokens.weight (the same nn.Parameter), not a copy",
        )
        if config.tie_word_embeddings:
            expect(
                mine.lm_head.weight is mine.embed_tokens.weight,
                "the head is not tied to the embedding",
                input=name,
                expected="lm_head.weight is embed_tokens.weight",
                got="two different tensors",
                hint="self.lm_head.weight = self.embed_tokens.weight",
            )


@checks("TinyLlama")
def logits_match_hf_fp32(ex):
    """fp32 logits match LlamaForCausalLM (GQA/MHA/MQA, tied and untied) on a left-padded batch of 3, same position ids"""
    for name, overrides in CONFIGS.items():
        config = tiny_llama_config(**overrides)
        mine, reference = loaded_pair(ex, config)
        input_ids, mask, positions = random_batch(config)
        with torch.no_grad():
            got = mine(input_ids, attention_mask=mask, position_ids=positions)
        expect_logits_match(
            got,
            reference,
            input_ids,
            mask,
            positions,
            f"{name}, float32, random ids (3, 8), left-padded lengths {LENGTHS}",
            "embed -> every block -> final norm -> lm_head; pass the mask and position ids to every block",
        )


@checks("TinyLlama")
def logits_match_hf_bf16(ex):
    """bf16 logits match LlamaForCausalLM's, within the error that its own bf16 run makes"""
    config = tiny_llama_config()
    mine, reference = loaded_pair(ex, config)
    mine, reference = mine.to(torch.bfloat16), reference.to(torch.bfloat16)
    input_ids, mask, positions = random_batch(config)
    with torch.no_grad():
        got = mine(input_ids, attention_mask=mask, position_ids=positions)
    label = f"bfloat16, random ids (3, 8), left-padded lengths {LENGTHS}"
    expect_tensor(got, dtype=torch.bfloat16, input=label, what="logits")
    expect_close(
        got[mask],
        oracle_logits(reference, input_ids, mask, positions)[mask],
        baseline=hf_logits(reference, input_ids, mask, positions)[mask],
        input=label,
        what="logits at real tokens",
        hint="build the RoPE tables in float32 (rope_cache's default), not in the model's bf16",
    )


@checks("TinyLlama")
def default_position_ids_from_the_mask(ex):
    """without position_ids, positions are attention_mask.cumsum(-1) - 1 (0/1 int masks too; no mask = 0..T-1)"""
    config = tiny_llama_config()
    mine, reference = loaded_pair(ex, config)
    input_ids, mask, positions = random_batch(config)
    with torch.no_grad():
        got = mine(input_ids, attention_mask=mask.long())
    expect_logits_match(
        got,
        reference,
        input_ids,
        mask,
        positions,
        f"attention_mask (3, 8) int64 0/1, left-padded lengths {LENGTHS}, no position_ids",
        "position_ids = (mask.cumsum(-1) - 1).clamp_min(0) at the new tokens; a 0/1 int mask must work too",
    )
    single = input_ids[:1]
    everything = torch.ones(1, SEQ_LEN, dtype=torch.bool)
    with torch.no_grad():
        got = mine(single)
    expect_logits_match(
        got,
        reference,
        single,
        everything,
        torch.arange(SEQ_LEN)[None],
        "input_ids (1, 8), no attention_mask, no position_ids",
        "no mask means every token is real and positions are 0 .. T-1",
    )


@checks("TinyLlama")
def kv_cache_decoding_equals_full_pass(ex):
    """prefill + one-token steps through KVCaches (default positions) give the logits of one full pass"""
    config = tiny_llama_config()
    mine, reference = loaded_pair(ex, config)
    for lengths, label in ((LENGTHS, f"left-padded lengths {LENGTHS}, growing mask"), ([8, 8], "no padding, no mask")):
        input_ids, mask, positions = random_batch(config, lengths)
        use_mask = min(lengths) < SEQ_LEN
        caches, steps = [ex.KVCache() for _ in range(config.num_hidden_layers)], []
        with torch.no_grad():
            for start, stop in ((0, 5), (5, 6), (6, 7), (7, 8)):
                step_mask = mask[:, :stop] if use_mask else None
                steps.append(mine(input_ids[:, start:stop], attention_mask=step_mask, caches=caches))
        expect_logits_match(
            torch.cat(steps, dim=1),
            reference,
            input_ids,
            mask,
            positions,
            f"float32, {label}: prefill 5 tokens, then 3 single tokens",
            "the new tokens' positions continue after the cached ones: take the LAST T columns of the cumsum, "
            "and the cache length when there is no mask",
        )


@checks("TinyLlama")
def default_positions_agree_with_explicit_ones(ex):
    """prefill with default positions, then decode with explicit position_ids (as a caller such as generate passes
    them): the same logits as one full pass, so the default is exactly mask.cumsum(-1) - 1"""
    config = tiny_llama_config()
    mine, reference = loaded_pair(ex, config)
    input_ids, mask, positions = random_batch(config)
    caches, steps = [ex.KVCache() for _ in range(config.num_hidden_layers)], []
    with torch.no_grad():
        steps.append(mine(input_ids[:, :5], attention_mask=mask[:, :5], caches=caches))
        for start in range(5, SEQ_LEN):
            step = slice(start, start + 1)
            steps.append(mine(input_ids[:, step], mask[:, : start + 1], positions[:, step], caches=caches))
    expect_logits_match(
        torch.cat(steps, dim=1),
        reference,
        input_ids,
        mask,
        positions,
        f"float32, left-padded lengths {LENGTHS}: prefill 5 tokens with default positions, then 3 single tokens "
        "with explicit position_ids = mask.cumsum(-1) - 1",
        "RoPE only sees position differences, so an offset in the default positions shows up only next to explicit "
        "ones: the default is (mask.cumsum(-1) - 1).clamp_min(0), the first real token at 0",
    )


# ------------------------------------------------------------------------------------------ conversion


@checks("convert_meta_checkpoint")
def round_trip_gives_hf_weights(ex):
    """a Meta checkpoint written from LlamaForCausalLM converts back to exactly its weights (untied and tied)"""
    for name, overrides in CONFIGS.items():
        config = tiny_llama_config(**overrides)
        reference = causal_lm(config)
        converted = ex.convert_meta_checkpoint(meta_checkpoint(reference, config), model_args(ex, config))
        want = hf_state_dict(reference)
        expect(
            set(converted) == set(want),
            "the converted keys are not the model's",
            input=name,
            expected=f"missing {sorted(set(want) - set(converted))}",
            got=f"extra {sorted(set(converted) - set(want))}",
            hint="rename every Meta key (section 3's table); a tied model still needs lm_head.weight",
        )
        for key, tensor in want.items():
            expect(
                tuple(converted[key].shape) == tuple(tensor.shape) and torch.equal(converted[key], tensor),
                f"{key} differs from Hugging Face's",
                input=name,
                expected=f"{tuple(tensor.shape)}, equal to LlamaForCausalLM's",
                got=f"{tuple(converted[key].shape)}, different values",
                hint="q/k: permute the rows of each head (wk has n_kv_heads heads); w1 = gate, w3 = up, w2 = down",
            )


@checks("convert_meta_checkpoint")
def rows_reordered_per_head_by_hand(ex):
    """head_dim 8: Meta rows (0..7) of each q and k head become (0, 2, 4, 6, 1, 3, 5, 7)"""
    config = tiny_llama_config(hidden_size=32, head_dim=8)
    meta = meta_checkpoint(causal_lm(config), config)
    for key, heads in (("attention.wq", config.num_attention_heads), ("attention.wk", config.num_key_value_heads)):
        labels = torch.arange(heads * 8, dtype=torch.float32)
        meta[f"layers.0.{key}.weight"] = labels[:, None].expand(-1, 32).clone()  # row r holds the number r
    converted = ex.convert_meta_checkpoint(meta, model_args(ex, config))
    for ours, heads in (
        ("self_attn.q_proj", config.num_attention_heads),
        ("self_attn.k_proj", config.num_key_value_heads),
    ):
        got = converted[f"layers.0.{ours}.weight"][:, 0].long().tolist()
        # rotate-half row i of a head is Meta's row 2i, row i + D/2 is Meta's row 2i + 1
        expected = [head * 8 + 2 * (j % 4) + j // 4 for head in range(heads) for j in range(8)]
        expect(
            got == expected,
            f"{ours} rows are in the wrong order",
            input=f"Meta {ours.split('.')[1][0]} rows labelled 0 .. {heads * 8 - 1}, {heads} heads of 8",
            expected=str(expected),
            got=str(got),
            hint="per head: view(n_heads, D/2, 2, d).transpose(1, 2): the pairs' first members, then their second",
        )
    expect(
        interleaved_rows(8).tolist() == [0, 4, 1, 5, 2, 6, 3, 7],
        "internal: the checks' inverse permutation is wrong",
        expected="[0, 4, 1, 5, 2, 6, 3, 7]",
        got=str(interleaved_rows(8).tolist()),
    )


@checks("convert_meta_checkpoint")
def converted_model_matches_hf_logits(ex):
    """your model loaded from the converted Meta checkpoint gives LlamaForCausalLM's logits (GQA, untied)"""
    config = tiny_llama_config()
    reference = causal_lm(config)
    mine = ex.TinyLlama(model_args(ex, config)).eval()
    mine.load_state_dict(ex.convert_meta_checkpoint(meta_checkpoint(reference, config), model_args(ex, config)))
    input_ids, mask, positions = random_batch(config)
    with torch.no_grad():
        got = mine(input_ids, attention_mask=mask, position_ids=positions)
    expect_logits_match(
        got,
        reference,
        input_ids,
        mask,
        positions,
        f"Meta checkpoint of a GQA model, float32, left-padded lengths {LENGTHS}",
        "without the q/k permutation every shape matches and the logits are wrong",
    )


# ------------------------------------------------------------------------------------------ generation


def hf_generate(reference, input_ids, mask, max_new_tokens):
    reference.generation_config.eos_token_id = None  # never stop early: compare every step
    with torch.no_grad():
        return reference.generate(
            input_ids,
            attention_mask=mask.long(),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
        )


@checks("generate_greedy")
def matches_hf_generate(ex):
    """left-padded batch of 3, 10 new tokens: the same tokens as LlamaForCausalLM.generate(do_sample=False)"""
    for name in ("GQA 4/2, untied head", "MHA 4/4, tied head, rope_theta=5e5"):
        config = tiny_llama_config(**CONFIGS[name])
        mine, reference = loaded_pair(ex, config)
        input_ids, mask, _ = random_batch(config, [6, 4, 2], 6)
        got = ex.generate_greedy(mine, input_ids, mask, max_new_tokens=10)
        want = hf_generate(reference, input_ids, mask, 10)
        label = f"{name}, prompts (3, 6), left-padded lengths [6, 4, 2], max_new_tokens=10"
        expect_tensor(got, shape=want.shape, dtype=torch.int64, input=label, what="tokens")
        expect(
            torch.equal(got, want),
            "generated tokens differ from Hugging Face's greedy generate",
            input=label,
            expected=str(want[:, 6:].tolist()),
            got=str(got[:, 6:].tolist()),
            hint="argmax of the LAST column's logits; prefill with the mask; extend the mask by one column per step",
        )


@checks("generate_greedy")
def decodes_one_token_per_step(ex):
    """after the prefill, every model call carries one new token (the KV cache does the rest)"""
    config = tiny_llama_config()
    mine, _ = loaded_pair(ex, config)
    calls, forward = [], mine.forward

    def spy(input_ids, *args, **kwargs):
        calls.append((input_ids.shape[1], kwargs.get("caches", args[2] if len(args) > 2 else None) is not None))
        return forward(input_ids, *args, **kwargs)

    mine.forward = spy
    input_ids, mask, _ = random_batch(config, [5, 3], 5)
    ex.generate_greedy(mine, input_ids, mask, max_new_tokens=6)
    lengths = [length for length, _ in calls]
    expect(
        bool(calls) and lengths[0] == 5 and all(length == 1 for length in lengths[1:]) and len(calls) <= 7,
        "the model is not decoding through a KV cache",
        input="prompts (2, 5), max_new_tokens=6",
        expected="token counts per call: [5, 1, 1, 1, 1, 1] (one prefill, then one token per step)",
        got=str(lengths),
        hint="prefill once with fresh caches, then feed only the newest token with the same caches",
    )
    expect(
        all(with_cache for _, with_cache in calls),
        "a model call was made without the caches",
        input="prompts (2, 5), max_new_tokens=6",
        expected="caches passed on every call",
        got=str([with_cache for _, with_cache in calls]),
        hint="model(ids, attention_mask=..., caches=caches)",
    )


@checks("generate_greedy")
def equals_full_recomputation(ex):
    """batch of one, no mask: the tokens of greedy decoding by full recomputation; max_new_tokens=0 returns the prompt"""
    config = tiny_llama_config(num_key_value_heads=1)
    mine, reference = loaded_pair(ex, config)
    prompt = torch.randint(0, config.vocab_size, (1, 4))
    got = ex.generate_greedy(mine, prompt, None, max_new_tokens=12)
    want = prompt
    with torch.no_grad():
        for _ in range(12):
            next_token = reference(want).logits[:, -1].argmax(-1, keepdim=True)
            want = torch.cat((want, next_token), dim=1)
    expect(
        torch.equal(got, want),
        "tokens differ from greedy decoding by full recomputation",
        input="MQA, prompt (1, 4), attention_mask=None, max_new_tokens=12",
        expected=str(want[0, 4:].tolist()),
        got=str(got[0, 4:].tolist()) if isinstance(got, torch.Tensor) else repr(got),
        hint="with no mask every token is real; the cache must not change the result",
    )
    unchanged = ex.generate_greedy(mine, prompt, None, max_new_tokens=0)
    expect(
        isinstance(unchanged, torch.Tensor) and torch.equal(unchanged, prompt),
        "max_new_tokens=0 must return the prompt unchanged",
        input="prompt (1, 4), max_new_tokens=0",
        expected=str(prompt.tolist()),
        got=str(unchanged.tolist()) if isinstance(unchanged, torch.Tensor) else repr(unchanged),
        hint="generate max_new_tokens tokens, not one more",
    )
