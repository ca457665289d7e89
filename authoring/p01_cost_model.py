"""Source of 01_Hardware_Math_Systems/18_Cost_Model.ipynb (build with `python -m llm_algo build p01.cost_model`)."""

from llm_algo.authoring import LessonBuilder


def build() -> LessonBuilder:
    lesson = LessonBuilder(
        id="p01.cost_model",
        path="01_Hardware_Math_Systems/18_Cost_Model.ipynb",
        title_en="Serving and training cost",
        title_zh="推理与训练的成本模型",
        difficulty="easy",
        device="cpu",
        minutes=40,
        prerequisites=["p01.params_and_flops", "p01.kv_cache_math"],
    )
    lesson.title(
        intro=r"""
        **本节要点**
        - 推理成本：每百万 token 美元数 $= \dfrac{\text{每 GPU 小时价格} \times \text{GPU 数}}{3600 \times
          \text{tokens/s} \times \text{利用率}} \times 10^6$；利用率 (utilization) 低时成本按比例上升。
        - 训练计算量约 $6ND$（$N$ 参数，MoE 用激活参数；$D$ 训练 token 数），GPU 小时
          $= 6ND / (\text{峰值 FLOP/s} \times \text{MFU} \times 3600)$。
        - 用公开数字核对：Llama 3.1 405B 报告 30.84M H100 GPU 小时；按 15.6T token、MFU 40% 估算约 26.6M。
        - DeepSeek-V3 报告预训练 2.664M H800 GPU 小时，按每小时 2 美元共 557.6 万美元（全部训练）；反推其 MFU（约 35%）。
        {易错点}

        What does a token cost? For an API provider it is the GPU-hour price divided by the tokens those hours
        produce; for a lab it is the GPU-hours a training run consumes. Both follow from numbers earlier lessons
        derived (FLOPs per token, `p01.params_and_flops`; tokens per second bounded by memory bandwidth,
        `p01.kv_cache_math`), a price, and one honest factor: how much of the time the hardware does useful work.

        **You will implement** the dollars per million tokens of a serving deployment and the GPU-hours, days and
        dollars of a training run. **Graded against** a day of serving and a run simulated step by step in the
        checks, and against published training budgets: Llama 3.1 405B's GPU-hours (Meta's model card) and
        DeepSeek-V3's (its technical report), sources named where they are used.
    """
    )
    lesson.md(r"""
        ## 1. Serving: dollars per million tokens

        A deployment of $g$ GPUs rented at $p$ dollars per GPU-hour that generates $r$ tokens per second *while busy*,
        and is busy a fraction $u$ of the time (traffic comes and goes; 1.0 is a saturated server), produces
        $3600\, r\, u$ tokens per hour for $g\,p$ dollars:

        $$
        \text{\$ per million tokens} = \frac{g\, p}{3600\, r\, u} \times 10^{6}.
        $$

        Example: one H100 at \$2/hour, Llama-3-8B in BF16 decoding 32 sequences at 8k context, bound by memory
        bandwidth at about $32 \times 66.4 = 2126$ tokens/s (`p01.kv_cache_math`), busy half the time:
        $2 / (3600 \cdot 2126 \cdot 0.5) \cdot 10^6 \approx \$0.52$ per million output tokens. The price of a
        GPU-hour varies by provider and contract; this lesson uses \$2 per H800 GPU-hour, the rate DeepSeek-V3's
        report assumes (arXiv:2412.19437, Table 1), for H100-class GPUs throughout.

        ## 2. Exercise `cost_per_million_tokens`

        Refuse `tokens_per_second <= 0`, a negative price, `num_gpus < 1` and a `utilization` outside $(0, 1]$
        (`ValueError`).
    """)
    lesson.setup(r"""
        import math

        import matplotlib.pyplot as plt

        H100_BF16_DENSE = 989e12  # FLOP/s, NVIDIA H100 SXM datasheet (dense; the 1979 figure assumes 2:4 sparsity)
        PRICE_PER_GPU_HOUR = 2.0  # dollars, the H800 rental price DeepSeek-V3's report assumes
    """)
    lesson.exercise(
        "cost_per_million_tokens",
        r'''
        def cost_per_million_tokens(tokens_per_second: float, gpu_hour_price: float, num_gpus: int = 1,
                                    utilization: float = 1.0) -> float:
            """Dollars per million generated tokens for num_gpus GPUs producing tokens_per_second while busy."""
            # TODO: validate (ValueError)
            # TODO: dollars per hour for the deployment, tokens per hour actually produced, then per million
            ### BEGIN SOLUTION
            if tokens_per_second <= 0 or gpu_hour_price < 0 or num_gpus < 1 or not 0 < utilization <= 1:
                raise ValueError("need tokens_per_second > 0, price >= 0, num_gpus >= 1 and 0 < utilization <= 1")
            dollars_per_hour = num_gpus * gpu_hour_price
            tokens_per_hour = 3600 * tokens_per_second * utilization  # idle time is paid for too
            return dollars_per_hour / tokens_per_hour * 1e6
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Cost against batch size

        The same H100, Llama-3-8B in BF16 at 8k context: batching raises tokens/s (the weights are read once per step
        for the whole batch) until the KV caches dominate; utilization scales the bill.
    """)
    lesson.code(r"""
        weights, per_token, bandwidth, context = 16.06e9, 131072, 3.35e12, 8192
        batches = [1, 2, 4, 8, 16, 32, 52]  # 52 sequences of 8k fit next to the weights in 72 GB
        fig, ax = plt.subplots(figsize=(6.5, 3.4))
        for utilization in (1.0, 0.5, 0.2):
            costs = []
            for batch in batches:
                rate = batch * bandwidth / (weights + per_token * context * batch)  # tokens/s, bandwidth bound
                try:
                    costs.append(cost_per_million_tokens(rate, PRICE_PER_GPU_HOUR, 1, utilization))
                    who = "yours"
                except NotImplementedError:
                    costs.append(PRICE_PER_GPU_HOUR / (3600 * rate * utilization) * 1e6)
                    who = "formula"
            ax.plot(batches, costs, marker="o", label=f"utilization {utilization:.0%} ({who})")
        ax.set_xscale("log", base=2); ax.set_yscale("log")
        ax.set_xlabel("decode batch (sequences)"); ax.set_ylabel("$ per million output tokens")
        ax.set_title("Llama-3-8B BF16, 8k context, one H100 at $2/h (bandwidth bound)")
        ax.legend(fontsize=8); ax.grid(alpha=0.3, which="both")
        plt.tight_layout(); plt.show()
    """)
    lesson.md(r"""
        These are lower bounds (a real server reaches perhaps 60–80% of the bandwidth bound and also spends time on
        prefill), but the shape is the business: batching moves the cost by more than ten times (about \$2.8 to
        \$0.23 per million tokens at full utilization, from 1 to 52 sequences), and idle time multiplies it by
        1/utilization.

        ## 3. Training: GPU-hours from FLOPs

        Training a dense model of $N$ parameters on $D$ tokens costs about $6ND$ FLOPs (2 per parameter per token
        forward, 4 backward; `p01.params_and_flops`); for an MoE, $N$ is the *active* parameters. A GPU with peak
        $P$ FLOP/s reaches a fraction MFU of it (model FLOPs utilization: 38–43% for Llama 3 405B in BF16, arXiv:
        2407.21783, Table 4), so

        $$
        \text{GPU-hours} = \frac{6 N D}{P \cdot \text{MFU} \cdot 3600}, \qquad
        \text{days} = \frac{\text{GPU-hours}}{24\, g}, \qquad \text{dollars} = \text{GPU-hours} \times p .
        $$

        **Llama 3.1 405B**: $N = 405 \cdot 10^9$, $D = 15.6 \cdot 10^{12}$ tokens (arXiv:2407.21783, Sec. 3: the
        report's own $3.8 \times 10^{25}$ FLOPs), H100 at 989 TFLOP/s and MFU 0.40: $6ND = 3.79 \cdot 10^{25}$ FLOPs,
        26.6M GPU-hours. Meta's model card (Llama 3.1, "Training utilized a cumulative of 39.3M GPU hours",
        405B: 30.84M) reports 16% more: restarts, evaluation, long-context and annealing stages and lower-MFU
        phases are all in the measured figure and none are in $6ND$.

        ## 4. Exercise `training_cost`

        Return `(gpu_hours, days, dollars)` as floats. Refuse non-positive `params`, `tokens`, `peak_flops`, an
        `mfu` outside $(0, 1]$, `num_gpus < 1`, a negative price (`ValueError`).
    """)
    lesson.exercise(
        "training_cost",
        r'''
        def training_cost(params: float, tokens: float, peak_flops: float, mfu: float, num_gpus: int,
                          gpu_hour_price: float) -> tuple[float, float, float]:
            """(GPU-hours, wall-clock days on num_gpus GPUs, dollars) of training params (active) on tokens."""
            # TODO: validate (ValueError)
            # TODO: 6 N D FLOPs at peak_flops * mfu per GPU; then hours, days on num_gpus, dollars
            ### BEGIN SOLUTION
            if params <= 0 or tokens <= 0 or peak_flops <= 0 or not 0 < mfu <= 1 or num_gpus < 1 or gpu_hour_price < 0:
                raise ValueError("need positive params, tokens, peak_flops, 0 < mfu <= 1, num_gpus >= 1, price >= 0")
            flops = 6 * params * tokens  # forward 2ND + backward 4ND
            gpu_hours = flops / (peak_flops * mfu) / 3600
            return gpu_hours, gpu_hours / num_gpus / 24, gpu_hours * gpu_hour_price
            ### END SOLUTION
    ''',
    )
    lesson.md(r"""
        ### Published budgets, estimated

        Llama 3.1 405B (dense, H100) and DeepSeek-V3 pre-training (MoE, 37B active parameters, 14.8T tokens, 2.664M
        H800 GPU-hours on 2,048 GPUs; the whole run, with context extension and post-training, 2.788M GPU-hours or
        \$5.576M at \$2/hour: arXiv:2412.19437, Table 1). The H800 has the H100's dense BF16 peak. The last column is
        the MFU at which the estimate would match the reported hours.
    """)
    lesson.code(r"""
        runs = [  # name, params (active), tokens, GPUs, reported GPU-hours
            ("Llama 3.1 405B", 405e9, 15.6e12, 16384, 30.84e6),
            ("DeepSeek-V3 pre-training", 37e9, 14.8e12, 2048, 2.664e6),
        ]
        for name, params, tokens, gpus, reported in runs:
            try:
                hours, days, dollars = training_cost(params, tokens, H100_BF16_DENSE, 0.40, gpus, PRICE_PER_GPU_HOUR)
                who = "yours"
            except NotImplementedError:
                hours = 6 * params * tokens / (H100_BF16_DENSE * 0.40) / 3600
                days, dollars, who = hours / gpus / 24, hours * PRICE_PER_GPU_HOUR, "formula"
            implied = 6 * params * tokens / (reported * 3600 * H100_BF16_DENSE)
            print(f"{name:25} estimate {hours / 1e6:6.2f}M GPU-h ({days:5.1f} days on {gpus}, ${dollars / 1e6:6.1f}M)"
                  f"  reported {reported / 1e6:6.2f}M  implied MFU {implied:.1%}  ({who})")
    """)
    lesson.md(r"""
        DeepSeek-V3's implied BF16 MFU comes out near 35%, but it trained its matrix multiplications in FP8, whose
        peak is twice BF16's: against that peak the figure halves. Its low cost is mostly the MoE's small active size
        (37B of 671B): a dense 671B model on the same tokens would need 18 times the FLOPs.
    """)
    lesson.stop()
    lesson.md(r"""
        ## 5. Reading the solutions

        **`cost_per_million_tokens`.** Idle time is paid for: utilization *divides* the tokens, it does not discount the
        price. The usual mistakes: *multiplying by the utilization* (a half-idle server looks four times
        cheaper than it is), *forgetting the number of GPUs* (a tensor-parallel deployment of 8 GPUs costs 8 times the
        price per hour for its tokens), *per thousand tokens*.

        **`training_cost`.** The mistakes: *$2ND$* (forward only: a third of the cost), *ignoring MFU* (peak FLOP/s are
        never reached: a factor 2.5 at 40%), *days without dividing by the number of GPUs*, *dollars from wall-clock
        hours* (the bill is per GPU-hour).

        **What production estimates add.** Real budgets include the attention FLOPs ($12 L H d_h T$ per token,
        `p01.params_and_flops`; at 8k context 8% of $6N$ for Llama 3 405B, 27% for Llama-3-8B), failed runs and restarts
        (`p01.fault_tolerance`), evaluation and ablations (the Llama 3.1 model card's 39.3M GPU-hours cover all three
        models), and, for serving, the prefill tokens, which are compute-bound and priced separately by most APIs.
        Total cost of ownership replaces the rental price by purchase price over depreciation years plus power,
        cooling and networking.
    """)
    lesson.mistakes()
    return lesson
