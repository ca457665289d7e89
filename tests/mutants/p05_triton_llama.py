"""Realistic wrong versions of the p05.triton_llama solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "TritonLlamaBlock",
        "rope_on_v",
        "rotates v instead of k with RoPE",
        [
            (
                "q, k = RotaryEmbedding.apply(q, k, cos, sin, offsets)",
                "q, v = RotaryEmbedding.apply(q, v, cos, sin, offsets)",
            )
        ],
        mistake_zh="用 RoPE 旋转了 v 而不是 k",
    ),
    Mutant(
        "TritonLlamaBlock",
        "not_causal",
        "calls the attention kernel with causal=False",
        [("k.transpose(1, 2), v.transpose(1, 2), True)", "k.transpose(1, 2), v.transpose(1, 2), False)")],
        mistake_zh="调用注意力内核时传了 causal=False",
    ),
    Mutant(
        "TritonLlamaBlock",
        "attention_residual_missing",
        "replaces the residual stream with the attention's output",
        [("x = x + out @ self.o_proj.T", "x = out @ self.o_proj.T")],
        mistake_zh="用注意力的输出替换了残差流，而不是加到残差上",
    ),
    Mutant(
        "TritonLlamaBlock",
        "default_eps",
        "ignores the config's rms_norm_eps and uses 1e-6",
        [("self.eps, self.theta = config.rms_norm_eps,", "self.eps, self.theta = 1e-6,")],
        mistake_zh="忽略 config 的 rms_norm_eps，固定用 1e-6",
    ),
    Mutant(
        "TritonLlamaBlock",
        "norms_swapped",
        "uses the post-attention norm's gain before attention",
        [
            (
                "h = rms_norm(x, self.input_layernorm, self.eps)",
                "h = rms_norm(x, self.post_attention_layernorm, self.eps)",
            )
        ],
        mistake_zh="在注意力之前用了 post-attention 归一化的增益",
    ),
    Mutant(
        "TritonLlamaBlock",
        "accepts_float32",
        "does not check x's dtype and shape before the kernels",
        [
            (
                "if x.dim() != 3 or x.shape[-1] != self.hidden_size or x.dtype != self.dtype or x.device != device:",
                "if False:",
            )
        ],
        mistake_zh="调用内核之前没有检查 x 的 dtype 和形状",
    ),
    Mutant(
        "TritonLlama",
        "no_final_norm",
        "forgets the final RMSNorm before the head",
        [("return rms_norm(x, self.norm, self.eps) @ self.lm_head.T", "return x @ self.lm_head.T")],
        mistake_zh="在输出头之前漏掉了最后的 RMSNorm",
    ),
    Mutant(
        "TritonLlama",
        "tied_head",
        "uses the embedding matrix as the output head (a tied model's habit)",
        [('self.lm_head = parameter("lm_head.weight")', "self.lm_head = self.embed_tokens")],
        mistake_zh="用嵌入矩阵当输出头（权重共享模型的习惯）",
    ),
    Mutant(
        "TritonLlama",
        "shifted_again",
        "shifts the targets once more although the caller already did",
        [
            (
                "return fused_cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())",
                "return fused_cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), targets[:, 1:].reshape(-1).long())",
            )
        ],
        mistake_zh="调用方已经移位过目标，却又移位了一次",
    ),
    Mutant(
        "TritonLlama",
        "shared_weights",
        "keeps the caller's tensors instead of copies",
        [
            (
                "return nn.Parameter(state_dict[key].detach().clone().to(device=device, dtype=dtype))",
                "return nn.Parameter(state_dict[key].detach().to(device=device, dtype=dtype))",
            )
        ],
        mistake_zh="直接持有调用方的张量，而不是它们的副本",
    ),
    Mutant(
        "TritonLlamaBlock",
        "sdpa_instead_of_kernel",
        "calls PyTorch's scaled_dot_product_attention instead of your FlashAttention kernels",
        [
            (
                "out = FlashAttention.apply(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True)",
                "out = torch.nn.functional.scaled_dot_product_attention("
                "q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True)",
            )
        ],
        mistake_zh="调用 PyTorch 的 scaled_dot_product_attention，而不是你自己的 FlashAttention 内核",
    ),
    Mutant(
        "TritonLlama",
        "torch_cross_entropy",
        "computes the loss with F.cross_entropy instead of your fused kernel",
        [
            (
                "return fused_cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())",
                "return torch.nn.functional.cross_entropy("
                "logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1).long())",
            )
        ],
        mistake_zh="用 F.cross_entropy 计算损失，而不是你自己的融合内核",
    ),
    Mutant(
        "TritonLlama",
        "blocks_in_float16",
        "builds every block in float16 whatever dtype the model was given",
        [
            (
                "self.layers.append(TritonLlamaBlock(sub, config, dtype=dtype, device=device))",
                "self.layers.append(TritonLlamaBlock(sub, config, dtype=torch.float16, device=device))",
            )
        ],
        mistake_zh="无论模型给定哪个 dtype，每个 block 都用 float16 构造",
    ),
    Mutant(
        "TritonLlama",
        "outer_weights_in_float16",
        "keeps the embedding, the final norm and the head in float16 whatever dtype the model was given",
        [
            (
                "return nn.Parameter(state_dict[key].detach().clone().to(device=device, dtype=dtype))",
                "return nn.Parameter(state_dict[key].detach().clone().to(device=device, dtype=torch.float16))",
            )
        ],
        mistake_zh="无论模型给定哪个 dtype，embedding、最后的 norm 和输出头都保持 float16",
    ),
]
