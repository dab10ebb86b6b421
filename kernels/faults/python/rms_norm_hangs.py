# rms_norm whose forward never returns: timeout (the child's process group is killed).
import time
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()

    def forward(self, x, weight):
        while True:
            time.sleep(0.05)
