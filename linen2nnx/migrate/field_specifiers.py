"""Field specifiers of other libraries: a field default that is a call returning a ``dataclasses.Field``.

A dataclass reads ``config: Config = instance_field(Config)`` (Fiddle's, as praxis writes every layer's
``params_init``) as the field's default factory; written as the parameter default of an NNX
``__init__``, the same call gives the ``Field`` object itself, which the class then holds as its
config. The codemod cannot tell what such a function returns, so a default that calls one is
reported (``L2N-MOD-012``) in every class whose ``__init__`` takes the field.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_utils import callee_name


def is_field_specifier(value: cst.BaseExpression) -> bool:
    """A call of another library's field specifier (``instance_field(Child)``, ``struct.field(...)``): by
    name, a function ending in ``field`` (``dataclasses.field`` itself is read before this is asked)."""
    return isinstance(value, cst.Call) and callee_name(value).lower().endswith("field")
