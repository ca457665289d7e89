"""Realistic wrong versions of the p05.tiny_llm_from_scratch solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "prepare_corpus",
        "tokenizer_sees_validation",
        "learns the merges on the whole text, validation documents included",
        [
            (
                "BPETokenizer(train_bpe(END_OF_TEXT.join(train_documents), num_merges))",
                "BPETokenizer(train_bpe(text, num_merges))",
            )
        ],
        mistake_zh="在全部文本上学习合并规则，把验证集文档也包括进去了",
    ),
    Mutant(
        "prepare_corpus",
        "no_end_of_text",
        "concatenates the documents without the END_OF_TEXT id between them",
        [("ids.append(end_id)  # the model learns where a story ends", "pass")],
        mistake_zh="拼接文档时没有在它们之间插入 END_OF_TEXT id",
    ),
    Mutant(
        "prepare_corpus",
        "validation_from_the_front",
        "holds out the first documents instead of the last",
        [
            (
                "documents[:-val_documents], documents[-val_documents:]",
                "documents[val_documents:], documents[:val_documents]",
            )
        ],
        mistake_zh="留出最前面的文档作验证集，而不是最后面的",
    ),
    Mutant(
        "prepare_corpus",
        "int64_streams",
        "stores the streams as int64 (4 times the memory of uint16)",
        [("torch.tensor(ids, dtype=torch.uint16)", "torch.tensor(ids, dtype=torch.int64)")],
        mistake_zh="把 token 流存成 int64（内存是 uint16 的 4 倍）",
    ),
    Mutant(
        "train_step",
        "no_zero_grad",
        "never clears the gradients: every step uses the sum of all past gradients",
        [("optimizer.zero_grad(set_to_none=True)", "pass")],
        mistake_zh="从不清零梯度：每一步用的都是过去所有梯度之和",
    ),
    Mutant(
        "train_step",
        "scheduler_first",
        "steps the scheduler before the optimizer: the schedule is shifted by one",
        [
            (
                "optimizer.step()                                                          # at this step's lr\n"
                "    scheduler.step()",
                "scheduler.step()\n    optimizer.step()",
            )
        ],
        mistake_zh="在 optimizer 之前调用 scheduler.step()：学习率调度整体错位一步",
    ),
    Mutant(
        "train_step",
        "clip_after_step",
        "clips the gradients after the optimizer used them",
        [
            (
                "grad_norm = clip_grad_norm(model.parameters(), max_grad_norm)             # the norm before clipping\n"
                "    optimizer.step()",
                "optimizer.step()\n    grad_norm = clip_grad_norm(model.parameters(), max_grad_norm)",
            )
        ],
        mistake_zh="在 optimizer 已经用完梯度之后才裁剪",
    ),
    Mutant(
        "train_step",
        "norm_after_clipping",
        "reports the gradient norm after clipping, which hides a divergence",
        [("return loss.item(), float(grad_norm)", "return loss.item(), min(float(grad_norm), max_grad_norm)")],
        mistake_zh="报告裁剪之后的梯度范数，从而掩盖了发散",
    ),
    Mutant(
        "train_step",
        "no_clipping",
        "forgets to clip and reports the norm computed by hand",
        [
            (
                "grad_norm = clip_grad_norm(model.parameters(), max_grad_norm)",
                "grad_norm = torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None]).norm()",
            )
        ],
        mistake_zh="忘了裁剪梯度，只报告手工算出的范数",
    ),
    Mutant(
        "evaluate",
        "mean_of_batch_means",
        "averages the per-batch means, over-weighing a smaller last batch",
        [
            (
                'targets[start : start + batch_size].flatten(),\n                                 reduction="sum").item()',
                "targets[start : start + batch_size].flatten()).item() / math.ceil(k / batch_size)",
            ),
            ("return total / (k * T)", "return total"),
        ],
        mistake_zh="对每个 batch 的均值再求平均，使较小的最后一个 batch 权重偏大",
    ),
    Mutant(
        "evaluate",
        "targets_not_shifted",
        "uses the inputs as their own targets",
        [("tokens[1 : k * T + 1].to(device=device", "tokens[: k * T].to(device=device")],
        mistake_zh="把输入本身当作目标",
    ),
    Mutant(
        "evaluate",
        "left_in_eval_mode",
        "switches to eval mode and never restores the caller's mode",
        [("model.train(was_training)", "pass")],
        mistake_zh="切换到 eval 模式后从不恢复调用方原来的模式",
    ),
    Mutant(
        "evaluate",
        "last_batch_dropped",
        "skips the last, incomplete batch of windows",
        [
            ("for start in range(0, k, batch_size):", "for start in range(0, k - batch_size + 1, batch_size):"),
            ("return total / (k * T)", "return total / (k // batch_size * batch_size * T)"),
        ],
        mistake_zh="跳过了最后一个不完整的窗口 batch",
    ),
    Mutant(
        "TrainingRun",
        "generator_per_call",
        "creates the sampler's generator in train(): every resume replays the first batches",
        [
            (
                "config, losses = self.config, []",
                "config, losses = self.config, []\n"
                "        self.generator = torch.Generator().manual_seed(config.seed + 1)",
            )
        ],
        mistake_zh="在 train() 内创建采样器的生成器：每次恢复训练都会重放最初的几个 batch",
    ),
    Mutant(
        "TrainingRun",
        "step_not_restored",
        "loads the checkpoint but starts the resumed run at step 0",
        [("run.step = load_checkpoint(", "load_checkpoint(")],
        mistake_zh="加载了检查点，但恢复的训练从第 0 步开始",
    ),
    Mutant(
        "TrainingRun",
        "checkpoint_before_counting",
        "writes the checkpoint before counting the step just done",
        [
            (
                "self.step += 1                                          # the number of steps done\n"
                "            if checkpoint_every and self.step % checkpoint_every == 0:",
                "if checkpoint_every and self.step % checkpoint_every == 0:",
            ),
            (
                "generator=self.generator, step=self.step)\n",
                "generator=self.generator, step=self.step)\n            self.step += 1\n",
            ),
        ],
        mistake_zh="在计入刚完成的这一步之前就写检查点",
    ),
    Mutant(
        "TrainingRun",
        "decay_everything",
        "applies weight decay to every parameter, norm gains included",
        [
            (
                "AdamW(weight_decay_param_groups(self.model, config.weight_decay), lr=config.peak_lr,",
                "AdamW(self.model.parameters(), weight_decay=config.weight_decay, lr=config.peak_lr,",
            )
        ],
        mistake_zh="对所有参数都施加权重衰减，包括归一化层的增益",
    ),
    Mutant(
        "TrainingRun",
        "schedule_ends_early",
        "passes the decay's length where the schedule wants its absolute end step",
        [("decay_end=config.steps)", "decay_end=config.steps - config.warmup_steps)")],
        mistake_zh="把衰减阶段的长度传给了需要绝对结束步数的调度参数",
    ),
    Mutant(
        "TrainingRun",
        "unseeded",
        "builds the model without seeding: every run starts from other weights",
        [("torch.manual_seed(config.seed)", "pass  # no seed")],
        mistake_zh="构建模型时没有设种子：每次运行的初始权重都不同",
    ),
    Mutant(
        "distinct_ngram_ratio",
        "tensor_ngrams",
        "builds n-grams from 0-d tensors, which hash by identity",
        [("ids = [int(token) for token in sequence]", "ids = list(sequence)")],
        mistake_zh="用 0 维张量构成 n-gram，而它们按对象身份哈希",
    ),
    Mutant(
        "distinct_ngram_ratio",
        "across_sequences",
        "concatenates the sequences, counting n-grams across their boundaries",
        [
            (
                "ngrams = []\n    for sequence in sequences:\n        ids = [int(token) for token in sequence]",
                "ngrams = []\n    for sequence in [[int(t) for s in sequences for t in s]]:\n        ids = sequence",
            )
        ],
        mistake_zh="把各序列拼接起来，统计了跨越序列边界的 n-gram",
    ),
    Mutant(
        "distinct_ngram_ratio",
        "last_ngram_dropped",
        "stops one n-gram early in every sequence",
        [("for i in range(len(ids) - n + 1))", "for i in range(len(ids) - n))")],
        mistake_zh="每个序列都少统计最后一个 n-gram",
    ),
    Mutant(
        "generate",
        "no_temperature",
        "forgets the temperature processor",
        [("[Temperature(temperature)] + ([TopK(top_k)] if top_k else [])", "([TopK(top_k)] if top_k else [])")],
        mistake_zh="忘了加温度处理器",
    ),
    Mutant(
        "generate",
        "steps_without_cache",
        "feeds each new token without the caches: the model sees one token",
        [("logits = model(next_token[:, None], caches=caches)[:, -1]", "logits = model(next_token[:, None])[:, -1]")],
        mistake_zh="每个新 token 都不带缓存单独送入：模型只看得到一个 token",
    ),
    Mutant(
        "generate",
        "global_rng",
        "does not pass the generator: a seed no longer reproduces a sample",
        [("processors, generator=generator,", "processors, generator=None,")],
        mistake_zh="没有传入生成器：同一个种子不再能复现采样结果",
    ),
    Mutant(
        "generate",
        "prefill_first_column",
        "takes the prefill logits of the first position instead of the last",
        [("logits = model(input_ids, caches=caches)[:, -1]", "logits = model(input_ids, caches=caches)[:, 0]")],
        mistake_zh="取预填充 logits 的第一个位置，而不是最后一个",
    ),
    Mutant(
        "TrainingRun",
        "model_not_moved",
        "builds the model on the CPU whatever device the run was given",
        [("self.model = TinyLlama(model_args).to(self.device)", "self.model = TinyLlama(model_args)")],
        mistake_zh="无论给定哪个 device，模型都建在 CPU 上",
    ),
    Mutant(
        "TrainingRun",
        "bar_always_off",
        "never shows the progress bar (progress is ignored)",
        [("disable=not progress", "disable=True")],
        mistake_zh="从不显示进度条（忽略了 progress）",
    ),
    Mutant(
        "TrainingRun",
        "bar_always_on",
        "shows the progress bar whatever progress says",
        [("disable=not progress", "disable=False")],
        mistake_zh="无论 progress 是什么都显示进度条",
    ),
]
