# rms_norm whose forward raises: wrong_result with the exception and the candidate's line.
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        raise RuntimeError("kernel launch failed: too many resources requested")
