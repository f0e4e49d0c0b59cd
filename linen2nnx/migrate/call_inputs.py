"""Which argument of a call feeds one input of the module it applies, found by position or by the
input's name (never by the argument's place among keywords)."""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.dataflow_types import Feat


def passed_input(node: cst.CSTNode, args: tuple[Feat, ...], index: int, arg: str) -> Feat | None:
    """The value a call passes for its callee's input ``index``, whose size argument is ``arg``
    (``<param>_features``): positionally, or by its keyword; None when the call leaves it to its
    default or splats arguments, so that no other argument's size is taken for it."""
    call_args = node.args if isinstance(node, cst.Call) and len(node.args) == len(args) else None
    if call_args is None or any(a.star for a in call_args):
        return None
    positional = sum(1 for a in call_args if a.keyword is None)
    if index < positional:
        return args[index]
    named = [
        k
        for k, a in enumerate(call_args)
        if a.keyword is not None and arg.rstrip("_") == f"{a.keyword.value}_features"
    ]
    return args[named[0]] if len(named) == 1 else None


def input_fed(node: cst.Call, arg_feats: list[Feat], index: int, names: tuple[str, ...]) -> Feat:
    """What ``node`` passes for its callee's input ``index``: the positional argument there, else the
    keyword argument of that input's name (``names``); unknown when neither is known -- an argument
    taken by its place in the call would be another input when the call names its inputs."""
    for k, arg in enumerate(node.args):
        if arg.star:
            return Feat.unknown("arguments unpacked into a call")
        if arg.keyword is None and k == index:
            return arg_feats[k]
        if arg.keyword is not None and index < len(names) and arg.keyword.value == names[index]:
            return arg_feats[k]
    return Feat.unknown("no input" if len(node.args) <= index else "an input passed by keyword")
