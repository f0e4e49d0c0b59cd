"""When two classes a config chooses between name their weights alike (migrate/alike_builds.py):
the name map then lists both under one name instead of an L2N-MOD-013."""

from linen2nnx.migrate.alike_builds import alike
from linen2nnx.namemap import Child, ClassEntry, NameMap


def _map(*entries: ClassEntry) -> NameMap:
    return NameMap({e.name: e for e in entries})


def test_names_shared_at_the_same_attribute_are_alike():
    gated = ClassEntry("m.Gated", children={n: Child(n, "flax.linen.Dense") for n in ("wi_0", "wi_1", "wo")})
    plain = ClassEntry("m.Plain", children={n: Child(n, "flax.linen.Dense") for n in ("wi", "wo")})
    assert alike(_map(gated, plain), "m.Gated", "m.Plain")


def test_a_name_placed_apart_is_not_alike():
    affine = ClassEntry("m.Affine", variables={"params": {"scale": "scale", "bias": "bias"}})
    swapped = ClassEntry("m.Swapped", variables={"params": {"scale": "bias", "bias": "scale"}})
    assert not alike(_map(affine, swapped), "m.Affine", "m.Swapped")


def test_children_of_the_same_name_are_compared_class_by_class():
    inner_a = ClassEntry("m.InnerA", variables={"params": {"w": "w"}})
    inner_b = ClassEntry("m.InnerB", variables={"params": {"w": "weight"}})
    a = ClassEntry("m.A", children={"proj": Child("proj", "m.InnerA")})
    b = ClassEntry("m.B", children={"proj": Child("proj", "m.InnerB")})
    assert not alike(_map(inner_a, inner_b, a, b), "m.A", "m.B")
    b_same = ClassEntry("m.B", children={"proj": Child("proj", "m.InnerA")})
    assert alike(_map(inner_a, a, b_same), "m.A", "m.B")


def test_what_the_map_does_not_know_is_not_alike():
    known = ClassEntry("m.A", variables={"params": {"w": "w"}})
    based = ClassEntry("m.B", variables={"params": {"w": "w"}}, bases=["m.Base"])
    assert not alike(_map(known), "m.A", "other.Unknown")  # a class of another file
    assert not alike(_map(known, based), "m.A", "m.B")  # what the base builds is not listed


def test_a_class_against_a_built_in_layer():
    norm = ClassEntry("m.AdaNorm", children={"linear": Child("linear", "flax.linen.Dense")})
    renamed = ClassEntry("m.Odd", children={"linear": Child("proj", "flax.linen.Dense")})
    names = _map(norm, renamed)
    assert alike(names, "flax.linen.LayerNorm", "m.AdaNorm")
    assert not alike(names, "flax.linen.LayerNorm", "m.Odd")
    assert alike(names, "flax.linen.LayerNorm", "flax.linen.RMSNorm")
