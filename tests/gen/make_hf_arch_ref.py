#!/usr/bin/env python3
"""make_hf_arch_ref.py - Hugging Face checkpoints of Gemma 2, Phi-3 and a Gemma 3 with a
vision tower, and transformers' greedy runs on them, for tests/test_engine_hf.c.

Each model is random, built with transformers' own classes (pinned versions:
tests/gen/requirements-gemma3.txt) and saved as safetensors + config.json under
tests/data/hf/NAME/; transformers' float32 greedy run of its prompts goes to
tests/data/ref/hf-NAME.json in tools/llref's format (make_gemma3_ref.greedy: one full
forward per step without a cache, argmax of raw logits; first-step top-10 logits and
log-sum-exp). qconvert converts the folders; the test runs the bundles on the CPU
engine and compares. Run from the repository root, in the venv:
  /tmp/venv-g3/bin/python tests/gen/make_hf_arch_ref.py [NAME ...]
(no NAME: every model; else only those, e.g. phi3_partial).
Output is deterministic (fixed seeds, float32 on the CPU, one thread).

Models:
- gemma2 (bf16): 4 layers, so layers 0 and 2 attend through a window of 4 and 1 and 3
  attend to everything; attention soft-cap 4 and final soft-cap 8 (transformers'
  defaults 50/30 would not bite at this scale); query_pre_attn_scalar = head_dim = 16;
  norm weights w ~ N(0, 0.3), which Gemma2RMSNorm applies as (1 + w).
- phi3 (f16): fused qkv_proj (GQA 4/2) and gate_up_proj, sliding_window 8 on every
  layer, no rope_scaling.
- phi3-longrope (f16): rope_scaling longrope with short and long factor tables,
  max_position_embeddings 256 over original_max_position_embeddings 64, so
  transformers' attention factor is sqrt(1 + ln 4 / ln 64) on cos and sin with either
  table. transformers picks the table per forward by the sequence length (long when
  longer than 64); two references keep every forward on one side: hf-phi3-longrope-short
  (prompts of at most 32 ids, so at most 63 positions: the short table; the test runs
  the engine with a 64-token context) and hf-phi3-longrope-long (prompts of 65-72 ids:
  the long table from the first forward; engine context 128).
- phi3-partial (f16): Phi-4-mini's shape in small: partial_rotary_factor 0.75 (RoPE on
  the first 12 of each head's 16 dims; the last 4 pass through), LongRoPE with tables of
  12 / 2 = 6 factors (transformers sizes them by the rotated dims), tied embeddings, 2
  heads of 16 over 1 K/V head, sliding_window longer than the context (Phi-4-mini states
  262144); references hf-phi3-partial-short (prompts of at most 32 ids, engine context
  64: the short table) and hf-phi3-partial-long (65-72 ids, context 128: the long
  table), as phi3-longrope.
- gemma3-cg: tests/data/hf/gemma3's weights inside transformers'
  Gemma3ForConditionalGeneration with a tiny random SigLIP vision tower and projector
  (saved under the class's own names, language_model.*), whose text logits are asserted
  equal to Gemma3ForCausalLM's; its reference is tests/data/ref/gemma3-bf16.json.
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gemma3_ref import greedy  # noqa: E402  (same reference rules as gemma3-bf16)

HF_OUT = "tests/data/hf"
REF_OUT = "tests/data/ref"
N_VOCAB = 256
# matrix weights: Gemma 2 std 0.2 (larger: the scaled embedding dominates and prompts repeat
# their last token), Phi-3 std 0.7 (smaller: near-flat logits, few margins above 0.05)
GEMMA2_STD = 0.2
PHI3_STD = 0.7
NORM_STD = 0.3


def randomize(model, seed, dtype, wstd):
    """Every parameter N(0, wstd) (norms N(0, NORM_STD)), rounded to dtype."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            std = NORM_STD if name.endswith("norm.weight") else wstd
            p.copy_(torch.randn(p.shape) * std)
            p.copy_(p.to(dtype).to(torch.float32))
    return model.eval()


def save_hf(model, name, arch, dtype, skip=()):
    out = os.path.join(HF_OUT, name)
    os.makedirs(out, exist_ok=True)
    sd = {k: v.to(dtype).contiguous() for k, v in model.state_dict().items() if k not in skip}
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    cfg["architectures"] = [arch]
    cfg["torch_dtype"] = str(dtype).replace("torch.", "")
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def prompts(seed, lens, bos):
    g = np.random.default_rng(seed)
    return [[bos] + [int(x) for x in g.integers(4, N_VOCAB, n - 1)] for n in lens]


def write_ref(name, folder, cls, model, ps):
    ref = {
        "file": "tests/data/hf/%s" % folder,
        "made_by": "transformers %s %s (torch %s, float32, eager attention, CPU)"
                   % (transformers.__version__, cls, torch.__version__),
        "greedy_invocation": "tests/gen/make_hf_arch_ref.py: one full forward per step (use_cache=False), "
                             "argmax of raw logits",
        "greedy": [greedy(model, p) for p in ps],
    }
    with open(os.path.join(REF_OUT, "hf-%s.json" % name), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")


def gemma2():
    cfg = transformers.Gemma2Config(
        vocab_size=N_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
        rms_norm_eps=1e-6, rope_theta=10000.0, query_pre_attn_scalar=16, sliding_window=4,
        attn_logit_softcapping=4.0, final_logit_softcapping=8.0, hidden_activation="gelu_pytorch_tanh",
        pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
        torch_dtype="float32", attn_implementation="eager")
    model = randomize(transformers.Gemma2ForCausalLM(cfg), 5, torch.bfloat16, GEMMA2_STD)
    save_hf(model, "gemma2", "Gemma2ForCausalLM", torch.bfloat16, skip=("lm_head.weight",))
    write_ref("gemma2", "gemma2", "Gemma2ForCausalLM", model, prompts(5, [1, 3, 5, 7, 9, 12, 16, 20], 2))


def phi3_config(**kw):
    return transformers.Phi3Config(
        vocab_size=N_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=10000.0,
        hidden_act="silu", pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=False,
        torch_dtype="float32", attn_implementation="eager", **kw)


def phi3():
    cfg = phi3_config(max_position_embeddings=128, original_max_position_embeddings=128, sliding_window=8)
    model = randomize(transformers.Phi3ForCausalLM(cfg), 7, torch.float16, PHI3_STD)
    save_hf(model, "phi3", "Phi3ForCausalLM", torch.float16)
    write_ref("phi3", "phi3", "Phi3ForCausalLM", model, prompts(7, [1, 3, 5, 7, 9, 12, 16, 20], 2))


def phi3_longrope():
    hd = 32 // 4
    g = np.random.default_rng(11)
    # divisors of each rotated pair's frequency: short near 1, long growing with the
    # pair index as the released tables do (both far enough apart to tell)
    short = [round(float(x), 4) for x in 1.0 + 0.2 * g.random(hd // 2)]
    long = [round(float(x), 4) for x in np.linspace(1.0, 12.0, hd // 2) * (1.0 + 0.1 * g.random(hd // 2))]
    cfg = phi3_config(max_position_embeddings=256, original_max_position_embeddings=64, sliding_window=None,
                      rope_scaling={"type": "longrope", "short_factor": short, "long_factor": long})
    model = randomize(transformers.Phi3ForCausalLM(cfg), 9, torch.float16, PHI3_STD)
    save_hf(model, "phi3-longrope", "Phi3ForCausalLM", torch.float16)
    write_ref("phi3-longrope-short", "phi3-longrope", "Phi3ForCausalLM", model,
              prompts(9, [1, 3, 6, 10, 15, 20, 26, 32], 2))
    write_ref("phi3-longrope-long", "phi3-longrope", "Phi3ForCausalLM", model,
              prompts(10, [65, 66, 67, 68, 69, 70, 71, 72], 2))


def phi3_partial():
    # seed 17: at 15 and 18 most prompts hit a greedy margin below 0.05 within 1-4 steps.
    # hidden 64 with 4 heads of 16 was tried first: exact with float32 K/V (1e-5), but
    # the engine's binary16 K/V moved first-step logits by 5.6e-3 at that scale
    hd = 32 // 2
    rot = int(hd * 0.75)
    g = np.random.default_rng(15)
    short = [round(float(x), 4) for x in 1.0 + 0.2 * g.random(rot // 2)]
    long = [round(float(x), 4) for x in np.linspace(1.0, 12.0, rot // 2) * (1.0 + 0.1 * g.random(rot // 2))]
    cfg = transformers.Phi3Config(
        vocab_size=N_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, rms_norm_eps=1e-5, rope_theta=10000.0,
        hidden_act="silu", pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
        max_position_embeddings=256, original_max_position_embeddings=64, sliding_window=1024,
        partial_rotary_factor=0.75, rope_scaling={"type": "longrope", "short_factor": short, "long_factor": long},
        torch_dtype="float32", attn_implementation="eager")
    model = randomize(transformers.Phi3ForCausalLM(cfg), 17, torch.float16, PHI3_STD)
    model.tie_weights()
    assert model.model.rotary_emb.inv_freq.shape[0] == rot // 2
    save_hf(model, "phi3-partial", "Phi3ForCausalLM", torch.float16, skip=("lm_head.weight",))
    write_ref("phi3-partial-short", "phi3-partial", "Phi3ForCausalLM", model,
              prompts(15, [1, 3, 6, 10, 15, 20, 26, 32], 2))
    write_ref("phi3-partial-long", "phi3-partial", "Phi3ForCausalLM", model,
              prompts(16, [65, 66, 67, 68, 69, 70, 71, 72], 2))


def gemma3_cg():
    """tests/data/hf/gemma3's text weights in a Gemma3ForConditionalGeneration."""
    src = os.path.join(HF_OUT, "gemma3")
    with open(os.path.join(src, "config.json")) as f:
        tcfg = json.load(f)
    for k in ("architectures", "torch_dtype", "transformers_version", "_name_or_path"):
        tcfg.pop(k, None)
    text = transformers.Gemma3TextConfig(**tcfg)
    vision = transformers.SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, image_size=16, patch_size=4)
    cfg = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                    boi_token_index=250, eoi_token_index=251, image_token_index=252,
                                    torch_dtype="float32", attn_implementation="eager")
    cfg.text_config._attn_implementation = "eager"
    causal = transformers.Gemma3ForCausalLM(text).eval()
    sd = {k: v.to(torch.float32) for k, v in load_file(os.path.join(src, "model.safetensors")).items()}
    missing, unexpected = causal.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    torch.manual_seed(13)
    model = transformers.Gemma3ForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.startswith("language_model."):
                p.copy_((torch.randn(p.shape) * 0.1).to(torch.bfloat16).to(torch.float32))
    missing, unexpected = model.language_model.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    model.language_model.tie_weights()
    with torch.no_grad():  # the text path must be the causal model's, bit for bit
        ids = torch.tensor([[2, 17, 99, 3, 45, 200, 7, 8, 9]])
        a = causal(ids, use_cache=False).logits
        b = model(input_ids=ids, use_cache=False).logits
        assert torch.equal(a, b), float((a - b).abs().max())
    save_hf(model, "gemma3-cg", "Gemma3ForConditionalGeneration", torch.bfloat16,
            skip=("language_model.lm_head.weight",))


MODELS = {"gemma2": gemma2, "phi3": phi3, "phi3_longrope": phi3_longrope, "phi3_partial": phi3_partial,
          "gemma3_cg": gemma3_cg}


def main():
    torch.set_num_threads(1)
    for name in sys.argv[1:] or MODELS:
        MODELS[name]()


if __name__ == "__main__":
    sys.exit(main())
