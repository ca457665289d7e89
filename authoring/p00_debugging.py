"""Source of 00_Prerequisites/15_Debugging.ipynb (build with `python -m llm_algo build p00.debugging`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p00.debugging",
        path="00_Prerequisites/15_Debugging.ipynb",
        title_en="Debugging numerics: the first NaN, the first inf",
        title_zh="数值调试：定位第一个 NaN 与第一个 inf",
        difficulty="medium",
        device="cpu",
        minutes=40,
        prerequisites=["p00.autograd", "p00.module_basics"],
    )
    lesson.title(
        intro=r"""
        A loss that turns into `nan` at step 31,000 of a training run is the most expensive bug in LLM work: every
        later number is `nan`, and the traceback, if there is one, points at the optimizer, not at the cause. The
        OPT-175B logbook (Zhang et al., 2022, *OPT: Open Pre-trained Transformer Language Models*, section 2.5)
        records dozens of restarts after loss divergences; fp16 training of large models overflowed so often that
        the field moved to bf16 (same 8-bit exponent as fp32, max $3.4 \times 10^{38}$, instead of fp16's 65,504).
        Two tools find the first bad number instead of the last: **forward hooks** (which module first *outputs*
        `nan` or `inf`) and **anomaly mode** (which backward function first *returns* `nan`).

        **You will implement** `first_nonfinite_module` (forward hooks on every submodule, in execution order) and
        `first_nan_backward` (`torch.autograd.detect_anomaly`, reading its error). **Graded on** a tiny Hugging Face
        Llama with a poisoned weight, the same Llama in fp16 with one MLP projection that overflows while fp32 is
        fine, hand-made modules whose first bad output is known by construction, and the classic NaN gradients of
        `where(x > 0, sqrt(x), 0)` and of normalising a zero vector.

        **本节要点**
        - NaN 会传播：最后看到 NaN 的地方往往不是源头；要找“第一个”产生非有限值（NaN/inf）的模块或算子。
        - 前向：给每个子模块注册 forward hook，按执行顺序检查输出 `torch.isfinite(out).all()`；子模块先于父模块结束，所以第一个报告的就是最内层的源头。用完必须 `handle.remove()`（放在 `finally` 里）。
        - fp16 最大值 65504：激活值超过它就变成 inf（溢出），fp32/bf16 中同样的计算是有限的；inf 之后的 RMSNorm 会得到 NaN。
        - 反向：`torch.autograd.detect_anomaly()` 让反向中第一个返回 NaN 的函数报错，错误信息含其名字（如 `SqrtBackward0`），并打印对应的前向调用栈。
        - 经典陷阱：`torch.where(x > 0, x.sqrt(), 0)` 前向没问题，但未选中分支的梯度 0·inf = NaN；零向量归一化 0/0。
        - 异常检测很慢，只在调试时打开，结束后要关闭。
        {易错点}
        """
    )
    lesson.md(r"""
        ## 1. Where a NaN comes from

        Non-finite numbers are born in a handful of ways, then spread through every operation they touch
        ($\text{nan} + 1 = \text{nan}$, $0 \cdot \infty = \text{nan}$, $\infty - \infty = \text{nan}$):

        | birth | example in an LLM |
        | --- | --- |
        | overflow: a result above the dtype's max becomes `inf` | fp16 activations above 65,504 (an MLP projection with outlier features) |
        | $0/0$, $\infty/\infty$, $\infty - \infty$ | normalising a zero vector; `softmax` of a row that is all `-inf` (a fully masked query) |
        | `log(0)` = `-inf`, `log(x < 0)` and `sqrt(x < 0)` = `nan` | log-probabilities of a zero probability; a variance that came out negative |
        | a NaN in the data or the weights | a corrupted checkpoint, an uninitialised `torch.empty` buffer |

        ## 2. Forward: the first module with a non-finite output

        `module.register_forward_hook(hook)` calls `hook(module, args, output)` when `module`'s forward returns
        (you met hooks in [p00.module_basics](07_Module_Basics.ipynb)). Forwards nest: `model` calls `layers.0`,
        which calls `layers.0.mlp`, which calls `layers.0.mlp.down_proj`; the innermost **returns first**. So if a hook
        on every module (`model.named_modules()`, the root included, named `""`) records the name of the first
        module whose output is not finite, it names the smallest module that produced the bad value, before it
        spread to its parents and to the rest of the network.

        Outputs are not always tensors: Hugging Face's rotary embedding returns a tuple `(cos, sin)`, a model returns
        an output object. Check the tensors you can see: the output itself, or the tensors in a tuple or list.

        ## 3. Backward: anomaly mode

        Gradients can be `nan` while every forward value is finite. The classic case:

        $$
        y = \begin{cases}\sqrt x & x > 0 \\ 0 & \text{otherwise}\end{cases}
        \quad\text{written}\quad \texttt{torch.where(x > 0, x.sqrt(), 0)} .
        $$

        The forward computes `x.sqrt()` for *every* element (`nan` for $x < 0$) and then discards it. In the backward,
        `where` sends a zero gradient to the discarded elements, and `SqrtBackward0` multiplies it by
        $\frac{1}{2\sqrt x} = \text{nan}$: $0 \cdot \text{nan} = \text{nan}$. The fix is to make the untaken branch safe
        (`x.clamp(min=tiny).sqrt()`), not to mask its result.

        Inside `with torch.autograd.detect_anomaly():` autograd checks the output of every backward function and
        raises `RuntimeError: Function 'SqrtBackward0' returned nan values in its 0th output.` at the first one, and
        warns with the traceback of the *forward* call that created that node. It slows the backward down
        (every output checked, every forward traceback stored): turn it on to debug, never in production.
    """)
    lesson.setup(r"""
        import re
        import warnings

        import matplotlib.pyplot as plt
        import torch
        import torch.nn as nn
    """)
    lesson.md(r"""
        ## 4. Exercise `first_nonfinite_module`

        `first_nonfinite_module(model, *args, **kwargs)` runs `model(*args, **kwargs)` (under `torch.no_grad()`)
        with a forward hook on every module of `model.named_modules()` and returns the name of the first module, in
        the order their forwards *return*, whose output (a tensor, or any tensor in a tuple/list output) contains a
        `nan` or an `inf`; `None` if every output is finite. Remove every hook before returning, also when the
        forward raises (then let the exception through). The likely mistakes: `torch.isnan` only (an fp16 overflow
        is `inf`), the last bad module instead of the first (it is then always the root, `""`), hooks left behind.
    """)
    lesson.exercise(
        "first_nonfinite_module",
        r'''
        def first_nonfinite_module(model: nn.Module, *args, **kwargs) -> str | None:
            """Name of the first module (in the order forwards return) whose output has nan or inf, else None."""
            # TODO: a hook for every (name, module) in model.named_modules() that checks the output's tensors
            # TODO: remember only the first bad name
            # TODO: run the model without gradients; remove every hook in a finally block
            ### BEGIN SOLUTION
            first = []

            def make_hook(name):
                def hook(module, inputs, output):
                    tensors = output if isinstance(output, (tuple, list)) else (output,)
                    bad = any(
                        isinstance(t, torch.Tensor) and t.is_floating_point() and not torch.isfinite(t).all()
                        for t in tensors
                    )
                    if bad and not first:
                        first.append(name)

                return hook

            handles = [module.register_forward_hook(make_hook(name)) for name, module in model.named_modules()]
            try:
                with torch.no_grad():
                    model(*args, **kwargs)
            finally:
                for handle in handles:
                    handle.remove()
            return first[0] if first else None
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ## 5. Exercise `first_nan_backward`

        `first_nan_backward(loss_fn, *inputs)` computes `loss = loss_fn(*inputs)` and `loss.backward()` inside
        `torch.autograd.detect_anomaly()`, and returns the name of the backward function that first returned `nan`
        (`"SqrtBackward0"`), read from the error message, or `None` when the backward is clean. Any other error
        (a shape mismatch, a `RuntimeError` that is not anomaly mode's) must propagate unchanged, and anomaly mode
        must be off again afterwards. Silence the warnings that anomaly mode prints
        (`warnings.catch_warnings()`), or keep them: they show the forward line.
    """)
    lesson.exercise(
        "first_nan_backward",
        r'''
        def first_nan_backward(loss_fn, *inputs) -> str | None:
            """Name of the first backward function that returns nan for loss_fn(*inputs).backward(), else None."""
            # TODO: forward and backward inside torch.autograd.detect_anomaly()
            # TODO: catch anomaly mode's RuntimeError and extract the function name: Function '(name)' returned nan
            # TODO: re-raise any other error; return None when the backward succeeds
            ### BEGIN SOLUTION
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with torch.autograd.detect_anomaly():
                    try:
                        loss_fn(*inputs).backward()
                    except RuntimeError as error:
                        found = re.search(r"Function '(\w+)' returned nan values", str(error))
                        if found is None:
                            raise
                        return found.group(1)
            return None
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### A picture: an fp16 overflow in a real layer

        A tiny Llama (2 layers, from `transformers` with a random config) whose layer-1 `down_proj` has outlier
        weights (×10⁵), the way a few massive-activation channels make real LLMs overflow in fp16. The bars are the
        largest |output| of each module, computed in float32; the red line is fp16's maximum, 65,504. In fp16 the
        first module above the line turns into `inf`, and the final RMSNorm turns that into `nan`
        ($\infty/\infty$). Your `first_nonfinite_module` names it (the reference when yours is not written).
    """)
    lesson.code(r"""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import transformers

        torch.manual_seed(0)
        config = transformers.LlamaConfig(
            vocab_size=128, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, attn_implementation="eager",
        )
        model = transformers.LlamaForCausalLM(config).eval()
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 2:
                    p.normal_(0.0, p.shape[1] ** -0.5)  # unit-scale activations, as in a trained model
            model.model.layers[1].mlp.down_proj.weight.mul_(1e5)
        ids = torch.randint(0, 128, (2, 8))

        peaks = {}
        def record(name):
            def hook(module, inputs, output):
                out = output[0] if isinstance(output, tuple) else output
                if isinstance(out, torch.Tensor) and name.count(".") >= 3:  # the modules inside each layer
                    peaks[name.replace("model.layers.", "L")] = out.float().abs().max().item()
            return hook
        handles = [m.register_forward_hook(record(n)) for n, m in model.named_modules()]
        with torch.no_grad():
            model(ids)
        for handle in handles:
            handle.remove()

        half = model.half()
        try:
            culprit, who = first_nonfinite_module(half, ids), "yours"
        except NotImplementedError:
            culprit, who = "(write first_nonfinite_module)", "not written"
        fp32_ok = torch.isfinite(model.float()(ids).logits).all().item()
        print(f"float32 logits finite: {fp32_ok}; first non-finite module in float16 ({who}): {culprit}")

        plt.figure(figsize=(9, 3.5))
        plt.bar(range(len(peaks)), list(peaks.values()))
        plt.axhline(65504, color="red", label="fp16 max 65504")
        plt.xticks(range(len(peaks)), list(peaks.keys()), rotation=70, fontsize=7)
        plt.yscale("log"); plt.ylabel("max |output| (float32)"); plt.legend(fontsize=8)
        plt.title("per-module activation peaks of a tiny Llama with an outlier projection")
        plt.tight_layout(); plt.show()
    """)
    lesson.stop()
    lesson.md(r"""
        ## 6. Reading the solutions

        **`first_nonfinite_module`.** One closure per module captures its name; the list `first` keeps only the
        first bad name because later hooks (the parents, and every module after the source) see the spread
        values. `torch.isfinite` catches `nan`, `+inf` and `-inf` at once. The `finally` block removes the hooks even
        when the forward raises.

        **`first_nan_backward`.** Anomaly mode turns the first `nan` *returned by a backward function* into an
        exception; the message names the node. The `try` catches only `RuntimeError`, and the regex decides whether
        it is anomaly mode's: anything else is re-raised. The context manager switches the mode off on exit, even
        on an exception. *Mistakes*: `torch.autograd.set_detect_anomaly(True)` without switching it off (every
        later backward in the process runs slowly), returning `None` for every `RuntimeError` (a real bug
        reported as "no NaN").
    """)
    lesson.mistakes()
    lesson.md(r"""
        **What production training does.** Megatron-LM and DeepSpeed check the gradient norm for `nan`/`inf` every
        step and skip the step (fp16's dynamic loss scaling lowers the scale and retries,
        [p02.mixed_precision](../02_PyTorch_Algorithms/17_Mixed_Precision.ipynb)); large runs log per-layer
        activation and gradient norms to spot growing outliers before they overflow, and restart from the last
        good checkpoint with the offending batches skipped (OPT, BLOOM, PaLM). bf16 removes most overflows;
        fp8 training (DeepSeek-V3) brings them back, which is why it scales per tile. For kernels, Triton's
        interpreter and `compute-sanitizer` find out-of-bounds reads that produce garbage
        ([p03.debugging](../03_Triton_Kernels/12_Debugging.ipynb)).
    """)
    return lesson
