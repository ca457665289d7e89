"""Realistic wrong versions of the p00.memory solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "storage_bytes",
        "view_bytes",
        "counts the bytes of each view (numel * element_size) instead of its storage",
        [
            (
                "sizes[storage.data_ptr()] = storage.nbytes()",
                "sizes[id(tensor)] = tensor.numel() * tensor.element_size()",
            )
        ],
        mistake_zh="按每个视图的大小（numel * element_size）计数，而不是按其存储",
    ),
    Mutant(
        "storage_bytes",
        "no_dedup",
        "adds every tensor's storage, so views of one block are counted several times",
        [
            ("sizes[storage.data_ptr()] = storage.nbytes()", "sizes[id(tensor)] = storage.nbytes()"),
        ],
        mistake_zh="把每个张量的存储都加一遍，同一块内存的多个视图被重复计数",
    ),
    Mutant(
        "storage_bytes",
        "no_type_check",
        "accepts anything with an untyped_storage (or crashes with AttributeError on a number)",
        [("if not isinstance(tensor, torch.Tensor):", "if False:")],
        mistake_zh="接受任何带 untyped_storage 的对象（遇到数字则抛出 AttributeError）",
    ),
    Mutant(
        "training_state_bytes",
        "frozen_counted",
        "gives gradients and optimizer states to frozen parameters too",
        [("trainable = [p for p in parameters if p.requires_grad]", "trainable = parameters")],
        mistake_zh="给冻结参数也算上梯度和优化器状态",
    ),
    Mutant(
        "training_state_bytes",
        "tied_counted_twice",
        "lists parameters with duplicates (named_parameters(remove_duplicate=False)), counting a tied embedding twice",
        [
            (
                "parameters = list(model.parameters())",
                "parameters = [p for _, p in model.named_parameters(remove_duplicate=False)]",
            )
        ],
        mistake_zh="参数列表里带重复项（named_parameters(remove_duplicate=False)），绑定的嵌入被算了两次",
    ),
    Mutant(
        "training_state_bytes",
        "states_in_fp32",
        "assumes optimizer states are always float32 (4 bytes), also for a bf16 model",
        [
            (
                "optimizer_bytes = copies[optimizer] * trainable_bytes",
                "optimizer_bytes = copies[optimizer] * 4 * sum(p.numel() for p in trainable)",
            )
        ],
        mistake_zh="假定优化器状态总是 float32（4 字节），bf16 模型也一样",
    ),
    Mutant(
        "training_state_bytes",
        "forgets_step",
        "forgets AdamW's float32 step tensors",
        [("optimizer_bytes += 4 * len(trainable)", "optimizer_bytes += 0")],
        mistake_zh="漏掉 AdamW 的 float32 step 张量",
    ),
    Mutant(
        "training_state_bytes",
        "momentum_like_adam",
        "gives SGD with momentum two state copies",
        [('copies = {"sgd": 0, "momentum": 1, "adamw": 2}', 'copies = {"sgd": 0, "momentum": 2, "adamw": 2}')],
        mistake_zh="给带动量的 SGD 算了两份状态",
    ),
    Mutant(
        "saved_activation_bytes",
        "counts_parameters",
        "does not skip the parameters (their transposed views are saved by every linear layer)",
        [("if storage.data_ptr() not in parameter_storages:", "if True:")],
        mistake_zh="不跳过参数（每个线性层都会保存它们的转置视图）",
    ),
    Mutant(
        "saved_activation_bytes",
        "isinstance_parameter",
        "skips saved tensors that are nn.Parameter, missing the transposed views of the weights",
        [
            (
                "if storage.data_ptr() not in parameter_storages:",
                "if not isinstance(tensor, nn.Parameter):",
            )
        ],
        mistake_zh="跳过属于 nn.Parameter 的已保存张量，漏掉了权重的转置视图",
    ),
    Mutant(
        "saved_activation_bytes",
        "counts_views",
        "adds the bytes of every saved view instead of each storage once",
        [
            (
                "saved[storage.data_ptr()] = storage.nbytes()",
                "saved[len(saved)] = tensor.numel() * tensor.element_size()",
            )
        ],
        mistake_zh="把每个已保存视图的字节数都加上，而不是每块存储只算一次",
    ),
    Mutant(
        "saved_activation_bytes",
        "counts_output",
        "measures the output of the forward instead of what autograd saved",
        [
            (
                "        module(*args)\n    return sum(saved.values())",
                "        out = module(*args)\n    return out.numel() * out.element_size() if isinstance(out, torch.Tensor) else sum(saved.values())",
            )
        ],
        mistake_zh="统计的是前向的输出，而不是 autograd 保存的张量",
    ),
]
