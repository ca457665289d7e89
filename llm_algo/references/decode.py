"""float64 references for decode attention over a KV cache (one query token per sequence, `seq_lens` valid keys
of a (B, H_kv, S, d) cache, GQA), shared by p03.decode_attention and p03.paged_attention: the split-K partial states
of every slice, and SDPA run on each sequence's keys with its log-sum-exp."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..check.restrictions import reference_only


def slice_states(q, k, v, seq_lens, split_size, sm_scale=None, dtype=torch.float64, p_dtype=None):
    """The partial states (m, l, acc) of every slice, on the CPU in `dtype`: the valid scores of each sequence are
    padded with -inf to n_splits * split_size keys and reshaped to (H, n_splits, split_size). `p_dtype` rounds the
    probabilities before they multiply V (what a tensor-core kernel does): the baseline's error."""
    with reference_only():
        batch, heads, head_dim = q.shape
        kv_heads, cache_len = k.shape[1], k.shape[2]
        n_splits = -(-cache_len // split_size)
        scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else sm_scale
        m = torch.full((batch, heads, n_splits), float("-inf"), dtype=dtype)
        lsum = torch.zeros(batch, heads, n_splits, dtype=dtype)
        acc = torch.zeros(batch, heads, n_splits, head_dim, dtype=dtype)
        for b in range(batch):
            n = int(seq_lens[b])
            keys = k[b, :, :n].cpu().to(dtype).repeat_interleave(heads // kv_heads, dim=0)  # (H, n, d)
            values = v[b, :, :n].cpu().to(dtype).repeat_interleave(heads // kv_heads, dim=0)
            scores = (keys * q[b].cpu().to(dtype)[:, None, :]).sum(-1) * scale  # (H, n)
            padded = torch.full((heads, n_splits * split_size), float("-inf"), dtype=dtype)
            padded[:, :n] = scores
            padded = padded.view(heads, n_splits, split_size)
            m[b] = padded.amax(-1)
            safe = torch.where(torch.isfinite(m[b]), m[b], torch.zeros_like(m[b]))
            p = torch.exp(padded - safe[..., None])  # (H, n_splits, split_size), 0 on padding
            lsum[b] = p.sum(-1)
            if p_dtype is not None:
                p = p.to(p_dtype).to(dtype)
            padded_v = torch.zeros(heads, n_splits * split_size, head_dim, dtype=dtype)
            padded_v[:, :n] = values
            acc[b] = (p[..., None] * padded_v.view(heads, n_splits, split_size, head_dim)).sum(-2)
    return m, lsum, acc


def sdpa_per_sequence(q, k, v, seq_lens, sm_scale=None, dtype=torch.float64):
    """Reference decode: SDPA on each sequence's first seq_lens[b] keys; out (B, H, d) and the lse (B, H)."""
    with reference_only():
        outs, lses = [], []
        for b in range(q.shape[0]):
            n = int(seq_lens[b])
            qb = q[b : b + 1, :, None].cpu().to(dtype)  # (1, H, 1, d)
            kb, vb = k[b : b + 1, :, :n].cpu().to(dtype), v[b : b + 1, :, :n].cpu().to(dtype)
            outs.append(F.scaled_dot_product_attention(qb, kb, vb, scale=sm_scale, enable_gqa=True)[0, :, 0])
            kb = kb.repeat_interleave(q.shape[1] // k.shape[1], dim=1)[0]  # (H, n, d)
            scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
            lses.append(torch.logsumexp((kb * qb[0]).sum(-1) * scale, dim=-1))
        return torch.stack(outs), torch.stack(lses)
