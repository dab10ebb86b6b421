# A correct PyTorch-only rms_norm in Atrex-Bench's candidate format (generated_kernel.py): no
# target-DSL kernel, so it is correct with dsl_share 0 and a fallback in the report.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        inv = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (xf * inv * weight.float()).to(x.dtype)
