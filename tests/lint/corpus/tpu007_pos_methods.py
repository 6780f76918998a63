# Methods on tensors: annotated or used-as-tensor parameters, derived values, buffers.
import torch as T


def dedupe(ids: T.Tensor, logits, batch, codes: "torch.Tensor"):
    a = ids.unique()  # expect: TPU007
    probs = logits.softmax(-1)
    b = logits.nonzero()  # expect: TPU007
    c = T.cat([batch, batch]).unique()  # expect: TPU007
    d = probs.argmax(-1).unique_consecutive()  # expect: TPU007
    return a, b, c, d, codes.unique()  # expect: TPU007


class Model(T.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("table", T.zeros(4))
        self.codes = T.arange(4)

    def forward(self, x):
        def inner():
            return self.table.nonzero()  # expect: TPU007

        return inner(), self.codes.unique()  # expect: TPU007


def select(labels, scores):
    keep = ~(labels == -100).all(dim=-1)
    rows = keep.nonzero(as_tuple=True)  # expect: TPU007
    best = scores.max(dim=0).values
    found = (labels == 3).nonzero(as_tuple=True)  # expect: TPU007
    return rows, best.unique(), found  # expect: TPU007
