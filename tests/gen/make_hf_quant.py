#!/usr/bin/env python3
"""make_hf_quant.py — tiny quantized Hugging Face checkpoints for tests/test_hf_quant.c.

Each fixture is a folder under tests/data/hfq/<name>/ holding
  config.json         the model config with the scheme's quantization_config
  model.safetensors   the checkpoint, packed by the reference library that writes it
  ref.safetensors     that library's own float32 dequantization of every quantized
                      module (key = HF module name, [out, in]); metadata "greedy" holds
                      transformers' greedy ids of the dequantized model (JSON)
Libraries (tests/gen/requirements-hfq.txt): auto-gptq (QuantLinear.pack of the
cuda backend, its Quantizer for scales, its torch forward as dequantizer), autoawq
(WQLinear_GEMM.from_linear, packing_utils.dequantize_gemm), bitsandbytes
(functional.quantize_4bit / int8_vectorwise_quant, QuantState.as_dict(packed=True),
dequantize_4bit / int8_vectorwise_dequant), compressed-tensors (its compressors and
forward.dequantize). Where a library's dequantizer runs in fp16/bf16, it is called
with float32 scales so the reference is the exact product (docs/hf-quant.md).
Deterministic: fixed seeds; rerun with  $VENV/bin/python tests/gen/make_hf_quant.py
(VENV: a venv with requirements-hf.txt and requirements-hfq.txt, docs/hf-quant.md)
"""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file

def _bare_package(name):
    """Register package `name` without running its __init__: auto-gptq's and autoawq's pull in their
    model zoos, peft and datasets, none of which packing, Quantizer or dequantize_gemm use."""
    import importlib.util
    import types
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None:  # not installed: only the fixtures that use it fail (at their import)
        return
    m = types.ModuleType(name)
    m.__path__ = list(spec.submodule_search_locations)
    m.__spec__ = spec
    sys.modules[name] = m


_bare_package("auto_gptq")
_bare_package("awq")

def _where_fp8_on_cpu():
    """torch 2.5's CPU where() has no float8 kernel, which compressed-tensors'
    calculate_qparams uses for NVFP4 scales; selecting in float32 and casting back
    is exact (every operand is an e4m3 value)."""
    orig = torch.where

    def where(cond, *args, **kw):
        if len(args) == 2 and all(isinstance(a, torch.Tensor) and a.dtype == torch.float8_e4m3fn for a in args):
            return orig(cond, args[0].float(), args[1].float()).to(torch.float8_e4m3fn)
        return orig(cond, *args, **kw)
    torch.where = where


_where_fp8_on_cpu()

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "hfq")
PROMPTS = [[1, 17, 42, 99, 3], [1, 200, 5, 61]]
N_NEW = 8


# ---------------------------------------------------------------- models

def dense_model(seed):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=False, initializer_range=0.08)
    m = LlamaForCausalLM(cfg).float().eval()
    return m


def moe_model(seed):
    from transformers import MixtralConfig, MixtralForCausalLM
    torch.manual_seed(seed)
    cfg = MixtralConfig(vocab_size=256, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                        num_local_experts=4, num_experts_per_tok=2, tie_word_embeddings=False,
                        initializer_range=0.08)
    return MixtralForCausalLM(cfg).float().eval()


def gemma_model(arch, seed):
    """Gemma 2 / Gemma 3 text, as many weights as the Llama above: tied embeddings (the
    checkpoint stores no lm_head, as Google's do), RMSNorm weights N(0, 0.3) so that
    HF's (1 + w) is not the identity, sliding layers (window 4, shorter than the prompts
    plus 8 new ids) and global ones. Gemma 2: attention and final soft-caps small enough to bite; Gemma 3: q/k
    norms, local and global RoPE bases, linear RoPE scaling on the global layers. Every
    parameter is rounded to float16 (the dtype save() stores plain tensors in), so the
    reference runs on exactly the stored values. Matrices N(0, 0.2), the embedding
    N(0, 0.05): with a larger embedding its √hidden-scaled row dominates the residual
    and, tied, every prompt repeats its last id."""
    import transformers
    torch.manual_seed(seed)
    # Gemma 3: qconvert takes llama.cpp's fixed pattern (5 local layers, then a global
    # one), so 6 layers, narrower to stay as small
    dims = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2) if arch == "gemma2" else \
        dict(hidden_size=32, intermediate_size=64, num_hidden_layers=6)
    common = dict(vocab_size=256, **dims,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                  rms_norm_eps=1e-6, query_pre_attn_scalar=16, sliding_window=4,
                  hidden_activation="gelu_pytorch_tanh", pad_token_id=0, eos_token_id=1, bos_token_id=2,
                  tie_word_embeddings=True, initializer_range=0.2, attn_implementation="eager")
    if arch == "gemma2":
        cfg = transformers.Gemma2Config(rope_theta=10000.0, attn_logit_softcapping=4.0,
                                        final_logit_softcapping=8.0, **common)
        m = transformers.Gemma2ForCausalLM(cfg)
    else:
        cfg = transformers.Gemma3TextConfig(rope_theta=1000000.0, rope_local_base_freq=10000.0,
                                            rope_scaling={"rope_type": "linear", "factor": 4.0},
                                            sliding_window_pattern=6, **common)
        m = transformers.Gemma3ForCausalLM(cfg)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(torch.randn(p.shape) * 0.3)
            elif name.endswith("embed_tokens.weight"):
                p.copy_(torch.randn(p.shape) * 0.05)
            p.copy_(p.to(torch.float16).float())
    return m.float().eval()


def gemma3_cg_model(seed):
    """gemma_model("gemma3", seed) inside transformers' Gemma3ForConditionalGeneration with
    a tiny random SigLIP tower and projector (the class most released Gemma 3 checkpoints
    use; its text tensors are language_model.*). Its text logits are asserted equal to
    the causal model's."""
    import transformers
    causal = gemma_model("gemma3", seed)
    vision = transformers.SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, image_size=16, patch_size=4)
    cfg = transformers.Gemma3Config(text_config=causal.config, vision_config=vision, mm_tokens_per_image=4,
                                    boi_token_index=250, eoi_token_index=251, image_token_index=252,
                                    attn_implementation="eager")
    cfg.text_config._attn_implementation = "eager"
    m = transformers.Gemma3ForConditionalGeneration(cfg).float().eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if not name.startswith("language_model."):
                p.copy_((torch.randn(p.shape) * 0.1).to(torch.float16).float())
    missing, unexpected = m.language_model.load_state_dict(causal.state_dict(), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    m.language_model.tie_weights()
    with torch.no_grad():
        ids = torch.tensor([[2, 17, 99, 3, 45, 200, 7, 8, 9]])
        assert torch.equal(causal(ids, use_cache=False).logits, m(input_ids=ids, use_cache=False).logits)
    return m


def linear_modules(model):
    """Quantizable linears of the text model: not lm_head, not the MoE router (quantizers
    keep both float), not a vision tower or its projector (gemma3_cg_model)."""
    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and n.rsplit(".", 1)[-1] != "lm_head" and
            not n.endswith("block_sparse_moe.gate") and
            not n.startswith(("vision_tower.", "multi_modal_projector."))]


def greedy_nocache(model):
    """Greedy ids and top-1 - top-2 margins, one full forward per step without a cache
    (make_gemma3_ref.greedy's rule: no cache path whose sliding-window bookkeeping
    could differ from the plain forward)."""
    out, margins = [], []
    for p in PROMPTS:
        seq, ids, mg = list(p), [], []
        with torch.no_grad():
            for _ in range(N_NEW):
                top2 = torch.topk(model(torch.tensor([seq]), use_cache=False).logits[0, -1].double(), 2)
                ids.append(int(top2.indices[0]))
                mg.append(float(top2.values[0] - top2.values[1]))
                seq.append(ids[-1])
        out.append(ids)
        margins.append(mg)
    return out, margins


def greedy(model, ref):
    """Greedy ids of model with every reference weight substituted."""
    sd = model.state_dict()
    for name, w in ref.items():
        sd[name + ".weight"] = w.to(sd[name + ".weight"].dtype)
    model.load_state_dict(sd)
    if model.config.model_type.startswith("gemma"):
        return greedy_nocache(model)
    out, margins = [], []
    for p in PROMPTS:
        ids = torch.tensor([p])
        with torch.no_grad():
            g = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=N_NEW, do_sample=False,
                               pad_token_id=-1, output_scores=True, return_dict_in_generate=True)
        out.append(g.sequences[0, len(p):].tolist())
        # top-1 minus top-2 logit per step: a near tie may legitimately flip elsewhere
        margins.append([float(t[0] - t[1]) for t in (sc[0].topk(2).values for sc in g.scores)])
    return out, margins


def save(name, model, qcfg, tensors, ref, skip_float=()):
    """tensors: quantized module tensors; every other parameter is stored as float16
    (embeddings, norms, unquantized linears)."""
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    sd = {}
    quantized = set(ref)
    for k, v in model.state_dict().items():
        mod = k.rsplit(".", 1)[0]
        if mod in quantized or (k.endswith("lm_head.weight") and model.config.tie_word_embeddings):
            continue
        sd[k] = v.to(torch.float16).contiguous()
    for k, v in tensors.items():
        sd[k] = v.contiguous()
    save_file(sd, os.path.join(d, "model.safetensors"))
    cfg = model.config.to_dict()
    cfg["architectures"] = [type(model).__name__]  # a fresh config has none; converters need it
    cfg["quantization_config"] = qcfg
    cfg["torch_dtype"] = "float16"
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1, sort_keys=True)
    ids, margins = greedy(model, ref)
    save_file({k: v.float().contiguous() for k, v in ref.items()}, os.path.join(d, "ref.safetensors"),
              metadata={"greedy": json.dumps({"prompts": PROMPTS, "ids": ids, "margins": margins})})
    print(name, "modules", len(ref), "greedy", ids)


# ---------------------------------------------------------------- GPTQ (auto-gptq)

def gptq_quantize(w, bits, gs, sym, perm):
    """Round-to-nearest GPTQ grid (auto-gptq Quantizer) over groups of the permuted
    columns; returns scales [N, G], zeros [N, G], g_idx [K] in the original order."""
    from auto_gptq.quantization.quantizer import Quantizer
    n, k = w.shape
    gs_eff = k if gs == -1 else gs
    wp = w[:, perm]
    scales, zeros = [], []
    for g0 in range(0, k, gs_eff):
        q = Quantizer()
        q.configure(bits, perchannel=True, sym=sym, mse=False)
        q.find_params(wp[:, g0:g0 + gs_eff], weight=True)
        scales.append(q.scale.to(torch.float16).float())
        zeros.append(q.zero)
    inv = torch.argsort(perm)
    g_idx = (inv // gs_eff).to(torch.int32)
    return torch.cat(scales, 1), torch.cat(zeros, 1), g_idx


def gptq_layer(w, bits, gs, sym, perm, v2=False):
    from auto_gptq.nn_modules.qlinear.qlinear_cuda import QuantLinear
    n, k = w.shape
    scales, zeros, g_idx = gptq_quantize(w, bits, gs, sym, perm)
    lin = torch.nn.Linear(k, n, bias=False)
    lin.weight.data = w.to(torch.float16)
    ql = QuantLinear(bits, gs, k, n, bias=False)
    ql.pack(lin, scales, zeros, g_idx)
    t = {"qweight": ql.qweight.clone(), "qzeros": ql.qzeros.clone(), "scales": ql.scales.clone(),
         "g_idx": ql.g_idx.clone().to(torch.int32)}
    # the library's torch dequantizer, in float32: forward(I) = W^T
    ql.scales = ql.scales.float()
    with torch.no_grad():
        ref = ql(torch.eye(k)).t().contiguous()
    if v2:
        t["qzeros"] = gptq_v1_to_v2_zeros(t["qzeros"], bits)
    return t, ref


def gptq_v1_to_v2_zeros(qz, bits):
    """gptq_v2 stores z itself (v1 stores z-1): add 1 to every packed field, as
    GPTQModel's convert_gptq_v1_to_v2_format does (bits 2/4/8 only)."""
    assert bits in (2, 4, 8)
    per = 32 // bits
    u = qz.to(torch.int64) & 0xffffffff
    out = torch.zeros_like(u)
    for i in range(per):
        f = (u >> (bits * i)) & ((1 << bits) - 1)
        out |= ((f + 1) & ((1 << bits) - 1)) << (bits * i)
    return out.to(torch.uint32).view(torch.int32) if hasattr(torch, "uint32") else \
        torch.from_numpy(out.numpy().astype("uint32").view("int32"))


def make_gptq(name, model, bits, gs, sym, desc_act, static_groups=False, v2=False, moe_shared=False):
    torch.manual_seed(1234)
    tensors, ref = {}, {}
    hperm = {}
    for mname, m in linear_modules(model):
        w = m.weight.data.float()
        k = w.shape[1]
        if desc_act and not static_groups:
            # act-order: columns by a (fake) Hessian diagonal of this layer's input;
            # gate (w1) and up (w3) of one expert see the same input, so share it
            key = mname.replace(".w3", ".w1").replace("up_proj", "gate_proj") if moe_shared else mname
            key = key.replace("k_proj", "q_proj").replace("v_proj", "q_proj")
            if key not in hperm:
                hperm[key] = torch.argsort(torch.rand(k), descending=True)
            perm = hperm[key]
        else:
            perm = torch.arange(k)
        t, r = gptq_layer(w, bits, gs, sym, perm, v2)
        for kk, vv in t.items():
            tensors[mname + "." + kk] = vv
        ref[mname] = r
    qcfg = {"quant_method": "gptq", "bits": bits, "group_size": gs, "desc_act": desc_act, "sym": sym,
            "static_groups": static_groups, "true_sequential": True, "damp_percent": 0.01,
            "checkpoint_format": "gptq_v2" if v2 else "gptq", "model_name_or_path": None}
    save(name, model, qcfg, tensors, ref)


# ---------------------------------------------------------------- AWQ (autoawq GEMM)

def make_awq(name, model, gs):
    from awq.modules.linear.gemm import WQLinear_GEMM
    from awq.utils.packing_utils import dequantize_gemm
    tensors, ref = {}, {}
    for mname, m in linear_modules(model):
        w = m.weight.data.float()
        n, k = w.shape
        wg = w.reshape(-1, gs)
        mx, mn = wg.amax(1, keepdim=True), wg.amin(1, keepdim=True)
        scales = ((mx - mn).clamp(min=1e-5) / 15).to(torch.float16).float()
        zeros = (-torch.round(mn / scales)).clamp(0, 15)
        lin = torch.nn.Linear(k, n, bias=False)
        lin.weight.data = w.to(torch.float16)
        # from_linear takes [groups, out] (AutoAWQ's quantizer transposes before calling)
        ql = WQLinear_GEMM.from_linear(lin, 4, gs, scales=scales.view(n, -1).t().contiguous().to(torch.float16),
                                       zeros=zeros.view(n, -1).t().contiguous())
        tensors[mname + ".qweight"] = ql.qweight.clone()
        tensors[mname + ".qzeros"] = ql.qzeros.clone()
        tensors[mname + ".scales"] = ql.scales.clone()
        ref[mname] = dequantize_gemm(ql.qweight, ql.qzeros, ql.scales.float(), 4, gs).t().contiguous()
    qcfg = {"quant_method": "awq", "bits": 4, "group_size": gs, "zero_point": True, "version": "gemm",
            "modules_to_not_convert": None}
    save(name, model, qcfg, tensors, ref)


# ---------------------------------------------------------------- bitsandbytes

def make_bnb4(name, model, quant_type, blocksize, double_quant, skip=()):
    import bitsandbytes.functional as F
    from transformers import BitsAndBytesConfig
    tensors, ref = {}, {}
    for mname, m in linear_modules(model):
        if any(s in mname for s in skip):
            continue
        w = m.weight.data.float()
        packed, qs = F.quantize_4bit(w, blocksize=blocksize, compress_statistics=double_quant,
                                     quant_type=quant_type)
        tensors[mname + ".weight"] = packed
        for kk, vv in qs.as_dict(packed=True).items():
            tensors[mname + ".weight." + kk] = vv
        # bnb's CUDA arithmetic (quant_map[q] * absmax, float32), on the resolved
        # absmax bnb itself computes; bnb's CPU dequantize_4bit is cross-checked below
        absmax = qs.absmax
        if qs.nested:
            absmax = F.dequantize_blockwise(qs.absmax, qs.state2) + qs.offset
        codes = torch.stack(((packed.view(-1) >> 4), packed.view(-1) & 15), 1).reshape(-1).long()
        vals = qs.code[codes].reshape(-1, blocksize) * absmax.float().view(-1, 1)
        r = vals.reshape(w.shape)
        cpu = F.dequantize_4bit(packed, qs)
        if quant_type == "nf4":
            assert torch.equal(cpu, r), mname
        else:  # bnb's CPU table is rounded to 4 decimals
            assert (cpu - r).abs().max() <= 1e-4 * w.abs().max(), mname
        ref[mname] = r
    qcfg = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=quant_type,
                              bnb_4bit_use_double_quant=double_quant,
                              bnb_4bit_compute_dtype=torch.float32,
                              llm_int8_skip_modules=list(skip) or None).to_dict()
    save(name, model, qcfg, tensors, ref)


def make_bnb8(name, model):
    import bitsandbytes.functional as F
    from transformers import BitsAndBytesConfig
    tensors, ref = {}, {}
    for mname, m in linear_modules(model):
        w = m.weight.data.float()
        cb, scb, _ = F.int8_vectorwise_quant(w.to(torch.float16))
        tensors[mname + ".weight"] = cb
        tensors[mname + ".SCB"] = scb
        tensors[mname + ".weight_format"] = torch.tensor(0, dtype=torch.uint8)
        ref[mname] = F.int8_vectorwise_dequant(cb, scb).float()
    qcfg = BitsAndBytesConfig(load_in_8bit=True).to_dict()
    save(name, model, qcfg, tensors, ref)


# ---------------------------------------------------------------- compressed-tensors

def ct_args(**kw):
    from compressed_tensors.quantization import QuantizationArgs
    return QuantizationArgs(**kw)


def ct_qparams(w, args, g_idx=None):
    """scale/zero_point (and NVFP4 global scale) for w under args, with
    compressed-tensors' own calculate_qparams."""
    from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam
    n, k = w.shape
    st = args.strategy.value if hasattr(args.strategy, "value") else args.strategy
    gscale = None
    if st == "tensor":
        mn, mx = w.min().view(1), w.max().view(1)
    elif st == "channel":
        mn, mx = w.amin(1, keepdim=True), w.amax(1, keepdim=True)
    elif st == "group":
        gs = args.group_size
        wp = w if g_idx is None else w[:, torch.argsort(g_idx, stable=True)]
        wg = wp.reshape(n, k // gs, gs)
        mn, mx = wg.amin(2), wg.amax(2)
    elif st == "block":
        bn, bk = block_dims(args)
        gn, gk = -(-n // bn), -(-k // bk)
        mn = torch.empty(gn, gk)
        mx = torch.empty(gn, gk)
        for i in range(gn):
            for j in range(gk):
                t = w[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk]
                mn[i, j], mx[i, j] = t.min(), t.max()
    elif st == "tensor_group":
        gs = args.group_size
        gscale = generate_gparam(w.min(), w.max())
        wg = w.reshape(n, k // gs, gs)
        mn, mx = wg.amin(2), wg.amax(2)
    else:
        raise ValueError(st)
    if gscale is not None:
        s, z = calculate_qparams(mn, mx, args, global_scale=gscale)
    else:
        s, z = calculate_qparams(mn, mx, args)
    return s, z, gscale


def block_dims(args):
    """block_structure is "RxC" in this compressed-tensors release, [R, C] in later ones."""
    bs = args.block_structure
    return tuple(int(x) for x in bs.split("x")) if isinstance(bs, str) else tuple(bs)


def ct_block_expand(s, n, k, bn, bk):
    return s.repeat_interleave(bn, 0)[:n].repeat_interleave(bk, 1)[:, :k]


def ct_layer(fmt, w, args, scale_dtype, actorder_perm=None):
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization.lifecycle.forward import dequantize, quantize
    n, k = w.shape
    st = args.strategy.value if hasattr(args.strategy, "value") else args.strategy
    g_idx = None
    if actorder_perm is not None:
        g_idx = (torch.argsort(actorder_perm) // args.group_size).to(torch.int32)
    s, z, gscale = ct_qparams(w, args, g_idx)
    s = s.to(scale_dtype)
    comp = BaseCompressor.load_from_registry(fmt)
    if st == "block":
        bn, bk = block_dims(args)
        se = ct_block_expand(s.float(), n, k, bn, bk)
        ze = None
        q = quantize(w, se.to(scale_dtype), ze, args, dtype=w.dtype)
        out = {"weight": q.to(torch.float8_e4m3fn), "weight_scale": s}
        ref = dequantize(q.to(torch.float8_e4m3fn).float(), se, None, args, dtype=torch.float32)
        return out, ref
    kw = dict(weight=w, scale=s, quantization_args=args, zero_point=z)
    if g_idx is not None:
        kw["g_idx"] = g_idx
    if gscale is not None:
        kw["global_scale"] = gscale
    out = comp.compress_weight(**kw)
    out = {kk: vv for kk, vv in out.items()}
    out["weight_scale"] = s
    if not args.symmetric and "weight_zero_point" not in out:
        out["weight_zero_point"] = z
    if g_idx is not None:
        out["weight_g_idx"] = g_idx
    if gscale is not None:
        out["weight_global_scale"] = gscale
    # reference: the library's quantize/dequantize pair in float32
    qdt = torch.float8_e4m3fn if args.type == "float" and args.num_bits == 8 else None
    if gscale is not None:  # nvfp4: the compressor's own decompress path, float32 out
        from compressed_tensors.compressors.quantized_compressors.nvfp4_quantized import unpack_fp4_from_uint8
        xq = unpack_fp4_from_uint8(out["weight_packed"], n, k, dtype=torch.float32)
        ref = dequantize(x_q=xq, scale=s, global_scale=gscale, dtype=torch.float32)
        lib = comp.decompress_weight(out).float()
        assert ((lib - ref).abs() <= ref.abs() * 2 ** -8 + 1e-30).all()
        return out, ref
    q = quantize(w, s, z, args, g_idx=g_idx, dtype=torch.int8 if qdt is None else w.dtype)
    if qdt is not None:
        q = q.to(qdt).float()
    ref = dequantize(q.float(), s.float(), None if z is None else z, args, dtype=torch.float32, g_idx=g_idx)
    return out, ref


def act_fp8_hook(ia, static_scale):
    """W8A8 FP8 activations of one linear, with compressed-tensors' own calculate_qparams and
    fake_quantize: the static input_scale, or per token a scale from that token's row. Not the
    library's forward_quantize for the token strategy: 0.10.2's compute_dynamic_scales_and_zp
    reduces a [batch, seq, hidden] input over the batch only (a scale per element, so nothing is
    rounded), while serving engines (vLLM's per-token FP8 quant) and the strategy's meaning take
    one scale per token over its hidden row."""
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from compressed_tensors.quantization.utils import calculate_qparams

    def hook(mod, inputs):
        x = inputs[0]
        if static_scale is not None:
            s = static_scale
        else:
            s, _ = calculate_qparams(x.amin(-1, keepdim=True), x.amax(-1, keepdim=True), ia)
        return (fake_quantize(x, s, None, ia),) + tuple(inputs[1:])
    return hook


def calibrate_inputs(model, mnames):
    """min / max of every named linear's input over calibration prompts (llm-compressor's
    MinMax observer over a calibration set: here PROMPTS and four random ones)."""
    g = torch.Generator().manual_seed(5)
    prompts = [list(p) for p in PROMPTS] + [torch.randint(0, 256, (12,), generator=g).tolist() for _ in range(4)]
    seen, hooks = {}, []
    mods = dict(model.named_modules())
    for mname in mnames:
        def rec(mod, inputs, mname=mname):
            x = inputs[0].detach()
            mn, mx = x.min().view(1), x.max().view(1)
            if mname in seen:
                mn, mx = torch.minimum(mn, seen[mname][0]), torch.maximum(mx, seen[mname][1])
            seen[mname] = (mn, mx)
        hooks.append(mods[mname].register_forward_pre_hook(rec))
    with torch.no_grad():
        for p in prompts:
            model(torch.tensor([p]))
    for h in hooks:
        h.remove()
    return seen


def make_ct(name, model, fmt, groups, ignore=(), scale_dtype=torch.bfloat16, actorder=False, moe_shared=False,
            input_args=None):
    """groups: list of (targets, QuantizationArgs); targets use HF module names or "re:".
    input_args: W8A8 FP8 input_activations (float 8-bit, static tensor or dynamic token) for
    every group: static scales calibrated on the float model, stored as input_scale in
    scale_dtype; the greedy reference runs with the activations rounded (act_fp8_hook)."""
    import re
    from compressed_tensors.quantization import QuantizationConfig, QuantizationScheme
    from compressed_tensors.quantization.utils import calculate_qparams
    torch.manual_seed(99)
    tensors, ref = {}, {}
    hperm = {}
    act_hooks = []
    if input_args is not None:
        # the checkpoint stores every float parameter as fp16 (save): rounded activations
        # amplify a difference that small (a code flips), so the reference model is the
        # stored one
        with torch.no_grad():
            for prm in model.parameters():
                prm.copy_(prm.half().float())
        cal = calibrate_inputs(model, [n for n, _ in linear_modules(model)])

    def matches(mname, pats):
        for p in pats:
            if p == "Linear":
                return True
            if p.startswith("re:") and re.match(p[3:], mname):
                return True
            if p == mname:
                return True
        return False

    for mname, m in linear_modules(model):
        if matches(mname, ignore):
            continue
        args = None
        for targets, a in groups:
            if matches(mname, targets):
                args = a
                break
        if args is None:
            continue
        w = m.weight.data.float()
        perm = None
        if actorder:
            key = mname.replace(".w3", ".w1") if moe_shared else mname
            if key not in hperm:
                hperm[key] = torch.argsort(torch.rand(w.shape[1]), descending=True)
            perm = hperm[key]
        t, r = ct_layer(fmt, w, args, scale_dtype, perm)
        for kk, vv in t.items():
            tensors[mname + "." + kk] = vv
        ref[mname] = r
        if input_args is not None:
            st = None
            if not input_args.dynamic:
                sc, _ = calculate_qparams(cal[mname][0], cal[mname][1], input_args)
                tensors[mname + ".input_scale"] = sc.to(scale_dtype).reshape(1)
                st = tensors[mname + ".input_scale"].float()
            act_hooks.append((m, act_fp8_hook(input_args, st)))
    for m, h in act_hooks:  # after calibration and quantization: the greedy reference only
        m.register_forward_pre_hook(h)
    cg = {f"group_{i}": QuantizationScheme(targets=list(t), weights=a, input_activations=input_args)
          for i, (t, a) in enumerate(groups)}
    qc = QuantizationConfig(config_groups=cg, format=fmt, ignore=list(ignore) + ["lm_head"],
                            quantization_status="compressed")
    d = qc.model_dump(exclude_none=False)
    d["quant_method"] = "compressed-tensors"
    d = json.loads(json.dumps(d, default=str))
    save(name, model, d, tensors, ref)


def make_act_fp8_ref():
    """W8A8 FP8 activation rounding by compressed-tensors' calculate_qparams + fake_quantize
    (act_fp8_hook's arithmetic) on rows built to hit its corners: e4m3 ties (odd multiples of
    half an ulp in every binade), subnormals, values past 448 * s (saturated by the clamp),
    zeros, an all-zero row (the eps scale), huge and tiny rows. tests/data/act_fp8_ref.safetensors:
    x [R, 64]; static_scale [1]; static [R, 64] (rounded under static_scale); dynamic [R, 64]
    (each row under its own scale), dyn_scale [R]."""
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from compressed_tensors.quantization.utils import calculate_qparams
    g = torch.Generator().manual_seed(11)
    rows = [torch.randn(64, generator=g) * m for m in (1.0, 1e-3, 37.0, 3e4, 1e-30)]
    ties = []
    for e in range(-9, 9):  # (2j+1)/16 * 2^e: halfway between two e4m3 values of binade e
        ties += [(2 * j + 1) / 16 * 2.0 ** e * (1 if j % 2 else -1) for j in range(8, 16)]
    t = torch.tensor(ties[:128], dtype=torch.float32)
    rows += [t[i * 64:(i + 1) * 64] for i in range(2)]
    rows.append(torch.zeros(64))
    r = torch.randn(64, generator=g)
    r[::5] = 0.0
    r[7] = 900.0  # saturates under the static scale
    rows.append(r)
    x = torch.stack(rows).float()
    sargs = ct_args(num_bits=8, type="float", symmetric=True, strategy="tensor", dynamic=False)
    dargs = ct_args(num_bits=8, type="float", symmetric=True, strategy="token", dynamic=True)
    ss = torch.tensor([1.0], dtype=torch.float32)  # the tie rows sit on ties at s = 1
    st = fake_quantize(x, ss, None, sargs)
    ds, _ = calculate_qparams(x.amin(-1, keepdim=True), x.amax(-1, keepdim=True), dargs)
    dy = fake_quantize(x, ds, None, dargs)
    save_file({"x": x.contiguous(), "static_scale": ss, "static": st.contiguous(), "dynamic": dy.contiguous(),
               "dyn_scale": ds.reshape(-1).contiguous()}, os.path.join(OUT, "..", "act_fp8_ref.safetensors"))
    print("act_fp8_ref rows", x.shape[0])


# ---------------------------------------------------------------- main

def main():
    only = set(sys.argv[1:])

    def want(n):
        return not only or n in only

    os.makedirs(OUT, exist_ok=True)
    if want("act_fp8_ref"):
        make_act_fp8_ref()
    if want("gptq_b4_g32_sym"):
        make_gptq("gptq_b4_g32_sym", dense_model(1), 4, 32, True, False)
    if want("gptq_b4_g32_asym_act"):
        make_gptq("gptq_b4_g32_asym_act", dense_model(2), 4, 32, False, True)
    if want("gptq_b3_g64_asym"):
        make_gptq("gptq_b3_g64_asym", dense_model(3), 3, 64, False, False)
    if want("gptq_b2_g32_asym_v2"):
        make_gptq("gptq_b2_g32_asym_v2", dense_model(4), 2, 32, False, True, v2=True)
    if want("gptq_b8_chan_static"):
        make_gptq("gptq_b8_chan_static", dense_model(5), 8, -1, True, True, static_groups=True)
    if want("gptq_b4_g32_static_act"):
        make_gptq("gptq_b4_g32_static_act", dense_model(21), 4, 32, False, True, static_groups=True)
    if want("awq_b4_g64"):
        make_awq("awq_b4_g64", dense_model(6), 64)
    if want("bnb_nf4"):
        make_bnb4("bnb_nf4", dense_model(7), "nf4", 64, False)
    if want("bnb_fp4_dq"):
        make_bnb4("bnb_fp4_dq", dense_model(8), "fp4", 128, True)
    if want("bnb_nf4_dq_skip"):
        make_bnb4("bnb_nf4_dq_skip", dense_model(9), "nf4", 64, True, skip=("down_proj",))
    if want("bnb_int8"):
        make_bnb8("bnb_int8", dense_model(10))
    if want("ct_int4_g32_asym_act"):
        make_ct("ct_int4_g32_asym_act", dense_model(11), "pack-quantized",
                [(["Linear"], ct_args(num_bits=4, type="int", symmetric=False, strategy="group",
                                      group_size=32, actorder="group"))], actorder=True)
    if want("ct_multi"):
        make_ct("ct_multi", dense_model(12), "pack-quantized",
                [(["re:.*self_attn.*"], ct_args(num_bits=8, type="int", symmetric=True, strategy="channel")),
                 (["re:.*mlp.*"], ct_args(num_bits=4, type="int", symmetric=True, strategy="group",
                                          group_size=64))],
                ignore=["model.layers.1.mlp.down_proj"], scale_dtype=torch.float16)
    if want("ct_fp8_tensor"):
        make_ct("ct_fp8_tensor", dense_model(13), "float-quantized",
                [(["Linear"], ct_args(num_bits=8, type="float", symmetric=True, strategy="tensor"))],
                scale_dtype=torch.float32)
    if want("ct_fp8_channel"):
        make_ct("ct_fp8_channel", dense_model(14), "float-quantized",
                [(["Linear"], ct_args(num_bits=8, type="float", symmetric=True, strategy="channel"))])
    if want("ct_fp8_block"):
        make_ct("ct_fp8_block", dense_model(15), "float-quantized",
                [(["Linear"], ct_args(num_bits=8, type="float", symmetric=True, strategy="block",
                                      block_structure="128x128"))], scale_dtype=torch.float32)
    # W8A8 FP8, llm-compressor's two recipes: "FP8" (tensor weights, static tensor
    # activations) and "FP8_DYNAMIC" (channel weights, dynamic per-token activations)
    if want("ct_fp8_w8a8_static"):
        make_ct("ct_fp8_w8a8_static", dense_model(29), "float-quantized",
                [(["Linear"], ct_args(num_bits=8, type="float", symmetric=True, strategy="tensor"))],
                input_args=ct_args(num_bits=8, type="float", symmetric=True, strategy="tensor", dynamic=False))
    if want("ct_fp8_w8a8_dynamic"):
        make_ct("ct_fp8_w8a8_dynamic", dense_model(30), "float-quantized",
                [(["Linear"], ct_args(num_bits=8, type="float", symmetric=True, strategy="channel"))],
                input_args=ct_args(num_bits=8, type="float", symmetric=True, strategy="token", dynamic=True))
    if want("ct_naive_int8"):
        make_ct("ct_naive_int8", dense_model(16), "naive-quantized",
                [(["Linear"], ct_args(num_bits=8, type="int", symmetric=False, strategy="channel"))],
                scale_dtype=torch.float32)
    if want("ct_nvfp4"):
        make_ct("ct_nvfp4", dense_model(17), "nvfp4-pack-quantized",
                [(["Linear"], ct_args(num_bits=4, type="float", symmetric=True, strategy="tensor_group",
                                      group_size=16))], scale_dtype=torch.float8_e4m3fn)
    # Gemma 2 and Gemma 3: the quantizers leave the (tied) embedding and every norm in float
    if want("gemma2_gptq_b4_g32_asym_act"):
        make_gptq("gemma2_gptq_b4_g32_asym_act", gemma_model("gemma2", 22), 4, 32, False, True)
    if want("gemma2_ct_fp8_channel"):
        make_ct("gemma2_ct_fp8_channel", gemma_model("gemma2", 23), "float-quantized",
                [(["Linear"], ct_args(num_bits=8, type="float", symmetric=True, strategy="channel"))])
    if want("gemma2_bnb_nf4"):
        make_bnb4("gemma2_bnb_nf4", gemma_model("gemma2", 24), "nf4", 64, False)
    if want("gemma3_gptq_b4_g32_sym"):
        make_gptq("gemma3_gptq_b4_g32_sym", gemma_model("gemma3", 25), 4, 32, True, False)
    if want("gemma3_ct_int8"):
        make_ct("gemma3_ct_int8", gemma_model("gemma3", 26), "naive-quantized",
                [(["Linear"], ct_args(num_bits=8, type="int", symmetric=False, strategy="channel"))],
                scale_dtype=torch.float32)
    if want("gemma3_awq_b4_g32"):
        make_awq("gemma3_awq_b4_g32", gemma_model("gemma3", 27), 32)
    if want("gemma3cg_ct_int4_g32"):
        # llm-compressor's W4A16 recipe for the multimodal class: the text linears only
        make_ct("gemma3cg_ct_int4_g32", gemma3_cg_model(28), "pack-quantized",
                [(["Linear"], ct_args(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32))],
                ignore=["re:.*lm_head", "re:vision_tower.*", "re:multi_modal_projector.*"])
    if want("moe_ct_fp8_tensor"):
        make_ct("moe_ct_fp8_tensor", moe_model(18), "float-quantized",
                [(["Linear"], ct_args(num_bits=8, type="float", symmetric=True, strategy="tensor"))],
                ignore=["re:.*block_sparse_moe.gate$"], scale_dtype=torch.float32)
    if want("moe_gptq_b4_act"):
        make_gptq("moe_gptq_b4_act", moe_model(19), 4, 32, True, True, moe_shared=True)
    if want("moe_ct_nvfp4"):
        make_ct("moe_ct_nvfp4", moe_model(20), "nvfp4-pack-quantized",
                [(["re:.*experts.*"], ct_args(num_bits=4, type="float", symmetric=True, strategy="tensor_group",
                                              group_size=16))], scale_dtype=torch.float8_e4m3fn)


if __name__ == "__main__":
    main()
