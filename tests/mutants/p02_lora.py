"""Realistic wrong versions of the p02.lora solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "lora_linear",
        "b_random_init",
        "initialises B randomly like A, so the model changes before any training",
        [("nn.init.zeros_(self.lora_B.weight)", "nn.init.kaiming_uniform_(self.lora_B.weight, a=math.sqrt(5))")],
        mistake_zh="B 像 A 一样随机初始化，训练开始前模型就变了",
    ),
    Mutant(
        "lora_linear",
        "a_zero_init",
        "initialises A to zero as well: the output is right at step 0 but no gradient ever reaches A or B",
        [("nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))", "nn.init.zeros_(self.lora_A.weight)")],
        mistake_zh="A 也初始化为零：第 0 步输出正确，但梯度永远到不了 A 和 B",
    ),
    Mutant(
        "lora_linear",
        "a_unit_normal_init",
        "initialises A from N(0, 1): the adapter's first updates are sqrt(3 d_in) times too large",
        [("nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))", "nn.init.normal_(self.lora_A.weight)")],
        mistake_zh="A 从 N(0, 1) 初始化：适配器最初的更新大了 √(3·d_in) 倍",
    ),
    Mutant(
        "lora_linear",
        "scale_alpha_only",
        "scales by alpha, forgetting the division by r",
        [("alpha / math.sqrt(r) if use_rslora else alpha / r", "alpha / math.sqrt(r) if use_rslora else alpha")],
        mistake_zh="缩放只乘 alpha，忘了除以 r",
    ),
    Mutant(
        "lora_linear",
        "rslora_ignored",
        "always uses alpha / r, ignoring use_rslora",
        [("alpha / math.sqrt(r) if use_rslora else alpha / r", "alpha / r")],
        mistake_zh="总是用 alpha / r，忽略 use_rslora",
    ),
    Mutant(
        "lora_linear",
        "base_trainable",
        "forgets to freeze the wrapped layer: W0 gets gradients and optimizer state",
        [("self.base_layer = base_layer.requires_grad_(False)", "self.base_layer = base_layer")],
        mistake_zh="忘了冻结被包装的层：W0 有了梯度和优化器状态",
    ),
    Mutant(
        "lora_linear",
        "merge_without_scale",
        "merges B @ A without the scaling",
        [
            (
                "return self.scaling * (self.lora_B.weight @ self.lora_A.weight)",
                "return self.lora_B.weight @ self.lora_A.weight",
            )
        ],
        mistake_zh="合并 B @ A 时没有乘缩放系数",
    ),
    Mutant(
        "lora_linear",
        "unmerge_adds",
        "unmerge adds the delta again instead of subtracting it",
        [("self.base_layer.weight -= self.delta_weight()", "self.base_layer.weight += self.delta_weight()")],
        mistake_zh="unmerge 又加了一次增量，而不是减去",
    ),
    Mutant(
        "lora_linear",
        "merged_forward_adds_again",
        "forward keeps adding the adapter path after merge: the delta counts twice",
        [("return result                                             # BA already inside W0", "pass")],
        mistake_zh="合并之后 forward 仍然加上适配器分支：增量算了两次",
    ),
    Mutant(
        "lora_linear",
        "merge_twice",
        "merge() without the merged guard: a second call adds the delta again",
        [("if self.merged:\n            return\n        ", "")],
        mistake_zh="merge() 没有 merged 保护：第二次调用又加了一次增量",
    ),
    Mutant(
        "apply_lora",
        "base_not_frozen",
        "wraps the targets but forgets to freeze the rest of the model",
        [
            (
                "model.requires_grad_(False)                                       # embeddings, norms, head: frozen",
                "pass",
            )
        ],
        mistake_zh="包装了目标层，却忘了冻结模型的其余部分",
    ),
    Mutant(
        "apply_lora",
        "freeze_after_wrapping",
        "freezes the model after wrapping, which freezes the new adapters too",
        [
            (
                "model.requires_grad_(False)                                       # embeddings, norms, head: frozen",
                "pass",
            ),
            ("    return model", "    model.requires_grad_(False)\n    return model"),
        ],
        mistake_zh="包装之后才冻结模型，新的适配器也被冻结了",
    ),
    Mutant(
        "apply_lora",
        "every_linear",
        "wraps every nn.Linear, lm_head included, ignoring target_modules",
        [
            (
                'isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in target_modules',
                "isinstance(module, nn.Linear)",
            )
        ],
        mistake_zh="忽略 target_modules，包装了每个 nn.Linear，连 lm_head 也不例外",
    ),
    Mutant(
        "apply_lora",
        "silent_on_no_match",
        "returns the frozen model when nothing matched instead of refusing",
        [('raise ValueError(f"no nn.Linear named {target_modules} in {type(model).__name__}")', "pass")],
        mistake_zh="什么都没匹配到时返回冻结的模型，而不是拒绝",
    ),
    Mutant(
        "lora_parameter_count",
        "kv_as_mha",
        "gives k_proj and v_proj the query width, as if every model were MHA",
        [("kv_width = config.num_key_value_heads * head_dim", "kv_width = config.num_attention_heads * head_dim")],
        mistake_zh="给 k_proj 和 v_proj 与 query 相同的宽度，好像每个模型都是 MHA",
    ),
    Mutant(
        "lora_parameter_count",
        "head_dim_from_hidden",
        "always takes head_dim = hidden_size // num_attention_heads",
        [
            (
                'head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads',
                "head_dim = hidden // config.num_attention_heads",
            )
        ],
        mistake_zh="总是取 head_dim = hidden_size // num_attention_heads",
    ),
    Mutant(
        "lora_parameter_count",
        "square_projections",
        "counts every projection as hidden x hidden",
        [
            (
                "per_layer = sum(r * (shapes[name][0] + shapes[name][1]) for name in set(target_modules))",
                "per_layer = sum(2 * r * hidden for name in set(target_modules))",
            )
        ],
        mistake_zh="把每个投影都算成 hidden × hidden",
    ),
    Mutant(
        "lora_parameter_count",
        "one_layer",
        "forgets to multiply by the number of layers",
        [("return config.num_hidden_layers * per_layer", "return per_layer")],
        mistake_zh="忘了乘以层数",
    ),
]
