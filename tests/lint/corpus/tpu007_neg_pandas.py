# unique()/nonzero() on pandas and numpy objects are not tensor ops.
import numpy as np
import pandas as pd
import torch


def summarize(df: pd.DataFrame, path, config):
    labels = df["label"].unique()
    frame = pd.read_csv(path)
    users = frame.user_id.unique()
    arr = np.asarray([1, 0, 2])
    idx = arr.nonzero()
    names = config.columns.unique()
    nested = {"a": df}

    def inner():
        return nested["a"]["col"].unique()

    return labels, users, idx, names, torch.tensor(len(labels)), inner


def frames(df, arr):
    kept = df.all(axis=1)
    return kept.unique(), np.sort(arr, axis=0).nonzero()
