import jax
import numpy as np
from flax import nnx


@nnx.jit
def train_step(model, optimizer, batch):
    return model(batch)


@jax.jit
def eval_step(model, batch):
    return model(batch)


def train(model, optimizer, batches, config):
    losses = []
    for step, batch in enumerate(batches):
        batch = jax.device_put(np.asarray(batch))  # host data moved in: no sync
        loss = train_step(model, optimizer, batch)
        losses.append(loss)  # kept on device
        if step % config.log_every == 0:
            print(f"step {step} loss {float(loss)}")
        if step == 0:
            print("compiled")
        if loss is None or loss.shape != ():  # structure, static
            continue
    print(np.mean(jax.device_get(losses)))  # once, after the loop
    return losses


def evaluate(model, batches):
    # An evaluation loop reads its results: not a training step loop.
    return [float(eval_step(model, b)) for b in batches] + [
        eval_step(model, b).item() for b in batches]


def decode(model, tokens):
    for _ in range(16):
        nxt = int(model(tokens)[-1].argmax())  # inference: the token is needed on the host
        tokens.append(nxt)
    return tokens
