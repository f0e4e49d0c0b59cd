"""Trace specs for Hugging Face ``transformers`` 4.46.3 Flax models (``bench/outside_transformers.py``).

One function per model, each a tiny config (2 layers, width 32, 4 heads, a vocabulary of about 60) on
two sequences of ids with a padded mask (or two images, two waveforms), dropout off, the model's own
``__call__`` arguments in its order, ``return_dict=False`` (the loss reads the float leaves of the
output tuple). ``transformers`` is the copy the bench puts on ``sys.path``. No ``EXAMPLE``: the corpus
bench does not read this file.
"""

import dataclasses

import jax.numpy as jnp
import numpy as np

from linen2nnx.spec import LinenSide


def _ids(length: int, vocab: int = 60) -> np.ndarray:
    return np.random.default_rng(length).integers(1, vocab, size=(2, length)).astype("int32")


def _mask(length: int) -> np.ndarray:
    mask = np.ones((2, length), "int32")
    mask[1, -2:] = 0  # the second sequence padded
    return mask


def _positions(length: int) -> np.ndarray:
    return np.broadcast_to(np.arange(length, dtype="int32"), (2, length)).copy()


def _ones(length: int) -> np.ndarray:
    return np.ones((2, length), "int32")


def _images(size: int) -> np.ndarray:
    return np.random.default_rng(size).standard_normal((2, size, size, 3)).astype("float32")


def _float_leaves_loss(out, batch) -> jnp.ndarray:
    leaves = out if isinstance(out, tuple) else (out,)
    return sum(
        jnp.mean(jnp.asarray(o, jnp.float32) ** 2)
        for o in leaves
        if hasattr(o, "shape") and o.dtype.kind == "f"
    )


def _side(model, batch: dict, name: str, long: dict | None = None, **call) -> LinenSide:
    """The batch's entries ``"0"``, ``"1"``, ... are the model's positional arguments, in order."""
    kwargs = {"return_dict": False, **call}
    return LinenSide(
        model=model,
        batch=batch,
        long_batch=long,
        inputs=lambda b: (tuple(b[str(i)] for i in range(len(b))), dict(kwargs)),
        loss=_float_leaves_loss,
        train_kwargs={"deterministic": False},
        eval_kwargs={"deterministic": True},
        name=name,
    )


def _text(length: int, *parts: str) -> dict:
    make = {"ids": _ids, "mask": _mask, "types": _ones, "pos": _positions}
    return {f"{i}": make[p](length) for i, p in enumerate(parts)}


def _text_side(
    model, name: str, parts: tuple[str, ...], length: int = 6, long: int = 12, **call
) -> LinenSide:
    """A text model called with ``parts`` (ids, mask, token types, positions) of two sequences."""
    return _side(model, _text(length, *parts), name, _text(long, *parts), **call)


def _seq2seq(length: int) -> dict:
    return {
        "0": _ids(length),
        "1": _mask(length),
        "2": _ids(5),
        "3": _ones(5),
        "4": _positions(length),
        "5": _positions(5),
    }


SEQ2SEQ = dict(
    vocab_size=64, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
    encoder_ffn_dim=48, decoder_ffn_dim=40, max_position_embeddings=24, dropout=0.0, attention_dropout=0.0,
    activation_dropout=0.0, pad_token_id=1, decoder_start_token_id=2, scale_embedding=True,
)  # fmt: skip
ENCODER = dict(
    vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=40,
    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
)  # fmt: skip


def bert(example=None) -> LinenSide:
    from transformers import BertConfig
    from transformers.models.bert import modeling_flax_bert as m

    cfg = BertConfig(**ENCODER, max_position_embeddings=24, type_vocab_size=2)
    module = m.FlaxBertForPreTrainingModule(cfg)
    return _text_side(module, "hf/Bert", ("ids", "mask", "types", "pos"), head_mask=None)


def roformer(example=None) -> LinenSide:
    from transformers import RoFormerConfig
    from transformers.models.roformer import modeling_flax_roformer as m

    cfg = RoFormerConfig(
        **ENCODER, embedding_size=32, max_position_embeddings=24, type_vocab_size=2, rotary_value=True
    )
    module = m.FlaxRoFormerForMaskedLMModule(cfg)
    return _text_side(module, "hf/RoFormer", ("ids", "mask", "types"), head_mask=None)


def xlm_roberta(example=None) -> LinenSide:
    from transformers import XLMRobertaConfig
    from transformers.models.xlm_roberta import modeling_flax_xlm_roberta as m

    cfg = XLMRobertaConfig(**ENCODER, max_position_embeddings=30, type_vocab_size=1, pad_token_id=1)

    def batch(length: int) -> dict:  # token types 0, positions past the padding id
        return {"0": _ids(length), "1": _mask(length), "2": 0 * _ones(length), "3": _positions(length) + 2}

    module = m.FlaxXLMRobertaForMaskedLMModule(cfg)
    return _side(module, batch(6), "hf/XLMRoberta", batch(12), head_mask=None)


def big_bird(example=None) -> LinenSide:
    from transformers import BigBirdConfig
    from transformers.models.big_bird import modeling_flax_big_bird as m

    cfg = BigBirdConfig(
        **ENCODER, max_position_embeddings=48, type_vocab_size=2, attention_type="block_sparse", block_size=2,
        num_random_blocks=1,
    )  # fmt: skip
    module = m.FlaxBigBirdForPreTrainingModule(cfg)
    side = _text_side(module, "hf/BigBird", ("ids", "mask", "types", "pos"), 16, 24, head_mask=None)
    return dataclasses.replace(
        side, rng_streams=("params", "dropout", "indices")
    )  # random blocks' own stream


def distilbert(example=None) -> LinenSide:
    from transformers import DistilBertConfig
    from transformers.models.distilbert import modeling_flax_distilbert as m

    cfg = DistilBertConfig(
        vocab_size=60, dim=32, n_layers=2, n_heads=4, hidden_dim=40, max_position_embeddings=24, dropout=0.0,
        attention_dropout=0.0, qa_dropout=0.0, seq_classif_dropout=0.0,
    )  # fmt: skip
    return _text_side(m.FlaxDistilBertForMaskedLMModule(cfg), "hf/DistilBert", ("ids", "mask"))


def gpt2(example=None) -> LinenSide:
    from transformers import GPT2Config
    from transformers.models.gpt2 import modeling_flax_gpt2 as m

    cfg = GPT2Config(
        vocab_size=60, n_positions=24, n_embd=32, n_layer=2, n_head=4, n_inner=40, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0,
    )  # fmt: skip
    return _text_side(m.FlaxGPT2LMHeadModule(cfg), "hf/GPT2", ("ids", "mask", "pos"))


def gptj(example=None) -> LinenSide:
    from transformers import GPTJConfig
    from transformers.models.gptj import modeling_flax_gptj as m

    cfg = GPTJConfig(
        vocab_size=60, n_positions=24, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_inner=40, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    return _text_side(m.FlaxGPTJForCausalLMModule(cfg), "hf/GPTJ", ("ids", "mask", "pos"))


def llama(example=None) -> LinenSide:
    from transformers import LlamaConfig
    from transformers.models.llama import modeling_flax_llama as m

    cfg = LlamaConfig(
        vocab_size=60, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=24,
    )  # fmt: skip
    return _text_side(m.FlaxLlamaForCausalLMModule(cfg), "hf/Llama", ("ids", "mask", "pos"))


def xglm(example=None) -> LinenSide:
    from transformers import XGLMConfig
    from transformers.models.xglm import modeling_flax_xglm as m

    cfg = XGLMConfig(
        vocab_size=60, max_position_embeddings=24, d_model=32, ffn_dim=40, num_layers=2, attention_heads=4,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, layerdrop=0.0,
    )  # fmt: skip
    return _text_side(m.FlaxXGLMForCausalLMModule(cfg), "hf/XGLM", ("ids", "mask", "pos"))


def pegasus(example=None) -> LinenSide:
    from transformers import PegasusConfig
    from transformers.models.pegasus import modeling_flax_pegasus as m

    module = m.FlaxPegasusForConditionalGenerationModule(PegasusConfig(**SEQ2SEQ))
    return _side(module, _seq2seq(7), "hf/Pegasus", _seq2seq(12))


def mbart(example=None) -> LinenSide:
    from transformers import MBartConfig
    from transformers.models.mbart import modeling_flax_mbart as m

    module = m.FlaxMBartForConditionalGenerationModule(MBartConfig(**SEQ2SEQ))
    return _side(module, _seq2seq(7), "hf/MBart", _seq2seq(12))


def marian(example=None) -> LinenSide:
    from transformers import MarianConfig
    from transformers.models.marian import modeling_flax_marian as m

    return _side(m.FlaxMarianMTModule(MarianConfig(**SEQ2SEQ)), _seq2seq(7), "hf/Marian", _seq2seq(12))


def vit(example=None) -> LinenSide:
    from transformers import ViTConfig
    from transformers.models.vit import modeling_flax_vit as m

    cfg = ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=40, image_size=16, patch_size=4,
        num_channels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=5,
    )  # fmt: skip
    return _side(m.FlaxViTForImageClassificationModule(cfg), {"0": _images(16)}, "hf/ViT")


def clip(example=None) -> LinenSide:
    from transformers import CLIPConfig
    from transformers.models.clip import modeling_flax_clip as m

    text = dict(
        vocab_size=60, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=24, projection_dim=16,
    )  # fmt: skip
    vision = dict(
        hidden_size=24, intermediate_size=36, num_hidden_layers=2, num_attention_heads=2, image_size=16, patch_size=4,
        projection_dim=16, num_channels=3,
    )  # fmt: skip
    cfg = CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)

    def batch(length: int) -> dict:
        return {"0": _ids(length), "1": _images(16), "2": _mask(length), "3": _positions(length)}

    return _side(m.FlaxCLIPModule(cfg), batch(6), "hf/CLIP", batch(12))


def wav2vec2(example=None) -> LinenSide:
    from transformers import Wav2Vec2Config
    from transformers.models.wav2vec2 import modeling_flax_wav2vec2 as m

    cfg = Wav2Vec2Config(
        vocab_size=12, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=40,
        conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8,
        num_conv_pos_embedding_groups=4, hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0, do_stable_layer_norm=True, feat_extract_norm="layer",
    )  # fmt: skip

    def waves(n: int) -> dict:
        return {"0": np.random.default_rng(n).standard_normal((2, n)).astype("float32")}

    return _side(m.FlaxWav2Vec2ForCTCModule(cfg), waves(200), "hf/Wav2Vec2", waves(400))


def longt5(example=None) -> LinenSide:
    from transformers import LongT5Config
    from transformers.models.longt5 import modeling_flax_longt5 as m

    cfg = LongT5Config(
        vocab_size=64, d_model=32, d_kv=8, d_ff=40, num_layers=2, num_decoder_layers=2, num_heads=4, local_radius=2,
        global_block_size=4, encoder_attention_type="transient-global", dropout_rate=0.0,
        relative_attention_num_buckets=8, relative_attention_max_distance=16, decoder_start_token_id=0,
    )  # fmt: skip

    def batch(length: int) -> dict:
        return {"0": _ids(length, 64), "1": _mask(length), "2": _ids(5, 64), "3": _ones(5)}

    return _side(m.FlaxLongT5ForConditionalGenerationModule(cfg), batch(8), "hf/LongT5", batch(13))
