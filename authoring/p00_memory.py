"""Source of 00_Prerequisites/14_Memory.ipynb (build with `python -m llm_algo build p00.memory`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p00.memory",
        path="00_Prerequisites/14_Memory.ipynb",
        title_en="Memory accounting: parameters, gradients, optimizer states, activations",
        title_zh="显存账本：参数、梯度、优化器状态与激活值",
        difficulty="medium",
        device="cpu",
        minutes=45,
        prerequisites=["p00.autograd", "p00.module_basics", "p00.optim_and_loss"],
    )
    lesson.title(
        intro=r"""
        "CUDA out of memory" is the error every LLM engineer meets first. Before buying a bigger GPU, count: training
        Llama-3-8B (8.03 billion parameters) with AdamW in bf16 mixed precision keeps 16 bytes per parameter
        (Rajbhandari et al., 2020, *ZeRO*, section 3.1: bf16 weights and gradients, 2 + 2 bytes, plus fp32 master
        weights and two Adam moments, 4 + 4 + 4), which is 128 GB before a single activation: no single 80 GB GPU can
        hold it, whatever the batch size. The activations then grow with batch × sequence length and are usually the
        larger part. Every memory technique in this course (activation checkpointing, ZeRO/FSDP sharding, LoRA,
        8-bit optimizers, FlashAttention) removes one line of this account.

        **You will implement** `storage_bytes` (the bytes that tensors really hold alive, views included),
        `training_state_bytes` (parameters, gradients and optimizer states of a model, predicted before training),
        and `saved_activation_bytes` (what autograd keeps for the backward, measured with
        `saved_tensors_hooks`). **Graded against** the storages actually allocated by a training step of a tiny
        Hugging Face Llama with `torch.optim.SGD`/`AdamW` on the CPU, closed forms for an MLP and a fused QKV
        projection, and, where a GPU is present, `torch.cuda.memory_allocated`.

        **本节要点**
        - 张量真正占用的是它的 storage：切片、转置、`view` 共享同一块 storage，`x[:, :1]` 会让整块内存一直存活；按 `untyped_storage().data_ptr()` 去重。
        - 训练状态（每个参数）：参数本身 + 梯度（仅 `requires_grad` 的参数）+ 优化器状态（SGD 0 份，动量 1 份，Adam/AdamW 2 份，外加每个参数一个 4 字节的 float32 `step`）。
        - 绑定（tied）的权重只算一次：`model.parameters()` 本身已去重。冻结的参数（LoRA 的底座）没有梯度，也没有优化器状态。
        - bf16 混合精度 + AdamW：每参数 16 字节（ZeRO 论文）；Llama-3-8B 约 128 GB，还没算激活值。
        - 激活值：autograd 为反向保存的张量，用 `torch.autograd.graph.saved_tensors_hooks` 可以逐个看到；参数不算激活值。
        - GPU 上 `torch.cuda.memory_allocated` 按 512 字节对齐取整，缓存分配器还会保留已释放的块（`memory_reserved`）。
        {易错点}
        """
    )
    lesson.md(r"""
        ## 1. What a tensor really holds: its storage

        A tensor is a view (shape, strides, offset, see [p00.tensor_layout](04_Tensor_Layout.ipynb)) into a
        **storage**, a flat block of bytes. `x.numel() * x.element_size()` is the size of the *view*;
        `x.untyped_storage().nbytes()` is the memory it keeps alive. They differ for every slice:

        | tensor | view bytes | storage bytes |
        | --- | --- | --- |
        | `logits = torch.randn(8, 4096, 128256)` (fp32) | 16.8 GB | 16.8 GB |
        | `last = logits[:, -1]` (the next-token logits) | 4.1 MB | 16.8 GB: the whole block stays alive |
        | `last = logits[:, -1].clone()` | 4.1 MB | 4.1 MB: `del logits` now frees 16.8 GB |

        (Llama-3's vocabulary has 128,256 tokens; the numbers are $8 \cdot 4096 \cdot 128256 \cdot 4$ bytes.) Two
        tensors share memory exactly when their storages start at the same address,
        `a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()`: that is how you count each block once.

        ## 2. The training state, per parameter

        For a model with $\Psi$ parameter elements of $b$ bytes each (4 for fp32, 2 for bf16), of which $\Psi_t$ are
        trainable:

        | what | bytes | notes |
        | --- | --- | --- |
        | parameters | $b\,\Psi$ | tied weights (Llama-3.2-1B's embedding and LM head) are one tensor: count once |
        | gradients | $b\,\Psi_t$ | `p.grad`, same dtype and shape as `p`; none for frozen parameters |
        | SGD, no momentum | 0 | |
        | SGD with momentum | $b\,\Psi_t$ | `momentum_buffer` |
        | Adam / AdamW | $2\,b\,\Psi_t + 4\,n_t$ | `exp_avg`, `exp_avg_sq`, and a 0-d float32 `step` for each of the $n_t$ trainable tensors |

        PyTorch keeps the optimizer states in the parameter's dtype. Mixed-precision training instead keeps fp32
        master weights in the optimizer (12 bytes per parameter with Adam) next to the bf16 model (2 + 2): the
        16 bytes of the introduction. LoRA ([p02.lora](../02_PyTorch_Algorithms/21_LoRA.ipynb)) freezes the base:
        $\Psi_t$ falls to well under 1% of $\Psi$, and with it the gradients and Adam states.

        ## 3. Activations: what autograd saves for the backward

        The backward of $y = x W^\top$ needs $x$ (for $\partial L/\partial W$) and $W$ (for $\partial L/\partial x$);
        the backward of GELU needs its input; of `exp`, its output. Autograd keeps exactly those tensors alive from
        the forward until their backward has run: the **activations**. PyTorch lets you see each one: inside
        `with torch.autograd.graph.saved_tensors_hooks(pack, unpack):` every tensor that autograd saves is passed
        to `pack(tensor)` (whatever `pack` returns is stored, and `unpack` gets it back for the backward). Weights
        are saved too, but they are parameters, already counted above. For an MLP
        `Linear(d, 4d) → GELU → Linear(4d, d)` on `x (B, T, d)`, the saved activations are $x$, the GELU input and
        the GELU output: $(1 + 4 + 4)\,BTd$ elements.

        For a GPT-style transformer layer, Korthikanti et al. (2022, *Reducing Activation Recomputation in Large
        Transformer Models*, section 4.1) count $sbh\,(34 + 5as/h)$ bytes in 16-bit training (sequence $s$, batch $b$,
        hidden $h$, heads $a$); the $5as/h$ term is the attention score matrices. For $s = 8192$, $b = 1$,
        $h = 4096$, $a = 32$ that is $1.1$ GB + $10.7$ GB per layer; FlashAttention removes the second term, and
        activation checkpointing ([p02.activation_checkpointing](../02_PyTorch_Algorithms/18_Activation_Checkpointing.ipynb))
        keeps only each layer's input.

        **On a GPU.** `torch.cuda.memory_allocated()` counts the bytes of live tensors, each rounded up to a multiple
        of 512 bytes by PyTorch's caching allocator; `torch.cuda.memory_reserved()` is what the allocator holds
        from the driver (freed blocks are kept for reuse), and `nvidia-smi` shows that plus the CUDA context (a few
        hundred MB). On the CPU there is no such counter for tensors, so we count storages.
    """)
    lesson.setup(r"""
        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
    """)
    lesson.md(r"""
        ## 4. Exercise `storage_bytes`

        `storage_bytes(tensors)`: the total bytes of the **distinct** storages behind an iterable of tensors, each
        storage counted once however many views of it are passed. Skip `None` entries (a parameter without a
        gradient); refuse anything else that is not a tensor with `TypeError`. The likely mistakes: summing
        `numel() * element_size()` (the views, not what they hold alive), and counting a shared storage twice.
    """)
    lesson.exercise(
        "storage_bytes",
        r'''
        def storage_bytes(tensors) -> int:
            """Bytes of the distinct storages behind `tensors` (an iterable of tensors or None) -> int"""
            # TODO: for each tensor (skip None; TypeError for a non-tensor), find its storage
            # TODO: remember each storage once, keyed by its address, with its size in bytes; return the total
            ### BEGIN SOLUTION
            sizes = {}  # storage address -> bytes
            for tensor in tensors:
                if tensor is None:
                    continue
                if not isinstance(tensor, torch.Tensor):
                    raise TypeError(f"expected tensors or None, got {type(tensor).__name__}")
                storage = tensor.untyped_storage()
                sizes[storage.data_ptr()] = storage.nbytes()
            return sum(sizes.values())
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `training_state_bytes`

        `training_state_bytes(model, optimizer)` predicts, **before** any training step and without allocating
        anything, the bytes that training `model` with `optimizer` will hold: a dict
        `{"parameters": ..., "gradients": ..., "optimizer": ...}` of ints, following the table of section 2, for
        `optimizer` one of `"sgd"` (no momentum), `"momentum"` (SGD with momentum) and `"adamw"`. Only parameters
        with `requires_grad` get gradients and optimizer states (the checks give the optimizer exactly those).
        Refuse any other optimizer name with `ValueError`. The checks train a tiny Llama (tied and untied
        embeddings, fp32 and bf16, partly frozen) for one step and count the storages that appeared.
    """)
    lesson.exercise(
        "training_state_bytes",
        r'''
        def training_state_bytes(model: nn.Module, optimizer: str) -> dict[str, int]:
            """Predicted bytes of {"parameters", "gradients", "optimizer"} for training model with
            optimizer in {"sgd", "momentum", "adamw"}."""
            # TODO: refuse an unknown optimizer name
            # TODO: parameters: every parameter once (model.parameters() already skips tied duplicates)
            # TODO: gradients: the trainable ones (requires_grad), same dtype
            # TODO: optimizer: 0, 1 or 2 copies of the trainable bytes; AdamW adds a float32 step per tensor
            ### BEGIN SOLUTION
            copies = {"sgd": 0, "momentum": 1, "adamw": 2}
            if optimizer not in copies:
                raise ValueError(f"optimizer must be one of {sorted(copies)}, got {optimizer!r}")
            parameters = list(model.parameters())
            trainable = [p for p in parameters if p.requires_grad]
            trainable_bytes = sum(p.numel() * p.element_size() for p in trainable)
            optimizer_bytes = copies[optimizer] * trainable_bytes
            if optimizer == "adamw":
                optimizer_bytes += 4 * len(trainable)  # state["step"]: a 0-d float32 tensor per parameter
            return {
                "parameters": sum(p.numel() * p.element_size() for p in parameters),
                "gradients": trainable_bytes,
                "optimizer": optimizer_bytes,
            }
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 6. Exercise `saved_activation_bytes`

        `saved_activation_bytes(module, *args)` runs `module(*args)` with autograd recording and returns the bytes
        of the distinct storages that autograd saved for the backward, **not counting** the module's parameters
        (a saved weight is often a transposed *view* of the parameter, so compare storages, not `isinstance`). Use
        `torch.autograd.graph.saved_tensors_hooks` with a `pack` hook that records each saved tensor's storage and
        returns the tensor unchanged, and an `unpack` hook that returns it. Count while the forward runs; the
        result must not depend on whether a backward follows.
    """)
    lesson.exercise(
        "saved_activation_bytes",
        r'''
        def saved_activation_bytes(module: nn.Module, *args) -> int:
            """Bytes of the distinct non-parameter storages that autograd saves while running module(*args)."""
            # TODO: the storage addresses of the module's parameters (to skip them)
            # TODO: a pack hook that records {address: nbytes} of each saved tensor's storage and returns the tensor
            # TODO: run the module inside torch.autograd.graph.saved_tensors_hooks(pack, unpack); sum the sizes
            ### BEGIN SOLUTION
            parameter_storages = {p.untyped_storage().data_ptr() for p in module.parameters()}
            saved = {}  # storage address -> bytes

            def pack(tensor):
                storage = tensor.untyped_storage()
                if storage.data_ptr() not in parameter_storages:
                    saved[storage.data_ptr()] = storage.nbytes()
                return tensor

            with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
                module(*args)
            return sum(saved.values())
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### A picture: where the memory of a training step goes

        A tiny Llama (2 layers, hidden 64, vocabulary 128, from `transformers` with a random config) trained with
        AdamW, for a growing batch of 128-token sequences: the training state is fixed, the activations grow
        linearly with the batch. (Your functions when they pass, a reference otherwise.)
    """)
    lesson.code(r"""
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import transformers

        def reference_state(model):
            parameters = list(model.parameters())
            nbytes = sum(p.numel() * p.element_size() for p in parameters)
            return {"parameters": nbytes, "gradients": nbytes, "optimizer": 2 * nbytes + 4 * len(parameters)}

        def reference_activations(module, *args):
            skip, saved = {p.untyped_storage().data_ptr() for p in module.parameters()}, {}
            def pack(t):
                if t.untyped_storage().data_ptr() not in skip:
                    saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
                return t
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                module(*args)
            return sum(saved.values())

        config = transformers.LlamaConfig(
            vocab_size=128, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, tie_word_embeddings=False, attn_implementation="eager",
        )
        model = transformers.LlamaForCausalLM(config)
        try:
            state, who = training_state_bytes(model, "adamw"), "yours"
            activations = saved_activation_bytes
        except NotImplementedError:
            state, who = reference_state(model), "reference"
            activations = reference_activations
        batches = [1, 2, 4, 8, 16]
        acts = [activations(model, torch.randint(0, 128, (b, 128))) for b in batches]
        fixed = sum(state.values())
        plt.figure(figsize=(6, 3.5))
        plt.bar([str(b) for b in batches], [fixed / 2**20] * len(batches), label="parameters + gradients + AdamW")
        plt.bar([str(b) for b in batches], [a / 2**20 for a in acts], bottom=[fixed / 2**20] * len(batches),
                label="saved activations")
        plt.xlabel("batch size (sequences of 128 tokens)"); plt.ylabel("MiB")
        plt.title(f"tiny Llama training memory ({who})"); plt.legend(fontsize=8)
        plt.tight_layout(); plt.show()
        print({k: f"{v / 2**10:.0f} KiB" for k, v in state.items()})
        print("activations per sequence of 128 tokens:", f"{acts[0] / 2**20:.2f} MiB")
    """)
    lesson.stop()
    lesson.md(r"""
        ## 7. Reading the solutions

        **`storage_bytes`.** A dict keyed by `untyped_storage().data_ptr()` counts each block once; `nbytes()` is
        the size of the whole block, however small the view. Two empty tensors have no block (address 0, 0 bytes),
        so they cannot be confused with a real one. *Mistakes*:
        `numel() * element_size()` (a slice of a 16.8 GB logits tensor then looks like 4 MB), no deduplication (a
        weight and its transpose counted twice).

        **`training_state_bytes`.** Everything follows from `model.parameters()`, which yields each tied tensor
        once, and `requires_grad`. The AdamW `step` is a real tensor (`torch.optim` keeps it as a 0-d float32 tensor
        so that `capturable`/fused implementations can update it on the GPU); it is 4 bytes per parameter tensor,
        negligible, but it makes the count exact. *Mistakes*: counting frozen parameters in the gradients and
        states, counting a tied embedding twice (iterating `state_dict()` or `named_parameters(remove_duplicate=False)`),
        states in fp32 for a bf16 model.

        **`saved_activation_bytes`.** The pack hook sees every tensor autograd saves, in the order the forward
        saves them; returning the tensor itself keeps the default behaviour. Offloading libraries use this very hook
        to move activations to CPU (`torch.autograd.graph.save_on_cpu`), and activation checkpointing replaces it by
        recomputation. *Mistakes*: counting the weights (a saved `W.T` is a view of the parameter's storage), no
        deduplication (the fused QKV output is saved as three views of one block).

        **What production code does.** DeepSpeed ZeRO and PyTorch FSDP shard the parameters, gradients and optimizer
        states over $N$ GPUs (16Ψ/N bytes each at stage 3); 8-bit Adam (bitsandbytes) stores the two moments in
        1 byte each; Megatron-LM's sequence parallelism splits the activations over the tensor-parallel group.
        `torch.cuda.memory_summary()`, `torch.cuda.max_memory_allocated()` and the memory snapshot
        (`torch.cuda.memory._record_memory_history`, viewed at pytorch.org/memory_viz) are the GPU tools.
    """)
    lesson.mistakes()
    return lesson
