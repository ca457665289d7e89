"""Realistic wrong versions of the p00.training_loop solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "train_loop",
        "no_train_mode",
        "never calls model.train(): after an evaluation, training runs without dropout",
        [("    model.train()\n", "")],
        mistake_zh="从不调用 model.train()：做过评估之后，训练在没有 dropout 的情况下进行",
    ),
    Mutant(
        "train_loop",
        "clip_before_backward",
        "clips before backward: the fresh gradients are never clipped",
        [
            ("        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n", ""),
            (
                "        loss.backward()\n",
                "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n        loss.backward()\n",
            ),
        ],
        mistake_zh="在 backward 之前裁剪：新算出的梯度从未被裁剪",
    ),
    Mutant(
        "train_loop",
        "targets_not_shifted",
        "uses the inputs as targets (the model learns the identity)",
        [("inputs, targets = rows[:, :-1], rows[:, 1:]", "inputs, targets = rows[:, :-1], rows[:, :-1]")],
        mistake_zh="把输入当作目标（模型学到的是恒等映射）",
    ),
    Mutant(
        "train_loop",
        "no_clipping",
        "forgets to clip",
        [("        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n", "")],
        mistake_zh="忘了裁剪",
    ),
    Mutant(
        "train_loop",
        "seeds_torch_only",
        "seeds PyTorch only",
        [("    random.seed(seed)\n    np.random.seed(seed)\n", "")],
        mistake_zh="只给 PyTorch 设了随机种子",
    ),
    Mutant(
        "train_loop",
        "zero_grad_after_backward",
        "zeroes the gradients after backward: the step sees no gradient",
        [
            (
                "        optimizer.zero_grad(set_to_none=True)\n        loss.backward()\n",
                "        loss.backward()\n        optimizer.zero_grad(set_to_none=True)\n",
            ),
        ],
        mistake_zh="在 backward 之后清零梯度：step 看不到任何梯度",
    ),
    Mutant(
        "checkpoint",
        "no_rng_state",
        "saves no torch RNG state: the resumed run draws other batches and dropout masks",
        [('    torch.set_rng_state(state["torch_rng"])\n', "")],
        mistake_zh="不保存 torch 的随机数状态：恢复后的运行抽到不同的批次和 dropout 掩码",
    ),
    Mutant(
        "checkpoint",
        "no_optimizer_state",
        "does not restore the optimizer: AdamW restarts its moments",
        [('    optimizer.load_state_dict(state["optimizer"])\n', "")],
        mistake_zh="不恢复优化器：AdamW 的矩估计从头开始",
    ),
    Mutant(
        "checkpoint",
        "no_python_rng",
        "restores torch's generator but not Python's",
        [('    random.setstate(state["python_rng"])\n', "")],
        mistake_zh="恢复了 torch 的生成器，却没有恢复 Python 的",
    ),
    Mutant(
        "checkpoint",
        "numpy_state_pickled",
        "stores NumPy's state as returned (a NumPy array inside): weights_only loading refuses it",
        [
            (
                '"numpy_rng": (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)),',
                '"numpy_rng": np.random.get_state(),',
            ),
            ("    state = torch.load(path, weights_only=True)", "    state = torch.load(path, weights_only=False)"),
            (
                "    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))",
                "    np.random.set_state((name, keys, pos, has_gauss, cached))",
            ),
        ],
        mistake_zh="按原样保存 NumPy 的状态（里面有 NumPy 数组）：weights_only 加载会拒绝它",
    ),
    Mutant(
        "checkpoint",
        "keys_not_checked",
        "loads whatever file it is given",
        [
            (
                "    if not isinstance(state, dict) or not set(CHECKPOINT_KEYS) <= set(state):",
                "    if not isinstance(state, dict):",
            )
        ],
        mistake_zh="给什么文件就加载什么文件",
    ),
]
