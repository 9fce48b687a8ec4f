"""Scaled dot-product attention with a float mask that requires grad (a learned position bias), in the fused kernel.

PyTorch's CPU kernel (``_scaled_dot_product_flash_attention_for_cpu``) takes a float mask but does not
differentiate it: given a mask that requires grad, ``F.scaled_dot_product_attention`` falls back on the math
path, which keeps each layer's (B,H,Tq,Tk) probabilities for backward (12 of them in a base model, half its
attention's saved bytes at L = 200). Here the fused kernel runs forward with the mask as a constant, and backward
adds the mask's gradient by recomputing the probabilities from the kernel's log-sum-exp, as the GPU's
memory-efficient kernel does (it differentiates its bias itself, so CUDA keeps the native call):
    s = q k^T + mask,  p = exp(s - lse)                           (B,H,Tq,Tk), recomputed in backward
    dmask = p * (dO v^T - rowsum(dO * o)),  summed to the mask's (B|1, H|1, Tq, Tk)
(the softmax backward; rowsum(dO * o) = rowsum(p * dO v^T)). q, k, v and their gradients are the kernel's own.
A query that sees no key (a row of -inf) has lse 0 in the kernel, so its p and dmask are 0, as the math path's
safe softmax gives. Saved: q, k, v, o, lse as the kernel's own backward, and the mask (one storage per pass).
"""
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

aten = torch.ops.aten


class _MaskedCPUAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask):
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask, scale=1.0)
        ctx.save_for_backward(q, k, v, mask, out, lse)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, mask, out, lse = ctx.saved_tensors
        dq, dk, dv = aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dout, q, k, v, out, lse, 0.0, False, attn_mask=mask, scale=1.0)
        dmask = None
        if ctx.needs_input_grad[3]:
            p = (q @ k.transpose(-1, -2)).add_(mask).sub_(lse.unsqueeze(-1)).exp_()  # (B,H,Tq,Tk)
            rows = (dout * out).sum(-1, keepdim=True)  # (B,H,Tq,1)
            dmask = p.mul_((dout @ v.transpose(-1, -2)).sub_(rows)).sum_to_size(mask.shape)
        return dq, dk, dv, dmask


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], dropout_p: float = 0.0,
              is_causal: bool = False) -> Tensor:
    """``F.scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale=1.0)`` (q already scaled):
    (B,H,Tq,d). A float mask (B|1,H|1,Tq,Tk) that requires grad goes through the CPU's fused kernel when
    nothing else stands in its way (no dropout, no causal flag); every other call is the plain one."""
    if (mask is not None and mask.requires_grad and torch.is_grad_enabled() and q.device.type == "cpu"
            and dropout_p == 0.0 and not is_causal and mask.dtype == q.dtype):
        return _MaskedCPUAttention.apply(q, k, v, mask)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal,
                                          scale=1.0)
