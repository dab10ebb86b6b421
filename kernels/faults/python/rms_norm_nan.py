# rms_norm that is right except for one NaN per call: wrong_result (NaN where the reference is
# finite).
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        xf = x.float()
        out = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * weight.float())
        out = out.to(x.dtype)
        out[-1, -1] = float("nan")
        return out
