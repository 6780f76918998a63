import functools

import jax
import numpy as np
from flax import nnx


@nnx.jit
def train_step(model, optimizer, batch):
    return model(batch)


def train(model, optimizer, batches, log):
    for step, batch in enumerate(batches):
        loss = train_step(model, optimizer, batch)
        log.append(float(loss))  # expect: TPU006
        host = np.asarray(loss)  # expect: TPU006
        print(f"loss {loss}")  # expect: TPU006
        loss.block_until_ready()  # expect: TPU006
        if loss > 10:  # expect: TPU006
            break
        if jax.process_index() == 0:  # the same every step: not a logging guard
            print(loss.item())  # expect: TPU006
    return host


def fit(state, loader, train_step_fn):
    # A step handed in as a parameter, named like one; its outputs are device values, and
    # so is what is computed from them.
    for batch in loader:
        state, metrics = train_step_fn(state, batch)
        info = metrics["train"]
        jax.device_get(info)  # expect: TPU006
    return state


def run(state, loader):
    # The while test runs every iteration: int() of the step waits for the last one.
    p_train_step = jax.jit(functools.partial(step, lr=0.1))
    while int(state.step) < 100:  # expect: TPU006
        state = p_train_step(state, next(loader))
    return state


def step(state, batch, lr):
    return state
