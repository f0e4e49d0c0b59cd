"""Numeric parity for module forms beyond single layers: loops, user submodules, params, setup variables.

Each fixture input of tests/fixtures/migrate is a real Linen module; its migrated output (the golden
file) must compute the same function with the converted (perturbed) weights.
"""

import collections
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fixture_parity import assert_parity, build, grad_paths
from fixture_paths import all_cases, fixture
from flax import nnx
from migrate_fixtures import case_trace

from linen2nnx.equivalence import check, perturbed
from linen2nnx.migrate import migrate_source
from linen2nnx.spec import LinenSide, ModelPair, import_file


@dataclasses.dataclass(frozen=True)
class Own:
    """A constructor value each side takes from its own module (``Mixer.GATED``: each file defines
    its own enum, and ``is`` tells them apart)."""

    path: str

    def of(self, module) -> object:
        value = module
        for part in self.path.split("."):
            value = getattr(value, part)
        return value


def _own_values(ctor: dict, module) -> dict:
    return {k: v.of(module) if isinstance(v, Own) else v for k, v in ctor.items()}


#: Another configuration of reshape_config_local's Attn: heads * hd (6) no longer equals d (5).
OTHER_ATTN_CFG = collections.namedtuple("Cfg", "d heads hd")(5, 3, 2)


@dataclasses.dataclass(frozen=True)
class TowerConfig:
    width: int = 4
    depth: int = 3
    dtype: object = jnp.float32


@dataclasses.dataclass(frozen=True)
class ActConfig:
    """A config object read through attributes, as model code outside Flax keeps one."""

    inner: int = 7
    width: int = 4
    act: str = "gelu"


# case -> (class name, constructor kwargs, input shape, extra NNX kwargs from the input)
CASES = {
    "compact_loop": ("Tower", {"config": TowerConfig()}, (2, 5)),
    "stack_keeps_width": ("Model", {"config": TowerConfig()}, (2, 5)),  # the head reads width, loop or not
    "init_applies_head": ("Decoder", {}, (2, 5)),  # the head applied at init only: NNX builds it
    "compact_param": ("Scale", {"features": 3}, (2, 4)),
    "class_decorator": ("Model", {}, (2, 3)),  # a registry decorator kept (with its finding)
    "traced_named_loop": ("Transformer", {}, (2, 5)),  # `layers_{i}` fed a handed embedding: the trace
    "kw_only_fields": ("Model", {}, (2, 4)),  # `_: dataclasses.KW_ONLY`: keyword-only fields after `*`
    "kw_only_one_field": ("Model", {}, (2, 4)),  # field(kw_only=True) on one field: Block(4, 5.0) is shift
    "field_hides_module_method": ("Model", {}, (2, 3)),  # train: bool hides nnx.Module.train(): MOD-016
    "setup_param": ("Affine", {"features": 4}, (2, 4)),
    "view_reaches_fixed_flags": ("SameFlag", {}, (2, 4)),  # one call-time flag for the whole nest: converts
    "setup_local_kwargs": ("FieldStack", {}, (2, 4)),  # a scan in setup() reading fields: converts
    "rnn_drawn_carry": (
        "OnesStart",
        {},
        (2, 5, 3),
    ),  # the keyless carry_init converts; the others are located
    "param_number_init": ("Model", {}, (2, 4)),
    "pooling_submodule": ("Model", {}, (2, 6, 3)),  # nn.pooling.min_pool is nnx.min_pool
    "einsum_no_bias": ("Model", {}, (2, 3, 4)),  # use_bias=False / True literals dropped
    "activation_submodule": (
        "Model",
        {},
        (2, 4),
    ),  # nn.activation.tanh -> nnx.tanh  # lambda key: 2.0 -> an array NNX's [...] reads
    "setup_mlp": ("MLP", {"hidden": 6}, (2, 4)),
    "setup_bound_later": ("Head", {"h": 3}, (2, 4)),  # a size setup() binds below the layer, spelled out
    "concat_leading_axis": ("Tokens", {}, (2, 4)),  # a class token joined along axis 1 of rank-3 parts
    "display_variables": ("MLP", {}, (2, 3)),
    "setup_comprehension_conditional": (
        "Stack",
        {},
        (2, 3),
    ),  # an nnx.List under a config test too  # print(self.dense2.variables) -> print(nnx.state(...))
    "inheritance": ("Wider", {"width": 3}, (2, 5)),
    "inherited_build": ("WithHead", {"width": 4}, (2, 5)),
    "inherited_build_scaled": ("Scaled", {"width": 4}, (2, 5)),
    "inherited_build_tempered": ("Tempered", {"width": 5}, (2, 5)),
    "inherited_passthrough": ("Model", {}, (2, 3)),
    "inherited_passthrough_self": ("SelfAttention", {}, (2, 3, 5)),
    "setup_class_local": ("Stage", {}, (2, 8)),
    "setup_class_local_mixer": ("Mixer", {}, (2, 3, 5)),
    "setup_class_local_clipped": ("Mixer", {"clipped": True}, (2, 3, 5)),
    "subclass_factory_default": ("WideNet", {}, (2, 5)),  # the subclass's default block sizes the head
    "subclass_factory_default_base": ("Net", {}, (2, 5)),
    "inherited_sizes_changed": ("Scaled", {}, (2, 5)),  # overrides that keep the inherited layers' inputs
    "inherited_sizes_changed_proj_only": ("ProjOnly", {}, (2, 5)),
    "inherited_sizes_changed_tanh": ("TanhHooked", {}, (2, 5)),
    "compact_tied": ("Tied", {"vocab": 11, "dim": 4}, (2, 5)),
    "tied_head": ("TiedLM", {}, (2, 5)),  # encoder.variables['params']['tok']['embedding'] -> attributes
    "setup_conditional": ("Head", {"classes": 3}, (2, 5)),
    "tuple_helpers": ("AutoEncoder", {"latents": 3}, (2, 5)),
    "compact_dense": ("MyDense", {"features": 3}, (2, 5)),
    "field_kinds": ("Head", {"classes": 3}, (2, 5)),
    "compact_seq_loop": ("MLP", {}, (2, 5)),
    # module-level partials of Linen layers, used in @nn.compact and in setup()
    "module_level_partial": ("Head", {}, (2, 6)),
    "module_level_alias": ("Head", {}, (2, 3, 6)),  # Attention = nn.MultiHeadDotProductAttention; rank kept
    # a size written over several lines inside the call's brackets, read by the next layer
    "multiline_size_expression": ("Model", {}, (2, 6, 6, 3)),
    # an activation picked by a config string into a local, in each of two branches or an `a if c else b`
    "activation_chosen_by_config": ("ActorCritic", {"action_dim": 3, "activation": "relu"}, (2, 5)),
    # a backbone returning a dict; heads read its entries (one head applied to two of them)
    "dict_output_entry": ("Classifier", {}, (2, 6, 6, 3)),
    # a block's output size is an attribute its setup() binds from the config: spelled out by the caller
    "block_output_setup_attribute": ("LM", {}, (2, 5)),
    # a field annotated `nn.Embed`, handed the model's shared embedding: sized from its `features`
    "layer_field_annotation": ("Model", {}, (2, 5)),
    # `self.q_proj, self.k_proj, self.v_proj = dense(), dense(), dense()` in setup()
    "setup_tuple_assignment": ("Attention", {}, (2, 5)),
    # one attribute built in the branches of a config test: each branch's sizes
    "setup_branch_sizes": ("Model", {}, (2, 5)),
    # a tied head reading the table two submodules down, by attributes and by Linen names
    "tied_embedding_chain": ("LM", {}, (2, 5)),
    # a loop's names chosen by config: one module named `wi`, or `wi_0`, `wi_1`, ... (T5X's MlpBlock)
    "loop_single_name": ("MlpBlock", {}, (2, 5)),
    "loop_single_name_gated": ("MlpBlock", {"activations": ("relu", "linear")}, (2, 5)),
    "setup_branch_sizes_narrow": ("Model", {"wide": False, "pool": False}, (2, 5)),
    # a projection built only when a field `is not None`: the head's size chosen by that test
    "optional_projection": ("Head", {}, (2, 5)),
    "optional_projection_set": ("Head", {"representation_size": 6}, (2, 5)),
    "optional_projection_narrow": ("Widen", {}, (2, 5)),
    "optional_projection_wide": ("Widen", {"wide": True}, (2, 5)),
    "optional_projection_nested": ("Nested", {}, (2, 5)),
    "optional_projection_nested_set": ("Nested", {"rep": 1, "b": False}, (2, 5)),
    # a __post_init__ hook run in __init__ after the fields: a check, or a size derived from a field
    "post_init": ("Head", {}, (2, 5)),
    "post_init_embedder": ("Embedder", {"width": 6}, (2, 5)),
    "compact_shape_local": ("Block", {"hidden": 4, "deterministic": True}, (2, 5)),
    "param_override": ("Net", {}, (2, 8, 8, 1)),  # StdConv(nn.Conv) overriding `param`
    # the override names what it forwards: `def param(self, name, init_fn, *init_args)`
    "param_override_named_args": ("Root", {}, (2, 8, 8, 3)),
    "shadowed_globals": ("Net", {}, (2, 5)),  # the override reads module-level `args` and `kwargs`
    "submodule_local_size": ("Stage", {}, (2, 5)),
    "submodule_setup_local_size": ("Encoder", {}, (2, 5)),  # a setup() local sizes the block's output
    "submodule_input_local_size": (
        "Stage",
        {},
        (2, 5),
    ),  # Unit's `nmid` from x.shape[-1] in Stage's terms  # Unit's `nout` local spelled out in Stage
    "sharding_constraints": ("Block", {}, (2, 3, 4)),  # wlc / with_sharding_constraint keep the size
    "written_axes": ("Upsample", {}, (2, 4, 4, 3)),  # resize / pad to a shape that ends with `c`
    "written_axes_pool": ("Pool", {}, (2, 3, 4)),  # a probe of shape (1, 1, d), tiled by (n, 1, 1)
    "shape_unpack": ("MlpBlock", {}, (2, 3, 5)),  # `n, l, d = x.shape`: d is the input size
    "shape_unpack_project": ("Project", {}, (2, 5)),  # `b, c = x.shape` after a layer: c is its width
    "shape_unpack_scaled": ("Scaled", {}, (2, 5)),  # `_, d = x.shape` read at call time only
    "compact_dense_nobias": ("MyDense", {"features": 3, "use_bias": False}, (2, 5)),
    "compact_loop_tail": ("MLP", {}, (2, 5)),
    "compact_loop_tail_short": ("MLP", {"widths": (3,), "depth": 1}, (2, 5)),
    "compact_loop_tail_empty": ("MLP", {"depth": 0}, (2, 5)),  # Block(7) reads the last Dense's width
    "compact_matmul": ("Proj", {}, (2, 5)),
    "compact_matmul_setup": ("SetupProj", {}, (2, 5)),
    "custom_cell": ("Encoder", {}, (2, 6, 3)),  # an nn.RNNCellBase subclass inside nn.RNN
    "partial_local": ("Gate", {}, (2, 5)),  # dense = partial(nn.Dense, ...); dense(name=...)(x)
    "partial_later_class": ("Attention", {}, (2, 5, 4)),  # partial(Projection, ...) of a class below
    "setup_partial": ("Encoder", {}, (2, 5)),  # dense = partial(nn.Dense, ...); self.inp = dense(6)
    "factory_field_block": ("Net", {}, (2, 8, 8, 3)),  # self.conv(...)(x) of conv: ModuleDef; a shortcut
    "flatten_input": ("Classifier", {}, (2, 4, 4, 3)),  # x.reshape((x.shape[0], -1)) of the input
    "flatten_input_steps": ("PerStep", {}, (2, 3, 4, 5)),  # two leading axes kept
    "import_alias": ("Norms", {"features": 4}, (2, 5)),  # `from flax import linen`: linen.Dense, ...
    "traced_flatten": ("Classifier", {}, (2, 8, 8, 3)),  # a flatten's size from the trace: 16 * channels
    "traced_product": ("Block", {}, (2, 5)),  # the traced size is num_heads * head_dim
    "traced_nest": ("Mixer", {}, (2, 5)),  # loop-with-local Blocks applied by a function: traced width
    "traced_nest_deep": ("Mixer", {"width": 4, "depth": 3, "layers": 1}, (2, 7)),
    "traced_literal": ("Spectral", {}, (2, 10)),  # --unsafe-fixes: the traced literal 6
    "is_initializing": ("Probe", {}, (2, 5)),  # --unsafe-fixes: self.is_initializing() -> False
    "explicit_names": ("Net", {}, (2, 5)),  # name='norm-pre-head', '0', 'bbox_pred.0' (compact and setup)
    "pure_helpers": ("CausalMix", {}, (2, 5, 3)),  # nn.dtypes.promote_dtype, dot_product_attention kept
    "setup_match": ("Block", {"features": 3}, (2, 5)),  # `match` in setup(): the first case
    "factory_function": ("MLP", {"hidden": 4}, (2, 3)),  # dense(...)(x), norm(...)(x): module-level factories
    "optional_input": ("Encoder", {}, (2, 5)),  # --unsafe-fixes: a layer built when an input is None
    "optional_input_sized": ("Context", {}, (2, 5)),  # no context, no context size: its Dense is None
    "optional_inputs": ("Model", {}, (2, 5, 4)),  # layers built only when an optional input is (not) given
    "einops_patterns": ("Tokens", {}, (2, 4, 4, 3)),  # einops.rearrange / reduce keep the last axis
    "axis_order": ("Mixer", {}, (2, 5, 6)),  # einsum / transpose / swapaxes keeping the last axis
    "axis_order_attention": ("Attention", {}, (2, 5, 8)),  # reshapes to leading setup() sizes
    "late_import": ("Scaled", {}, (2, 5)),  # an import below the classes: nnx is imported above them
    "initializer_reads_input_width": ("Head", {}, (2, 5)),  # stddev=h.shape[-1] ** -0.5 -> nnx.initializers
    "enumerate_mlp_dropout": ("MLP", {}, (2, 5)),  # enumerate loop; a Dropout on some steps only
    "setup_comprehension": ("Stack", {}, (2, 4)),  # [Block(..., name=f"block.{i}") for i in range(n)]
    # name='0', then name=str(i) over range(1, n) (CLIP's ResNet layers): '1', '2' are elements 0, 1
    "compact_loop_str_names": ("Layer", {}, (2, 5)),
    "top_level_initializers": ("Head", {}, (2, 5)),  # nn.zeros / nn.ones -> nnx.initializers
    # 'encoderblock_' + str(i) and 'Block_{:02d}'.format(i): the f-strings they equal
    "compact_loop_name_spellings": ("Encoder", {}, (2, 5)),
    "setup_comprehension_zip": ("Stack", {}, (2, 5)),
    "setup_lists_zipped": ("DownBlock", {}, (2, 5)),  # for resnet, attn in zip(self.resnets, self.attentions)
    "setup_lists_zipped_deep": ("DownBlock", {"depth": 3}, (2, 5)),
    "setup_comprehension_name_spellings": (
        "Stack",
        {},
        (2, 5),
    ),  # 'layer_' + str(i), 'proj_{}'.format(i)  # for i, kind in zip(range(n), kinds)
    "setup_comprehension_zip_short": ("Stack", {"depth": 5}, (2, 5)),  # the zip stops at the kinds
    "setup_loop_lists": ("Stack", {}, (2, 4)),  # blocks.append(Block(...)) in a loop, self.blocks = blocks
    "setup_match_gated": ("Block", {"features": 3, "mixer": Own("Mixer.GATED")}, (2, 5)),  # and the second
    "param_keywords": ("Layer", {}, (2, 5)),  # self.param(name=..., init_fn=...), init kwargs, unbox=True
    "frozen_dict": ("Scaled", {}, (2, 5)),  # nn.FrozenDict kept (flax.core.FrozenDict itself)
    "unbox_if_boxed": ("Head", {}, (2, 5)),  # if isinstance(v, nn.LogicallyPartitioned): v = v.unbox() kept
    "box_strip_forms": ("Scaled", {"features": 3}, (2, 4)),  # v.value if isinstance(v, Box) else v kept
    "splat_locals": ("Fp8Dense", {}, (2, 3)),  # self.variable(COL, name, *args) of locals; fp8_ops kept
    "splat_locals_compact": ("CompactScales", {}, (2, 5)),  # the same locals in @nn.compact
    "conv_helpers": ("ModConv", {}, (2, 6, 6, 3)),  # nn.linear._conv_dimension_numbers & co. kept
    "compact_loop_offset": ("Offset", {}, (2, 5)),  # for i in range(1, depth): enumerate; factory lambda
    "lifted_auto_names": ("Lifted", {}, (2, 6)),  # CheckpointBlock_0, ScanStep_0 beside Block_0
    "compact_loop_chain": ("Stages", {}, (2, 5)),  # later loops extend the first loop's list of Blocks
    "compact_loop_chain_short": ("Stages", {"depths": (0, 1, 2)}, (2, 5)),  # an empty first loop
    "compact_loop_chain_gap": (
        "Stages",
        {"depths": (2, 0, 1)},
        (2, 5),
    ),  # Block(12) reads the first loop's width
    "compact_loop_chain_field": ("Net", {}, (2, 5)),  # a factory field's blocks in two loops
    "compact_loop_chain_wide": (
        "Net",
        {"block_cls": Own("Wide"), "depths": (1, 3)},
        (2, 5),
    ),  # ... as Wide_{k}
    "compact_loop_chain_mixed": ("Mixed", {}, (2, 5)),  # two classes per iteration, two lists extended
    "compact_loop_after_others": ("Stem", {}, (2, 5)),  # a loop's Dense_{k+2} after Dense_0, Dense_1
    "compact_loop_after_others_gated": ("Gated", {"depth": 3}, (2, 5)),  # both under `if self.embed`
    "compact_loop_after_others_empty": ("Gated", {"depth": 0}, (2, 5)),  # an empty loop after Dense_0
    # a label layer under `if self.c_dim > 0` starts the loop's list: Dense_k is element k either way
    # modules under an `if` on the loop's names: the loop replayed in __init__ with its `if`s
    "loop_tested_modules": ("NormedMLP", {}, (2, 5)),
    "loop_tested_modules_one": ("NormedMLP", {"depth": 1}, (2, 5)),  # no norm at all
    "loop_tested_modules_stages": ("Stages", {}, (2, 8, 8, 3)),
    "loop_tested_modules_stage": ("Stages", {"widths": (4,)}, (2, 8, 8, 3)),
    "loop_tested_modules_alternating": ("Alternating", {"depth": 5}, (2, 5)),
    "loop_tested_modules_last": ("LastByLocal", {}, (2, 5)),  # the test reads a local of the method
    # auto-named norms under tests in separate `if`s: a static name where the count before is static
    "opposite_ifs": ("Block", {}, (2, 5)),
    "opposite_ifs_post": ("Block", {"pre_norm": False}, (2, 5)),
    "auto_names_apart": ("PrePost", {}, (2, 5)),
    "auto_names_apart_post": ("PrePost", {"pre_norm": False}, (2, 5)),
    "auto_names_apart_narrow": ("SwitchThenLoop", {}, (2, 5)),
    "auto_names_apart_wide": ("SwitchThenLoop", {"wide": True, "depth": 3}, (2, 5)),
    "compact_loop_after_others_labelled": ("Labelled", {"c_dim": 3}, (2, 5)),
    "compact_loop_after_others_unlabelled": ("Labelled", {"c_dim": 0}, (2, 5)),
    "compact_loop_after_others_tagged": ("Tagged", {"tags": True, "depth": 3}, (2, 5)),
    "compact_loop_after_others_untagged": ("Tagged", {"tags": False}, (2, 5)),
    # initial values computed from config in several statements (tuple unpacking, `if` on a field, ...)
    "static_init_locals": (
        "Mapping",
        {"in_features": 5, "features": 3, "key": jax.random.PRNGKey(1)},
        (2, 5),
    ),
    "static_init_locals_hidden": (
        "Mapping",
        {"in_features": 5, "features": 3, "hidden": 4, "zero_strength": True, "key": jax.random.PRNGKey(2)},
        (2, 5),
    ),
    "static_init_locals_gain": ("Gain", {"features": 5, "use_bias": True}, (2, 5)),
    "compact_loop_from_start": ("Pyramid", {}, (2, 5)),  # for level in range(2, top): list counted from 0
    "init_value_input_shape": ("FromImage", {"features": 5}, (2, 4, 4, 3)),  # x_shape: replayed on a stand-in
    "init_value_input_shape_nobias": ("FromImage", {"features": 5, "use_bias": False}, (2, 4, 4, 3)),
    "init_value_input_shape_inline": ("ConvIn", {"features": 4}, (2, 5, 5, 3)),  # (3, 3, x.shape[3], f)
    "helper_blocks": ("Tower", {}, (2, 5)),  # self._stage(x, features=6, depth=2, ...) replayed in place
    "helper_blocks_deep": ("Tower", {"deep": True, "scale": 0.5}, (2, 5)),  # the layers `if self.deep` adds
    "broadcast_experts": ("MoE", {}, (6, 3)),  # the experts' width: the broadcast input's, not num_experts
    "sow_own_collection": ("Router", {}, (6, 4)),  # a sown "losses" collection, compared as sown values
    "kept_function_result_method": (
        "CausalMix",
        {},
        (2, 5, 3),
    ),  # dot_product_attention_weights(...).squeeze(1)
    "helper_tuple_returns": ("Router", {}, (4, 5)),  # gates, aux = self._gates(...): the guard's return
    "helper_tuple_returns_noisy": ("Router", {"deterministic": False}, (4, 5)),  # the final if / else
    "helper_tuple_returns_two": ("Router", {"deterministic": False, "num_experts": 2}, (4, 5)),
    "setup_helpers": ("Block", {"features": 3}, (2, 5)),  # self._setup_dense() replayed in __init__
    "setup_helpers_gated": ("Block", {"features": 3, "gated": True}, (2, 5)),  # the other helper's layers
    "setup_helpers_plain": ("Block", {"features": 3, "post_norm": False}, (2, 5)),  # no norm bound
    "callee_rank": ("ViT", {}, (2, 4, 4, 3)),  # x[:, 0] of what a class of the file returns, rank kept
    "input_rank_only": (
        "Block",
        {},
        (2, 3, 4),
    ),  # a submodule reading its input's rank alone: x_shape of ones
    "input_dtype_param": ("MAPHead", {}, (2, 3, 6)),  # self.param(..., x.dtype): a float32 keyword argument
    "input_dtype_param_affine": ("Affine", {}, (2, 5)),
    "layer_dtype_param": ("ViT", {}, (2, 4, 4, 3)),  # param in x.dtype of Conv(dtype=self.dtype): self.dtype
    "layer_dtype_param_tokens": ("Tokens", {}, (2, 4)),  # of a Dense without dtype=: the input's (float32)
    "branch_unbound_local": ("Block", {}, (2, 5)),  # locals bound only under the test that reads them
    "branch_unbound_local_plain": ("Block", {"project": False, "pre_norm": False}, (2, 5)),
    "broadcast_functions": ("Gate", {}, (2, 5)),  # jnp.where(mask, h, 0.0), jnp.maximum(0.0, h), lax.max
    "reduction_table": ("Pool", {}, (2, 3, 4)),  # {'gap': jnp.mean, 'gmp': jnp.max, ...}[self.classifier]
    "reduction_table_max": ("Pool", {"classifier": "gmp"}, (2, 3, 4)),
    "reduction_table_token": ("Pool", {"classifier": "token"}, (2, 3, 4)),
    "method_jit": ("Model", {}, (2, 5)),  # nn.jit on methods -> nnx.jit, self dropped from static args
    "method_jit_scaled": ("Scaled", {"features": 3}, (2, 4)),
    "branch_static_local": ("Heads", {}, (2, 6)),  # head_dim replayed from `qkv // num_heads` in __init__
    "branch_static_local_dim": ("Heads", {"head_dim": 3, "rescale_logits": True}, (2, 6)),  # the others
    "loop_over_input_axis": ("PerToken", {}, (2, 3, 4)),  # `for i in range(x.shape[1])`: x_shape
    "stateless_call_time_scaled": ("Scaled", {}, (2, 5)),  # the config part of a test kept
    "stateless_call_time_tagged": ("Tagged", {}, (2, 5)),  # one attribute for one name on two paths
    "stateless_call_time_scaled_on": ("Scaled", {"scale": 2.0}, (2, 5)),
    "stateless_call_time": ("Net", {}, (2, 5)),  # IdentityLayer / Dropout under `if train:`: built always
    "branch_pairs": ("Pair", {}, (2, 5)),  # two modules in each branch: both built in each
    "branch_pairs_c": ("Pair", {"c": True}, (2, 5)),
    "branch_pairs_guard": ("GuardPair", {}, (2, 5)),
    "branch_pairs_guard_c": ("GuardPair", {"c": True}, (2, 5)),
    "branch_pairs_nested": ("NestedPair", {}, (2, 5)),
    "branch_pairs_nested_c": ("NestedPair", {"c": True}, (2, 5)),
    "branch_pairs_nested_off": ("NestedPair", {"a": False}, (2, 5)),
    "loop_growing_shape_arg": ("Keeping", {}, (2, 5)),  # Dense(x.shape[-1]) in a loop keeping x's width
    "branch_shape_unpack": ("ViT", {}, (2, 4, 4, 3)),  # (1, 1, c) of the second `n, h, w, c = x.shape`
    "branch_shape_unpack_pooled": ("ViT", {"use_tokens": False}, (2, 4, 4, 3)),
    "stateless_other_build": ("Head", {}, (2, 3, 5)),  # pre_logits: IdentityLayer, no weights ...
    "loop_over_sum": ("Joined", {}, (2, 5)),  # (self.widths + self.extra)[i - 1]
    "setup_frozen_values": ("Fine", {}, (2, 5)),  # a tuple of parameters, a value of the config
    "setup_array_property": ("RotaryAttention", {}, (2, 5, 8)),  # built under eval_shape: no tracer leak
    "setup_array_property_tables": ("AddPositions", {}, (2, 7, 3)),
    "setup_array_property_causal": ("CausalMixer", {}, (2, 5, 4)),  # a mask under a config test ...
    "setup_array_property_open": ("CausalMixer", {"causal": False}, (2, 5, 4)),  # ... not taken
    "setup_array_property_declared": ("DeclaredTable", {}, (2, 3)),  # an init=False field's own name
    "factory_field_other_binding": ("Net", {}, (2, 5)),  # the default class: BlockA_0 ...
    "factory_field_other_binding_b": ("Net", {"block_cls": Own("BlockB")}, (2, 5)),  # ... or BlockB_0
    "cell_carry_bound": ("StepLSTM", {}, (2, 5, 3)),  # cell.initialize_carry(rng, shape) of its own cell
    "cell_carry_bound_own": ("StepOwnCell", {}, (2, 5, 3)),  # ... of a cell class of the run
    "nested_layer_locals": ("Encoder", {}, (2, 5, 3)),  # cell = nn.LSTMCell(h); nn.RNN(cell)
    "attention_fn_default": ("Encoder", {}, (2, 5, 4)),  # attention_fn=nn.dot_product_attention dropped
    "dot_general_default": ("Block", {}, (2, 5, 3)),  # jax's dot_general / conv, or None: dropped
    "conv_mask_array": ("CausalConv", {}, (2, 6, 6, 3)),  # mask=nnx.data(taps): data, never a leaked tracer
    "conv_mask_array_stem": ("MaskedStem", {}, (2, 6, 6, 3)),
    "stack_last_axis": ("LastAxisScan", {}, (2, 8)),  # params (and the Dropout's RNG scalars) on axis -1
    "setup_head_under_test": ("Head", {}, (2, 4, 4, 4)),  # sigma_head never created: kept from init
    "setup_head_under_test_on": ("Head", {"learn_sigma": True}, (2, 4, 4, 4)),  # ... or converted
    "nested_layer_locals_bi": ("BiEncoder", {}, (2, 5, 3)),  # ... a chain into nn.Bidirectional
    "nested_layer_locals_seq": ("Head", {}, (2, 3)),  # ... an element of nn.Sequential's list
    "handed_array": ("HandsInitializer", {}, (2, 5)),  # an initializer and a dtype handed on: no arrays
    "shape_test_list_strides": ("Shortcut", {"strides": [1, 1]}, (2, 6, 6, 3)),  # a list: no shortcut
    "shape_test_list_strides_two": ("Shortcut", {"strides": [2, 2]}, (2, 6, 6, 3)),  # ... or one
    # a table from a function, a numpy grid
    "layer_attribute_renamed": ("Widen", {}, (2, 3)),  # self.proj.features -> self.proj.out_features
    "layer_attribute_renamed_halves": ("Halves", {}, (2, 3)),
    "layer_attribute_renamed_alias": ("AliasHalves", {}, (2, 3)),  # m = self.proj; m.features
    "branch_shape_first": ("Hidden", {}, (2, 5)),  # h = 4 * x.shape[-1] when hidden is None
    "branch_shape_first_given": ("Hidden", {"hidden": 7}, (2, 5)),
    "branch_shape_first_scale": ("Scale", {}, (2, 5)),
    "branch_shape_first_shared": ("Scale", {"per_channel": False}, (2, 5)),
    "setup_list_may_be_empty": ("Tower", {}, (2, 5)),
    "setup_list_may_be_empty_none": ("Tower", {"n": 0}, (2, 5)),  # the head sees inp's 3
    "setup_list_may_be_empty_pair": ("Pair", {}, (2, 5)),
    "loop_tested_first": ("OddNorms", {}, (2, 5)),  # LayerNorm_0 is 4 wide: built at i = 1
    "loop_tested_first_later": ("LaterNorms", {}, (2, 5)),
    "caller_after_loop": ("Model", {}, (2, 6)),  # head sized (5, 4)[-1] if len((5, 4)) > 0 else in_features
    "partial_input_size": ("Heads", {}, (2, 6)),  # a partial of DenseGeneral sized by x.shape[-1]
    "attribute_clashes": ("ParamLikeChild", {}, (2, 5)),
    "attribute_clashes_method": ("ChildLikeMethod", {}, (2, 5)),  # the method normalises the child's output
    "attribute_clashes_api": ("ModuleApiNames", {}, (2, 5)),
    "einsum_output": ("KernelAxis", {}, (2, 5)),  # the kernel's h after 'bd,dh->bh'
    "einsum_output_starred": ("StarredZeros", {}, (2, 5)),  # zeros((b, *self.shape)) is shape[-1] wide
    "sequential_elementwise": ("ReluInside", {}, (2, 5)),  # relu / gelu between the layers keep the width
    "sequential_of_blocks": ("Stack", {}, (2, 5)),  # Lin(2) sized by Lin(self.hidden)'s output
    "stack_size_call_time": ("Ensemble", {}, (2, 5)),  # axis_size=self.members converts
    "loop_over_sum_repeated": ("Repeated", {}, (2, 5)),  # ((4,) * self.depth)[-1] ...
    "loop_over_sum_empty": ("Repeated", {"depth": 0}, (2, 5)),  # ... or the input's, with no element
    "stateless_other_build_dense": ("Head", {"representation_size": 4}, (2, 3, 5)),  # ... or a Dense
    "loop_may_not_run": ("Tower", {}, (2, 5)),  # the head after a loop of layers reads their width ...
    "loop_may_not_run_empty": ("Tower", {"depth": 0}, (2, 5)),  # ... or, with no layer, the stem's
    "loop_may_not_run_widths": ("Widths", {}, (2, 5)),  # enumerate(self.widths): self.widths[-1] ...
    "loop_may_not_run_no_widths": ("Widths", {"widths": ()}, (2, 5)),  # ... or the stem's width
    "loop_may_not_run_proj": ("ProjThenLoop", {"depth": 0}, (2, 5)),  # a choice of choices
    "loop_may_not_run_proj_plain": ("ProjThenLoop", {"depth": 0, "proj": False}, (2, 5)),
    "loop_may_not_run_proj_deep": ("ProjThenLoop", {}, (2, 5)),
    "early_return": ("Guard", {}, (2, 5)),  # layers after `if not self.use_head: return x`
    "early_return_off": ("Guard", {"use_head": False}, (2, 5)),  # ... not built
    "early_return_names": ("Head2", {}, (2, 5)),  # auto-names counted from the branch that goes on
    "early_return_names_small": ("Head2", {"small": True}, (2, 5)),
    "early_return_sized": ("Early", {}, (2, 5)),  # the branch that returns does not size the head
    "early_return_sized_rep": ("Early", {"rep": 3}, (2, 5)),
    "setup_none_first": ("Head", {"classes": 3}, (2, 5)),  # self.norm = None, then the layer: nnx.data(None)
    "setup_none_first_plain": ("Head", {"classes": 3, "use_norm": False, "gate": True}, (2, 5)),
    "setup_none_first_tower": ("Tower", {"features": 4, "deep": True}, (2, 5)),  # annotated, unpacked
    "setup_none_first_summary": ("Summary", {"classes": 3}, (2, 5)),  # identity, then nnx.data(layer)
    "setup_none_first_identity": ("Summary", {"classes": 3, "use_proj": False}, (2, 5)),  # stays a function
    "setup_none_first_param": ("Affine", {"features": 3}, (2, 5)),  # self.bias is not None: the Param
    "setup_none_first_no_param": ("Affine", {"features": 3, "use_bias": False}, (2, 5)),  # ... or None
    "index_known_rank": ("Tokens", {}, (2, 4, 4, 3)),  # x[:, 0] of a value of rank 3: the hidden size
    "reshape_written_axis": ("Attn", {}, (2, 3, 4)),  # x.shape[:2] + (self.inner,): the written size
    "reshape_config_local": ("Attn", {}, (2, 3, 4)),  # c = self.cfg; q.reshape(b, t, c.heads * c.hd) ...
    "reshape_config_local_other": ("Attn", {"cfg": OTHER_ATTN_CFG}, (2, 3, 4)),  # ... in any config
    "input_keyword": ("Model", {}, (2, 5)),  # self.mix(x, other=..., scale=...): `other` sized by name
    "input_keyword_first": ("Model", {}, (2, 5)),  # self.mix(other=..., x=...): `x` sized by name too
    "attention_kv_features": ("CrossKeyword", {}, (2, 3, 5)),  # in_kv_features from inputs_kv=
    "held_submodule": ("Stack", {}, (2, 3, 4)),  # rel = Embed(...) handed to every layer: self.relpos_bias
    "handed_module": ("Model", {}, (2, 4)),  # the embedding handed to the encoder sizes its layers
    "class_attribute_reads_field": ("Scaled", {}, (2, 5)),  # scale = Scale(factor * 1.5) in the body
    "kw_only_class_keyword": ("Big", {"depth": 2, "extra": 3}, (2, 5)),  # class Big(Base, kw_only=True)
    "rank_guard": ("SqueezeAndExcite", {}, (2, 3, 3, 4)),  # if inputs.ndim != 4: raise -> mean keeps features
    "rank_guard_pool": ("Pool", {}, (2, 3, 5)),  # assert tokens.ndim == 3
    "rank_guard_unpacked": ("Stem", {}, (2, 4, 4, 3)),  # n, h, w, c = images.shape
    "rank_guard_squeezed": ("Squeezed", {}, (2, 5)),  # h.squeeze(-2) keeps the features
    "layer_dtype_param_after_stem": ("HybridViT", {}, (2, 8, 8, 3)),  # embedding after a stem: float32
    "helper_layer_chain": ("Model", {}, (2, 4)),  # w = Dense(3)(y); w = Dense(3)(w) in a tuple helper
    "submodule_width_from_input": ("Model", {}, (2, 4)),  # Block(features=x.shape[-1] + 1), then its width
    "setup_local_sizes": ("Late", {}, (2, 5)),  # the head built before `w = 6` reads the width as (6)
    "compact_method_same_input": (
        "Model",
        {},
        (2, 3, 4),
    ),  # body(self, u) fed __call__'s x unchanged: x_shape
    "compact_method_own_input": ("Model", {}, (2, 4)),  # x.shape[-1] of the compact method's own x
    "field_holds_modules": ("Model", {}, (2, 3)),  # embedders: Mapping[str, nn.Module] kept as nnx.data
    "position_embedding_unpack": ("AddPositionEmbs", {}, (2, 5, 4)),  # _, length, width = x.shape: x_shape
    "rebound_shape_unpack": ("ViT", {}, (2, 4, 4, 3)),  # n, h, w, c = x.shape twice: the second c
    "setup_param_declared_field": ("Classifier", {}, (2, 3, 5)),  # embedding: field(init=False)
    "param_named_by_field": ("Proj", {}, (2, 4)),  # self.param(self.weight_name, ...): map {weight_name}
    "share_scope": ("Block", {}, (2, 4)),  # nn.share_scope(self, child): the child's names at this level
    "setup_handed_instance": ("Block", {}, (2, 3)),  # AltUp(norm=Norm()) in setup: adopted as altup/norm
    "setup_branch_classes": ("Same", {}, (2, 4)),  # one class in both branches: no L2N-MOD-013
    "setup_branch_classes_gated": ("FeedForward", {}, (2, 4)),  # classes alike: the map lists both
    "setup_branch_classes_plain": ("FeedForward", {"gated": False}, (2, 4)),  # ... through the alternative
    "compact_class_choice": (
        "Encoder",
        {},
        (2, 3),
    ),  # block = BlockA under `if self.kind == 'a'`, else BlockB
    "compact_class_choice_b": ("Encoder", {"kind": "b"}, (2, 3)),  # ... the other branch: BlockB's weights
    "compact_class_choice_stack": ("Stack", {}, (2, 4)),  # auto-named: BlockB_0, BlockB_1
    "compact_class_choice_wide": ("Stack", {"wide": True}, (2, 3)),  # Wide_0, Wide_1: out_features read
    "rank_through_blocks": ("ViT", {}, (2, 4, 4, 3)),  # act field, param shape in a local: x[:, 0] sized
    "rebound_shape_unpack_config": ("ConfigFirst", {}, (2, 4, 4, 3)),  # c = self.hidden // 2 unread
    "rebound_shape_unpack_token": ("ClassToken", {}, (2, 4, 4, 3)),  # n, l, c = x.shape after, c unread
    "reduction_axis_range": ("GapHead", {"width": 4, "num_classes": 3}, (2, 4, 4, 3)),  # range(1, x.ndim - 1)
    "reduction_axis_range_max": ("MaxHead", {"width": 4}, (2, 3, 3, 2)),  # x.max(axis=...len(x.shape) - 1)
    "attention_kv_features_positional": ("CrossPositional", {}, (2, 3, 5)),  # from inputs_k= / inputs_v=
    "attention_kv_loop": ("Decoder", {}, (2, 3, 5)),  # blocks in a loop attend to one encoder output
    "caller_local_same_name": ("Model", {"config": ActConfig()}, (2, 5)),  # both spell their local `config`
    "own_variables": ("Scale", {}, (2, 5)),  # self.variables["params"]["gain"] -> self.gain[...]
    "tied_apply": ("TiedLM", {}, (2, 5)),  # lm_head.apply({"params": {"kernel": emb.T}}, h): nnx.merge
    "tied_apply_untied": ("TiedLM", {"tie": False}, (2, 5)),  # the head's own kernel
    "tied_embedding": ("LM", {"vocab": 11, "features": 4}, (2, 5)),  # the table read through the encoder
    "activation_table": ("Mlp", {"cfg": ActConfig()}, (2, 5)),  # self.act = ACTS[self.cfg.act] in setup
    "activation_table_helper": ("Mlp", {"cfg": ActConfig(act="swish_ish")}, (2, 5)),  # a function of the file
    "conditional_head": ("Backbone", {}, (2, 6, 6, 3)),  # the head's unknown size: None, no head built
    "branch_auto_names_nested": ("Nested", {}, (2, 3)),  # same condition: converted (Uneven: kept as Linen)
    "branch_auto_names": ("Head", {}, (2, 3)),  # Dense_0 in either branch, then Dense_1
    "branch_auto_names_wide": ("Head", {"wide": True}, (2, 3)),
    "norm_function": ("Net", {}, (2, 5)),  # norm(x, train) replayed; x_shape per traced Block
    "norm_function_weights": (  # the branch that takes its initialiser from the weights: built too
        "Block",
        {
            "features": 4,
            "down": True,
            "weights": {"first": {"scale": [2.0] * 4}, "down": {"scale": [0.5] * 4}},
        },
        (2, 5),
    ),
    "loop_list_previous_width": ("Stages", {}, (2, 5)),  # each block reads the one before: list built lazily
    "loop_list_previous_width_wide": ("Stages", {"block": Own("Wide")}, (2, 5)),  # outputs 2 * features
    "rebound_axis": ("AxisScale", {}, (2, 3, 4)),  # axes bound twice, both replayed on the stand-in
    "rebound_axis_pair": ("AxisScale", {"axis": (1, -1)}, (2, 3, 4)),
    "branch_local_size": ("Head", {}, (2, 5)),  # a local bound once in each branch of an if on config
    "branch_local_size_wide": ("Head", {"preset": "wide", "classes": 6}, (2, 5)),
    "branch_local_size_narrow": ("Head", {"preset": "narrow"}, (2, 5)),
    "loop_local_arg": ("Tower", {}, (2, 5)),  # a loop local from the index and config: in the list
    "loop_local_arg_scales": ("Tower", {"scales": (0.5, 0.25, 0.125, 1.0)}, (2, 5)),
    "loop_carried_local": ("Disc", {}, (2, 6, 6, 3)),  # filters after the loop: its last value
    "loop_carried_local_unrun": ("Disc", {"mults": ()}, (2, 6, 6, 3)),  # no block: the value before
    "loop_carried_local_halves": ("Disc", {"mults": (1.5, 0.5)}, (2, 6, 6, 3)),  # int() of the last
    "loop_carried_local_widths": ("Widths", {}, (2, 5)),  # over the sequence, a local reading it
    "loop_carried_local_widths_unrun": ("Widths", {"mults": ()}, (2, 5)),
    "local_dict_kwargs": ("MlpBlock", {}, (2, 5)),  # nn.Dense(d, **inits) of a local dict(...): kept
    "local_dict_kwargs_plain": ("MlpBlock", {"zero_head": False}, (2, 5)),  # the empty dict's branch
    "loop_local_alias": ("Encoder", {}, (2, 3, 5)),  # block = Block(name=f"block_{i}"); x, aux = block(x)
    "loop_local_alias_scan": ("Encoder", {"scan": True}, (2, 3, 5)),  # the nn.scan branch beside it
    "tuple_returns": ("Model", {}, (2, 5)),  # sizes read through (h, x), outs[0], outs[1:], *rest
    "output_objects": ("Model", {}, (2, 5)),  # sizes read through out.field of a dataclass / NamedTuple
    "param_helper": ("Decoder", {}, (2, 6, 4)),  # make_pos(self, ...) replayed: a param, a fixed array
    "param_helper_setup": ("Encoder", {}, (2, 6, 4)),
    "param_helper_expression": ("Encoder", {}, (2, 4, 5)),  # x + get_posemb(self, ...) hoisted, replayed
    "param_helper_expression_zeros": ("Encoder", {"posemb": "zeros"}, (2, 4, 5)),  # the fixed branch
    "simple_cell_dtype": ("Recurrent", {}, (2, 3, 4)),  # nnx.SimpleCell(dtype=None): bfloat16 kept
    "shared_first_known": ("Twice", {"dim": 4}, (2, 4)),  # one Dense on x, then on its own output
    "last_axis_test": ("Unit", {}, (2, 6, 6, 4)),  # 4 == nout, strides 1: no projection
    "last_axis_test_wide": ("Unit", {"nmid": 3}, (2, 6, 6, 4)),  # 4 != 6: the projection is built
    "last_axis_test_strided": (
        "Unit",
        {"strides": (2, 2)},
        (2, 6, 6, 4),
    ),  # strided: built  # in setup: self.pos, the param "pos_embedding"
    "init_restated_tests": ("Gated", {}, (2, 3)),  # `if c != self.n` of c = x.shape[-1]: 3 != 4, built
    "init_restated_tests_same": ("Gated", {"extra": False}, (2, 4)),  # 4 == 4 and no extra: neither
    "init_restated_tests_splat": ("Splat", {}, (2, 5)),  # dense(**options) of partial(nn.Dense, 4)
}
SOURCES = {
    "reshape_config_local_other": "reshape_config_local",
    "conv_mask_array_stem": "conv_mask_array",
    "setup_array_property_tables": "setup_array_property",
    "setup_array_property_causal": "setup_array_property",
    "setup_array_property_open": "setup_array_property",
    "setup_array_property_declared": "setup_array_property",
    "shape_test_list_strides_two": "shape_test_list_strides",
    "cell_carry_bound_own": "cell_carry_bound",
    "nested_layer_locals_bi": "nested_layer_locals",
    "setup_head_under_test_on": "setup_head_under_test",
    "nested_layer_locals_seq": "nested_layer_locals",
    "factory_field_other_binding_b": "factory_field_other_binding",
    **{f"stateless_call_time_{k}": "stateless_call_time" for k in ("scaled", "scaled_on", "tagged")},
    "compact_loop_chain_gap": "compact_loop_chain",
    "compact_loop_tail_empty": "compact_loop_tail",
    **{
        f"loop_may_not_run_{k}": "loop_may_not_run"
        for k in ("empty", "widths", "no_widths", "proj", "proj_plain", "proj_deep")
    },
    **{
        f"branch_pairs_{k}": "branch_pairs"
        for k in ("c", "guard", "guard_c", "nested", "nested_c", "nested_off")
    },
    **{f"early_return_{k}": "early_return" for k in ("off", "names", "names_small", "sized", "sized_rep")},
    "branch_static_local_dim": "branch_static_local",
    "splat_locals_compact": "splat_locals",
    "traced_nest_deep": "traced_nest",
    "flatten_input_steps": "flatten_input",
    "compact_dense_nobias": "compact_dense",
    "compact_loop_tail_short": "compact_loop_tail",
    "compact_matmul_setup": "compact_matmul",
    "setup_match_gated": "setup_match",
    "compact_loop_chain_short": "compact_loop_chain",
    "compact_loop_chain_field": "compact_loop_chain",
    "compact_loop_chain_wide": "compact_loop_chain",
    "compact_loop_chain_mixed": "compact_loop_chain",
    "compact_loop_after_others_gated": "compact_loop_after_others",
    "opposite_ifs_post": "opposite_ifs",
    "einsum_output_starred": "einsum_output",
    **{f"attribute_clashes_{k}": "attribute_clashes" for k in ("method", "api")},
    **{f"setup_list_may_be_empty_{k}": "setup_list_may_be_empty" for k in ("none", "pair")},
    "loop_tested_first_later": "loop_tested_first",
    **{f"branch_shape_first_{k}": "branch_shape_first" for k in ("given", "scale", "shared")},
    **{f"auto_names_apart_{k}": "auto_names_apart" for k in ("post", "narrow", "wide")},
    "compact_loop_after_others_empty": "compact_loop_after_others",
    **{
        f"loop_tested_modules_{k}": "loop_tested_modules"
        for k in ("one", "stages", "stage", "alternating", "last")
    },
    **{
        f"compact_loop_after_others_{k}": "compact_loop_after_others"
        for k in ("labelled", "unlabelled", "tagged", "untagged")
    },
    "static_init_locals_hidden": "static_init_locals",
    "static_init_locals_gain": "static_init_locals",
    "init_value_input_shape_nobias": "init_value_input_shape",
    "init_value_input_shape_inline": "init_value_input_shape",
    "helper_blocks_deep": "helper_blocks",
    "helper_tuple_returns_noisy": "helper_tuple_returns",
    "helper_tuple_returns_two": "helper_tuple_returns",
    "setup_helpers_gated": "setup_helpers",
    "setup_helpers_plain": "setup_helpers",
    "rank_guard_pool": "rank_guard",
    "rank_guard_unpacked": "rank_guard",
    "rank_guard_squeezed": "rank_guard",
    "stateless_other_build_dense": "stateless_other_build",
    "branch_shape_unpack_pooled": "branch_shape_unpack",
    "loop_over_sum_repeated": "loop_over_sum",
    "layer_attribute_renamed_halves": "layer_attribute_renamed",
    "layer_attribute_renamed_alias": "layer_attribute_renamed",
    "loop_over_sum_empty": "loop_over_sum",
    "reduction_axis_range_max": "reduction_axis_range",
    "rebound_shape_unpack_config": "rebound_shape_unpack",
    "rebound_shape_unpack_token": "rebound_shape_unpack",
    "setup_none_first_plain": "setup_none_first",
    "setup_none_first_tower": "setup_none_first",
    "method_jit_scaled": "method_jit",
    "input_dtype_param_affine": "input_dtype_param",
    "layer_dtype_param_tokens": "layer_dtype_param",
    "branch_unbound_local_plain": "branch_unbound_local",
    "reduction_table_max": "reduction_table",
    "reduction_table_token": "reduction_table",
    "setup_none_first_summary": "setup_none_first",
    "setup_none_first_identity": "setup_none_first",
    "setup_none_first_param": "setup_none_first",
    "setup_none_first_no_param": "setup_none_first",
    "activation_table_helper": "activation_table",
    "rebound_axis_pair": "rebound_axis",
    "branch_auto_names_nested": "branch_auto_names",
    "branch_auto_names_wide": "branch_auto_names",
    "norm_function_weights": "norm_function",
    "loop_list_previous_width_wide": "loop_list_previous_width",
    "branch_local_size_wide": "branch_local_size",
    "branch_local_size_narrow": "branch_local_size",
    "loop_local_arg_scales": "loop_local_arg",
    "loop_carried_local_unrun": "loop_carried_local",
    "loop_carried_local_halves": "loop_carried_local",
    "loop_carried_local_widths": "loop_carried_local",
    "loop_carried_local_widths_unrun": "loop_carried_local",
    "inherited_build_scaled": "inherited_build",
    "inherited_build_tempered": "inherited_build",
    "inherited_passthrough_self": "inherited_passthrough",
    "setup_class_local_mixer": "setup_class_local",
    "setup_branch_classes_gated": "setup_branch_classes",
    "setup_branch_classes_plain": "setup_branch_classes",
    "setup_class_local_clipped": "setup_class_local",
    "subclass_factory_default_base": "subclass_factory_default",
    "inherited_sizes_changed_proj_only": "inherited_sizes_changed",
    "inherited_sizes_changed_tanh": "inherited_sizes_changed",
    "local_dict_kwargs_plain": "local_dict_kwargs",
    "written_axes_pool": "written_axes",
    "axis_order_attention": "axis_order",
    "shape_unpack_project": "shape_unpack",
    "shape_unpack_scaled": "shape_unpack",
    "loop_local_alias_scan": "loop_local_alias",
    "param_helper_setup": "param_helper",
    "param_helper_expression_zeros": "param_helper_expression",
    "last_axis_test_wide": "last_axis_test",
    "last_axis_test_strided": "last_axis_test",
    "init_restated_tests_same": "init_restated_tests",
    "init_restated_tests_splat": "init_restated_tests",
    "attention_kv_features_positional": "attention_kv_features",
    "tied_apply_untied": "tied_apply",
    "setup_branch_sizes_narrow": "setup_branch_sizes",
    "optional_projection_set": "optional_projection",
    "optional_projection_narrow": "optional_projection",
    "optional_projection_wide": "optional_projection",
    "optional_projection_nested": "optional_projection",
    "optional_projection_nested_set": "optional_projection",
    "loop_single_name_gated": "loop_single_name",
    "post_init_embedder": "post_init",
    "setup_comprehension_zip_short": "setup_comprehension_zip",
    "setup_lists_zipped_deep": "setup_lists_zipped",
    "compact_class_choice_b": "compact_class_choice",
    "compact_class_choice_stack": "compact_class_choice",
    "compact_class_choice_wide": "compact_class_choice",
}
UNUSED_BY_LINEN = {
    "tied_embedding_chain": 1,
    "tied_apply": 1,
    "tied_embedding": 1,
    "setup_head_under_test": 2,  # sigma_head's kernel and bias, applied only if learn_sigma
    "inherited_sizes_changed_proj_only": 2,  # the inherited norm's scale and bias, which ProjOnly never applies
    "optional_inputs": 1,  # `given`'s token embedding: its embeddings are handed in
}  # the tied head's own kernel: NNX builds it, Linen never does
INT_INPUTS = {
    "inherited_passthrough",
    "traced_named_loop",
    "stack_keeps_width",
    "field_holds_modules",
    "handed_module",
    "post_init_embedder",
    "tied_embedding_chain",
    "block_output_setup_attribute",
    "layer_field_annotation",
    "compact_tied",
    "import_alias",
    "tied_head",
    "tied_apply",
    "tied_apply_untied",
    "tied_embedding",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_migrated_fixture_has_parity(case, tmp_path):
    cls_name, ctor, shape = CASES[case]
    source = SOURCES.get(case, case)
    src = fixture(f"{source}_in.py").read_text()
    fx = all_cases()[source]  # with the trace and options its header names
    result = migrate_source(
        src,
        f"{source}.py",
        module_name=source,
        trace=case_trace(fx),
        unsafe_fixes="unsafe-fixes" in fx.options(),
    )
    (tmp_path / "linen_src.py").write_text(src)
    (tmp_path / "nnx_src.py").write_text(result.output)
    linen_module, nnx_module = import_file(tmp_path / "linen_src.py"), import_file(tmp_path / "nnx_src.py")
    linen_cls, nnx_cls = getattr(linen_module, cls_name), getattr(nnx_module, cls_name)
    linen_ctor, nnx_ctor = _own_values(ctor, linen_module), _own_values(ctor, nnx_module)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 11, shape) if case in INT_INPUTS else rng.normal(size=shape).astype(np.float32)
    side = LinenSide(
        model=linen_cls(**linen_ctor),
        batch={"x": x},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    entry = result.name_map.classes[f"{source}.{cls_name}"]
    extra = {name: x.shape[-1] for name, how in entry.new_args.items() if how == "input:0"}
    extra.update({name: x.shape for name, how in entry.new_args.items() if how == "input_shape:0"})
    optional = {name for name, how in entry.new_args.items() if how == "unresolved_if"}  # layers not built
    optional |= {  # the sizes of inputs other than x, which the batch leaves out: built without them
        name for name, how in entry.new_args.items() if how.startswith("input:") and how != "input:0"
    }
    assert set(extra) == set(entry.new_args) - optional, entry.new_args
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    pair = ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_cls(**nnx_ctor, **extra, rngs=rngs), name_map=map_path
    )
    variables = perturbed(side.init_variables())
    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]
    # one gradient per Linen parameter, and one (checked to be 0) per NNX parameter Linen never creates
    unused = UNUSED_BY_LINEN.get(case, 0)
    assert len(parity.by_check()["grad"]) == len(jax.tree.leaves(variables["params"])) + unused


def test_a_layer_table_read_as_an_attribute_is_returned_as_the_array(tmp_path):
    """``word.embedding`` of an ``nn.Embed`` is an array in Linen; returned as it was written, NNX's would
    be the ``nnx.Param`` itself and the outputs' structures would differ (scenic's BERT stem)."""
    src = fixture("embed_table_read_in.py").read_text()
    result = migrate_source(src, "embed_table_read.py", module_name="embed_table_read")
    (tmp_path / "linen_src.py").write_text(src)
    (tmp_path / "nnx_src.py").write_text(result.output)
    linen_module, nnx_module = import_file(tmp_path / "linen_src.py"), import_file(tmp_path / "nnx_src.py")
    ids = np.random.default_rng(0).integers(0, 11, (2, 5))
    side = LinenSide(
        model=linen_module.Tied(),
        batch={"x": ids},
        loss=lambda out, batch: sum(jnp.mean(o**2) for o in out),
        train_kwargs={},
        eval_kwargs={},
    )
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    pair = ModelPair(linen=side, nnx_factory=lambda rngs: nnx_module.Tied(rngs=rngs), name_map=map_path)
    parity = check(pair, perturbed(side.init_variables()))
    assert parity.passed, [(lf.check, lf.path, lf.note) for lf in parity.failures]
    outputs = nnx_module.Tied(rngs=nnx.Rngs(0))(ids)
    assert all(isinstance(o, jax.Array) for o in outputs)


def test_later_elements_no_traced_call_saw_take_one_size_each(tmp_path):
    """Traced with one element per list, the sizes of the elements after the first were matched with the
    first element's call (``self.in_channels``: wrong for every later element of a block that widens);
    now a tuple, and with the true sizes a two-element block computes what Linen's computes."""
    _sized_by_hand(
        tmp_path,
        "traced_one_element",
        "Block",
        "in_features=resnets_in_features[i]",
        linen_args=(4, 6, 2),
        nnx_args=(4, 6, 2),
        traced=True,
        width=4,
        resnets_in_features=(4, 6),
    )


def test_custom_collection_has_parity_and_converts(tmp_path):
    """``moving_stats`` / ``noise_consts`` variables (custom_collection): the checkpoint's collections
    convert into the file's registered Variable subclasses, and one train-mode call gives the same
    output and the same updated ``moving_stats`` on both sides."""
    from flax.traverse_util import flatten_dict

    from linen2nnx.checkpoint_convert.api import convert_state

    src = fixture("custom_collection_in.py").read_text()
    result = migrate_source(src, "custom_collection.py", module_name="custom_collection")
    (tmp_path / "linen_src.py").write_text(src)
    (tmp_path / "nnx_src.py").write_text(result.output)
    linen_cls = import_file(tmp_path / "linen_src.py").Tracker
    nnx_cls = import_file(tmp_path / "nnx_src.py").Tracker
    x = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    side = LinenSide(
        model=linen_cls(features=4),
        batch={"x": x},
        loss=lambda out, batch: jnp.mean(out**2),
        mutable=("moving_stats",),
    )
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    pair = ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_cls(in_features=5, rngs=rngs), name_map=map_path
    )
    variables = perturbed(side.init_variables())
    assert set(variables) == {"params", "moving_stats", "noise_consts"}

    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]
    assert {lf.path for lf in parity.by_check()["moving_stats"]} == {"steps", "moving_average_0/w_avg"}

    model, _ = convert_state(variables, pair, map_path)  # the converter's own output, called directly
    assert type(model.steps).__name__ == "MovingStats" and type(model.offset).__name__ == "NoiseConsts"
    np.testing.assert_array_equal(model.offset[...], variables["noise_consts"]["offset"])
    out_l, updates = side.model.apply(variables, x, train=True, mutable=["moving_stats"])
    out_n = model(x, train=True)
    np.testing.assert_allclose(out_n, out_l, rtol=1e-5, atol=1e-6)
    after = {"/".join(k): v for k, v in flatten_dict(updates["moving_stats"]).items()}
    assert set(after) == {"steps", "MovingAverage_0/w_avg"}
    np.testing.assert_allclose([model.steps[...], after["steps"]], variables["moving_stats"]["steps"] + 1)
    np.testing.assert_allclose(model.moving_average_0.w_avg[...], after["MovingAverage_0/w_avg"], rtol=1e-6)
    assert not np.allclose(
        after["MovingAverage_0/w_avg"], variables["moving_stats"]["MovingAverage_0"]["w_avg"]
    )


def test_same_name_in_two_collections_stays_two_variables(tmp_path):
    """``self.param('w')`` and ``self.variable('ema', 'w')``: two NNX attributes (``w``, ``w_ema``), so
    three calls update the average, not the weight, and give Linen's outputs and averages."""
    from linen2nnx.checkpoint_convert.api import convert_state

    linen_mod, nnx_mod, _, map_path = build("same_name_collections", tmp_path)
    linen_cls, nnx_cls = linen_mod.AveragedWeight, nnx_mod.AveragedWeight
    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    side = LinenSide(
        model=linen_cls(),
        batch={"x": x},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
        mutable=("ema",),
    )
    pair = ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_cls(in_features=3, rngs=rngs), name_map=map_path
    )
    variables = perturbed(side.init_variables())
    model, _ = convert_state(variables, pair, map_path)
    assert type(model.w_ema).__name__ == "Ema"
    for _ in range(3):
        out_l, updates = side.model.apply(variables, x, mutable=["ema"])
        variables = {**variables, **updates}
        np.testing.assert_allclose(model(x), out_l, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(model.w_ema[...], variables["ema"]["w"], rtol=1e-6)
        np.testing.assert_array_equal(model.w[...], variables["params"]["w"])


@pytest.mark.parametrize("with_targets", [False, True])
def test_init_only_dummy_inputs_read_false(with_targets, tmp_path):
    """``if self.is_initializing() and ...:`` inventing targets for init reads False: Linen's init
    (with the dummy targets) and NNX's __init__ hold the same weights, and the migrated call computes
    what Linen's apply does, with and without targets."""
    src = fixture("init_dummy_inputs_in.py").read_text()
    result = migrate_source(src, "init_dummy_inputs.py", module_name="init_dummy_inputs")
    assert [f.rule for f in result.findings if f.rule == "L2N-API-007"] == ["L2N-API-007"]
    (tmp_path / "linen_src.py").write_text(src)
    (tmp_path / "nnx_src.py").write_text(result.output)
    linen_cls = import_file(tmp_path / "linen_src.py").Model
    nnx_cls = import_file(tmp_path / "nnx_src.py").Model
    rng = np.random.default_rng(1)
    batch = {"x": rng.normal(size=(3, 5)).astype(np.float32), "t": rng.normal(size=(3, 4)).astype(np.float32)}
    side = LinenSide(
        model=linen_cls(),
        batch=batch,
        inputs=lambda b: ((b["x"],), {"targets": b["t"]} if with_targets else {}),
        loss=lambda out, b: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    pair = ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_cls(in_features=5, rngs=rngs), name_map=map_path
    )
    variables = perturbed(side.init_variables())
    assert set(variables["params"]) == {"body", "head"}  # the dummy targets made init reach the head
    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]
    assert len(parity.by_check()["grad"]) == len(jax.tree.leaves(variables["params"]))


def _stats_parity(tmp_path, stem, cls, linen_kwargs, nnx_kwargs, x, **modes):
    """Migrate fixture ``stem``, then run the parity check of its class ``cls`` with a mutable
    ``batch_stats`` (``modes``: the train / eval call arguments): the migration's result, the NNX class
    and the parity result."""
    src = fixture(f"{stem}_in.py").read_text()
    result = migrate_source(src, f"{stem}.py", module_name=stem)
    (tmp_path / "linen_src.py").write_text(src)
    (tmp_path / "nnx_src.py").write_text(result.output)
    linen_cls = getattr(import_file(tmp_path / "linen_src.py"), cls)
    nnx_cls = getattr(import_file(tmp_path / "nnx_src.py"), cls)
    side = LinenSide(
        model=linen_cls(**linen_kwargs),
        batch={"x": x},
        loss=lambda out, b: jnp.mean(out**2),
        mutable=("batch_stats",),
        **modes,
    )
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    pair = ModelPair(linen=side, nnx_factory=lambda rngs: nnx_cls(**nnx_kwargs, rngs=rngs), name_map=map_path)
    parity = check(pair, perturbed(side.init_variables()))
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]
    return result, nnx_cls, parity


@pytest.mark.parametrize(
    ("cls", "train_kwargs", "eval_kwargs"),
    [
        ("Norm", {"use_running_average": False}, {"use_running_average": True}),
        ("Centre", {"train": True}, {"train": False}),
        ("Running", {"train": True}, {"train": False}),
    ],
)
def test_params_mutable_question_reads_false(cls, train_kwargs, eval_kwargs, tmp_path):
    """``self.is_mutable_collection('params')`` skipping the running-statistics update during init reads
    False: NNX's __init__ holds Linen's init values, and a train call updates the statistics as Linen's
    apply with a mutable ``batch_stats`` does."""
    x = np.random.default_rng(2).normal(size=(5, 4)).astype(np.float32)
    result, _, parity = _stats_parity(
        tmp_path,
        "params_mutable_stats",
        cls,
        {"features": 4},
        {"features": 4},
        x,
        train_kwargs=train_kwargs,
        eval_kwargs=eval_kwargs,
    )
    assert [f.rule for f in result.findings if f.rule == "L2N-API-007"] == ["L2N-API-007"] * 3
    assert not [f for f in result.findings if f.severity == "manual"], result.findings
    assert parity.by_check()["batch_stats"], "the train call's statistics are compared"


def test_batch_stat_sized_by_the_input_is_built_in_init(tmp_path):
    """A running statistic sized by the input is created in ``__init__``: the converted checkpoint has
    its home before any call, and train and eval calls match Linen's, statistics included."""
    x = np.random.default_rng(4).normal(size=(5, 4)).astype(np.float32)
    _, nnx_cls, parity = _stats_parity(
        tmp_path,
        "batch_stat_from_input",
        "RunningCentre",
        {},
        {"in_features": 4},
        x,
        train_kwargs={"train": True},
        eval_kwargs={"train": False},
    )
    assert "mean" in nnx.state(nnx_cls(in_features=4, rngs=nnx.Rngs(0)), nnx.BatchStat)
    assert parity.by_check()["batch_stats"], "the train call's statistics are compared"


def test_merged_mode_flag_moves_to_the_call(tmp_path):
    """A class of the run that merges its mode flag with ``merge_param`` is built without it in
    ``__init__`` and given it at the call: the same forward, loss, gradients and running statistics in
    train and eval mode."""
    x = np.random.default_rng(3).normal(size=(5, 3)).astype(np.float32)
    result, _, parity = _stats_parity(tmp_path, "merged_flag", "Net", {}, {"in_features": 3}, x)
    assert "L2N-LAYER-003" in {f.rule for f in result.findings}
    assert parity.by_check()["batch_stats"] and parity.by_check()["forward/eval"]


@pytest.mark.parametrize(
    ("cls_name", "ctor", "sizes"),
    [
        ("Modulated", {"index": 2}, {"affine_0_in_features": 6, "affine_0_out_features": 5}),
        ("Biased", {}, {"affine_0_in_features": 6, "x_shape": (2, 3, 5)}),
    ],
)
def test_input_axis_sizes_become_constructor_arguments(cls_name, ctor, sizes, tmp_path):
    """A submodule sized from one axis of each of two call inputs is built in ``__init__`` from new
    size arguments (or, for a class that stands in for its first input, from the stand-in's shape);
    given the sizes those axes have, the NNX class computes the same forward, loss and gradients."""
    linen_module, nnx_module, result, map_path = build("input_axis_size", tmp_path)
    linen_cls, nnx_cls = getattr(linen_module, cls_name), getattr(nnx_module, cls_name)
    rng = np.random.default_rng(4)
    batch = {
        "x": rng.normal(size=(2, 3, 5)).astype(np.float32),
        "styles": rng.normal(size=(2, 4, 6)).astype(np.float32),
    }
    side = LinenSide(
        model=linen_cls(**ctor),
        batch=batch,
        loss=lambda out, b: jnp.mean(out**2),
        inputs=lambda b: ((b["x"], b["styles"]), {}),
        train_kwargs={},
        eval_kwargs={},
    )
    assert set(result.name_map.classes[f"input_axis_size.{cls_name}"].new_args) == set(sizes)
    pair = ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_cls(**ctor, **sizes, rngs=rngs), name_map=map_path
    )
    variables = perturbed(side.init_variables())
    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]
    assert len(parity.by_check()["grad"]) == len(jax.tree.leaves(variables["params"]))


def test_scope_make_rng_draws_from_the_module_rngs(tmp_path):
    """``self.scope.make_rng("dropout")`` converts as ``self.make_rng`` does: the same eval forward and
    gradients; in train mode the same output for a key the caller passes, and without one a dropout
    mask drawn from the module's own ``nnx.Rngs`` (kept entries scaled by 1 / (1 - rate), the rest 0)."""
    from linen2nnx.checkpoint_convert.api import convert_state

    linen_module, nnx_module, result, map_path = build("scope_make_rng", tmp_path)
    assert "self.scope.make_rng(" not in result.output and "rng = self.rngs.dropout()" in result.output
    linen_cls, nnx_cls = linen_module.Head, nnx_module.Head
    x = np.random.default_rng(4).normal(size=(64, 5)).astype(np.float32)
    side = LinenSide(model=linen_cls(), batch={"x": x}, loss=lambda out, b: jnp.mean(out**2), train_kwargs={})
    pair = ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_cls(in_features=5, rngs=rngs), name_map=map_path
    )
    variables = perturbed(side.init_variables())
    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]

    model, _ = convert_state(variables, pair, map_path)
    key = jax.random.key(7)
    given = side.model.apply(variables, x, train=True, rng=key)
    np.testing.assert_allclose(model(x, train=True, rng=key), given, rtol=1e-5, atol=1e-6)
    full = np.asarray(model(x))
    drawn = np.asarray(model(x, train=True))
    kept = drawn != 0
    assert 0 < kept.mean() < 1
    np.testing.assert_allclose(drawn[kept], full[kept] / 0.5, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(drawn, np.asarray(model(x, train=True)))  # each call draws a new key


def test_traced_input_leaf_sizes_are_constructor_arguments(tmp_path):
    """Layers a helper applies to entries of a dict input take each entry's last axis as a constructor
    argument (the trace saw them read it unchanged): the same forward and gradients, for entry sizes
    other than the traced ones, and the pair spec the run writes fills them from the example batch."""
    from linen2nnx.migrate.engine import Mode, migrate_paths
    from linen2nnx.migrate.spec_writer import write_pair_spec
    from linen2nnx.migrate.trace import trace_linen
    from linen2nnx.spec import input_leaf, load_linen_side, load_pair

    linen_module, nnx_module, result, map_path = build("traced_input_leaf", tmp_path)
    src = fixture("traced_input_leaf_in.py").read_text()
    entry = result.name_map.classes["traced_input_leaf.Fusion"]
    assert entry.new_args == {
        "views_audio_features": "input_leaf:0:['audio']",
        "views_video_features": "input_leaf:0:['video']",
    }
    linen_cls, nnx_cls = linen_module.Fusion, nnx_module.Fusion
    rng = np.random.default_rng(5)
    views = {
        "audio": rng.normal(size=(3, 7)).astype(np.float32),
        "video": rng.normal(size=(3, 2)).astype(np.float32),
    }
    assert input_leaf(views, "['video']") is views["video"]
    side = LinenSide(
        model=linen_cls(width=5),
        batch={"x": views},
        loss=lambda out, b: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: nnx_cls(width=5, views_audio_features=7, views_video_features=2, rngs=rngs),
        name_map=map_path,
    )
    parity = check(pair, perturbed(side.init_variables()))
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]
    assert len(parity.by_check()["grad"]) == 6

    # the pair spec `migrate --trace --out-dir` writes reads both sizes off its own example batch
    (tmp_path / "fusion.py").write_text(src)
    (tmp_path / "linen_spec.py").write_text(
        "import numpy as np\n"
        "from linen2nnx.spec import LinenSide, import_file\n"
        "def side():\n"
        f"    model = import_file({str(tmp_path / 'fusion.py')!r}).Fusion()\n"
        "    views = {'audio': np.ones((2, 6), np.float32), 'video': np.ones((2, 5), np.float32)}\n"
        "    return LinenSide(model=model, batch={'x': views}, loss=lambda o, b: o.sum(), train_kwargs={}, eval_kwargs={})\n"
    )
    ref = f"{tmp_path / 'linen_spec.py'}:side"
    trace = trace_linen(load_linen_side(ref), spec_ref=ref)
    assert trace.own_leaves["Fusion"] == trace.root_leaves == {"0:['audio']": (2, 6), "0:['video']": (2, 5)}
    out = migrate_paths([tmp_path / "fusion.py"], Mode.OUT_DIR, out_dir=tmp_path / "out", trace=trace)
    spec = write_pair_spec(tmp_path / "out", trace, out)
    assert "INPUT_LEAF_ARGS = {'views_audio_features': (0, \"['audio']\")" in spec.read_text()
    written = load_pair(str(spec))
    parity = check(written, perturbed(written.linen.init_variables()))
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]


@pytest.mark.parametrize(
    "case, cls, sizes, width",
    [
        ("setup_loop_sizes_each", "Mid", {"layers_in_features": (5, 4, 4)}, 5),
        ("setup_comprehension_range_sizes", "Stack", {"blocks_in_features": (5, 4, 3)}, 5),
        # `[Stage(..., name="0")]`, then `name=str(i + 1)` in the loop: Linen's `0`, `1`, ... by position
        (
            "setup_loop_list_named_seed",
            "Stages",
            {"stages_in_features": (4,) * 3, "heads_in_features": (4,) * 3},
            4,
        ),
    ],
)
def test_setup_list_sizes_each_index_elements_by_position(case, cls, sizes, width, tmp_path):
    """A size per element of a setup() list, read at the element's position in the list: a list that
    starts with a module before the loop that fills it (diffusers' mid blocks: ``[0]``, then ``[1 + i]``),
    and a comprehension over ``range(1, 4)`` (``[i - 1]``), as Linen numbers ``layers_0``, ``layers_1``,
    ...; widths that differ per element would fail to build from the same weights if the positions were
    off."""
    src = fixture(f"{case}_in.py").read_text()
    result = migrate_source(src, f"{case}.py", module_name=case)
    (tmp_path / "linen_src.py").write_text(src)
    (tmp_path / "nnx_src.py").write_text(result.output)
    linen_module, nnx_module = import_file(tmp_path / "linen_src.py"), import_file(tmp_path / "nnx_src.py")
    assert result.name_map.classes[f"{case}.{cls}"].new_args == dict.fromkeys(sizes, "unresolved_each")
    x = np.random.default_rng(0).normal(size=(2, width)).astype(np.float32)
    side = LinenSide(
        model=getattr(linen_module, cls)(),
        batch={"x": x},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: getattr(nnx_module, cls)(**sizes, rngs=rngs),
        name_map=map_path,
    )
    variables = perturbed(side.init_variables())
    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]


def test_splat_local_variables_reach_the_forward(tmp_path):
    """splat_locals: the amax histories built from `*history_args` are the ones the forward reads; the
    parity check sees a history swapped in the migrated call (so the passing case is no accident of
    variables the forward ignores)."""
    src = fixture("splat_locals_in.py").read_text()
    result = migrate_source(src, "splat_locals.py", module_name="splat_locals")
    read = "self.input_scale[...], self.input_history[...]"
    assert read in result.output
    (tmp_path / "linen_src.py").write_text(src)
    (tmp_path / "nnx_src.py").write_text(
        result.output.replace(read, "self.input_scale[...], self.kernel_history[...]")
    )
    linen_cls = import_file(tmp_path / "linen_src.py").Fp8Dense
    nnx_cls = import_file(tmp_path / "nnx_src.py").Fp8Dense
    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    side = LinenSide(
        model=linen_cls(),
        batch={"x": x},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    variables = perturbed(side.init_variables())
    assert set(variables["_overwrite_with_gradient"]) == {
        "input_history",
        "kernel_history",
        "input_scale",
        "kernel_scale",
    }
    parity = check(
        ModelPair(linen=side, nnx_factory=lambda rngs: nnx_cls(rngs=rngs), name_map=map_path), variables
    )
    assert not parity.passed


def test_param_override_subclass_computes_bit_identical_numbers(tmp_path):
    """A built-in layer's subclass that transforms a parameter in ``param`` (a weight-standardised
    convolution) computes exactly Linen's numbers in NNX, forward and gradients, with the same weights
    reaching it through the name map under Linen's own auto-names (``StdConv_0``)."""
    linen_module, nnx_module, result, map_path = build("param_override", tmp_path)
    assert "L2N-LAYER-004" in {f.rule for f in result.findings}
    x = np.random.default_rng(5).normal(size=(2, 8, 8, 1)).astype(np.float32)
    side = LinenSide(
        model=linen_module.Net(),
        batch={"x": x},
        loss=lambda out, b: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    variables = perturbed(side.init_variables())
    assert set(variables["params"]) == {"conv", "StdConv_0", "ScaledDense_0"}
    pair = ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_module.Net(in_features=1, rngs=rngs), name_map=map_path
    )
    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]
    compared = [leaf for leaf in parity.leaves if leaf.check.startswith(("forward", "grad", "loss"))]
    assert compared and all(leaf.max_abs == 0.0 for leaf in compared), [
        (leaf.check, leaf.path, leaf.max_abs) for leaf in compared if leaf.max_abs
    ]


def test_own_cache_read_through_variables_matches_linen(tmp_path):
    """``self.variables["cache"][...]`` of a cache the class creates on a call: the NNX read of the
    attribute gives what Linen's gives, on the call that creates the cache and on the next one."""
    src = fixture("own_variables_in.py").read_text()
    result = migrate_source(src, "own_variables.py", module_name="own_variables")
    (tmp_path / "linen_src.py").write_text(src)
    (tmp_path / "nnx_src.py").write_text(result.output)
    linen_cls = import_file(tmp_path / "linen_src.py").Cached
    nnx_model = import_file(tmp_path / "nnx_src.py").Cached(rngs=nnx.Rngs(0))
    x = jnp.arange(6.0).reshape(2, 3)
    variables = linen_cls().init(jax.random.key(0), x)
    for step in range(3):
        linen_out, updates = linen_cls().apply(variables, x, decode=True, mutable=["cache"])
        variables = {**variables, **updates}
        np.testing.assert_array_equal(
            np.asarray(linen_out), np.asarray(nnx_model(x, decode=True)), f"call {step}"
        )
    np.testing.assert_array_equal(np.asarray(variables["cache"]["index"]), np.asarray(nnx_model.index[...]))


def test_a_parameter_linen_never_creates_is_kept_with_its_reason(tmp_path):
    """The tied head's own kernel: Linen's init never creates it, so the conversion keeps it from init
    and says why; a parameter the Linen model does create stays a problem when the checkpoint lacks it."""
    from linen2nnx.checkpoint_convert.api import convert_tree
    from linen2nnx.errors import ConversionError

    linen_module, nnx_module, _, map_path = build("tied_apply", tmp_path)
    side = LinenSide(
        model=linen_module.TiedLM(),
        batch={"x": np.zeros((2, 5), np.int32)},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    pair = ModelPair(linen=side, nnx_factory=lambda rngs: nnx_module.TiedLM(rngs=rngs), name_map=map_path)
    variables = side.init_variables()
    report = convert_tree(variables, pair).report
    assert [(k.nnx, bool(k.why)) for k in report.kept_from_init] == [("lm_head/kernel", True)]
    lacking = {"params": {**variables["params"], "norm": {"bias": variables["params"]["norm"]["bias"]}}}
    with pytest.raises(ConversionError, match="not filled: NNX norm/scale"):
        convert_tree(lacking, pair)


def test_the_optimizer_state_of_a_parameter_linen_never_creates_comes_from_tx_init(tmp_path):
    """The tied head's kernel has no Adam moments in the Linen checkpoint: the NNX optimizer's come
    from ``tx.init`` (zeros), every other moment from the checkpoint."""
    import optax
    from flax.training.train_state import TrainState

    from linen2nnx.checkpoint_convert.api import convert_tree

    linen_module, nnx_module, _, map_path = build("tied_apply", tmp_path)
    tx = optax.adam(1e-3)
    side = LinenSide(
        model=linen_module.TiedLM(),
        batch={"x": np.zeros((2, 5), np.int32)},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
        optimizer=tx,
    )
    pair = ModelPair(linen=side, nnx_factory=lambda rngs: nnx_module.TiedLM(rngs=rngs), name_map=map_path)
    params = side.init_variables()["params"]
    state = TrainState.create(apply_fn=None, params=params, tx=tx)
    moved = jax.tree.map(lambda v: v + 1.0, state.opt_state[0].mu)  # Linen moments away from zero
    state = state.replace(opt_state=(state.opt_state[0]._replace(mu=moved), *state.opt_state[1:]))
    converted = convert_tree(state, pair, optimizer=True)
    flat = {"/".join(map(str, p)): v.get_value() for p, v in nnx.to_flat_state(converted.optimizer_state)}
    assert np.all(np.asarray(flat["opt_state/0/mu/lm_head/kernel"]) == 0)
    np.testing.assert_array_equal(flat["opt_state/0/mu/embed/embedding"], moved["embed"]["embedding"])


def test_input_dict_entry_sizes_are_constructor_arguments(tmp_path):
    """Layers that read entries of a dict input (``batch['image']``, ``batch['obs']['state']``) take
    each entry's last axis as a constructor argument, with no trace; a block handed the whole dict gets
    its caller's arguments for the same entries: the same forward and gradients at parity."""
    linen_module, nnx_module, result, map_path = build("input_dict_entries", tmp_path)
    entry = result.name_map.classes["input_dict_entries.Policy"]
    assert entry.new_args == {
        "batch_image_features": "input_leaf:0:['image']",
        "batch_obs_state_features": "input_leaf:0:['obs']['state']",
    }
    rng = np.random.default_rng(3)
    batch = {
        "image": rng.normal(size=(2, 6)).astype(np.float32),
        "obs": {"state": rng.normal(size=(2, 5)).astype(np.float32)},
    }
    side = LinenSide(
        model=linen_module.Policy(),
        batch={"x": batch},
        loss=lambda out, b: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: nnx_module.Policy(
            batch_image_features=6, batch_obs_state_features=5, rngs=rngs
        ),
        name_map=map_path,
    )
    parity = check(pair, perturbed(side.init_variables()))
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]
    assert len(parity.by_check()["grad"]) == 6


def test_growing_cache_store_replaces_the_array(tmp_path):
    """``keys.value = jnp.concatenate([keys.value, k], 1)``: NNX's ``keys[...] = ...`` would write into
    the empty array (no key kept, a NaN mean); ``set_value`` grows it as Linen does, call after call,
    while the counter and the update slice keep their index stores."""
    from linen2nnx.checkpoint_convert.api import convert_tree

    linen_module, nnx_module, _, map_path = build("variable_store_shape", tmp_path)
    x = jnp.arange(12.0).reshape(2, 2, 3) / 7
    linen_model = linen_module.GrowingCache()
    variables = perturbed(dict(linen_model.init(jax.random.key(0), x)))
    side = LinenSide(model=linen_model, batch={"x": x}, loss=lambda out, b: jnp.mean(out**2))
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: nnx_module.GrowingCache(in_features=3, rngs=rngs),
        name_map=map_path,
    )
    nnx_model = pair.make_nnx()
    nnx.update(nnx_model, convert_tree({"params": variables["params"]}, pair).state)
    state = {"params": variables["params"]}
    for step in range(4):
        linen_out, updates = linen_model.apply(state, x + step, decode=True, mutable=["cache"])
        state = {**state, **updates}
        nnx_out = nnx_model(x + step, decode=True)
        assert np.isfinite(np.asarray(linen_out)).all()
        np.testing.assert_allclose(
            np.asarray(nnx_out), np.asarray(linen_out), rtol=1e-6, err_msg=f"call {step}"
        )
    assert nnx_model.keys[...].shape == state["cache"]["keys"].shape == (2, 6, 4)


@pytest.mark.parametrize("cls", ["ScannedLM", "RematLM"])
def test_attention_cache_under_scan_and_remat_decodes_as_linen(cls, tmp_path):
    """``nn.SelfAttention(decode=...)`` inside a scanned / rematerialised block creates its cache on
    the first (fresh) call; with ``graph_updates=False`` NNX dropped it, so every decode step attended
    to itself alone. Prefill call, then one token at a time: the same logits as Linen's."""
    from linen2nnx.checkpoint_convert.api import convert_tree

    linen_module, nnx_module, _, map_path = build("scan_attention_cache", tmp_path)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 11, (2, 5)), jnp.int32)
    linen_model = getattr(linen_module, cls)(use_cache=True)
    variables = dict(linen_model.init(jax.random.key(0), tokens))
    params = perturbed({"params": variables["params"]})["params"]
    side = LinenSide(model=linen_model, batch={"x": tokens}, loss=lambda out, b: jnp.mean(out**2))
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: getattr(nnx_module, cls)(use_cache=True, rngs=rngs),
        name_map=map_path,
    )
    nnx_model = pair.make_nnx()
    nnx.update(nnx_model, convert_tree({"params": params}, pair).state)
    nnx_model(tokens)  # the fresh call creates the cache, as Linen's init did
    state = {"params": params, "cache": variables["cache"]}
    for t in range(tokens.shape[1]):
        step = tokens[:, t : t + 1]
        linen_out, updates = linen_model.apply(state, step, mutable=["cache"])
        state = {**state, **updates}
        np.testing.assert_allclose(
            np.asarray(nnx_model(step)), np.asarray(linen_out), atol=1e-5, err_msg=f"step {t}"
        )


@pytest.mark.parametrize(
    "cls, ctor, shapes, by_hand",
    [
        ("ResetCore", {}, [(2, 8), (2, 5), (2, 1)], {"hh_in_features": 8}),  # a finding: given by hand
        ("GatedFusion", {}, [(2, 5), (2, 1)], {}),
        ("ScalarGate", {}, [(2, 5)], {}),  # max(gate_features, features), gate_features = 1
        ("ScalarGate", {"gate_features": 8}, [(2, 5)], {}),  # ... equal to features
    ],
)
def test_a_side_input_of_width_one_does_not_size_a_product(cls, ctor, shapes, by_hand, tmp_path):
    """``(1.0 - done) * h`` with ``done`` of width 1: which input is the 1 is not known, a finding (the
    Dense it feeds was built of done's width 1 before, exit 0); ``sigmoid(ctx) * dense(x)``: the
    Dense's width; two config sizes: their max."""
    linen_module, nnx_module, result, map_path = build("gated_products", tmp_path)
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=shape).astype(np.float32) for shape in shapes]
    entry = result.name_map.classes[f"gated_products.{cls}"]
    extra = {
        n: xs[int(how.split(":")[1])].shape[-1]
        for n, how in entry.new_args.items()
        if how.startswith("input:")
    }
    assert set(entry.new_args) == set(extra) | set(by_hand), entry.new_args
    side = LinenSide(
        model=getattr(linen_module, cls)(**ctor),
        batch={f"x{i}": x for i, x in enumerate(xs)},
        inputs=lambda b: (tuple(b[f"x{i}"] for i in range(len(b))), {}),
        loss=lambda out, b: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    pair = ModelPair(
        linen=side,
        nnx_factory=lambda rngs: getattr(nnx_module, cls)(**ctor, **extra, **by_hand, rngs=rngs),
        name_map=map_path,
    )
    parity = check(pair, perturbed(side.init_variables()))
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.note) for lf in parity.failures]


def test_a_head_applied_only_under_a_test_is_kept_from_init_with_the_reason(tmp_path):
    """sigma_head, built by setup() and applied only if learn_sigma: with it off, Linen never creates
    its weights and NNX builds them; convert keeps them from init and says why (before: "not filled",
    while migrate reported the class clean). A weight the Linen init does create stays a problem."""
    from linen2nnx.checkpoint_convert.api import convert_tree
    from linen2nnx.checkpoint_convert.linen_unused import NEVER_APPLIED
    from linen2nnx.errors import ConversionError

    linen_module, nnx_module, _, map_path = build("setup_head_under_test", tmp_path)
    x = np.zeros((2, 4, 4, 4), np.float32)
    side = LinenSide(
        model=linen_module.Head(),
        batch={"x": x},
        loss=lambda out, b: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    pair = ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_module.Head(in_features=4, rngs=rngs), name_map=map_path
    )
    variables = side.init_variables()
    report = convert_tree(variables, pair).report
    assert sorted((k.nnx, k.why) for k in report.kept_from_init) == [
        ("sigma_head/bias", NEVER_APPLIED),
        ("sigma_head/kernel", NEVER_APPLIED),
    ]
    lacking = {"params": {k: v for k, v in variables["params"].items() if k != "mean_head"}}
    with pytest.raises(ConversionError, match="not filled: NNX mean_head"):
        convert_tree(lacking, pair)


def test_a_layer_built_only_with_an_optional_input_runs_both_ways_and_converts(tmp_path):
    """Block's cross-attention, built by Linen only when a context is given: NNX builds it always.
    With a context the pair agrees with every weight converted; from an init without one, convert
    keeps its weights from init and says why, and the pair agrees without a context."""
    from linen2nnx.checkpoint_convert.api import convert_tree
    from linen2nnx.checkpoint_convert.linen_unused import NEVER_APPLIED

    linen_module, nnx_module, _, map_path = build("optional_inputs", tmp_path)
    rng = np.random.default_rng(0)
    x, context = rng.normal(size=(2, 5, 4)).astype(np.float32), rng.normal(size=(2, 3, 6)).astype(np.float32)
    nnx_block = lambda rngs: nnx_module.Block(in_features=4, context_features=6, rngs=rngs)  # noqa: E731

    def side(batch: dict) -> LinenSide:
        return LinenSide(
            model=linen_module.Block(),
            batch=batch,
            loss=lambda out, b: jnp.mean(out**2),
            train_kwargs={},
            eval_kwargs={},
            inputs=lambda b: ((b["x"],), {k: v for k, v in b.items() if k != "x"}),
        )

    with_context = side({"x": x, "context": context})
    variables = perturbed(with_context.init_variables())
    parity = check(ModelPair(linen=with_context, nnx_factory=nnx_block, name_map=map_path), variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs) for lf in parity.failures]
    assert {p for p in grad_paths(parity) if p.startswith("cross/")}, "the cross-attention was not compared"

    alone = side({"x": x})
    pair = ModelPair(linen=alone, nnx_factory=nnx_block, name_map=map_path)
    variables = perturbed(alone.init_variables())
    kept = convert_tree(variables, pair).report.kept_from_init
    assert kept and all(k.nnx.startswith("cross/") and k.why == NEVER_APPLIED for k in kept)
    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs) for lf in parity.failures]


def test_a_builder_passes_one_size_per_element_on_as_a_tuple(tmp_path):
    """Top's new argument feeds Collection's per-element sizes: annotated as the tuple it is (an int,
    as it was annotated, crashed in `sizes[i]`), and with one size per block the pair agrees."""
    linen_module, nnx_module, result, map_path = build("setup_list_sizes_passed_on", tmp_path)
    assert "collection_blocks_proj_in_features: tuple[int, ...]" in result.output
    x = np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32)
    assert_parity(
        linen_module.Top(),
        lambda rngs: nnx_module.Top(collection_blocks_proj_in_features=(4, 8), rngs=rngs),
        x,
        map_path,
    )


@pytest.mark.parametrize("cls", ["Recurrence", "RecurrenceOneAxis"])
def test_scanned_function_with_a_default_argument(cls, tmp_path):
    """nnx.scan gets one axis per input the call passes (``in_axes=(1,)``, or one axis and a call that
    passes one input), then None for the defaulted ``scale``, which nnx.scan binds too: an axis for it
    made the call raise."""
    linen_module, nnx_module, _, map_path = build("scan_function_default_arg", tmp_path)
    x = np.random.default_rng(0).normal(size=(2, 5, 4)).astype(np.float32)
    assert_parity(
        getattr(linen_module, cls)(),
        lambda rngs: getattr(nnx_module, cls)(cell_in_features=4, rngs=rngs),
        x,
        map_path,
    )


def test_make_rng_handed_on_as_a_value_draws_where_linen_draws(tmp_path):
    """``stochastic_depth(y, rate, not train, self.make_rng)``: in train mode the helper draws with the
    function the migration hands it, from the module's ``nnx.Rngs``; the check's fixed key makes both
    sides' draws the same, so the train forward and gradients agree only if NNX draws where Linen does."""
    linen_module, nnx_module, result, map_path = build("make_rng_value", tmp_path)
    assert "self.make_rng)" not in result.output and "self.rngs[name]()" in result.output
    x = np.random.default_rng(5).normal(size=(16, 4)).astype(np.float32)
    side = LinenSide(
        model=linen_module.Block(),
        batch={"x": x},
        loss=lambda out, b: jnp.mean(out**2),
        train_kwargs={"train": True},
        eval_kwargs={"train": False},
    )
    pair = ModelPair(
        linen=side, nnx_factory=lambda rngs: nnx_module.Block(in_features=4, rngs=rngs), name_map=map_path
    )
    variables = perturbed(side.init_variables())
    parity = check(pair, variables)
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]
    assert parity.by_check()["forward/train"] and len(parity.by_check()["grad"]) == 4


def _sown_router(tmp_path):
    """The ``sow_own_collection`` fixture migrated: (its Linen side on an example batch, the NNX
    module, the migration result, the name map's path)."""
    linen_module, nnx_module, result, map_path = build("sow_own_collection", tmp_path)
    x = np.random.default_rng(6).normal(size=(6, 4)).astype(np.float32)
    side = LinenSide(
        model=linen_module.Router(),
        batch={"x": x},
        loss=lambda out, b: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    return side, nnx_module, result, map_path


def _router_pair(side, module, map_path):
    return ModelPair(
        linen=side, nnx_factory=lambda rngs: module.Router(in_features=4, rngs=rngs), name_map=map_path
    )


def test_a_loss_sown_into_its_own_collection_is_compared_and_a_slip_fails(tmp_path):
    """``self.sow("losses", ...)`` migrated to a registered ``nnx.Intermediate`` subclass: check compares
    its values (eval and train) as sown values, so a load-balancing loss 10% off fails there."""
    side, nnx_module, result, map_path = _sown_router(tmp_path)
    variables = perturbed(side.init_variables())
    assert "losses" in variables  # Linen's init sows too: no state, and nothing to convert
    slipped = result.output.replace("* self.experts)", "* self.experts * 1.1)")
    assert slipped != result.output
    (tmp_path / "nnx_slipped.py").write_text(slipped)
    verdicts = {}
    for name, module in (("as migrated", nnx_module), ("slipped", import_file(tmp_path / "nnx_slipped.py"))):
        parity = check(_router_pair(side, module, map_path), variables)
        sown = {(lf.check, lf.path) for lf in parity.leaves if lf.check.startswith("intermediates")}
        assert ("intermediates", "load_balance/0") in sown and (
            "intermediates/train",
            "load_balance/0",
        ) in sown
        verdicts[name] = {(lf.check, lf.path) for lf in parity.failures}
    assert verdicts["as migrated"] == set()
    assert verdicts["slipped"] == {
        ("intermediates", "load_balance/0"),
        ("intermediates/train", "load_balance/0"),
    }


def test_a_collection_linen_sows_into_that_nothing_compares_fails_the_check(tmp_path):
    """A twin with no NNX type for a collection Linen sows into (a hand-written one, or a class kept as
    Linen behind the bridge): its values would be compared with nothing, so the check fails there."""
    source = """\
import flax.linen as nn
import jax.numpy as jnp


class Scorer(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.Dense(3)(x)
        self.sow("aux_metrics_unregistered", "norm", jnp.sum(h**2))
        return h
"""
    twin = """\
from flax import nnx


class Scorer(nnx.Module):
    def __init__(self, *, rngs):
        self.dense_0 = nnx.Linear(4, 3, rngs=rngs)

    def __call__(self, x):
        return self.dense_0(x)
"""
    (tmp_path / "linen_src.py").write_text(source)
    (tmp_path / "nnx_src.py").write_text(twin)
    linen_module, nnx_module = import_file(tmp_path / "linen_src.py"), import_file(tmp_path / "nnx_src.py")
    x = np.random.default_rng(7).normal(size=(5, 4)).astype(np.float32)
    side = LinenSide(
        model=linen_module.Scorer(),
        batch={"x": x},
        loss=lambda out, b: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    pair = ModelPair(linen=side, nnx_factory=lambda rngs: nnx_module.Scorer(rngs=rngs), name_map=None)
    variables = {"params": perturbed(side.init_variables())["params"]}
    parity = check(pair, variables)
    failed = {(lf.check, lf.path) for lf in parity.failures}
    assert failed == {("intermediates", "linen:aux_metrics_unregistered")}, failed


def test_a_model_sowing_into_its_own_collection_converts_both_ways(tmp_path):
    """Linen's init sows into ``losses`` too: ``convert`` converts none of its values, and ``convert
    --to linen`` leaves the collection out of the checkpoint it writes (a call makes its values)."""
    import orbax.checkpoint as ocp

    from linen2nnx.checkpoint_convert import convert
    from linen2nnx.checkpoint_convert.to_linen import convert_to_linen

    side, nnx_module, _, map_path = _sown_router(tmp_path)
    pair = _router_pair(side, nnx_module, map_path)
    variables = perturbed(side.init_variables())
    assert set(variables) == {"params", "losses"}
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(tmp_path / "linen", variables)
        ckptr.wait_until_finished()
    convert(tmp_path / "linen", tmp_path / "nnx", pair)
    convert_to_linen(tmp_path / "nnx", tmp_path / "back", pair)
    with ocp.StandardCheckpointer() as ckptr:
        back = ckptr.restore(tmp_path / "back")
    assert set(back) == {"params"}
    for got, want in zip(jax.tree.leaves(back["params"]), jax.tree.leaves(variables["params"])):
        np.testing.assert_array_equal(got, want)


def test_sows_are_recorded_only_in_the_context_that_watches_them():
    """The watched ``Module.sow`` records into the watching context's set: a model sowing on another
    thread meanwhile (another check) is not mistaken for the checked one."""
    import threading

    import flax.linen as nn

    from linen2nnx.equivalence import sown

    class Sows(nn.Module):
        @nn.compact
        def __call__(self, x):
            self.sow("elsewhere", "v", x)
            return x

    sown._watch_sow()
    mine: set[str] = set()
    token = sown._SOWN.set(mine)
    try:
        other = threading.Thread(target=lambda: Sows().init(jax.random.key(0), jnp.ones(2)))
        other.start()
        other.join()
        assert mine == set()
        Sows().init(jax.random.key(0), jnp.ones(2))
        assert mine == {"elsewhere"}
    finally:
        sown._SOWN.reset(token)


def test_a_position_embedding_sized_by_its_input_builds_from_the_traced_shape(tmp_path):
    """``_, length, width = x.shape`` read by a position embedding's shape: the embedding gains ``x_shape``
    and its parent the shape the trace saw; given it, the NNX model computes Linen's forward and
    gradients."""
    linen_module, nnx_module, result, map_path = build("position_embedding_unpack", tmp_path)
    entry = result.name_map.classes["position_embedding_unpack.TinyViT"]
    assert set(entry.new_args) == {"in_features", "posembed_x_shape"}
    x = np.random.default_rng(3).normal(size=(2, 4, 4, 3)).astype(np.float32)
    nnx_cls = nnx_module.TinyViT
    assert_parity(
        linen_module.TinyViT(),
        lambda rngs: nnx_cls(in_features=3, posembed_x_shape=(2, 4, 6), rngs=rngs),
        x,
        map_path,
    )


def test_shape_locals_computed_from_the_input_shape_build_as_linen(tmp_path):
    """The embedding gains ``x_shape`` and its parent the shape the trace saw; given it, the NNX model
    computes Linen's forward and gradients, and the embedding's own variables have Linen's shapes and
    dtypes (a bfloat16 input's dtype through the ``<attr>_dtype`` arguments)."""
    linen_module, nnx_module, result, map_path = build("position_embedding_derived_shape", tmp_path)
    blocking = [f.rule for f in result.findings if f.severity in ("manual", "error") and f.line < 41]
    assert blocking == ["L2N-SHAPE-003"]  # posembed_x_shape, to pass
    entry = result.name_map.classes["position_embedding_derived_shape.Video"]
    assert set(entry.new_args) == {"in_features", "posembed_x_shape"}
    x = np.random.default_rng(5).normal(size=(2, 3, 4, 5)).astype(np.float32)
    nnx_cls = nnx_module.Video
    sizes = {"in_features": 5, "posembed_x_shape": (2, 3, 4, 6)}
    assert_parity(linen_module.Video(), lambda rngs: nnx_cls(**sizes, rngs=rngs), x, map_path)

    for dtype in (jnp.float32, jnp.bfloat16):
        u = jnp.ones((2, 3, 4, 6), dtype)
        linen_vars = linen_module.AddSpaceTimeEmbs().init(jax.random.key(0), u)["params"]
        dtypes = {f"{n}_dtype": dtype for n in ("pos_embedding_space", "pos_embedding_time")}
        model = nnx_module.AddSpaceTimeEmbs(x_shape=u.shape, **dtypes, rngs=nnx.Rngs(0))
        got = {k: (v.shape, v.dtype) for k, v in nnx.to_pure_dict(nnx.state(model, nnx.Param)).items()}
        assert got == {k: (v.shape, v.dtype) for k, v in linen_vars.items()}
        assert got["pos_embedding_space"] == ((1, 1, 4, 6), jnp.dtype(dtype))


def test_a_key_size_the_trace_saw_on_one_side_of_a_test_is_given_by_hand(tmp_path):
    """``context = x if context is None else context`` traced with a context: the key's size is a
    constructor argument to give (not bound to ``context``'s width); given the traced width, the NNX
    block computes Linen's forward and gradients."""
    linen_module, nnx_module, result, map_path = build("traced_optional_context", tmp_path)
    entry = result.name_map.classes["traced_optional_context.Block"]
    assert set(entry.new_args) == {"views_x_features", *(f"attn{k}_k_in_features" for k in ("", "2", "3"))}
    rng = np.random.default_rng(8)
    views = {
        "x": rng.normal(size=(2, 3, 6)).astype(np.float32),
        "c": rng.normal(size=(2, 3, 5)).astype(np.float32),
    }
    sizes = {"views_x_features": 6, **{f"attn{k}_k_in_features": 5 for k in ("", "2", "3")}}
    nnx_cls = nnx_module.Block
    assert_parity(linen_module.Block(), lambda rngs: nnx_cls(**sizes, rngs=rngs), views, map_path)


def test_a_container_of_modules_looped_over_is_data_and_runs(tmp_path):
    """``layers: Sequence[Embedder]`` looped over (``for layer in self.layers``): kept as ``nnx.data``, the
    class builds with NNX layers and applies them in order (a plain attribute was refused at build)."""
    _, nnx_module, _, _ = build("field_holds_modules", tmp_path)
    rngs = nnx.Rngs(0)
    up, down = nnx.Linear(4, 3, rngs=rngs), nnx.Linear(3, 2, rngs=rngs)
    chain = nnx_module.Chain(layers=(up, down), rngs=rngs)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(chain(x), down(up(x)))
    assert len(jax.tree.leaves(nnx.state(chain, nnx.Param))) == 4


def _sized_by_hand(tmp_path, case, cls_name, expected, linen_args=(), nnx_args=(), traced=False, **sizes):
    """Migrate fixture ``case`` (with the trace its header names when ``traced``; its output must hold
    ``expected``), build its ``cls_name`` on both sides with the sizes the migration asks for given by
    hand, and check parity on a (2, 3) or (2, 4) batch."""
    src = fixture(f"{case}_in.py").read_text()
    trace = case_trace(all_cases()[case]) if traced else None
    result = migrate_source(src, f"{case}.py", module_name=case, trace=trace)
    assert expected in result.output
    (tmp_path / "linen_src.py").write_text(src)
    (tmp_path / "nnx_src.py").write_text(result.output)
    linen_cls = getattr(import_file(tmp_path / "linen_src.py"), cls_name)
    nnx_cls = getattr(import_file(tmp_path / "nnx_src.py"), cls_name)
    x = np.random.default_rng(1).normal(size=(2, sizes.pop("width"))).astype(np.float32)
    side = LinenSide(
        model=linen_cls(*linen_args),
        batch={"x": x},
        loss=lambda out, batch: jnp.mean(out**2),
        train_kwargs={},
        eval_kwargs={},
    )
    map_path = tmp_path / "map.json"
    result.name_map.save(map_path)
    make = lambda rngs: nnx_cls(*nnx_args, **sizes, rngs=rngs)  # noqa: E731
    parity = check(
        ModelPair(linen=side, nnx_factory=make, name_map=map_path), perturbed(side.init_variables())
    )
    assert parity.passed, [(lf.check, lf.path, lf.max_abs, lf.tol) for lf in parity.failures]


def test_a_loop_whose_width_grows_takes_one_size_per_iteration(tmp_path):
    """DenseNet-style growth (loop_growing_width): the layer's input size after the first iteration is a
    tuple, one per iteration, and with the true sizes the NNX model computes what Linen computes (one
    scalar, asked for before, fitted no iteration but one)."""
    _sized_by_hand(
        tmp_path,
        "loop_growing_width",
        "Dense3",
        "dense_in_features: tuple[int, ...]",
        width=4,
        in_features=4,
        dense_in_features=(12, 20),
    )


def test_a_lambda_init_is_an_array_only_where_it_is_surely_a_number():
    """``lambda key: self.init_value`` of a field annotated ``float`` holds an array (``v[...]`` of a
    Python float raised TypeError); a field that may hold ``None`` (``temp: Any = None``) or an array is
    left as it is (``jax.numpy.asarray(None)`` raised ValueError at construction, reported clean)."""
    src = (
        "from typing import Any\n\nimport flax.linen as nn\n\n\nclass Model(nn.Module):\n"
        "    temp: Any = None\n    scale: float = 2.0\n\n    @nn.compact\n    def __call__(self, x):\n"
        '        t = self.variable("consts", "t", lambda: self.temp)\n'
        '        s = self.variable("consts", "s", lambda: self.scale * 2)\n'
        "        y = nn.Dense(2)(x) * s.value\n        return y if t.value is None else y / t.value\n"
    )
    output = migrate_source(src, "temp.py").output
    assert "Consts(self.temp)" in output and "Consts(jax.numpy.asarray(self.scale * 2))" in output


def test_a_loop_whose_first_size_is_unknown_too_takes_one_tuple_from_the_first(tmp_path):
    """loop_sizes_each: the first block's input size is unknown (an activation field) and so are the
    later ones (a growing concatenation): one tuple read at each block's position, the first included;
    with the true sizes (3, 7) the NNX model computes what Linen computes."""
    import flax.linen as nn
    from flax import nnx

    _sized_by_hand(
        tmp_path,
        "loop_sizes_each",
        "Model",
        "in_features=stage_in_features[width_index]",
        linen_args=(nn.tanh,),
        nnx_args=(nnx.tanh,),
        width=3,
        stage_in_features=(3, 7),
    )


@pytest.mark.parametrize(
    ("cls_name", "norm"),
    [
        ("NormTable", "ln"),
        ("NormTable", "rms"),
        ("NormHelper", "ln"),
        ("NormHelper", "rms"),
        ("NormLocal", "rms"),
        ("NormSetup", "ln"),
    ],
)
def test_a_module_class_chosen_from_a_table_stays_linen_and_runs(tmp_path, cls_name, norm):
    """``NORMS[self.norm](epsilon=1e-3)(x)`` / ``get_norm(self.norm)(...)(x)``: the class was rewritten as
    NNX without the norm's parameters and failed at its call (CallCompactUnboundModuleError), reported
    converted. Now each construction is a located L2N-MOD-004 and the class runs as Linen behind the
    bridge, at parity (the norm's parameters included)."""
    linen_mod, nnx_mod, result, map_path = build("class_table", tmp_path)
    lines = {f.line for f in result.findings if f.rule == "L2N-MOD-004"}
    assert len(lines) == 4, result.findings
    x = np.random.default_rng(3).normal(size=(2, 5)).astype(np.float32)

    def make(rngs):
        model = getattr(nnx_mod, cls_name)(norm=norm, rngs=rngs)
        nnx.bridge.lazy_init(model, x)
        return model

    parity = assert_parity(getattr(linen_mod, cls_name)(norm=norm), make, x, map_path)
    norm_name = "LayerNorm_0" if norm == "ln" else "RMSNorm_0"
    assert any(norm_name in path or "norm_layer" in path for path in grad_paths(parity)), grad_paths(parity)


@pytest.mark.parametrize(
    ("cls_name", "ctor", "each"),
    [
        ("Widths", {}, (5, 8)),
        ("Widths", {"widths": (3,)}, (5,)),
        ("Widths", {"widths": ()}, ()),
        ("Growing", {}, (5, 4, 8)),
        ("Growing", {"n": 0}, ()),
        ("Appended", {}, (5, 4, 8)),
        ("Appended", {"n": 1}, (5,)),
    ],
)
def test_the_layer_after_a_setup_list_reads_its_last_element(tmp_path, cls_name, ctor, each):
    """``[nn.Dense(w) for i, w in enumerate(cfg.widths)]`` (or ``self.hidden * (i + 1)`` over
    ``range(self.n)``, or a loop appending them), then a layer after the loop over the list: its size
    was written with the comprehension's own ``w`` / ``i`` (NameError at construction); it reads their
    last values now, and is the input's size where the list is empty."""
    linen_mod, nnx_mod, _, map_path = build("setup_list_last_element", tmp_path)
    x = np.random.default_rng(4).normal(size=(2, 5)).astype(np.float32)
    if cls_name == "Widths":
        linen_kw = {"cfg": linen_mod.Cfg(**ctor)}
        nnx_kw = {"cfg": nnx_mod.Cfg(**ctor)}
    else:
        linen_kw = nnx_kw = ctor
    assert_parity(
        getattr(linen_mod, cls_name)(**linen_kw),
        lambda rngs: getattr(nnx_mod, cls_name)(**nnx_kw, denses_in_features=each, in_features=5, rngs=rngs),
        x,
        map_path,
    )
