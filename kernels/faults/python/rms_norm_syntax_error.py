# rms_norm with a syntax error (a missing colon): compile_error with Python's message.
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, weight)
        return x
