"""Realistic wrong versions of the p02.swiglu solutions; every one must be rejected by a check."""

from llm_algo.mutation import Mutant

MUTANTS = [
    Mutant(
        "swiglu",
        "silu_on_up_branch",
        "applies the activation to the up projection instead of the gate",
        [("return F.linear(F.silu(gate) * up, w_down)", "return F.linear(gate * F.silu(up), w_down)")],
        mistake_zh="激活函数作用在 up 投影上而不是门控上",
    ),
    Mutant(
        "swiglu",
        "gelu_gate",
        "uses GELU (GeGLU) where Llama uses SiLU",
        [("F.silu(gate) * up", "F.gelu(gate) * up")],
        mistake_zh="Llama 用 SiLU 的地方用了 GELU（GeGLU）",
    ),
    Mutant(
        "swiglu",
        "sigmoid_gate",
        "uses sigmoid (the original GLU) instead of silu = z * sigmoid(z)",
        [("F.silu(gate) * up", "torch.sigmoid(gate) * up")],
        mistake_zh="用 sigmoid（原始 GLU）代替 silu = z * sigmoid(z)",
    ),
    Mutant(
        "swiglu",
        "no_up_projection",
        "forgets the up branch: a plain MLP with the gate weights",
        [("F.linear(F.silu(gate) * up, w_down)", "F.linear(F.silu(gate), w_down)")],
        mistake_zh="忘了 up 分支：用门控权重做的普通 MLP",
    ),
    Mutant(
        "swiglu_hidden_dim",
        "rounds_down",
        "floors to a multiple instead of rounding up",
        [("multiple_of * ((hidden + multiple_of - 1) // multiple_of)", "multiple_of * (hidden // multiple_of)")],
        mistake_zh="向下取整到倍数，而不是向上取整",
    ),
    Mutant(
        "swiglu_hidden_dim",
        "always_adds_a_multiple",
        "h // m + 1 multiples: one too many when h is already on a multiple",
        [("multiple_of * ((hidden + multiple_of - 1) // multiple_of)", "multiple_of * (hidden // multiple_of + 1)")],
        mistake_zh="取 h // m + 1 个倍数：h 恰好是倍数时多了一个",
    ),
    Mutant(
        "swiglu_hidden_dim",
        "multiplier_after_rounding",
        "scales by ffn_dim_multiplier after rounding to the multiple",
        [
            ("hidden = int(ffn_dim_multiplier * hidden)", "pass"),
            (
                "return multiple_of * ((hidden + multiple_of - 1) // multiple_of)",
                "hidden = multiple_of * ((hidden + multiple_of - 1) // multiple_of)\n"
                "    return hidden if ffn_dim_multiplier is None else int(ffn_dim_multiplier * hidden)",
            ),
        ],
        mistake_zh="取整到倍数之后才乘 ffn_dim_multiplier",
    ),
    Mutant(
        "swiglu_hidden_dim",
        "no_two_thirds",
        "keeps the plain MLP's 4 * dim",
        [("hidden = int(2 * (4 * dim) / 3)", "hidden = 4 * dim")],
        mistake_zh="保留普通 MLP 的 4 * dim",
    ),
    Mutant(
        "SwiGLU",
        "linear_with_bias",
        "nn.Linear's default bias=True: keys that no Llama checkpoint has",
        [("self.gate_proj = nn.Linear(dim, hidden_dim, bias=False)", "self.gate_proj = nn.Linear(dim, hidden_dim)")],
        mistake_zh="nn.Linear 默认 bias=True：多出了任何 Llama 检查点都没有的键",
    ),
    Mutant(
        "SwiGLU",
        "gate_and_up_swapped",
        "passes up_proj's weight as the gate in forward",
        [
            (
                "swiglu(x, self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight)",
                "swiglu(x, self.up_proj.weight, self.gate_proj.weight, self.down_proj.weight)",
            )
        ],
        mistake_zh="forward 里把 up_proj 的权重当作门控",
    ),
    Mutant(
        "SwiGLU",
        "frozen_weights",
        "detaches the weights in forward, so nothing trains",
        [
            (
                "swiglu(x, self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight)",
                "swiglu(x, self.gate_proj.weight.detach(), self.up_proj.weight, self.down_proj.weight.detach())",
            )
        ],
        mistake_zh="forward 里 detach 了权重，什么都训练不了",
    ),
    # SwiGLUFunction
    Mutant(
        "SwiGLUFunction",
        "silu_derivative_is_sigmoid",
        "takes silu'(z) = sigmoid(z), the derivative of the gate of the original GLU",
        [("sig * (1 + g * (1 - sig))", "sig")],
        mistake_zh="取 silu'(z) = sigmoid(z)，那是原始 GLU 门控的导数",
    ),
    Mutant(
        "SwiGLUFunction",
        "grad_x_gate_path_only",
        "forgets that x feeds the up projection too: grad_x from the gate path only",
        [("grad_x = grad_gate @ w_gate + grad_up @ w_up", "grad_x = grad_gate @ w_gate")],
        mistake_zh="忘了 x 也输入到 up 投影：grad_x 只来自门控路径",
    ),
    Mutant(
        "SwiGLUFunction",
        "grad_up_times_gate",
        "multiplies the up gradient by the gate pre-activation instead of silu(gate)",
        [("grad_up = (grad_a * s).to(x.dtype)", "grad_up = (grad_a * g).to(x.dtype)")],
        mistake_zh="up 的梯度乘的是门控的激活前值，而不是 silu(gate)",
    ),
    Mutant(
        "SwiGLUFunction",
        "weight_grad_mean",
        "averages grad_w_down over the rows instead of summing",
        [("grad_w_down = grad_rows.T @ a", "grad_w_down = grad_rows.T @ a / grad_rows.shape[0]")],
        mistake_zh="grad_w_down 对各行取平均而不是求和",
    ),
    Mutant(
        "SwiGLUFunction",
        "grad_x_not_reshaped",
        "returns grad_x as (N, d) rows instead of x's shape",
        [("return grad_x.reshape(x.shape), grad_w_gate", "return grad_x, grad_w_gate")],
        mistake_zh="grad_x 以 (N, d) 的行返回，而不是 x 的形状",
    ),
    Mutant(
        "SwiGLUFunction",
        "calls_autograd",
        "rebuilds the forward under enable_grad and asks autograd for the gradients",
        [
            (
                "d, h = x.shape[-1], gate.shape[-1]",
                "with torch.enable_grad():\n"
                "            leaves = [t.detach().requires_grad_() for t in (x, w_gate, w_up, w_down)]\n"
                "            out = F.linear(F.silu(F.linear(leaves[0], leaves[1])) * F.linear(leaves[0], leaves[2]), "
                "leaves[3])\n"
                "            return torch.autograd.grad(out, leaves, grad_out)",
            )
        ],
        mistake_zh="在 enable_grad 下重建前向，让 autograd 求梯度",
    ),
    # FusedSwiGLU
    Mutant(
        "FusedSwiGLU",
        "up_first",
        "reads the first half of gate_up_proj's output as up and the second as the gate",
        [("gate, up = self.gate_up_proj(x).split", "up, gate = self.gate_up_proj(x).split")],
        mistake_zh="把 gate_up_proj 输出的前一半当作 up、后一半当作门控",
    ),
    Mutant(
        "FusedSwiGLU",
        "stacks_up_first",
        "stacks [up; gate] in from_unfused, the opposite of the split in forward",
        [("torch.cat((w_gate, w_up), dim=0)", "torch.cat((w_up, w_gate), dim=0)")],
        mistake_zh="from_unfused 里按 [up; gate] 堆叠，与 forward 中的切分相反",
    ),
    Mutant(
        "FusedSwiGLU",
        "interleaved_split",
        "splits even and odd columns (gpt-oss's layout) instead of two halves",
        [
            (
                "gate, up = self.gate_up_proj(x).split(self.hidden_dim, dim=-1)",
                "gate_up = self.gate_up_proj(x)\n        gate, up = gate_up[..., ::2], gate_up[..., 1::2]",
            )
        ],
        mistake_zh="按奇偶列切分（gpt-oss 的布局），而不是切成两半",
    ),
    Mutant(
        "FusedSwiGLU",
        "two_gemms",
        "slices the fused weight and runs two GEMMs, which the fusion was meant to avoid",
        [
            (
                "gate, up = self.gate_up_proj(x).split(self.hidden_dim, dim=-1)",
                "w_gate, w_up = self.gate_up_proj.weight.split(self.hidden_dim, dim=0)\n"
                "        gate, up = F.linear(x, w_gate), F.linear(x, w_up)",
            )
        ],
        mistake_zh="切开融合的权重做两次 GEMM，正是融合要避免的",
    ),
    Mutant(
        "FusedSwiGLU",
        "default_dtype",
        "builds the fused module in the default float32, whatever the source's dtype",
        [("fused = cls(d, h).to(dtype=w_gate.dtype, device=w_gate.device)", "fused = cls(d, h)")],
        mistake_zh="不管源模块是什么数据类型，都以默认的 float32 构建融合模块",
    ),
]
