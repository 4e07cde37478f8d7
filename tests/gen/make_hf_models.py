#!/usr/bin/env python3
"""make_hf_models.py - writes tests/data/hf/ (committed; CI needs no Python).

Tiny random-init Hugging Face models saved by transformers' own save_pretrained,
with transformers' greedy generation as the reference the C test compares against.
Pinned versions: tests/gen/requirements-hf.txt. Run from the repo root:
  python tests/gen/make_hf_models.py [FIXTURES]   (FIXTURES: ../shared/fixtures)

Tokenizers (real vocabularies, cut small):
  spm512: stories260K's 512-token SentencePiece vocab (fixtures gguf/stories260K.gguf)
          as a Llama-2-style tokenizer.json (BPE + byte_fallback, merges from scores,
          as transformers' SpmConverter derives them).
  bpe512: the first 512 ids of the Llama 3 vocab (fixtures vocab/ggml-vocab-llama-bpe.gguf)
          and the merges (in their order) whose halves and result all lie among them, with the
          Llama 3 (or, for Qwen models, the Qwen2) pre-tokenizer regex.
Models (hidden 64, 2 layers, fixed seeds): llama (untied, f16, rope_scaling linear),
llama-bias (1 layer, bf16, tied, attention_bias: q/k/v/o biases), llama-tied (bf16, bpe512, llama3 rope scaling), mistral (f16, head_dim 24
!= 64/4, sharded with an index),
qwen2 (f32, yarn rope scaling),
qwen3 (bf16), mixtral (f16, as mixtral.tar.gz only), qwen2-moe (bf16), qwen3-moe (f16).
Next to each: reference.json = prompts (text, HF token ids incl. BOS as the tokenizer
adds it), greedy ids from model.generate in float32, the per-step top-1 margin
(top1 - top2 logit) and the first step's top-5 logits. Output is deterministic (fixed seeds, mtime 0 in archives).
"""
import json
import os
import shutil
import struct
import sys
import tarfile

import torch
import transformers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

OUT = "tests/data/hf"
FIX = sys.argv[1] if len(sys.argv) > 1 else "../shared/fixtures"
N_GEN = 16
PROMPTS = ["Once upon a time", "The little dog", "Hello world, 123!", "she said"]


def gguf_kv(path):
    """Read the key/value section of a GGUF file (just what the tokenizers need)."""
    with open(path, "rb") as f:
        b = f.read()
    assert b[:4] == b"GGUF"
    off = 8
    n_t, n_kv = struct.unpack_from("<QQ", b, off)
    off += 16
    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def rstr(o):
        n = struct.unpack_from("<Q", b, o)[0]
        return b[o + 8:o + 8 + n].decode("utf-8", "surrogateescape"), o + 8 + n

    def rval(t, o):
        if t == 8:
            return rstr(o)
        if t == 9:
            et, n = struct.unpack_from("<IQ", b, o)
            o += 12
            if et in sizes:
                fmt = "<%d%s" % (n, sizes[et])
                return list(struct.unpack_from(fmt, b, o)), o + struct.calcsize(fmt)
            out = []
            for _ in range(n):
                v, o = rval(et, o)
                out.append(v)
            return out, o
        fmt = "<" + sizes[t]
        return struct.unpack_from(fmt, b, o)[0], o + struct.calcsize(fmt)

    kv = {}
    for _ in range(n_kv):
        k, off = rstr(off)
        t = struct.unpack_from("<I", b, off)[0]
        v, off = rval(t, off + 4)
        kv[k] = v
    return kv


def spm_merges(vocab, scores):
    """Merges of an SPM vocab: every split of a piece into two pieces, ordered by the
    merged piece's score (best first), then by the ids of the halves."""
    merges = []
    for piece, sc in scores.items():
        local = [(piece[:i], piece[i:], sc) for i in range(1, len(piece)) if piece[:i] in vocab and piece[i:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: -m[2])
    return [(a, b) for a, b, _ in merges]


def spm_tokenizer(kv):
    toks, scores, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.scores"], kv["tokenizer.ggml.token_type"]
    vocab = {t: i for i, t in enumerate(toks)}
    merge_scores = {t: scores[i] for i, t in enumerate(toks) if types[i] == 1}
    bpe = models.BPE(vocab=vocab, merges=spm_merges(vocab, merge_scores), unk_token=toks[0], byte_fallback=True,
                     fuse_unk=True)
    tk = Tokenizer(bpe)
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tk.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(" ", 1, 0)])
    tk.add_special_tokens([AddedToken(toks[i], normalized=False, special=True) for i in range(3)])
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                      special_tokens=[("<s>", 1)])
    cfg = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
           "add_eos_token": False, "model_max_length": 2048, "tokenizer_class": "LlamaTokenizerFast",
           "legacy": False}
    return tk, cfg, 1, 2


LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
             r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
            r"\s*[\r\n]+|\s+(?!\S)|\s+")


def bpe_tokenizer(kv, regex, n=512, bos=True):
    toks = kv["tokenizer.ggml.tokens"][:n]
    vocab = {t: i for i, t in enumerate(toks)}
    merges = [tuple(m.split(" ")) for m in kv["tokenizer.ggml.merges"]]
    merges = [(a, b) for a, b in merges if a in vocab and b in vocab and a + b in vocab]
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_end|>"]
    vocab_all = dict(vocab)
    bpe = models.BPE(vocab=vocab, merges=merges, ignore_merges=True)
    tk = Tokenizer(bpe)
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in specials])
    for i, s in enumerate(specials):
        vocab_all[s] = n + i
    if bos:
        tk.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                          special_tokens=[("<|begin_of_text|>", n)])])
    else:
        tk.post_processor = processors.ByteLevel(trim_offsets=False)
    cfg = {"bos_token": "<|begin_of_text|>" if bos else None, "eos_token": "<|end_of_text|>", "add_bos_token": bos,
           "model_max_length": 2048, "tokenizer_class": "PreTrainedTokenizerFast"}
    return tk, cfg, n if bos else None, n + 1


def save_tokenizer(d, tk, cfg):
    tk.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


COMMON = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256,
              rms_norm_eps=1e-5, initializer_range=0.25)


def configs(n_spm, n_bpe):
    return {
        "llama": ("LlamaConfig", "LlamaForCausalLM", "spm", torch.float16, dict(
            COMMON, vocab_size=n_spm, intermediate_size=128, num_key_value_heads=2, rope_theta=10000.0,
            tie_word_embeddings=False, rope_scaling={"type": "linear", "factor": 2.0})),
        "llama-tied": ("LlamaConfig", "LlamaForCausalLM", "llama3", torch.bfloat16, dict(
            COMMON, vocab_size=n_bpe, intermediate_size=96, num_key_value_heads=4, rope_theta=500000.0,
            tie_word_embeddings=True, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
        "mistral": ("MistralConfig", "MistralForCausalLM", "spm", torch.float16, dict(
            COMMON, vocab_size=n_spm, intermediate_size=128, num_key_value_heads=1, head_dim=24, rope_theta=1e6,
            sliding_window=None, tie_word_embeddings=False)),
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", "qwen2", torch.float32, dict(
            COMMON, vocab_size=n_bpe, intermediate_size=128, num_key_value_heads=2, rope_theta=1e6,
            tie_word_embeddings=True, use_sliding_window=False,
            rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})),
        "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", "qwen2", torch.bfloat16, dict(
            COMMON, vocab_size=n_bpe, intermediate_size=128, num_key_value_heads=2, head_dim=32, rope_theta=1e6,
            tie_word_embeddings=False, use_sliding_window=False)),
        "mixtral": ("MixtralConfig", "MixtralForCausalLM", "spm", torch.float16, dict(
            COMMON, vocab_size=n_spm, intermediate_size=64, num_key_value_heads=2, num_local_experts=4,
            num_experts_per_tok=2, rope_theta=1e6, tie_word_embeddings=False, sliding_window=None)),
        "qwen2-moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", "qwen2", torch.bfloat16, dict(
            COMMON, vocab_size=n_bpe, intermediate_size=128, moe_intermediate_size=32,
            shared_expert_intermediate_size=96, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
            norm_topk_prob=False, decoder_sparse_step=1, rope_theta=1e6, tie_word_embeddings=False,
            use_sliding_window=False)),
        "qwen3-moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", "qwen2", torch.float16, dict(
            COMMON, vocab_size=n_bpe, intermediate_size=128, moe_intermediate_size=32, num_key_value_heads=2,
            head_dim=16, num_experts=4, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
            rope_theta=1e6, tie_word_embeddings=False, use_sliding_window=False)),
        "llama-bias": ("LlamaConfig", "LlamaForCausalLM", "spm", torch.bfloat16, dict(
            COMMON, num_hidden_layers=1, vocab_size=n_spm, intermediate_size=64, num_key_value_heads=2,
            tie_word_embeddings=True, attention_bias=True)),
    }


def reference(model, tk, bos_id):
    out = []
    model = model.float().eval()
    for text in PROMPTS:
        ids = tk.encode(text).ids
        x = torch.tensor([ids])
        with torch.no_grad():
            # explicit mask: otherwise generate() masks every prompt id equal to pad_token_id
            g = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=N_GEN, min_new_tokens=N_GEN, do_sample=False,
                               output_scores=True, return_dict_in_generate=True, pad_token_id=0,
                               eos_token_id=None)
        gen = g.sequences[0, len(ids):].tolist()
        margins = []
        for s in g.scores:
            top = torch.topk(s[0].float(), 2).values
            margins.append(float(top[0] - top[1]))
        top5 = torch.topk(g.scores[0][0].float(), 5)
        first = [{"id": int(i), "logit": float(v)} for v, i in zip(top5.values, top5.indices)]
        out.append({"text": text, "prompt_ids": ids, "ids": gen, "margins": margins, "first_step_top5": first})
    return out


def archive(src_dir, dst):
    def reset(ti):
        ti.mtime = 0
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        return ti
    import gzip
    with open(dst, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        name = os.path.basename(src_dir)
        tf.add(src_dir, arcname=name, recursive=False, filter=reset)
        for f in sorted(os.listdir(src_dir)):
            tf.add(os.path.join(src_dir, f), arcname=name + "/" + f, filter=reset)


def main():
    os.makedirs(OUT, exist_ok=True)  # tok/ (make_hf_tokenizers.py) stays
    spm_kv = gguf_kv(os.path.join(FIX, "gguf/stories260K.gguf"))
    bpe_kv = gguf_kv(os.path.join(FIX, "vocab/ggml-vocab-llama-bpe.gguf"))
    toks = {"spm": spm_tokenizer(spm_kv), "llama3": bpe_tokenizer(bpe_kv, LLAMA3_RE),
            "qwen2": bpe_tokenizer(bpe_kv, QWEN2_RE, bos=False)}
    n_spm = toks["spm"][0].get_vocab_size()
    n_bpe = toks["llama3"][0].get_vocab_size()
    for seed, (name, (cfg_cls, model_cls, tok, dtype, kw)) in enumerate(configs(n_spm, n_bpe).items()):
        tk, tcfg, bos, eos = toks[tok]
        kw = dict(kw, bos_token_id=bos, eos_token_id=eos)
        torch.manual_seed(1000 + seed)
        cfg = getattr(transformers, cfg_cls)(**kw)
        model = getattr(transformers, model_cls)(cfg).eval()
        with torch.no_grad():  # norms start at 1; give them some spread so they are tested
            for n, p in model.named_parameters():
                if "norm" in n:
                    p.copy_(1.0 + 0.2 * torch.randn_like(p))
                if n.endswith(".bias"):
                    p.copy_(0.1 * torch.randn_like(p))
        model = model.to(dtype)
        d = os.path.join(OUT, name)
        shutil.rmtree(d, ignore_errors=True)
        shard = "20KB" if name == "mistral" else "1GB"
        model.save_pretrained(d, safe_serialization=True, max_shard_size=shard)
        save_tokenizer(d, tk, tcfg)
        # the reference runs in float32 on exactly the stored (possibly 16-bit) weights
        m2 = getattr(transformers, model_cls).from_pretrained(d, torch_dtype=torch.float32)
        ref = {"model": name, "architecture": model_cls, "dtype": str(dtype).replace("torch.", ""),
               "transformers": transformers.__version__, "torch": torch.__version__,
               "greedy": reference(m2, tk, bos)}
        with open(os.path.join(OUT, name + ".reference.json"), "w") as f:
            json.dump(ref, f, indent=1)
    archive(os.path.join(OUT, "mixtral"), os.path.join(OUT, "mixtral.tar.gz"))
    shutil.rmtree(os.path.join(OUT, "mixtral"))


if __name__ == "__main__":
    main()
