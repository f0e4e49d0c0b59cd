"""The name map's walk from a Linen path to an NNX path, for the entries that do not consume a key
the usual way: a variable named by a field (``{weight_name}``), a child sharing the class's scope
(``nn.share_scope``), a module handed in as a constructor argument."""

import pytest

from linen2nnx.namemap import Child, ClassEntry, NameMap


def _map(*entries: ClassEntry) -> NameMap:
    return NameMap({e.name: e for e in entries})


def test_a_field_named_variable_takes_any_name_nothing_else_claims():
    einsum = ClassEntry("m.Einsum", variables={"params": {"{weight_name}": "w", "clip": "clip"}})
    names = _map(einsum)
    assert names.to_nnx_path("m.Einsum", "params", ("gating",)) == ("w",)
    assert names.to_nnx_path("m.Einsum", "params", ("clip",)) == ("clip",)


def test_a_base_class_claims_its_names_before_the_field_named_variable():
    base = ClassEntry("m.Base", variables={"params": {"b": "b"}})
    derived = ClassEntry("m.M", variables={"params": {"{weight_name}": "w"}}, bases=["m.Base"])
    names = _map(base, derived)
    assert names.to_nnx_path("m.M", "params", ("b",)) == ("b",)
    assert names.to_nnx_path("m.M", "params", ("kernel",)) == ("w",)


def test_a_shared_child_receives_the_key_itself():
    einsum = ClassEntry("m.Einsum", variables={"params": {"{weight_name}": "w"}})
    ffw = ClassEntry(
        "m.FeedForward",
        children={
            "gating": Child("einsum_0", "m.Einsum", shared=True),
            "linear": Child("einsum_1", "m.Einsum", shared=True),
        },
    )
    names = _map(einsum, ffw)
    assert names.to_nnx_path("m.FeedForward", "params", ("gating",)) == ("einsum_0", "w")
    assert names.to_nnx_path("m.FeedForward", "params", ("linear",)) == ("einsum_1", "w")
    with pytest.raises(KeyError):
        names.to_nnx_path("m.FeedForward", "params", ("other",))


def test_a_class_sharing_its_own_scope_is_refused():
    loop = ClassEntry("m.M", children={"x": Child("x", "m.M", shared=True)})
    with pytest.raises(KeyError, match="shares its own scope"):
        _map(loop).to_nnx_path("m.M", "params", ("x",))


def test_a_handed_module_is_walked_as_the_class_handed_in():
    norm = ClassEntry("m.Norm", variables={"params": {"scale": "scale"}})
    altup = ClassEntry("m.AltUp", children={"Dense_0": Child("dense_0", "flax.linen.Dense")})
    block = ClassEntry(
        "m.Block", children={"altup": Child("altup", "m.AltUp", handed={"router_norm_layer": "m.Norm"})}
    )
    names = _map(norm, altup, block)
    assert names.to_nnx_path("m.Block", "params", ("altup", "router_norm_layer", "scale")) == (
        "altup",
        "router_norm_layer",
        "scale",
    )
    assert names.to_nnx_path("m.Block", "params", ("altup", "Dense_0", "kernel")) == (
        "altup",
        "dense_0",
        "kernel",
    )
    with pytest.raises(KeyError):  # only below the child it was handed to
        names.to_nnx_path("m.AltUp", "params", ("router_norm_layer", "scale"))


def test_new_entries_round_trip_through_json():
    block = ClassEntry(
        "m.Block",
        children={
            "altup": Child("altup", "m.AltUp", handed={"norm": "m.Norm"}),
            "g": Child("e", "m.E", shared=True),
        },
        variables={"params": {"{weight_name}": "w"}},
    )
    again = NameMap.from_json(_map(block).to_json())
    assert again.classes["m.Block"].children == block.children
    assert again.classes["m.Block"].variables == block.variables


def test_same_named_classes_are_told_apart_by_a_dotted_tail_of_their_module():
    """A file in a folder without ``__init__.py`` is recorded by its short module name (``b``); the
    trace of its class names it ``pc.sub.b``: that class, not the other ``Model`` (before: no class,
    and migrate --trace stopped with "was not migrated by this run")."""
    names = _map(ClassEntry("pc.a.Model", module="pc.a"), ClassEntry("b.Model", module="b"))
    assert names.find_class("Model", "pc.sub.b") == "b.Model"
    assert names.find_class("Model", "pc.a") == "pc.a.Model"
    assert names.find_class("Model", "other") is None  # neither: still ambiguous


def _choice_map(plain_wo: str = "wo") -> NameMap:
    """T5's feed-forward: ``ff`` built as the gated or the plain class on the config."""
    gated = ClassEntry(
        "m.Gated",
        children={n: Child(n, "flax.linen.Dense") for n in ("wi_0", "wi_1", "wo")},
    )
    plain = ClassEntry(
        "m.Plain", children={"wi": Child("wi", "flax.linen.Dense"), "wo": Child(plain_wo, "flax.linen.Dense")}
    )
    layer = ClassEntry("m.Layer", children={"ff": Child("ff", "m.Gated", alternatives=["m.Plain"])})
    return _map(gated, plain, layer)


def test_a_child_the_config_builds_as_one_of_several_classes_walks_each():
    names = _choice_map()
    assert names.to_nnx_path("m.Layer", "params", ("ff", "wi_0", "kernel")) == ("ff", "wi_0", "kernel")
    assert names.to_nnx_path("m.Layer", "params", ("ff", "wi", "kernel")) == ("ff", "wi", "kernel")
    assert names.to_nnx_path("m.Layer", "params", ("ff", "wo", "bias")) == ("ff", "wo", "bias")
    with pytest.raises(
        KeyError, match=r"ff/gate: not in the name map for any of the classes m\.Gated, m\.Plain"
    ):
        names.to_nnx_path("m.Layer", "params", ("ff", "gate"))


def test_classes_that_place_a_shared_name_apart_are_an_error_not_a_guess():
    names = _choice_map(plain_wo="out")
    with pytest.raises(KeyError, match=r"ff/wo/kernel: the classes m\.Gated, m\.Plain, which the config"):
        names.to_nnx_path("m.Layer", "params", ("ff", "wo", "kernel"))


def test_alternatives_survive_the_json_round_trip():
    names = _choice_map()
    again = NameMap.from_json(names.to_json())
    assert again.classes["m.Layer"].children["ff"].alternatives == ["m.Plain"]
    assert "alternatives" not in names.to_json()["classes"]["m.Gated"]["children"]["wo"]
