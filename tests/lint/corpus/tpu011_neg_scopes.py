import functools

import equinox as eqx
import jax
from jax.experimental.pjit import pjit


class Evaler:
    def _pjit(self, fn):
        # `fn` here is the parameter, not the policy closure below.
        return pjit(fn, in_shardings=None)


def every_n_steps(n, min_step):
    def fn(*, step, summaries):
        if step < min_step:  # a Python int: this closure is never jitted
            return False
        return step % n == 0
    return fn


class Table:
    @eqx.filter_jit
    def free(self, seq_id: int):
        # filter_jit traces arrays only: an int argument is static.
        if seq_id < 0:
            return self
        return self


jitted = jax.jit(lambda x: x)


@jax.jit
def lifted(scope, v):
    # A method named is_/has_ asks about structure; a comparison with a string reads metadata.
    if scope.is_mutable_collection("intermediates"):
        v = v + 1
    assert v.tag == "hello"
    return v


class Engine:
    def compile(self):
        # static_argnums of a bound method count after self: 1 is micro_steps.
        self.update = jax.jit(self._update, static_argnums=(1,))

    def _update(self, grads, micro_steps):
        if micro_steps <= 1:
            return grads
        return grads / micro_steps


def attention(mesh, specs):
    @functools.partial(jax.shard_map, mesh=mesh, in_specs=(specs, None), out_specs=specs)
    def kernel(q, cp_size):
        if cp_size > 1:  # in_specs None: a Python value, not sharded
            q = q * 2
        return q
    return kernel
