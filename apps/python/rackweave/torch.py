"""PyTorch on RackWeave, two ways.

1. The optimizer runs on the node (ServerOptimizer):

    opt = rackweave.torch.ServerOptimizer(model.named_parameters(), optimizer="momentum",
                                          lr=0.1, job="digits", token=token)
    for x, y in batches:
        loss = loss_fn(model(x), y)
        loss.backward()          # each parameter's gradient goes to the node as soon as
        opt.step()               # backward has it; step() waits for the new parameters
        opt.zero_grad()

Each trainable parameter is a tensor of the job, of its name. Without `optimizer` the
job's own optimizer and hyper-parameters apply: its name and token are enough (the first
rank to join declares the tensors; over TCP, as shared memory needs the spec stated);
with it, the spec is stated (defaults lr=0.01, momentum=0.9, weight_decay=0, betas=(0.9,
0.999), eps=1e-8, chunk_bytes=262144, compression="none" ("bf16", "fp16", "topk:RATIO",
"topk:RATIO,warmup=STEPS"),
compress_updates=False) and must match the job's. At construction rank 0's
values become version 0 and every rank starts from them. With overlap (the default) a
parameter's gradient is pushed from an autograd hook the moment backward produces it, so
communication overlaps the rest of backward; the node sums it over the ranks (in rank
order), runs the optimizer and writes the new values straight into the parameter's
memory. step() waits until every parameter has them; given the model too
(`model=model`), step() returns at once and the next forward of any of the model's
modules first waits for every answer still in flight, in push order (a parameter may be
read by a module other than its own: MultiheadAttention's out_proj, a ParameterList, a
tied weight), so that step()'s return overlaps what the loop does before its forward
(`synchronize()` waits for all, e.g. before saving or reading parameters outside a
forward), and rank 0's float32 buffers (BatchNorm's running statistics) replace every
rank's before each forward of the model, as DDP's default does (rackweave.buffers;
broadcast_buffers=False: not). One backward per step: gradient accumulation over several
backward calls needs overlap=False (step() then pushes the accumulated .grad).
state_dict() reads the optimizer state the node holds (momentum, Adam's moments, the
clock) for torch.save; load_state_dict() on every rank of a new job, right after
construction, puts it back, and training goes on bitwise from there.

2. Any DDP model exchanges its gradients through the node (a DDP communication hook):

    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ddp.register_comm_hook(rackweave.torch.HookState(model.named_parameters(), job="j"),
                           rackweave.torch.allreduce_hook)

The job's optimizer is `sum`: the node adds the ranks' gradients in rank order and the
hook divides by the number of ranks, so the bucket gets their mean as DDP's own
all-reduce gives it (bitwise the same where that number is a power of two, which makes
the division exact); each parameter is a tensor of the job, so DDP's buckets may change
(they do after the first iteration) without the node noticing. Each bucket's parameters
are pushed as DDP hands the bucket over, and the mean is written back into the bucket in
place. The process group DDP needs (gloo) still broadcasts the initial parameters; no
gradient goes through it.

CUDA parameters (one device per worker) take the same two ways: each gradient is copied
into pinned host memory on a side stream as backward produces it and pushed once that
copy is done, the answer lands over it and goes back onto the device on another side
stream, and the compute stream waits for that copy (a stream wait, never a device
synchronize) before the parameter is read again: in step(), or with `model=`, in the
next forward of any module of the model. The pinned memory is one arena per worker, made
once: exactly the trainable parameters' bytes (each tensor rounded up to 64 bytes), or
`pinned_bytes=` where that is less (then staging a gradient waits for the oldest answers
to land; it must hold the largest tensor, or DDP bucket); `staging_bytes` says what it
holds. Over libfabric it is registered with the NIC once (Worker.register_buffer). A
model spread over several devices, or a parameter that is not a contiguous float32
tensor, is a TypeError at construction. `staging=True` sends CPU parameters down the
same path (host memory, plain copies), as the suite does to test it without a GPU; by
default the worker reads and writes CPU parameters in place.

Where arguments are left out, torchrun's environment fills them in: RANK, WORLD_SIZE,
and RACKWEAVE_CONNECT (HOST:PORT of the job's node), RACKWEAVE_JOB, RACKWEAVE_TOKEN,
RACKWEAVE_TRANSPORT (default "auto": shared memory with a node on this host, else TCP).
"""

import concurrent.futures
import os
import warnings

import torch as _torch

from ._rackweave import Worker
from .buffers import BufferBroadcast
from .staging import CudaOps, HostOps, InPlace, Pipeline, arena_elements, device_of

__all__ = ["HookState", "ServerOptimizer", "allreduce_hook"]

# Staged gradients (CUDA, or staging=True) go to the host in buckets of this many bytes
# (the step's last one, whatever it holds): one copy event and one hop through the
# staging threads per bucket, not per tensor.
BUCKET_BYTES = 4 << 20


def _from_env(value, name, convert=str, default=None):
    if value is not None:
        return value
    if name in os.environ:
        return convert(os.environ[name])
    if default is not None:
        return default
    raise ValueError(f"rackweave.torch: give it, or set {name} (as torchrun does)")


class ServerOptimizer(_torch.optim.Optimizer):
    """The node's optimizer for a model's parameters; see the module's doc.

    A torch Optimizer with one param group holding the job's hyper-parameters (lr,
    momentum, weight_decay, betas), so any torch LR scheduler drives it: when rank 0's
    group differs from what the node runs, the change is made for the clock about to be
    pushed (Worker.set_hyper: rank 0's node has it made on every node of the job) before
    any of its gradients leaves, so every rank's step of that clock uses it. The other ranks' groups are not read."""

    def __init__(self, named_parameters, optimizer=None, lr=None, momentum=None,
                 weight_decay=None, betas=None, eps=None, *, connect=None, job=None,
                 rank=None, workers=None, token=None, chunk_bytes=None, overlap=True,
                 transport=None, timeout=120.0, model=None, compression=None,
                 compress_updates=None, staging=False, pinned_bytes=None,
                 bucket_bytes=BUCKET_BYTES, broadcast_buffers=True, buffers_job=None,
                 buffers_token=None):
        self.params = [(n, p) for n, p in named_parameters if p.requires_grad]
        if not self.params:
            raise ValueError("ServerOptimizer: no parameter requires grad")
        self.device = device_of(self.params, "ServerOptimizer")
        arena = _arena(self.device, staging, [p.numel() for _, p in self.params],
                       pinned_bytes)
        if model is not None:
            mine = {id(p) for _, p in self.params}
            if not any(id(p) in mine for p in model.parameters()):
                raise ValueError("ServerOptimizer: model= holds none of the parameters "
                                 "given (pass the model whose named_parameters() they are)")
        self.rank = _from_env(rank, "RANK", int)
        joining = dict(
            connect=_from_env(connect, "RACKWEAVE_CONNECT"), job=_from_env(job, "RACKWEAVE_JOB"),
            rank=self.rank, tensors=[(n, p.numel(), True) for n, p in self.params],
            token=_from_env(token, "RACKWEAVE_TOKEN", default=""),
            transport=_from_env(transport, "RACKWEAVE_TRANSPORT", default="auto"),
            timeout=timeout)
        hyper = (lr, momentum, weight_decay, betas, eps, chunk_bytes, compression,
                 compress_updates)
        if optimizer is None:
            # The job's optimizer and hyper-parameters (its name and token are enough).
            if any(v is not None for v in hyper):
                raise ValueError("ServerOptimizer: hyper-parameters without an optimizer: "
                                 "give optimizer=... too, or none of them to take the job's")
            if joining["transport"] == "auto":
                joining["transport"] = "tcp"  # shared memory needs the spec stated
            self.worker = Worker(**joining)
            self.workers = self.worker.spec["workers"]
        else:
            b1, b2 = betas if betas is not None else (0.9, 0.999)
            self.workers = _from_env(workers, "WORLD_SIZE", int)
            self.worker = Worker(
                **joining, workers=self.workers, optimizer=optimizer,
                lr=0.01 if lr is None else lr, momentum=0.9 if momentum is None else momentum,
                weight_decay=0.0 if weight_decay is None else weight_decay, beta1=b1, beta2=b2,
                eps=1e-8 if eps is None else eps,
                chunk_bytes=262144 if chunk_bytes is None else chunk_bytes,
                compression="none" if compression is None else compression,
                compress_updates=bool(compress_updates))
        self.overlap = overlap
        self._closed = False
        self._pending = {}
        self._hooks = []
        # CUDA parameters (or CPU ones with staging=True) go through the pinned arena
        # (rackweave.staging); CPU ones are read and written in place.
        self._stage = _pipeline(self.device, arena, self.worker, bucket_bytes)
        # Per name, its exchange: a push_pull in place in the name's region of the
        # arena (one native call per bucket for all of them).
        self._push_pulls = {n: InPlace(((n, 0),)) for n, _ in self.params}
        job = self.worker.spec
        super().__init__([p for _, p in self.params],
                         dict(lr=job["lr"], momentum=job["momentum"],
                              weight_decay=job["weight_decay"],
                              betas=(job["beta1"], job["beta2"])))
        self._running = self._hyper()  # what the node runs now
        # Version 0: rank 0's values, everywhere.
        if self._stage is None:
            if self.rank == 0:
                for f in [self.worker.init(n, p.data.view(-1)) for n, p in self.params]:
                    f.result()
            for f in [self.worker.pull(n, p.data.view(-1), 0) for n, p in self.params]:
                f.result()
        else:
            # Through host copies made for this, a batch at a time (the arena is for
            # the steps, and may be smaller than the model).
            for batch in _batches(self.params, INIT_BATCH_BYTES):
                host = {n: p.data.detach().reshape(-1).to("cpu", copy=True)
                        for n, p in batch}
                if self.rank == 0:
                    for f in [self.worker.init(n, host[n]) for n, _ in batch]:
                        f.result()
                for f in [self.worker.pull(n, host[n], 0) for n, _ in batch]:
                    f.result()
                for n, p in batch:
                    p.data.view(-1).copy_(host[n])
        if overlap:
            for n, p in self.params:
                self._hooks.append(p.register_hook(self._pusher(n, p)))
        # With the model: step() returns at once, and the next forward of any of the
        # model's modules (a forward pre-hook on each, so that calling a submodule alone
        # waits too) first waits for every answer still in flight, in push order. Waiting
        # for a module's own parameters only missed parameters read by another module's
        # forward (MultiheadAttention reads out_proj.weight in its own, a ParameterList
        # is never called, a tied weight is read through F.linear): those were read with
        # no wait at all. The backward pushed the first layers last, so their answers,
        # which the forward needs first, come last anyway: waiting for all costs the
        # forward little over waiting for its first layer.
        self._inflight = {}  # name -> the Future of its last push, in push order
        self._lazy = model is not None
        self._unwaited_said = False
        if self._lazy:
            hook = self._waiter()
            for m in model.modules():
                self._hooks.append(m.register_forward_pre_hook(hook))
        # With the model: rank 0's buffers (BatchNorm's running statistics) on every rank
        # before each forward, as DDP's default (rackweave.buffers).
        self._buffers = None
        if model is not None and broadcast_buffers:
            self._buffers = BufferBroadcast(
                model, connect=joining["connect"],
                job=f"{joining['job']}.buffers" if buffers_job is None else buffers_job,
                rank=self.rank, workers=self.workers,
                token=joining["token"] if buffers_token is None else buffers_token,
                transport=joining["transport"], timeout=timeout)
            self._hooks.append(model.register_forward_pre_hook(self._buffers))

    def _landed(self, call):
        """Waits for one parameter's answer: in its memory (CPU), or on its way there
        with the compute stream waiting for it (staged)."""
        if self._stage is None:
            call.result()
        else:
            self._stage.ops.compute_wait(call.result())

    def _exchange(self, name, grad, param):
        """Pushes one parameter's gradient; its new values land in `param`."""
        if self._stage is None:
            return self.worker.push_pull(name, grad.view(-1), param.data.view(-1))
        return self._stage.stage(name, grad, self._push_pulls[name], dst=param.data)

    def _waiter(self):
        def hook(module, inputs):
            _refuse_graphs("ServerOptimizer(model=...)", self.device)
            if self._inflight:
                self.synchronize()
        return hook

    def _unwaited(self, name, future):
        """A gradient of `name` while its last answer is still in flight: no forward of
        the model waited for it, so whatever made this gradient read it with no wait
        (old or half-written values). Said once per optimizer, then waited for."""
        if not self._unwaited_said:
            self._unwaited_said = True
            warnings.warn(
                f"ServerOptimizer(model=...): '{name}' has a new gradient but no forward "
                "of the model ran since step() to wait for its new values, so it was read "
                "without them; run the model (or one of its modules) before backward, or "
                "call synchronize() before reading parameters outside its forward",
                RuntimeWarning, stacklevel=3)
        self._landed(future)

    @property
    def staging_bytes(self):
        """Host memory (pinned, on a GPU) the staging arena holds: the parameters'
        bytes (each tensor rounded up to 64), or pinned_bytes where that is less; 0
        where the worker reads and writes the parameters in place."""
        return 0 if self._stage is None else self._stage.host_bytes

    def synchronize(self):
        """Waits until every parameter holds its newest version (with `model`, step()
        does not; reading parameters outside the model's forward needs this first).
        With CUDA parameters the host waits for the answers, and the current stream
        for their copies onto the device."""
        inflight, self._inflight = self._inflight, {}
        for f in _each_once(inflight.values()):
            self._landed(f)

    def _hyper(self):
        g = self.param_groups[0]
        return dict(lr=g["lr"], momentum=g["momentum"], weight_decay=g["weight_decay"],
                    beta1=g["betas"][0], beta2=g["betas"][1])

    def _before_pushing(self):
        """Rank 0, before the first gradient of a step leaves: the group's changes
        (an LR scheduler's) for the clock about to be pushed."""
        if self.rank != 0:
            return
        now = self._hyper()
        changed = {k: v for k, v in now.items() if v != self._running[k]}
        if not changed:
            return
        at = self.worker.clock(self.params[0][0])
        self.worker.set_hyper(at, **changed)
        self._running = now

    def _pusher(self, name, param):
        def hook(grad):
            _refuse_graphs("ServerOptimizer", self.device)
            if name in self._pending:
                raise RuntimeError(f"ServerOptimizer: a second backward reached '{name}' "
                                   "before step(); accumulate with overlap=False")
            if not self._pending:
                self._before_pushing()
            g = grad if grad.is_contiguous() else grad.contiguous()
            before = self._inflight.pop(name, None)  # a parameter no forward waited for
            if before is not None:
                self._unwaited(name, before)
            self._pending[name] = self._exchange(name, g, param)
            if self._stage is not None and len(self._pending) == len(self.params):
                self._stage.flush()  # the step's last gradient: its bucket goes now
            return None
        return hook

    # torch.cuda.amp.GradScaler.step(opt) calls opt.step(grad_scaler=scaler) on an
    # optimizer that says it handles scaling itself, which is how ServerOptimizer sees a
    # scaler at all (it refuses one: step()).
    _step_supports_amp_scaling = True

    def step(self, closure=None, grad_scaler=None):
        """Waits until every parameter holds the node's next version of it; with `model`
        it returns at once and the next forward waits for the answers."""
        if closure is not None:
            raise ValueError("ServerOptimizer.step: closures are not supported (the node "
                             "steps once per pushed gradient)")
        if grad_scaler is not None:
            raise RuntimeError(
                "ServerOptimizer: fp16 with a GradScaler is not supported: the node would "
                "apply the scaled gradients (with overlap, this step's are already pushed "
                "and applied: start the job again from a checkpoint), and each rank's own "
                "inf check could skip a push the other ranks wait for. Use bf16 autocast "
                "(torch.autocast(device_type, dtype=torch.bfloat16)), which needs no "
                "scaler")
        if not self.overlap:
            self._before_pushing()
            for n, p in self.params:
                if p.grad is None:
                    raise RuntimeError(f"ServerOptimizer: '{n}' has no gradient to push")
                before = self._inflight.pop(n, None)
                if before is not None:
                    self._unwaited(n, before)
                self._pending[n] = self._exchange(n, p.grad, p)
        if self._stage is not None:
            self._stage.flush()
        missing = [n for n, _ in self.params if n not in self._pending]
        if missing:
            raise RuntimeError("ServerOptimizer: backward produced no gradient for "
                               f"{missing[:5]}: every rank must push every parameter")
        pending, self._pending = self._pending, {}
        if self._lazy:
            self._inflight.update(pending)
            return
        for f in _each_once(pending[n] for n, _ in self.params):
            self._landed(f)

    # torch's names for the arrays the node keeps, by optimizer (m, then v).
    _ARRAY_NAMES = {"momentum": ("momentum_buffer",), "nesterov": ("momentum_buffer",),
                    "lars": ("momentum_buffer",), "adam": ("exp_avg", "exp_avg_sq"),
                    "lamb": ("exp_avg", "exp_avg_sq")}

    def state_dict(self):
        """The optimizer state the node holds, as torch.save keeps it: per parameter (by
        index, as torch's optimizers number them) its `step` (the job's clock: the steps
        applied, which Adam's bias correction counts) and the node's arrays as CPU
        tensors shaped like the parameter (momentum_buffer; Adam and LAMB: exp_avg and
        exp_avg_sq); `param_groups` as any torch optimizer's (lr, momentum,
        weight_decay, betas); and under "rackweave" the optimizer, the clock and the
        parameters' names. Any rank may call it, between steps (after step(); with
        `model=`, it waits for the last answers first)."""
        if self._pending:
            raise RuntimeError("ServerOptimizer.state_dict: call it after step(), not "
                               "between backward and step()")
        self.synchronize()
        kind = self.worker.spec["optimizer"]
        names = self._ARRAY_NAMES.get(kind, ())
        arrays = self.worker.state_arrays
        state, clock = {}, None
        for i, (n, p) in enumerate(self.params):
            buf = _torch.empty(arrays * p.numel(), dtype=_torch.float32)
            at = self.worker.pull_state(n, buf)
            if clock is None:
                clock = at
            elif at != clock:
                raise RuntimeError(f"ServerOptimizer.state_dict: '{n}' is at clock {at}, "
                                   f"'{self.params[0][0]}' at {clock}")
            entry = {"step": at}
            for k, key in enumerate(names[:arrays]):
                entry[key] = buf[k * p.numel():(k + 1) * p.numel()].view(p.shape).clone()
            state[i] = entry
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        group["params"] = list(range(len(self.params)))
        return {"state": state, "param_groups": [group],
                "rackweave": {"optimizer": kind, "clock": clock,
                              "names": [n for n, _ in self.params]}}

    def load_state_dict(self, state_dict):
        """Resumes from state_dict(): every rank calls it, right after constructing the
        optimizer with the model as saved (rank 0's parameters become the job's version
        0, so load the model's state_dict first), before the first step. Rank 0 loads
        each parameter's arrays and the clock into the node; the other ranks wait until
        it has, and every rank goes on from that clock: training continues bitwise as
        it would have from the save. The param group's values (an LR scheduler's lr
        included) apply from the next step. A state of another optimizer, or of other
        parameters, is a ValueError; a job that has stepped already is refused
        (rackweave.Error, clock_out_of_range)."""
        ours = state_dict.get("rackweave") if isinstance(state_dict, dict) else None
        if ours is None:
            raise ValueError("ServerOptimizer.load_state_dict: not a ServerOptimizer's "
                             "state_dict (it has no 'rackweave' entry)")
        kind = self.worker.spec["optimizer"]
        if ours["optimizer"] != kind:
            raise ValueError(f"ServerOptimizer.load_state_dict: the state is {ours['optimizer']}'s, "
                             f"the job runs {kind}")
        mine = [n for n, _ in self.params]
        if list(ours["names"]) != mine:
            theirs = list(ours["names"])
            differ = [(a, b) for a, b in zip(theirs, mine) if a != b][:3]
            raise ValueError("ServerOptimizer.load_state_dict: the state is of other "
                             f"parameters ({len(theirs)} saved, {len(mine)} here; first "
                             f"differences {differ})")
        if self._pending:
            raise RuntimeError("ServerOptimizer.load_state_dict: call it before the first "
                               "backward")
        self.synchronize()
        clock = int(ours["clock"])
        names = self._ARRAY_NAMES.get(kind, ())
        arrays = self.worker.state_arrays
        for i, (n, p) in enumerate(self.params):
            if self.rank != 0:
                self.worker.go_on_from(n, clock)
                continue
            entry = state_dict["state"][i]
            parts = [entry[key].detach().to("cpu", _torch.float32).reshape(-1)
                     for key in names[:arrays]]
            for key, part in zip(names, parts):
                if part.numel() != p.numel():
                    raise ValueError(f"ServerOptimizer.load_state_dict: '{n}' {key} has "
                                     f"{part.numel()} elements, the parameter {p.numel()}")
            buf = (_torch.cat(parts) if parts else _torch.empty(0)).contiguous()
            self.worker.load_state(n, buf, clock)
        saved = state_dict["param_groups"][0]
        for key in ("lr", "momentum", "weight_decay", "betas"):
            if key in saved:
                self.param_groups[0][key] = saved[key]

    def zero_grad(self, set_to_none=True):
        """set_to_none=False zeroes each .grad in place: with `model=` it first waits for
        every answer still in flight, as the worker may still be sending from a gradient's
        memory (on a GPU, copying it to the host). set_to_none=True (the default) drops
        them, and whatever still reads one keeps it."""
        if not set_to_none and self._inflight:
            self.synchronize()
        for _, p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def close(self):
        """Waits for every push still in flight (a backward's with no step() yet, and
        the answers step() did not wait for), then lets go of the hooks, the staging
        threads and the worker; a second call does nothing. The first error a push met
        is raised once all that is done."""
        if self._closed:
            return
        self._closed = True
        error = None
        pending, self._pending = self._pending, {}
        if self._stage is not None:
            self._stage.flush()
        for f in _each_once(list(self._inflight.values()) + list(pending.values())):
            try:
                self._landed(f)
            except BaseException as e:  # noqa: BLE001 - raised once everything is closed
                error = error or e
        self._inflight = {}
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self._buffers is not None:
            self._buffers.close()
        if self._stage is not None:
            self._stage.close()
        self.worker.close()
        if error is not None:
            raise error


INIT_BATCH_BYTES = 64 << 20  # version 0 goes through host copies of this much at a time


def _batches(params, limit):
    batch, size = [], 0
    for n, p in params:
        if batch and size + p.numel() * 4 > limit:
            yield batch
            batch, size = [], 0
        batch.append((n, p))
        size += p.numel() * 4
    if batch:
        yield batch


def _arena(device, staging, sizes, pinned_bytes):
    """The staging arena's elements for tensors of these sizes on `device`, or None
    where the worker reads and writes them in place (CPU, unless staging=True)."""
    if device.type != "cuda" and not staging:
        if pinned_bytes is not None:
            raise ValueError("pinned_bytes= bounds the staging arena, which CPU "
                             "parameters take only with staging=True")
        return None
    return arena_elements(sizes, pinned_bytes)


def _compiling():
    """Whether torch.compile (dynamo) is tracing the caller now (torch 2.x; never on
    torch 1.13, which has no torch.compiler)."""
    is_compiling = getattr(getattr(_torch, "compiler", None), "is_compiling", None)
    return bool(is_compiling is not None and is_compiling())


def _capturing(device):
    """Whether the current CUDA stream of `device` is being captured into a CUDA graph."""
    return device.type == "cuda" and _torch.cuda.is_current_stream_capturing()


def _refuse_graphs(who, device):
    """The hooks exchange gradients from the host, each step: torch.compile would break
    its graph on them (or fail with fullgraph=True) and a CUDA graph replays the step
    without them, so nothing would be pushed or waited for. Refused where seen."""
    if _compiling():
        raise RuntimeError(
            f"{who}: torch.compile is tracing a RackWeave hook: the hooks push gradients "
            "and wait for parameters from Python on every step, which a compiled graph "
            "cannot hold. With torch.compile, leave model= out (its forward pre-hooks are "
            "what a compiled forward traces; step() then waits for the parameters), or "
            "train without torch.compile")
    if _capturing(device):
        raise RuntimeError(
            f"{who}: CUDA graphs are not supported: a captured step would replay without "
            "RackWeave's hooks, pushing nothing and waiting for nothing. Capture without "
            "ServerOptimizer's hooks, or train without CUDA graphs")


def _each_once(futures):
    """The futures in order, each once (a bucket's tensors share their bucket's)."""
    return list({id(f): f for f in futures}.values())


def _pipeline(device, elements, worker, bucket_bytes=None):
    """The staging path for parameters on `device` (an arena of `elements`), or None
    (elements None) where the worker reads and writes them in place (CPU, unless
    staging=True: the same path as CUDA's, with host memory and plain copies). Over
    libfabric the arena is registered with the NIC once, here
    (Worker.register_buffer)."""
    if elements is None:
        return None
    ops = CudaOps(device) if device.type == "cuda" else HostOps()
    return Pipeline(ops, elements, register=worker.register_buffer,
                    bucket_bytes=bucket_bytes,
                    push_pull_regions=worker.push_pull_regions)


class HookState:
    """The state of allreduce_hook: a worker of a `sum` job whose tensors are the
    model's trainable parameters (by name)."""

    def __init__(self, named_parameters, *, connect=None, job=None, rank=None, workers=None,
                 token=None, chunk_bytes=262144, transport=None, timeout=120.0,
                 staging=False, pinned_bytes=None):
        params = [(n, p) for n, p in named_parameters if p.requires_grad]
        if not params:
            raise ValueError("HookState: no parameter requires grad")
        self.device = device_of(params, "HookState")
        # DDP's buckets hold every trainable parameter's gradient once per step.
        arena = _arena(self.device, staging, [p.numel() for _, p in params], pinned_bytes)
        self.names = {id(p): n for n, p in params}
        self.rank = _from_env(rank, "RANK", int)
        self.workers = _from_env(workers, "WORLD_SIZE", int)
        self.worker = Worker(
            connect=_from_env(connect, "RACKWEAVE_CONNECT"), job=_from_env(job, "RACKWEAVE_JOB"),
            rank=self.rank, workers=self.workers,
            tensors=[(n, p.numel(), False) for n, p in params],
            token=_from_env(token, "RACKWEAVE_TOKEN", default=""), optimizer="sum",
            chunk_bytes=chunk_bytes,
            transport=_from_env(transport, "RACKWEAVE_TRANSPORT", default="auto"),
            timeout=timeout)
        # Completes each bucket's torch future once the node has answered every one of
        # its parameters (waiting releases the GIL); in order, so buckets finish in turn.
        self._waiter = concurrent.futures.ThreadPoolExecutor(1, "rackweave-hook")
        # CUDA buckets (or CPU ones with staging=True) go through the pinned arena, a
        # region per bucket (rackweave.staging).
        self._stage = _pipeline(self.device, arena, self.worker)

    @property
    def staging_bytes(self):
        """Host memory (pinned, on a GPU) the staging arena holds; 0 without one."""
        return 0 if self._stage is None else self._stage.host_bytes

    def close(self):
        self._waiter.shutdown(wait=True)
        if self._stage is not None:
            self._stage.close()
        self.worker.close()


def allreduce_hook(state, bucket):
    """DDP communication hook: the mean of the ranks' gradients of the bucket (summed by
    the node in rank order, then divided by the ranks) in the bucket's buffer."""
    _refuse_graphs("allreduce_hook", state.device)
    buf = bucket.buffer()
    slices = []  # (name, first element, end)
    offset = 0
    for p in bucket.parameters():
        name = state.names.get(id(p))
        if name is None:
            raise RuntimeError("allreduce_hook: a parameter of the DDP model is not one "
                               "HookState was given (pass the same model's named_parameters())")
        slices.append((name, offset, offset + p.numel()))
        offset += p.numel()
    if offset != buf.numel():
        raise RuntimeError(f"allreduce_hook: the bucket holds {buf.numel()} elements, its "
                           f"parameters {offset}")

    def exchange(into):  # each parameter's mean lands over its gradient
        return _AllOf([state.worker.push_pull(n, into[a:b], into[a:b]) for n, a, b in slices])

    done = _torch.futures.Future()
    if state._stage is None:
        calls = exchange(buf)

        def wait():
            try:
                calls.result()
                done.set_result(buf.div_(state.workers))
            except BaseException as e:  # noqa: BLE001 - handed to DDP, which raises it
                done.set_exception(e)
    else:
        # The mean is taken on the device, right behind the copy back on the same
        # stream (not on the host in the lander); the bucket's future completes once
        # both have (DDP then reads the bucket on its own stream).
        landed = state._stage.submit(f"bucket {bucket.index()}", buf,
                                     InPlace((n, a) for n, a, _ in slices),
                                     divide=state.workers)

        def wait():
            try:
                state._stage.ops.host_wait(landed.result())
                done.set_result(buf)
            except BaseException as e:  # noqa: BLE001 - handed to DDP, which raises it
                done.set_exception(e)

    state._waiter.submit(wait)
    return done


class _AllOf:
    """Several rackweave Futures as one: result() waits for each."""

    def __init__(self, calls):
        self.calls = calls

    def result(self):
        for c in self.calls:
            c.result()
