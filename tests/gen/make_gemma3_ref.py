#!/usr/bin/env python3
"""make_gemma3_ref.py - writes the Gemma 3 (text) reference of tests/test_engine_gemma3.c.

Gemma 3 postdates the project's llama.cpp reference (c392e50), so its reference is
transformers: a small random Gemma3ForCausalLM built with transformers' own classes,
saved as safetensors + config.json (tests/data/hf/gemma3/), the same weights written as
a GGUF with gguf-py under llama.cpp's gemma3 names and keys (tests/data/ref/NAME.gguf),
and transformers' greedy run for 8 prompts (tests/data/ref/NAME.json, the format
tools/llref writes: prompt ids, 32 greedy ids, per-step top-1 margins, first-step
top-10 logits and log-sum-exp).
Pinned versions: tests/gen/requirements-gemma3.txt. Run from the repository root:
  python tests/gen/make_gemma3_ref.py
Output is deterministic (fixed seeds, float32 on the CPU, one thread).

The model: 7 layers, so layers 0-4 and 6 are local (sliding window 4, RoPE base
10000) and layer 5 is global (rope_theta 1e6 with linear scaling factor 4, which
transformers applies to the global layers only); GQA 4/2 with head_dim 16 != 32/4;
query_pre_attn_scalar = head_dim (what llama.cpp assumes below 62 layers: a GGUF
does not store it). Weights are drawn with std WEIGHT_STD (transformers' 0.02 gives
near-flat logits), rounded to bfloat16 and stored so; norm weights w ~ N(0, 0.3),
which Gemma3RMSNorm applies as (1 + w).

GGUF facts (llama.cpp convert_hf_to_gguf.py Gemma3Model, read for facts only):
every tensor whose name ends in "norm.weight" (input/post-attention/pre/post-FFN
norms, q_norm, k_norm, the final norm) is written as w + 1, in float32 (bf16 inputs
are upcast before the shift) and kept F32; matrices keep their bf16; no output.weight
(tied); keys context_length, embedding_length, block_count, feed_forward_length,
attention.head_count(_kv), attention.layer_norm_rms_epsilon, attention.key_length,
attention.value_length, rope.freq_base (the global layers'), attention.sliding_window,
rope.scaling.type "linear" + rope.scaling.factor when the config has rope_scaling.
The local layers' base (10000) and the pattern (5 local of every 6) are not stored:
llama.cpp's gemma3 loader fixes them.
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
import gguf
from safetensors.torch import save_file

NAME = "gemma3-bf16"
HF_OUT = "tests/data/hf/gemma3"
REF_OUT = "tests/data/ref"
N_GEN = 32
N_VOCAB = 256
WEIGHT_STD = 0.35
NORM_STD = 0.3
SEED = 3


def config():
    return transformers.Gemma3TextConfig(
        vocab_size=N_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=7,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
        rms_norm_eps=1e-6, rope_theta=1e6, rope_local_base_freq=10000.0,
        rope_scaling={"rope_type": "linear", "factor": 4.0}, query_pre_attn_scalar=16,
        sliding_window=4, sliding_window_pattern=6, final_logit_softcapping=None,
        attn_logit_softcapping=None, hidden_activation="gelu_pytorch_tanh",
        pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
        torch_dtype="float32", attn_implementation="eager")


def build_model():
    torch.manual_seed(SEED)
    model = transformers.Gemma3ForCausalLM(config()).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            std = NORM_STD if name.endswith("norm.weight") else WEIGHT_STD
            p.copy_(torch.randn(p.shape) * std)
            p.copy_(p.to(torch.bfloat16).to(torch.float32))  # bf16-exact values
    return model


def prompts():
    """8 prompts of 1-20 ids, BOS first; most exceed the window (4) at once."""
    g = np.random.default_rng(SEED)
    lens = [1, 3, 5, 7, 9, 12, 16, 20]
    return [[2] + [int(x) for x in g.integers(4, N_VOCAB, n - 1)] for n in lens]


def greedy(model, ids):
    """Greedy run, one full forward per step (no cache): transformers' own arithmetic,
    no cache path whose sliding-window bookkeeping could differ."""
    seq = list(ids)
    out, margins, first = [], [], None
    with torch.no_grad():
        for step in range(N_GEN):
            logits = model(torch.tensor([seq]), use_cache=False).logits[0, -1].double()
            top2 = torch.topk(logits, 2)
            out.append(int(top2.indices[0]))
            margins.append(float(top2.values[0] - top2.values[1]))
            if step == 0:
                first = logits
            seq.append(out[-1])
    t10 = torch.topk(first, 10)
    return {
        "prompt_ids": list(ids), "ids": out, "margins": [round(m, 9) for m in margins],
        "first_step_top10": [{"id": int(i), "logit": round(float(v), 9)} for v, i in zip(t10.values, t10.indices)],
        "first_step_logsumexp": round(float(torch.logsumexp(first, 0)), 9),
    }


def save_hf(model):
    os.makedirs(HF_OUT, exist_ok=True)
    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(sd, os.path.join(HF_OUT, "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    cfg["architectures"] = ["Gemma3ForCausalLM"]
    cfg["torch_dtype"] = "bfloat16"
    with open(os.path.join(HF_OUT, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


# HF name (model.layers.N. stripped) -> llama.cpp gemma3 GGUF name (blk.N.)
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    parts = hf.split(".")
    assert parts[0] == "model" and parts[1] == "layers", hf
    return "blk.%s.%s" % (parts[2], LAYER_NAMES[".".join(parts[3:])])


def write_vocab(w):
    toks = ["<pad>", "<eos>", "<bos>", "<unk>"] + ["\u2581t%d" % i for i in range(4, N_VOCAB)]
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * 4 + [-float(i) for i in range(4, N_VOCAB)])
    w.add_token_types([3, 3, 3, 2] + [1] * (N_VOCAB - 4))
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(False)


def save_gguf(model, path):
    c = model.config
    w = gguf.GGUFWriter(path, "gemma3")
    w.add_name("qconvert gemma3 reference (random, transformers %s)" % transformers.__version__)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_rope_freq_base(c.rope_theta)
    w.add_sliding_window(c.sliding_window)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    w.add_rope_scaling_factor(c.rope_scaling["factor"])
    write_vocab(w)
    for hf, t in model.state_dict().items():
        if hf == "lm_head.weight":
            continue  # tied: llama.cpp reads token_embd
        t = t.to(torch.bfloat16).to(torch.float32)  # the converter upcasts bf16 first
        if hf.endswith("norm.weight"):
            w.add_tensor(gguf_name(hf), (t + 1.0).numpy().astype(np.float32))
        else:
            q = gguf.quants.quantize(t.numpy(), gguf.GGMLQuantizationType.BF16)
            w.add_tensor(gguf_name(hf), q, raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    torch.set_num_threads(1)
    model = build_model()
    save_hf(model)
    save_gguf(model, os.path.join(REF_OUT, NAME + ".gguf"))
    ref = {
        "file": NAME + ".gguf",
        "made_by": "transformers %s Gemma3ForCausalLM (torch %s, float32, eager attention, CPU)"
                   % (transformers.__version__, torch.__version__),
        "greedy_invocation": "tests/gen/make_gemma3_ref.py: one full forward per step (use_cache=False), "
                             "argmax of raw logits",
        "greedy": [greedy(model, p) for p in prompts()],
    }
    with open(os.path.join(REF_OUT, NAME + ".json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
