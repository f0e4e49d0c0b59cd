"""Trace-guided shapes: run the Linen model once (abstractly) and record what each submodule sees.

``migrate --trace SPEC`` uses this when static dataflow cannot tell a layer's input feature size
(e.g. ``nn.Dense`` after a flatten). Nothing is computed: ``jax.eval_shape`` runs ``init`` on
abstract values and ``nn.intercept_methods`` records every submodule call.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

from linen2nnx.spec import LinenSide, linen_ctor_kwargs


@dataclasses.dataclass
class Trace:
    child_inputs: dict[tuple[str, str], list[tuple[int, ...]]]
    """(parent class qualname, child name) -> shapes of the child's first input, one per call."""
    instances: dict[str, list[dict[str, Any]]]
    """class qualname -> config (dataclass fields) of each traced instance."""
    root_class: str
    root_module: str
    root_inputs: list[tuple[int, ...]]
    """Shapes of the root module's positional inputs."""
    spec_ref: str = ""

    def shapes_for(self, class_qualname: str, child: str) -> list[tuple[int, ...]]:
        return self.child_inputs.get((class_qualname, child), [])


def trace_linen(side: LinenSide, spec_ref: str = "") -> Trace:
    import flax.linen as nn
    import jax

    child_inputs: dict[tuple[str, str], list[tuple[int, ...]]] = defaultdict(list)
    instances: dict[str, list[dict[str, Any]]] = defaultdict(list)
    seen: set[int] = set()

    def interceptor(next_fun, args, kwargs, context):
        module = context.module
        if context.method_name == "__call__":
            parent = module.parent
            if isinstance(parent, nn.Module) and args and hasattr(args[0], "shape"):
                child_inputs[(type(parent).__qualname__, module.name)].append(tuple(args[0].shape))
            if id(module) not in seen:
                seen.add(id(module))
                try:
                    instances[type(module).__qualname__].append(linen_ctor_kwargs(module))
                except TypeError:
                    pass
        return next_fun(*args, **kwargs)

    args, kwargs = side.call_args(train=False)

    def init():
        with nn.intercept_methods(interceptor):
            return side.model.init(side.init_rngs(), *args, **kwargs)

    jax.eval_shape(init)
    model_type = type(side.model)
    return Trace(
        child_inputs=dict(child_inputs),
        instances=dict(instances),
        root_class=model_type.__qualname__,
        root_module=model_type.__module__,
        root_inputs=[tuple(a.shape) for a in args if hasattr(a, "shape")],
        spec_ref=spec_ref,
    )
