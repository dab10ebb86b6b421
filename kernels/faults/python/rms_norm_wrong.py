# rms_norm that drops the square root: wrong_result.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        xf = x.float()
        inv = 1.0 / (xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (xf * inv * weight.float()).to(x.dtype)
