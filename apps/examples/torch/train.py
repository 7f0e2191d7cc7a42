"""One rank of a data-parallel training run, as torchrun starts it:

    python3 -m rackweave.torchrun --standalone --nproc_per_node 4 train.py --system server

--system server: rackweave.torch.ServerOptimizer, momentum SGD on the node (job
                 RACKWEAVE_JOB at RACKWEAVE_CONNECT with RACKWEAVE_TOKEN, optimizer
                 "momentum" with this run's lr and momentum);
         hook:   torch DDP with rackweave.torch.allreduce_hook (a "sum" job), momentum
                 SGD in the process;
         ddp:    torch DDP over gloo, momentum SGD in the process (the comparison);
         local:  no exchange at all, each rank on its own (the compute floor: what the
                 same ranks cost on this host without any communication).
--device cuda puts each rank's model and data on a GPU (rank LOCAL_RANK on device
LOCAL_RANK modulo the devices), and the step is timed to the end of its kernels.
The three do the same arithmetic up to the order of summation: each step every rank
takes its slice of a global batch (the same shuffle everywhere), the gradients are
averaged over the ranks and momentum SGD steps. Rank 0 prints a progress line and, at
the end, test accuracy (it alone evaluates); with --json-out it writes the run's
figures there.
"""

import argparse
import contextlib
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402 - next to this file

SYSTEMS = ("server", "hook", "ddp", "local")


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=models.MODELS, default="digits")
    p.add_argument("--system", choices=SYSTEMS, default="server")
    p.add_argument("--epochs", type=int, default=10, help="passes over the training set")
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    p.add_argument("--batch", type=int, default=32, help="examples per rank per step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk-bytes", type=int, default=262144,
                   help="the RackWeave job's chunk size (the job must have the same)")
    p.add_argument("--progress-every", type=float, default=1.0,
                   help="seconds between progress lines (0: only at the end of each epoch)")
    p.add_argument("--test-examples", type=int, default=0,
                   help="rank 0 reports test accuracy on the first N test examples "
                        "(0: all of them; a short smoke run has no accuracy to speak of)")
    p.add_argument("--json-out", default="", help="rank 0 writes the run's figures here")
    p.add_argument("--compression", default="none",
                   help="--system server: how gradients travel (none, bf16, fp16, topk:RATIO, "
                        "topk:RATIO,warmup=STEPS)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the model and its data live: cuda puts rank R on CUDA "
                        "device LOCAL_RANK modulo the devices (several ranks may share one)")
    p.add_argument("--staging", action="store_true",
                   help="--system server or hook on CPU: send the parameters through the "
                        "staging path CUDA tensors take (host buffers, plain copies)")
    p.add_argument("--amp", choices=("none", "bf16", "fp16"), default="none",
                   help="mixed precision: the forward and the loss under torch.autocast "
                        "in bf16, or in fp16 with a GradScaler (cuda only; "
                        "ServerOptimizer refuses a scaler)")
    p.add_argument("--compress-updates", action="store_true",
                   help="--system server, bf16 / fp16: the new parameters travel as 16-bit "
                        "values too")
    a = p.parse_args(argv)
    if a.amp == "fp16" and a.device != "cuda":
        p.error("--amp fp16 needs --device cuda (its GradScaler is CUDA's)")
    if a.test_examples < 0:
        p.error("--test-examples must be 0 (all) or positive")
    for k in ("epochs", "batch"):
        if getattr(a, k) <= 0:
            p.error(f"--{k} must be positive")
    return a


def exchanged_bytes(system, params, workers):
    """Payload bytes one rank sends plus receives per step: RackWeave pushes the gradient
    and receives the result (4 bytes each way per element); gloo's ring all-reduce sends
    and receives 2 (W-1)/W of the gradient each way."""
    if system == "ddp":
        return int(2 * 2 * (workers - 1) / workers * 4 * params)
    if system == "local":
        return 0
    return 8 * params


def main(argv):
    a = parse(argv)
    rank, workers = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)  # several ranks (and the node) share this host's cores
    torch.manual_seed(a.seed)
    model, data = models.build(a.model)
    params = sum(p.numel() for p in model.parameters())
    device = torch.device("cpu")
    if a.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("train.py: --device cuda, but torch sees no CUDA device")
        local = int(os.environ.get("LOCAL_RANK", rank))
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
        # The same convolution algorithms every run and rank, so that the systems'
        # losses can be compared step by step.
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    model.to(device)
    x_train, y_train, x_test, y_test = (t.to(device) for t in data)

    import rackweave.torch as rwt

    closing = []
    exchanger = None  # what RackWeave exchanges through: ServerOptimizer or HookState
    if a.system == "server":
        opt = rwt.ServerOptimizer(model.named_parameters(), optimizer="momentum", lr=a.lr,
                                  momentum=a.momentum, model=model, chunk_bytes=a.chunk_bytes,
                                  compression=a.compression,
                                  compress_updates=a.compress_updates, staging=a.staging)
        closing.append(opt.close)
        exchanger = opt
        net = model
    elif a.system == "local":
        net = model
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    else:
        dist.init_process_group("gloo")
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device] if device.type == "cuda" else None)
        if a.system == "hook":
            state = rwt.HookState(model.named_parameters(), chunk_bytes=a.chunk_bytes,
                                  staging=a.staging)
            net.register_comm_hook(state, rwt.allreduce_hook)
            closing.append(state.close)
            exchanger = state
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    per_step = exchanged_bytes(a.system, params, workers)
    if a.amp == "none":
        autocast = contextlib.nullcontext
    else:
        dtype = torch.bfloat16 if a.amp == "bf16" else torch.float16
        def autocast():
            return torch.autocast(device.type, dtype=dtype)
    scaler = torch.cuda.amp.GradScaler() if a.amp == "fp16" else None
    global_batch = a.batch * workers
    steps_per_epoch = len(y_train) // global_batch
    total = a.epochs * steps_per_epoch
    if a.max_steps:
        total = min(total, a.max_steps)
    if rank == 0:
        print(f"{a.model}/{a.system}: {workers} ranks, {params} parameters, "
              f"{steps_per_epoch} steps per epoch of {global_batch} examples, {total} steps",
              flush=True)

    times, curve = [], []  # per step: seconds; (seconds since start, loss)
    start = last_print = time.perf_counter()
    step = 0
    for epoch in range(a.epochs):
        order = torch.randperm(len(y_train), generator=torch.Generator().manual_seed(epoch))
        seen = correct = 0
        loss_sum = 0.0
        for s in range(steps_per_epoch):
            if step == total:
                break
            mine = order[s * global_batch + rank * a.batch:][:a.batch].to(device)
            x, y = x_train[mine], y_train[mine]
            t0 = time.perf_counter()
            with autocast():
                out = net(x)
                loss = F.cross_entropy(out, y)
            if scaler is None:
                loss.backward()
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            opt.zero_grad()
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # the step's kernels, not their launches
            now = time.perf_counter()
            times.append(now - t0)
            step += 1
            curve.append((now - start, loss.item()))
            seen += len(y)
            correct += (out.argmax(1) == y).sum().item()
            loss_sum += loss.item() * len(y)
            end_of_epoch = s == steps_per_epoch - 1 or step == total
            if rank == 0 and (end_of_epoch or (a.progress_every > 0
                                              and now - last_print >= a.progress_every)):
                last_print = now
                rate = step / (now - start)
                print(f"{a.model}/{a.system} epoch {epoch + 1}/{a.epochs} step {step}/{total} "
                      f"loss {loss_sum / seen:.4f} acc {100.0 * correct / seen:.1f}% "
                      f"{rate:.1f} steps/s {rate * per_step / 1e6:.1f} MB/s exchanged",
                      flush=True)
        if step == total:
            break

    # Only rank 0 reports test accuracy, so only rank 0 evaluates: the other ranks hold
    # the same parameters (local: their own, unreported), and a full test pass costs a
    # short run several steps' time.
    accuracy = None
    if rank == 0:
        if a.test_examples:
            x_test, y_test = x_test[:a.test_examples], y_test[:a.test_examples]
        with torch.no_grad():
            accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    # What this rank held at its peak: device memory (CUDA), the staging arena (host
    # memory, pinned on a GPU) and the process's resident set.
    peak_device = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    staging = None if exchanger is None else exchanger.staging_bytes
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    for close in closing:
        close()
    if a.system in ("hook", "ddp"):
        dist.destroy_process_group()
    if rank == 0:
        median_ms = 1000.0 * statistics.median(times)
        print(f"{a.model}/{a.system}: test accuracy {100.0 * accuracy:.2f}%, median step "
              f"{median_ms:.2f} ms over {step} steps", flush=True)
        if a.json_out:
            with open(a.json_out, "w") as f:
                json.dump({"model": a.model + ("" if a.amp == "none" else "+" + a.amp),
                           "amp": a.amp, "system": a.system, "device": device.type,
                           "gpus": torch.cuda.device_count() if device.type == "cuda" else 0,
                           "peak_device_bytes": peak_device, "staging_bytes": staging,
                           "peak_rss_bytes": peak_rss,
                           "torch": torch.__version__, "workers": workers,
                           "parameters": params, "steps": step,
                           "median_step_ms": round(median_ms, 3),
                           "accuracy": round(accuracy, 4),
                           "compression": a.compression,
                           "compress_updates": a.compress_updates,
                           "final_loss": round(curve[-1][1], 4),
                           "bytes_per_step": per_step, "curve": curve}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
