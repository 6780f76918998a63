# Index assignments on things that are not tensors, in SPMD code.
import torch_xla.distributed.spmd as xs


def configure(config, key, value, mesh, weights):
    xs.mark_sharding(weights, mesh, ("data", None))
    config[key] = value
    names = sorted(config)
    for i in range(len(names)):
        names[i] = names[i].upper()
    rows = [[0] * 4 for _ in names]
    rows[key][value] = 1

    def inner(table, k):
        table[k] = 1
        return table

    return inner({}, key), names, rows
