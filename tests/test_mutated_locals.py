"""The locals a method changes in place as containers (mutation.mutated_locals): never replayed."""

import libcst as cst

from linen2nnx.migrate.mutation import mutated_locals


def test_mutated_locals_are_the_containers_the_method_changes():
    fn = cst.parse_module(
        "def f(self, x):\n"
        "    widths = list(self.widths)\n"
        "    last = widths.pop()\n"
        "    dims.append(3)\n"
        "    table['k'] = 1\n"
        "    del order[0]\n"
        "    first = next(it)\n"
        "    n += 1\n"  # a rebinding, counted as one elsewhere
        "    y = x.reshape(2, -1)\n"  # an array method: no container changed
        "    self.cache.append(1)\n"  # the module's own attribute: not a local
        "    return x\n"
    ).body[0]
    assert isinstance(fn, cst.FunctionDef)
    assert mutated_locals(fn) == {"widths", "dims", "table", "order", "it"}
