"""Realistic wrong versions of the p00.module_basics solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "scaled_embedding",
        "scale_persistent",
        "registers embed_scale as a persistent buffer: it lands in every checkpoint",
        [("torch.tensor(d_model**0.5), persistent=False)", "torch.tensor(d_model**0.5))")],
        mistake_zh="把 embed_scale 注册成持久 buffer：它会出现在每个 checkpoint 里",
    ),
    Mutant(
        "scaled_embedding",
        "scale_plain_attribute",
        "keeps embed_scale as a plain tensor attribute: it does not follow .to()",
        [
            (
                'self.register_buffer("embed_scale", torch.tensor(d_model**0.5), persistent=False)',
                "self.embed_scale = torch.tensor(d_model**0.5)",
            )
        ],
        mistake_zh="把 embed_scale 存成普通张量属性：它不会跟着 .to() 移动",
    ),
    Mutant(
        "scaled_embedding",
        "counts_plain_attribute",
        "keeps token_counts as a plain tensor attribute: lost at save time",
        [
            (
                'self.register_buffer("token_counts", torch.zeros(vocab_size, dtype=torch.long))',
                "self.token_counts = torch.zeros(vocab_size, dtype=torch.long)",
            )
        ],
        mistake_zh="把 token_counts 存成普通张量属性：保存时丢失",
    ),
    Mutant(
        "scaled_embedding",
        "counts_in_eval_mode",
        "updates the counter on every forward, eval mode included",
        [("        if self.training:\n", "        if True:\n")],
        mistake_zh="每次前向都更新计数器，eval 模式也不例外",
    ),
    Mutant(
        "scaled_embedding",
        "padding_row_random",
        "leaves the padding row random",
        [("        weight[padding_idx] = 0.0\n", "        pass\n")],
        mistake_zh="padding 行保持随机值",
    ),
    Mutant(
        "scaled_embedding",
        "weight_as_buffer",
        "registers the embedding table as a buffer: it is saved but never trained",
        [("self.weight = nn.Parameter(weight)", 'self.register_buffer("weight", weight)')],
        mistake_zh="把嵌入表注册成 buffer：会被保存，但永远不会被训练",
    ),
    Mutant(
        "scaled_embedding",
        "no_validation",
        "does not check the ids",
        [("        if ids.numel() and (", "        if False and (")],
        mistake_zh="不检查 ids",
    ),
    Mutant(
        "record_outputs",
        "not_detached",
        "stores the outputs with their autograd graph",
        [("records.setdefault(name, []).append(value.detach())", "records.setdefault(name, []).append(value)")],
        mistake_zh="连同 autograd 计算图一起存下输出",
    ),
    Mutant(
        "record_outputs",
        "hooks_never_removed",
        "never removes the hooks",
        [("            handle.remove()", "            pass")],
        mistake_zh="从不移除 hook",
    ),
    Mutant(
        "record_outputs",
        "no_finally",
        "removes the hooks after the forward, but not when it raises",
        [
            (
                "    try:\n        output = model(*args)\n    finally:\n        for handle in handles:",
                "    output = model(*args)\n    if True:\n        for handle in handles:",
            )
        ],
        mistake_zh="前向之后移除 hook，但前向抛异常时不移除",
    ),
    Mutant(
        "record_outputs",
        "last_call_only",
        "keeps only the last output of a module that runs several times",
        [("records.setdefault(name, []).append(value.detach())", "records[name] = [value.detach()]")],
        mistake_zh="一个模块运行多次时只保留最后一次的输出",
    ),
    Mutant(
        "record_outputs",
        "late_binding_lambda",
        "registers a lambda in the comprehension, which captures the loop variable: every record lands under the last name",
        [
            (
                "module.register_forward_hook(make_hook(name))",
                "module.register_forward_hook(lambda m, i, o: records.setdefault(name, []).append("
                "(o[0] if isinstance(o, tuple) else o).detach()))",
            )
        ],
        mistake_zh="在推导式里注册 lambda，捕获的是循环变量：所有记录都落在最后一个名字下",
    ),
    Mutant(
        "init_gpt2_style",
        "variance_for_std",
        "passes the variance std**2 where normal_ expects the standard deviation",
        [
            (
                "    if isinstance(module, nn.Linear):\n        nn.init.normal_(module.weight, mean=0.0, std=std)",
                "    if isinstance(module, nn.Linear):\n        nn.init.normal_(module.weight, mean=0.0, std=std**2)",
            )
        ],
        mistake_zh="把方差 std**2 传给了需要标准差的 normal_",
    ),
    Mutant(
        "init_gpt2_style",
        "bias_untouched",
        "leaves the Linear biases as they were",
        [("    if module.bias is not None:\n            nn.init.zeros_(module.bias)", "    pass")],
        mistake_zh="Linear 的 bias 保持原样",
    ),
    Mutant(
        "init_gpt2_style",
        "padding_row_not_zeroed",
        "re-initialises the whole embedding, padding row included",
        [("        if module.padding_idx is not None:\n", "        if False:\n")],
        mistake_zh="重新初始化整个嵌入表，padding 行也不例外",
    ),
    Mutant(
        "init_gpt2_style",
        "norms_untouched",
        "does not reset the norm gains (only Linear and Embedding are handled)",
        [("    elif isinstance(module, (nn.LayerNorm, nn.RMSNorm)):", "    elif False:")],
        mistake_zh="不重置归一化层的增益（只处理 Linear 和 Embedding）",
    ),
    Mutant(
        "init_gpt2_style",
        "rebinds_parameters",
        "assigns fresh tensors to the module (module.weight = nn.Parameter(...)) instead of initialising in place",
        [
            (
                "    if isinstance(module, nn.Linear):\n        nn.init.normal_(module.weight, mean=0.0, std=std)",
                "    if isinstance(module, nn.Linear):\n"
                "        module.weight = nn.Parameter(torch.randn_like(module.weight) * std)",
            )
        ],
        mistake_zh="给模块赋新张量（module.weight = nn.Parameter(...)），而不是原地初始化",
    ),
]
