"""Causal bf16 attention rates on the GPU, forward and backward separately: torch's SDPA with its cuDNN and
flash backends, against the cuDNN frontend graph flame builds (runtime/cudnn_attention.py: q, k, v
[B, H, T, D] contiguous, heuristics A) and its variants (the [B, T, H, D] layout, heuristics B, the
frontend's COMPOSITE and UNIFIED implementations), each execution plan of each graph timed by CUDA
events (median of 15 after 3 warm-up calls). Needs a GPU, torch and nvidia-cudnn-frontend.

    python3 benchmarks/scripts/cudnn_attention_probe.py [B H T D]     # default 4 16 4096 128
"""

from __future__ import annotations

import statistics
import sys


def timed(fn, n: int = 15) -> float:
    """Median milliseconds of fn by CUDA events after 3 warm-up calls."""
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def strides(layout: str, dims: list[int]) -> list[int]:
    """[B, H, T, D] strides of a contiguous [B, H, T, D] ("bhsd") or [B, T, H, D] ("bshd") tensor."""
    _, h, s, d = dims
    return [h * s * d, s * d, d, 1] if layout == "bhsd" else [s * h * d, d, h * d, 1]


def torch_rows(dims, flops_f, flops_b, row) -> None:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v, do = (torch.randn(*dims, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        for layout in ("bhsd", "bshd"):
            if layout == "bhsd":
                qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
            else:
                qq, kk, vv = (x.transpose(1, 2).contiguous().transpose(1, 2).requires_grad_() for x in (q, k, v))
            with sdpa_kernel(backend):
                row(
                    f"torch {backend.name} {layout} fwd",
                    timed(lambda qq=qq, kk=kk, vv=vv: F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)),
                    flops_f,
                )
                o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
                row(
                    f"torch {backend.name} {layout} bwd",
                    timed(lambda o=o, qq=qq, kk=kk, vv=vv: torch.autograd.grad(o, (qq, kk, vv), do, retain_graph=True)),
                    flops_b,
                )


def build(cudnn, handle, direction: str, layout: str, impl: str | None, heur, dims):
    """The forward or backward graph flame builds, in `layout`, with every execution plan built."""
    b, h, t, d = dims
    bf16 = cudnn.data_type.BFLOAT16
    g = cudnn.pygraph(
        io_data_type=bf16,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
        handle=handle,
    )
    st = strides(layout, dims)
    ts = {n: g.tensor(name=n, dim=dims, stride=st, data_type=bf16) for n in ("q", "k", "v")}
    kw = {} if impl is None else {"implementation": getattr(cudnn.attention_implementation, impl)}
    if direction == "fwd":
        o, stats = g.sdpa(
            name="sdpa",
            q=ts["q"],
            k=ts["k"],
            v=ts["v"],
            attn_scale=d**-0.5,
            use_causal_mask=True,
            generate_stats=True,
            **kw,
        )
        o.set_output(True).set_dim(dims).set_stride(st)
        stats.set_output(True).set_data_type(cudnn.data_type.FLOAT).set_dim([b, h, t, 1]).set_stride([h * t, t, 1, 1])
        outs = {"o": o, "stats": stats}
    else:
        ts["o"] = g.tensor(name="o", dim=dims, stride=st, data_type=bf16)
        ts["dO"] = g.tensor(name="dO", dim=dims, stride=st, data_type=bf16)
        ts["stats"] = g.tensor(name="stats", dim=[b, h, t, 1], stride=[h * t, t, 1, 1], data_type=cudnn.data_type.FLOAT)
        dq, dk, dv = g.sdpa_backward(
            name="bwd",
            q=ts["q"],
            k=ts["k"],
            v=ts["v"],
            o=ts["o"],
            dO=ts["dO"],
            stats=ts["stats"],
            attn_scale=d**-0.5,
            use_causal_mask=True,
            **kw,
        )
        outs = {}
        for n, x in (("dq", dq), ("dk", dk), ("dv", dv)):
            x.set_output(True).set_dim(dims).set_stride(st)
            outs[n] = x
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([heur])
    g.check_support()
    g.build_plans(cudnn.build_plan_policy.ALL)
    return g, {**ts, **outs}


def cudnn_rows(dims, flops_f, flops_b, row) -> None:
    import cudnn
    import torch

    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    n = dims[0] * dims[1] * dims[2] * dims[3]
    buf = {x: torch.randn(n, device="cuda", dtype=torch.bfloat16) for x in ("q", "k", "v", "o", "dO", "dq", "dk", "dv")}
    buf["stats"] = torch.zeros(n // dims[3], device="cuda", dtype=torch.float32)
    for direction in ("fwd", "bwd"):
        for layout in ("bhsd", "bshd"):
            for impl in (None, "COMPOSITE", "UNIFIED"):
                for heur in ("A", "B"):
                    name = f"cudnn {direction} {layout} impl={impl} heur={heur}"
                    try:
                        g, ts = build(cudnn, handle, direction, layout, impl, getattr(cudnn.heur_mode, heur), dims)
                    except Exception as e:  # the frontend refuses a variant: say so and go on
                        print(name, "failed:", (str(e).splitlines() or [repr(e)])[0][:200])
                        continue
                    pack = {x: buf[k].data_ptr() for k, x in ts.items()}
                    for i in range(min(g.get_execution_plan_count(), 6)):
                        ws = torch.empty(
                            max(1, g.get_workspace_size_plan_at_index(i)), device="cuda", dtype=torch.uint8
                        )
                        ms = timed(
                            lambda g=g, i=i, ws=ws, pack=pack: g.execute_plan_at_index(
                                pack, ws.data_ptr(), i, handle=handle
                            )
                        )
                        row(
                            f"{name} plan {i} {g.get_plan_name_at_index(i)[:40]}",
                            ms,
                            flops_f if direction == "fwd" else flops_b,
                        )


def main() -> None:
    import cudnn
    import torch

    dims = [int(x) for x in (sys.argv[1:] or ["4", "16", "4096", "128"])]
    b, h, t, d = dims
    flops_f = 4 * b * h * t * t * d / 2
    flops_b = 2.5 * flops_f
    print("cudnn backend", cudnn.backend_version(), "torch cudnn", torch.backends.cudnn.version(), "shape", *dims)
    rows = []

    def row(name: str, ms: float, flops: float) -> None:
        rows.append((name, ms, flops / ms / 1e9))
        print(f"{name:60s} {ms:8.3f} ms {flops / ms / 1e9:7.1f} TFLOP/s", flush=True)

    torch_rows(dims, flops_f, flops_b, row)
    cudnn_rows(dims, flops_f, flops_b, row)
    print("\n== best per group")
    best = {}
    for name, ms, tf in rows:
        key = " ".join(name.split()[:3])
        if key not in best or tf > best[key][2]:
            best[key] = (name, ms, tf)
    for name, ms, tf in best.values():
        print(f"{name[:75]:75s} {ms:8.3f} ms {tf:7.1f}")


if __name__ == "__main__":
    main()
