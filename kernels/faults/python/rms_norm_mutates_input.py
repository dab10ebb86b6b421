# rms_norm that normalises x in place (its input, atrex's own buffer: no copy crossed DLPack) and
# returns it: the judge sees the input changed, wrong_result "modified its input x".
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        xf = x.float()
        inv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        x.copy_((xf * inv * weight.float()).to(x.dtype))
        return x
