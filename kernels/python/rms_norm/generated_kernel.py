# rms_norm in Atrex-Bench's candidate format, with its compute in one Triton kernel: one program
# per row, the row held in registers (BLOCK = the next power of two of hidden_size), fp32 sum of
# squares, bf16 out. Written for atrex (docs/python-candidates.md); evaluate with
#   atrex eval kernels/python/rms_norm/generated_kernel.py --operator rms_norm --backend cuda
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rms_norm_rows(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols, (x * inv * w).to(out_ptr.dtype.element_ty), mask=mask)


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        rows, n = x.shape
        out = torch.empty_like(x)
        block = triton.next_power_of_2(n)
        warps = 8 if block >= 4096 else (4 if block >= 1024 else 2)
        _rms_norm_rows[(rows,)](x, weight, out, n, self.eps, BLOCK=block, num_warps=warps)
        return out
