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
