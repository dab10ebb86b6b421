# silu_and_mul in Atrex-Bench's candidate format, with its compute in one Triton kernel:
# out[r, c] = bf16(bf16(silu(x[r, c])) * x[r, d + c]), silu in fp32; a 2-D grid of (row, column
# block). Written for atrex (docs/python-candidates.md); evaluate with
#   atrex eval kernels/python/silu_and_mul/generated_kernel.py --operator silu_and_mul --backend cuda
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_rows(x_ptr, out_ptr, d, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    a = tl.load(x_ptr + row * 2 * d + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_ptr + row * 2 * d + d + cols, mask=mask, other=0.0).to(tl.float32)
    s = (a / (1.0 + tl.exp(-a))).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * d + cols, (s * b).to(out_ptr.dtype.element_ty), mask=mask)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows, two_d = x.shape
        d = two_d // 2
        out = torch.empty((rows, d), dtype=x.dtype, device=x.device)
        block = min(1024, triton.next_power_of_2(d))
        _silu_and_mul_rows[(rows, triton.cdiv(d, block))](x, out, d, BLOCK=block, num_warps=4)
        return out
