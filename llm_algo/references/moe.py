"""Reference pieces shared by the two mixture-of-experts lessons' checks (p02.moe_router, p02.moe_balance).

Everything here is written to be obviously correct, not fast: Python loops over tokens and choices, one expert
call per (token, choice). The Hugging Face blocks are built locally from tiny configs (nothing is downloaded) and
loaded with the same weights the learner's function receives.

Weight layout used by both lessons (the `nn.Linear` convention, out x in, stacked over experts):
    router_weight (E, H), w_gate and w_up (E, F, H), w_down (E, H, F).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .hf import transformers_module


def random_experts(num_experts: int, hidden: int, ffn: int, dtype=torch.float64, num_shared: int = 0):
    """Random router and SwiGLU expert weights, scaled so activations stay of order one.

    Returns a dict with router_weight (E, H), w_gate/w_up (E, F, H), w_down (E, H, F), and, when num_shared > 0,
    shared_gate/shared_up (S, F, H) and shared_down (S, H, F)."""
    weights = {
        "router_weight": torch.randn(num_experts, hidden, dtype=torch.float64),
        "w_gate": torch.randn(num_experts, ffn, hidden, dtype=torch.float64) / math.sqrt(hidden),
        "w_up": torch.randn(num_experts, ffn, hidden, dtype=torch.float64) / math.sqrt(hidden),
        "w_down": torch.randn(num_experts, hidden, ffn, dtype=torch.float64) / math.sqrt(ffn),
    }
    if num_shared:
        weights["shared_gate"] = torch.randn(num_shared, ffn, hidden, dtype=torch.float64) / math.sqrt(hidden)
        weights["shared_up"] = torch.randn(num_shared, ffn, hidden, dtype=torch.float64) / math.sqrt(hidden)
        weights["shared_down"] = torch.randn(num_shared, hidden, ffn, dtype=torch.float64) / math.sqrt(ffn)
    return {name: w.to(dtype) for name, w in weights.items()}


def swiglu_expert(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """One SwiGLU expert on one token or a batch of tokens: down(silu(gate x) * up x). x (..., H)."""
    return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def route_one_token(logits: torch.Tensor, top_k: int, score_fn: str, normalize: bool, bias=None):
    """The routing spec for one token's logits (E,): returns ([gate, ...], [expert, ...]) best first.

    score_fn "softmax" (Mixtral, Qwen) or "sigmoid" (DeepSeek-V3); `bias` (E,) only changes which experts are
    chosen (DeepSeek-V3's aux-loss-free correction), never the gate values."""
    scores = torch.softmax(logits, dim=-1) if score_fn == "softmax" else torch.sigmoid(logits)
    for_choice = scores if bias is None else scores + bias
    remaining = list(range(logits.shape[-1]))
    experts = []
    for _ in range(top_k):  # pick the best remaining expert, k times
        best = max(remaining, key=lambda e: float(for_choice[e].detach()))
        experts.append(best)
        remaining.remove(best)
    gates = [scores[e] for e in experts]
    if normalize:
        total = sum(gates)
        gates = [g / total for g in gates]
    return gates, experts


def moe_loop_spec(
    x: torch.Tensor,
    weights: dict,
    top_k: int,
    capacity: int | None = None,
    score_fn: str = "softmax",
    normalize: bool = True,
    bias=None,
) -> torch.Tensor:
    """The whole MoE layer, one token and one choice at a time. x (..., H) -> (..., H), in x's dtype.

    Dropping rule when `capacity` is given: choices are served choice rank first (every token's 1st choice, in
    token order, then every token's 2nd choice, ...); an expert that already holds `capacity` tokens drops the
    choice, which then contributes nothing. Shared experts (if in `weights`) are added to every token."""
    H = x.shape[-1]
    tokens = x.reshape(-1, H)
    logits = tokens @ weights["router_weight"].T.to(x.dtype)  # (T, E)
    routes = [route_one_token(logits[t], top_k, score_fn, normalize, bias) for t in range(tokens.shape[0])]
    kept = [[True] * top_k for _ in routes]
    if capacity is not None:
        load = [0] * weights["router_weight"].shape[0]
        for choice in range(top_k):
            for t, (_, experts) in enumerate(routes):
                e = experts[choice]
                kept[t][choice] = load[e] < capacity
                load[e] += int(kept[t][choice])
    rows = []
    for t, (gates, experts) in enumerate(routes):
        out = torch.zeros_like(tokens[t])
        for choice, (gate, e) in enumerate(zip(gates, experts, strict=True)):
            if kept[t][choice]:
                expert = (weights["w_gate"][e], weights["w_up"][e], weights["w_down"][e])
                out = out + gate.to(x.dtype) * swiglu_expert(tokens[t], *(w.to(x.dtype) for w in expert))
        for s in range(weights["shared_gate"].shape[0] if "shared_gate" in weights else 0):
            shared = (weights["shared_gate"][s], weights["shared_up"][s], weights["shared_down"][s])
            out = out + swiglu_expert(tokens[t], *(w.to(x.dtype) for w in shared))
        rows.append(out)
    return torch.stack(rows).reshape(x.shape)


def hf_mixtral_block(weights: dict, top_k: int, dtype=torch.float64):
    """Hugging Face `MixtralSparseMoeBlock` (dropless, softmax then top-k then renormalise) holding `weights`."""
    transformers = transformers_module()
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    E, F_, H = weights["w_gate"].shape
    config = transformers.MixtralConfig(
        hidden_size=H,
        intermediate_size=F_,
        num_local_experts=E,
        num_experts_per_tok=top_k,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=32,
        router_jitter_noise=0.0,
    )
    config._experts_implementation = "eager"  # the reference loop over experts, not a fused kernel
    block = MixtralSparseMoeBlock(config).eval()
    with torch.no_grad():
        block.gate.weight.copy_(weights["router_weight"])
        block.experts.gate_up_proj.copy_(torch.cat((weights["w_gate"], weights["w_up"]), dim=1))  # (E, 2F, H)
        block.experts.down_proj.copy_(weights["w_down"])
    return block.to(dtype)


def hf_deepseek_v3_moe(weights: dict, top_k: int, bias: torch.Tensor | None = None, dtype=torch.float64):
    """Hugging Face `DeepseekV3MoE` (sigmoid scores, bias for selection only, normalised gates, shared experts)
    holding `weights`, with one expert group and routed_scaling_factor 1, so only the ideas of p02.moe_balance
    are in play. The shared experts are fused into one MLP of width S * F, which equals their sum."""
    transformers = transformers_module()
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE

    E, F_, H = weights["w_gate"].shape
    num_shared = weights["shared_gate"].shape[0]
    config = transformers.DeepseekV3Config(
        hidden_size=H,
        moe_intermediate_size=F_,
        intermediate_size=F_,
        n_routed_experts=E,
        num_experts_per_tok=top_k,
        n_shared_experts=num_shared,
        n_group=1,
        topk_group=1,
        routed_scaling_factor=1.0,
        norm_topk_prob=True,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=32,
    )
    config._experts_implementation = "eager"
    moe = DeepseekV3MoE(config).eval()
    with torch.no_grad():
        moe.gate.weight.copy_(weights["router_weight"])
        moe.gate.e_score_correction_bias.copy_(torch.zeros(E) if bias is None else bias)
        moe.experts.gate_up_proj.copy_(torch.cat((weights["w_gate"], weights["w_up"]), dim=1))
        moe.experts.down_proj.copy_(weights["w_down"])
        moe.shared_experts.gate_proj.weight.copy_(weights["shared_gate"].reshape(num_shared * F_, H))
        moe.shared_experts.up_proj.weight.copy_(weights["shared_up"].reshape(num_shared * F_, H))
        moe.shared_experts.down_proj.weight.copy_(weights["shared_down"].permute(1, 0, 2).reshape(H, num_shared * F_))
    return moe.to(dtype)
