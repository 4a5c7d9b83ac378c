"""The torch backend on one GPU (issue 3, part 5): init_process_group("accl") serves cuda tensors
through accl's nccl backend, every collective matches torch computed on the same device, the
caller's stream order holds, and DDP and FSDP2 steps match the steps computed without them.
World size 1: NCCL runs one rank per GPU. Prints one PASS/FAIL line per check."""

import os
import statistics
import sys
import time
import traceback

import torch
import torch.distributed as dist

import accl.distributed  # noqa: F401  (registers "accl"; an in-tree build has no entry point)

status = 0


def check(name, fn):
    global status
    try:
        fn()
        print(f"PASS  torch {name}")
    except Exception:  # noqa: BLE001  (every failure is a line of the report)
        status = 1
        print(f"FAIL  torch {name}")
        traceback.print_exc(file=sys.stdout)


def collectives():
    dev = torch.device("cuda", 0)
    # Produced on the current stream right before the call: the op must wait for it.
    x = torch.arange(1 << 20, device=dev, dtype=torch.float32).mul_(3)
    expect = x.clone()
    dist.all_reduce(x)
    torch.testing.assert_close(x, expect)
    for dtype in (torch.float16, torch.bfloat16, torch.int64):
        y = torch.full((1031,), 5, device=dev, dtype=dtype)
        dist.all_reduce(y, op=dist.ReduceOp.MAX)
        assert bool((y == 5).all()), dtype
    y = torch.ones(7, device=dev)
    dist.all_reduce(y, op=dist.ReduceOp.AVG)
    torch.testing.assert_close(y, torch.ones(7, device=dev))
    b = torch.randn(33, device=dev)
    keep = b.clone()
    dist.broadcast(b, 0)
    torch.testing.assert_close(b, keep)
    out = torch.empty(33, device=dev)
    dist.all_gather_into_tensor(out, keep)
    torch.testing.assert_close(out, keep)
    rs = torch.empty(33, device=dev)
    dist.reduce_scatter_tensor(rs, keep)
    torch.testing.assert_close(rs, keep)
    a2a = torch.empty(33, device=dev)
    dist.all_to_all_single(a2a, keep)
    torch.testing.assert_close(a2a, keep)
    nc = torch.randn(8, 6, device=dev).t()  # not contiguous
    want = nc.clone()
    dist.all_reduce(nc)
    torch.testing.assert_close(nc, want)
    works = [dist.all_reduce(torch.ones(4, device=dev), async_op=True) for _ in range(8)]
    for w in works:
        w.wait()
    bits = torch.tensor([6, 3], device=dev)
    dist.all_reduce(bits, op=dist.ReduceOp.BAND)  # folded on the device after a gather
    assert bits.tolist() == [6, 3]
    dist.barrier()
    torch.cuda.synchronize()


def mixed_devices_rejected():
    try:
        dist.all_gather_into_tensor(torch.empty(4), torch.ones(4, device="cuda"))
    except Exception as e:  # noqa: BLE001
        assert "cuda:0" in str(e) and "cpu" in str(e), e
    else:
        raise AssertionError("tensors on cpu and cuda in one call were accepted")


def cpu_still_served():
    t = torch.ones(5)
    dist.all_reduce(t)
    assert t.tolist() == [1.0] * 5


def steps_match(wrap, optimizer, full=lambda p: p):
    """Three steps of a small model wrapped by `wrap` against the same steps without it, on cuda;
    `full` gives a parameter of the wrapped model whole."""
    def mlp():
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))

    torch.manual_seed(0)
    ref = mlp().cuda()
    model = mlp()
    model.load_state_dict(ref.state_dict())
    model = wrap(model.cuda())
    opt, ropt = optimizer(model.parameters()), optimizer(ref.parameters())
    for _ in range(3):
        x = torch.randn(16, 32, device="cuda")
        for m, o in ((model, opt), (ref, ropt)):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(full(p), q)


def ddp_step():
    steps_match(lambda m: torch.nn.parallel.DistributedDataParallel(m, device_ids=[0]),
                lambda params: torch.optim.SGD(params, lr=0.1))


def fsdp_step():
    """FSDP2 (fully_shard): its all-gathers and reduce-scatters run on streams of its own, as
    async ops."""
    from torch.distributed.fsdp import fully_shard

    def shard(model):
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        return fully_shard(model)

    steps_match(shard, lambda params: torch.optim.Adam(params, lr=1e-2), lambda p: p.full_tensor())


def in_flight():
    """16 ops in flight at once, each writing 64 MiB: every wait() returns once the device has
    written that op's output, and the outputs are each op's own."""
    ins = [torch.full((1 << 24,), float(i), device="cuda") for i in range(16)]
    outs = [torch.empty_like(x) for x in ins]
    works = [dist.all_gather_into_tensor(o, x, async_op=True) for o, x in zip(outs, ins)]
    for i, (w, o) in enumerate(zip(works, outs)):
        w.wait()
        assert o[0].item() == i and o[-1].item() == i, (i, o[0].item(), o[-1].item())


def timing():
    """all_reduce through the accl group against torch's own nccl group, same process, same
    tensors: median of 5 rounds of mean time per call, host clock around a synchronized loop of
    calls that each wait (sync), or of calls with async_op=True waited for at the end (async)."""
    nccl = dist.new_group(backend="nccl")

    def run(group, x, iters, wait_each):
        if wait_each:
            for _ in range(iters):
                dist.all_reduce(x, group=group)
        else:
            for w in [dist.all_reduce(x, group=group, async_op=True) for _ in range(iters)]:
                w.wait()

    for nbytes, iters, wait_each in ((8, 300, True), (64 << 20, 20, True), (8, 300, False)):
        x = torch.ones(nbytes // 4, device="cuda")
        rounds = {"accl": [], "nccl": []}
        for _ in range(5):
            for name, group in (("accl", None), ("nccl", nccl)):
                run(group, x, 1, True)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                run(group, x, iters, wait_each)
                torch.cuda.synchronize()
                rounds[name].append((time.perf_counter() - t0) / iters * 1e6)
        a, n = statistics.median(rounds["accl"]), statistics.median(rounds["nccl"])
        print(f"INFO  torch all_reduce {nbytes} B, {'sync' if wait_each else 'async'}: accl group "
              f"{a:.1f} us, nccl group {n:.1f} us (ratio {a / n:.2f})")


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.cuda.set_device(0)
    dist.init_process_group("accl", rank=0, world_size=1)
    served = accl.distributed.accelerators()
    print(f"      torch {torch.__version__}, accl serves {served or 'no accelerator'}; "
          f"backend built for torch {accl.distributed.built_for()}")
    check("registers cuda with nccl", lambda: assert_eq(served.get("cuda"), "nccl"))
    check("collectives on cuda tensors (nccl)", collectives)
    check("tensors on two devices in one call are refused", mixed_devices_rejected)
    check("cpu tensors in the same group", cpu_still_served)
    check("DDP step on cuda matches the step without DDP", ddp_step)
    check("FSDP2 steps on cuda match the steps without FSDP", fsdp_step)
    check("16 ops in flight complete in order, each with its own output", in_flight)
    check("timing against torch's nccl group (INFO lines above)", timing)
    dist.destroy_process_group()
    return status


def assert_eq(a, b):
    assert a == b, f"{a!r} != {b!r}"


if __name__ == "__main__":
    raise SystemExit(main())
