# karpathy/llm.c dev/eval/export_hf.py:92: the vocab sizes are read out of a numpy header
# with .item(), so the slice they size is fixed before anything is traced.
import numpy as np
import torch


def convert(f, shapes):
    model_header = np.frombuffer(f.read(256 * 4), dtype=np.int32)
    V = model_header[3].item()
    Vp = model_header[7].item()
    w = {}
    for key, shape in shapes.items():
        data = np.frombuffer(f.read(int(np.prod(shape)) * 4), dtype=np.float32)
        w[key] = data.reshape(shape)
        if shape[0] == Vp:
            w[key] = w[key].reshape(shape)[:(V - Vp), :]
    return {k: torch.tensor(v) for k, v in w.items()}, w["wte"][:model_header[2].item()]
