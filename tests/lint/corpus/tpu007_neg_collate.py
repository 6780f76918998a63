import torch


# A collate function runs in the DataLoader's workers on CPU tensors, and torch.stack cannot
# make a dynamic shape: it raises unless every sample already has the same size.
def collate(samples):
    return torch.stack([s["ids"] for s in samples])


class DataCollator:
    def __call__(self, features):
        return {"x": torch.stack(features)}
