#!/usr/bin/env python3
"""Records PyTorch-profiler traces of small, randomly initialised Hugging Face models for
`atrex ingest` tests (issue 18): a Llama-style dense model and a Qwen-MoE-style model, built
from configs (no weights downloaded, no network), a prefill step and decode steps each inside a
`record_function` step marker ("prefill" / "decode"), plus a CUDA-graph replay of one decode MLP
so that graph-replayed kernels are in the trace.

The profiler runs with record_shapes=True (Input Dims / Input type / Concrete Inputs) and
with_stack + with_modules (the "nn.Module: ..." ranges that give the decomposed RMSNorm, MLP and
MoE blocks of transformers their scope). The trace is trimmed before it is gzipped: python
function events other than nn.Module ranges are dropped, and so are python stack fields; nothing
else changes (every cpu_op, runtime, kernel, memcpy and annotation event is kept).

Usage (GPU host, torch + transformers installed):
    python3 deploy/gpu/record-traces.py --out $OUT/traces
Writes <model>.pt.trace.json.gz for each model and manifest.json (configs, versions, counts).
Runs in well under two minutes on an H200.
"""
import argparse
import gzip
import json
import os
import sys
import time


def log(msg):
    print(f"[record-traces {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def build_llama(torch, transformers):
    cfg = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=2,
        num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096,
        rms_norm_eps=1e-6)
    cfg._attn_implementation = "sdpa"
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg)
    return "llama-dense", cfg, model


def build_moe(torch, transformers):
    errors = []
    for cls_name, kwargs in (
            ("Qwen2MoeConfig", dict(shared_expert_intermediate_size=1024)),
            ("Qwen3MoeConfig", dict()),
            ("MixtralConfig", dict())):
        cls = getattr(transformers, cls_name, None)
        if cls is None:
            errors.append(f"{cls_name}: missing")
            continue
        try:
            common = dict(vocab_size=32000, hidden_size=1024, num_hidden_layers=2,
                          num_attention_heads=16, num_key_value_heads=4,
                          max_position_embeddings=4096, rms_norm_eps=1e-6)
            if cls_name == "MixtralConfig":
                cfg = cls(intermediate_size=1408, num_local_experts=16, num_experts_per_tok=4,
                          **common)
            else:
                cfg = cls(moe_intermediate_size=512, intermediate_size=2816, num_experts=16,
                          num_experts_per_tok=4, decoder_sparse_step=1, norm_topk_prob=True,
                          **common, **kwargs)
            cfg._attn_implementation = "sdpa"
            model_cls = getattr(transformers, cls_name.replace("Config", "ForCausalLM"))
            with torch.device("cuda"):
                model = model_cls(cfg)
            return "qwen-moe" if cls_name != "MixtralConfig" else "mixtral-moe", cfg, model
        except Exception as e:  # a transformers version without these kwargs: try the next
            errors.append(f"{cls_name}: {e}")
    raise RuntimeError("no MoE model class could be built: " + "; ".join(errors))


def trim(trace):
    """Drops python function events other than nn.Module ranges, and python stacks."""
    kept = []
    dropped = 0
    for ev in trace.get("traceEvents", []):
        if ev.get("cat") == "python_function" and not str(ev.get("name", "")).startswith(
                "nn.Module:"):
            dropped += 1
            continue
        args = ev.get("args")
        if isinstance(args, dict):
            for k in ("Python parent id", "Python id", "Python thread"):
                args.pop(k, None)
        kept.append(ev)
    trace["traceEvents"] = kept
    return dropped


def record(torch, name, cfg, model, out_dir, batch, prompt, decode_steps):
    from torch.profiler import ProfilerActivity, profile, record_function
    model = model.to(torch.bfloat16).eval()
    ids = torch.randint(0, cfg.vocab_size, (batch, prompt), device="cuda")
    mlp = model.model.layers[0].mlp
    static_x = torch.randn(batch, 1, cfg.hidden_size, device="cuda", dtype=torch.bfloat16)

    def run_steps():
        with torch.no_grad():
            with record_function("prefill"):
                out = model(input_ids=ids, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
            for _ in range(decode_steps):
                with record_function("decode"):
                    out = model(input_ids=nxt, past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = out.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()

    run_steps()  # warm-up: cuBLAS handles, autotuning, lazy inits out of the trace
    graph = None
    try:
        with torch.no_grad():
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(2):
                    mlp(static_x)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_y = mlp(static_x)
        torch.cuda.synchronize()
    except Exception as e:  # an MoE block that cannot be captured: the trace has no graph
        log(f"{name}: CUDA graph capture of layer 0's MLP failed ({e}); no graph replay")
        graph = None

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 with_stack=True, with_modules=True) as prof:
        run_steps()
        if graph is not None:
            for _ in range(3):
                with record_function("decode"):
                    graph.replay()
            torch.cuda.synchronize()
    raw = os.path.join(out_dir, f"{name}.raw.json")
    prof.export_chrome_trace(raw)
    with open(raw) as f:
        trace = json.load(f)
    os.remove(raw)
    dropped = trim(trace)
    path = os.path.join(out_dir, f"{name}.pt.trace.json.gz")
    with gzip.open(path, "wt", compresslevel=9) as f:
        json.dump(trace, f, separators=(",", ":"))
    kernels = sum(1 for e in trace["traceEvents"] if e.get("cat") == "kernel")
    info = {"file": os.path.basename(path), "bytes": os.path.getsize(path),
            "events": len(trace["traceEvents"]), "python_events_dropped": dropped,
            "kernels": kernels, "batch": batch, "prompt_tokens": prompt,
            "decode_steps": decode_steps, "graph_replays": 3 if graph is not None else 0,
            "config": cfg.to_dict()}
    log(f"{name}: {info['events']} events, {kernels} kernels, {info['bytes']} B gz")
    return info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode-steps", type=int, default=4)
    a = ap.parse_args()
    import torch
    import transformers
    if not torch.cuda.is_available():
        print("record-traces: no CUDA device", file=sys.stderr)
        return 3
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    manifest = {"torch": torch.__version__, "transformers": transformers.__version__,
                "device": torch.cuda.get_device_name(0), "traces": []}
    for build in (build_llama, build_moe):
        t0 = time.time()
        try:
            name, cfg, model = build(torch, transformers)
            info = record(torch, name, cfg, model, a.out, a.batch, a.prompt, a.decode_steps)
            info["seconds"] = round(time.time() - t0, 1)
            manifest["traces"].append(info)
        except Exception as e:
            import traceback
            traceback.print_exc()
            manifest["traces"].append({"builder": build.__name__, "error": str(e)})
        torch.cuda.empty_cache()
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, default=str)
    ok = all("error" not in t for t in manifest["traces"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
