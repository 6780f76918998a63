# Tensors made on the host run their ops eagerly on the CPU; XLA never sees their shapes.
import numpy as np
import torch

EOT_ID = 50256


def finalize_sequence(inputs, targets, seq_len, max_num_docs):
    # KellerJordan/modded-nanogpt evals/hellaswag.py:64: packing eval sequences from lists.
    inputs_tensor = torch.tensor(inputs, dtype=torch.int32)
    targets_tensor = torch.tensor(targets, dtype=torch.int64)
    cum_lengths = torch.nonzero(inputs_tensor == EOT_ID)[:, 0] + 1
    _cum_lengths = torch.full((max_num_docs,), seq_len)
    return inputs_tensor, targets_tensor, cum_lengths, _cum_lengths


def compare(output, expected, seq_lens):
    # pytorch/xla test/test_pallas.py:628: masks applied after .cpu() select on the host.
    expected_output = torch.from_numpy(np.array(expected))
    return output.cpu()[seq_lens > 0], expected_output.cpu()[seq_lens > 0]


def shard_index(path, n):
    # A pinned buffer read from a file, cast without moving it.
    tokens = torch.empty(n, dtype=torch.uint16, pin_memory=True)
    tokens = torch.from_file(path, False, n, dtype=torch.uint16)
    bos = (tokens.to(torch.int32) == EOT_ID).nonzero(as_tuple=True)[0]
    return bos, tokens[tokens == EOT_ID].unique()
