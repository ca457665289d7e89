"""Hugging Face reference modules for checks, built locally from tiny random configs (nothing is downloaded).

Checks import `transformers` lazily through this module: the import costs about two seconds, and it warns about
tqdm/ipywidgets inside a kernel, which is noise for a learner.
"""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any


def transformers_module() -> ModuleType:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import transformers
    return transformers


def tiny_llama_config(**overrides: Any):
    """A `LlamaConfig` small enough for CPU checks: 2 layers, hidden 64, 4 query heads over 2 KV heads (GQA),
    eager attention (so the reference is plain matmuls, the same math the lessons teach). Any field can be
    overridden, e.g. `tiny_llama_config(num_key_value_heads=4, rope_theta=500000.0)`; `rope_theta` is folded into
    transformers 5's `rope_parameters`."""
    rope_theta = overrides.pop("rope_theta", 10000.0)
    fields: dict[str, Any] = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
        attention_dropout=0.0,
    )
    fields.update(overrides)
    config = transformers_module().LlamaConfig(**fields)
    config._attn_implementation = "eager"
    return config


def config_of(kind: str, fields: dict, *, eager: bool = False):
    """`transformers.<kind>(**fields)` (a config class by name: "LlamaConfig", "DeepseekV3Config"), built outside
    the restriction's watches and its warnings; `eager` picks plain-matmul attention (what FlopCounterMode counts)."""
    from ..check.restrictions import reference_only

    with reference_only(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = getattr(transformers_module(), kind)(**fields)
    if eager:
        config._attn_implementation = "eager"
    return config


def describe_config(kind: str, fields: dict) -> str:
    """`LlamaConfig(hidden_size=32, ...)` for a check's input column."""
    return f"{kind}(" + ", ".join(f"{k}={v}" for k, v in fields.items()) + ")"
