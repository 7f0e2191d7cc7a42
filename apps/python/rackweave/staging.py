"""Tensors that live on a GPU, through a node that reads and writes host memory.

RackWeave's workers read gradients from, and write answers into, host memory. A CUDA
parameter's bytes therefore go through pinned host memory: one arena per worker, made
(pinned, and registered with the NIC over libfabric) once, exactly the bytes of the
worker's parameters (each tensor rounded up to 64 bytes), or less where the user bounds
it (`pinned_bytes=`). Each tensor staged takes the next region of the arena; its answer
lands over its gradient in that region (the node answers a chunk only once it has
counted every rank's push of it, and the worker never reads an answered chunk's
gradient again), and the region is taken back once the answer's copy to the device has
been made. Tensors travel in buckets (ServerOptimizer's bucket_bytes; a DDP bucket is
one), so that the copies' events and the hops between threads are per bucket, not per
tensor. Two side streams carry the copies, so that neither they nor the exchange stop
the GPU:

  gradient hook (autograd's thread)   a region (waiting, under a bound, for the oldest
                                      to come back), in the open bucket; once the bucket
                                      is full (or the step's last): one event on the
                                      compute stream, a copy device -> region per tensor
                                      on the D2H stream after it, one event for them
  pusher thread                       (bound to the tensors' device at its start)
                                      waits for that event, then pushes the regions
                                      (InPlace ones in one native call per bucket)
  lander thread                       (likewise bound) waits for the answers (in the
                                      same regions), copies them into the parameters on
                                      the H2D stream after the compute stream's reads
                                      of the old values; one event; the regions go back
  before the parameters are read      the compute stream waits for that event (a stream
  again                               wait, not a device synchronize)

The device steps sit behind one small interface (`DeviceOps`): `CudaOps` for a CUDA
device, and `HostOps`, where the buffers are plain host tensors, the copies are plain
copies and the events are already complete, so that the whole path, threads and buffers
included, runs and is tested on a machine without a GPU. CPU parameters do not take it
by default (the worker reads and writes them in place, no copy at all); `staging=True`
in ServerOptimizer or HookState sends them through it, which is how the suite tests it.
"""

import atexit
import collections
import concurrent.futures
import queue
import threading
import time
import weakref

import torch as _torch

__all__ = ["CudaOps", "DeviceOps", "HostOps", "InPlace", "Pipeline", "device_of"]


class DeviceOps:
    """The device steps of the staging path. `Event`s are opaque to the pipeline."""

    def bind_thread(self):
        """Called first on each thread of the pipeline (the pusher, the lander): makes
        this device the thread's current one, so that nothing the thread does later
        (an event's wait, a stream switch) goes through another device."""
        raise NotImplementedError

    def host_buffer(self, numel):
        """A float32 host buffer of exactly `numel` elements (the pipeline's arena, made
        once)."""
        raise NotImplementedError

    def release_host(self, buffer):
        """The pipeline is done with host_buffer()'s buffer (unpins it)."""
        raise NotImplementedError

    def after_compute(self):
        """An event at the end of the compute stream's work so far."""
        raise NotImplementedError

    def to_host(self, copies, after):
        """Copies each (host buffer, device tensor) of `copies` device -> host once
        `after` has completed (each pair of one shape); returns one event, of the last
        copy (a bucket's)."""
        raise NotImplementedError

    def to_device(self, copies, after):
        """Copies each (device tensor, host buffer, divisor) of `copies` host -> device
        once `after` has completed (the compute stream's last reads of the tensors; each
        pair of one shape), then divides the device tensor by the divisor where it is
        not None, on the same stream; returns one event, of the last of it."""
        raise NotImplementedError

    def host_wait(self, event):
        """Blocks this thread until `event` has completed."""
        raise NotImplementedError

    def compute_wait(self, event):
        """Makes the compute stream (the caller's current stream) wait for `event`."""
        raise NotImplementedError


class HostOps(DeviceOps):
    """The staging path on the host: plain buffers, plain copies, events that are done."""

    def bind_thread(self):
        pass

    def host_buffer(self, numel):
        return _torch.empty(numel, dtype=_torch.float32)

    def release_host(self, buffer):
        pass

    def after_compute(self):
        return None

    def to_host(self, copies, after):
        for dst, src in copies:
            dst.copy_(src)
        return None

    def to_device(self, copies, after):
        for dst, src, divisor in copies:
            dst.copy_(src)
            if divisor is not None:
                dst.div_(divisor)
        return None

    def host_wait(self, event):
        pass

    def compute_wait(self, event):
        pass


class CudaOps(DeviceOps):
    """Pinned host buffers and a side stream each way on one CUDA device."""

    def __init__(self, device):
        self.device = _torch.device(device)
        self.d2h = _torch.cuda.Stream(self.device)
        self.h2d = _torch.cuda.Stream(self.device)

    def bind_thread(self):
        # A new thread's current device is device 0: without this, the first CUDA call
        # on it (an event's wait, the stream switch in to_device) makes a context on
        # device 0 (about 0.5 GB) for a rank on another GPU, and each stream switch
        # goes through device 0.
        _torch.cuda.set_device(self.device)

    def host_buffer(self, numel):
        # Pinned in place (cudaHostRegister), exactly numel * 4 bytes: torch's pinned
        # allocator (pin_memory=True) rounds each block up to a power of two, up to
        # twice the bytes asked for, and caches it after it is freed.
        buffer = _torch.empty(numel, dtype=_torch.float32)
        if numel:
            code = int(_torch.cuda.cudart().cudaHostRegister(
                buffer.data_ptr(), numel * 4, 0))
            if code != 0:
                raise RuntimeError(f"rackweave staging: pinning {numel * 4} bytes of host "
                                   f"memory failed (cudaHostRegister error {code}); "
                                   "pinned_bytes= bounds what is pinned")
        return buffer

    def release_host(self, buffer):
        if buffer.numel():
            _torch.cuda.cudart().cudaHostUnregister(buffer.data_ptr())

    def after_compute(self):
        event = _torch.cuda.Event()
        event.record(_torch.cuda.current_stream(self.device))
        return event

    def to_host(self, copies, after):
        with _torch.cuda.stream(self.d2h):
            self.d2h.wait_event(after)
            for dst, src in copies:
                dst.copy_(src, non_blocking=True)
                # src was made on the compute stream: the caching allocator must not
                # hand its memory out again before this stream has read it.
                src.record_stream(self.d2h)
            # The pusher thread waits for it: asleep (blocking), not spinning on a core
            # the ranks need.
            event = _torch.cuda.Event(blocking=True)
            event.record(self.d2h)
        return event

    def to_device(self, copies, after):
        with _torch.cuda.stream(self.h2d):
            if after is not None:
                self.h2d.wait_event(after)
            for dst, src, divisor in copies:
                dst.copy_(src, non_blocking=True)
                if divisor is not None:  # on the device, behind the copy: not on the host
                    dst.div_(divisor)
            event = _torch.cuda.Event(blocking=True)  # the DDP hook's thread waits for it
            event.record(self.h2d)
        return event

    def host_wait(self, event):
        if event is not None:
            event.synchronize()

    def compute_wait(self, event):
        if event is not None:
            _torch.cuda.current_stream(self.device).wait_event(event)


def device_of(named_tensors, who):
    """The one device of these tensors ("cpu" or a CUDA device), or a TypeError naming
    the tensor that is not float32, not contiguous, or on another device."""
    device = None
    first = None
    for name, t in named_tensors:
        if t.dtype != _torch.float32:
            raise TypeError(f"{who}: parameter '{name}' must be float32 (it is {t.dtype})")
        if not t.is_contiguous():
            raise TypeError(f"{who}: parameter '{name}' is not contiguous (RackWeave reads "
                            "and writes a parameter's memory as one block)")
        if t.device.type not in ("cpu", "cuda"):
            raise TypeError(f"{who}: parameter '{name}' is on {t.device}; RackWeave takes "
                            "CPU and CUDA tensors")
        if device is None:
            device, first = t.device, name
        elif t.device != device:
            what = ("a second GPU" if t.device.type == device.type == "cuda"
                    else "another device")
            raise TypeError(f"{who}: parameter '{name}' is on {t.device} but '{first}' is on "
                            f"{device} ({what}): all of a worker's parameters must be on "
                            "one device (one worker per GPU)")
    return device


# Pipelines not closed yet: closed at interpreter exit (their threads are daemons, which
# the interpreter would otherwise stop wherever they are, a copy or a push half done).
_open = weakref.WeakSet()
EXIT_WAIT_S = 30.0  # at exit, how long the answers still in flight are waited for
ALIGN = 16  # elements: each region of the arena starts on a 64-byte boundary
MAX_VIEWS = 4096  # the arena's views kept for reuse, at most


@atexit.register
def _close_at_exit():
    for p in list(_open):
        p.close(timeout=EXIT_WAIT_S)


def arena_elements(sizes, limit_bytes=None):
    """The arena for tensors of these element counts: each rounded up to ALIGN, all of
    them at once (a step's worth in flight), or `limit_bytes` where that is less. A
    ValueError where the limit cannot hold the largest one."""
    need = sum(_aligned(n) for n in sizes)
    if limit_bytes is None:
        return need
    cap = int(limit_bytes) // 4 // ALIGN * ALIGN
    largest = max(sizes, default=0)
    if cap < _aligned(largest):
        raise ValueError(f"rackweave staging: pinned_bytes={limit_bytes} cannot hold the "
                         f"largest tensor ({largest * 4} bytes); give at least "
                         f"{_aligned(largest) * 4}")
    return min(need, cap)


def _aligned(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


class _Arena:
    """One host buffer handed out in regions, in the order tensors are staged, and taken
    back oldest first once their answers are on their way to the device (a ring): a
    step's tensors fit at once when the arena holds them all; under a smaller limit
    staging waits for the oldest answers to land."""

    def __init__(self, ops, elements):
        self.ops = ops
        self.buffer = ops.host_buffer(elements)
        self.elements = elements
        self._live = collections.deque()  # [start, end, landed, event], oldest first
        self._cond = threading.Condition()
        self._views = {}  # (start, shape) -> (flat view, shaped view) of the buffer

    def views(self, start, shape, n):
        """The n elements at `start`, flat (for the worker) and shaped as `shape` (for
        the copies, which then need no reshape), made once per place and shape: the
        push order is the same every step, so a tensor's region is too."""
        key = (start, shape)
        got = self._views.get(key)
        if got is None:
            if len(self._views) >= MAX_VIEWS:  # regions that move (a bounded arena)
                self._views.clear()
            flat = self.buffer[start:start + n]
            got = self._views[key] = (flat, flat.view(shape))
        return got

    def _place(self, n):
        """Where n elements fit now, or None."""
        if not self._live:
            return 0 if n <= self.elements else None
        head, tail = self._live[-1][1], self._live[0][0]
        if self._live[-1][0] >= tail:  # not wrapped: free at [head, end) and [0, tail)
            if self.elements - head >= n:
                return head
            return 0 if tail >= n else None
        return head if tail - head >= n else None

    def acquire(self, n, closed, before_waiting):
        """A region of n elements (the region's record, whose [0] is its start): the
        oldest regions whose answers have landed are taken back until it fits;
        before_waiting() is called once before waiting for one to land."""
        n = _aligned(n)
        if n > self.elements:
            raise RuntimeError(f"rackweave staging: {n * 4} bytes to stage but the arena "
                               f"holds {self.elements * 4} (pinned_bytes); give more, or "
                               "make DDP's buckets smaller (bucket_cap_mb)")
        with self._cond:
            while True:
                at = self._place(n)
                if at is not None:
                    region = [at, at + n, False, None]
                    self._live.append(region)
                    return region
                oldest = self._live[0]
                if oldest[2]:
                    # Its copy to the device reads the region: done before it is reused.
                    self.ops.host_wait(oldest[3])
                    self._live.popleft()
                    continue
                if closed():
                    raise RuntimeError("rackweave staging: the pipeline is closed")
                if before_waiting is not None:
                    before_waiting()
                    before_waiting = None
                self._cond.wait(1.0)

    def landed(self, regions, event):
        """The regions' answers are on their way to the device (event: that copy; None:
        nothing reads the regions any more)."""
        with self._cond:
            for region in regions:
                region[2], region[3] = True, event
            self._cond.notify_all()


class InPlace:
    """An exchange that is the worker's push_pull in place of each (tensor, first
    element) of `regions`, counted from the start of the tensor's region of the arena.
    The pusher makes one native call (Worker.push_pull_regions) for every such tensor
    of a bucket, and the lander waits for it once, so that a bucket costs two Python
    calls rather than two per tensor."""

    __slots__ = ("regions",)

    def __init__(self, regions):
        self.regions = tuple(regions)


class _Bucket:
    """Tensors staged together: one compute event, their copies to the host and one
    event for them, then each one's exchange, and one copy event back; one Future."""

    def __init__(self):
        # [src, dst, region, elements, exchange, finish, divisor], then the region's
        # flat view (what the worker reads and writes) and its view shaped as src
        self.items = []
        self.bytes = 0
        self.done = concurrent.futures.Future()


class Pipeline:
    """One worker's staging path: one host arena (made and registered once) that each
    tensor is staged through, its answer landing over its gradient, in buckets, and
    the two threads that push what the D2H stream copied and land what the node
    answered.

    stage() adds a tensor to the open bucket and returns the bucket's concurrent Future;
    flush() (or a bucket reaching `bucket_bytes`) sends the bucket on: one event on the
    compute stream, every tensor's copy to the host after it, one event for those
    copies, which the pusher thread waits for before pushing each tensor; the lander
    thread waits for each answer, copies them all back onto the device after the same
    compute event, and completes the Future with that copy's event, which the caller
    makes the compute stream wait for before reading the tensors. Errors (the node's, a
    copy's) complete the Future with the exception. submit() is stage() then flush().
    close() ends the threads once everything staged has landed."""

    def __init__(self, ops, elements, register=None, bucket_bytes=None,
                 push_pull_regions=None):
        """elements: the arena's size in float32 elements (arena_elements()).
        register(buffer): registers a host buffer with the fabric NIC where the worker's
        chunks travel over libfabric (Worker.register_buffer), returning what keeps the
        registration (None: nothing to register); the arena is registered once, here.
        bucket_bytes: a bucket is sent on once it holds this much (None: only at
        flush()). push_pull_regions(buffer, [(tensor, first element), ...]): the
        worker's call that InPlace exchanges go through (Worker.push_pull_regions)."""
        self.ops = ops
        self._push_pull_regions = push_pull_regions
        self._arena = _Arena(ops, elements)
        pin = register(self._arena.buffer) if register is not None else None
        self._pins = [] if pin is None else [pin]
        self._bucket_bytes = bucket_bytes
        self._open = None
        self._to_push = queue.Queue()
        self._to_land = queue.Queue()
        self._closed = False
        self._threads = [threading.Thread(target=self._push_loop, name="rackweave-push",
                                          daemon=True),
                         threading.Thread(target=self._land_loop, name="rackweave-land",
                                          daemon=True)]
        for t in self._threads:
            t.start()
        _open.add(self)

    @property
    def host_bytes(self):
        """The bytes of host memory (pinned, on a GPU) this pipeline holds."""
        return self._arena.elements * 4

    def registrations(self):
        """The NIC registrations of the arena (empty where none is needed)."""
        return list(self._pins)

    def stage(self, name, src, exchange, dst=None, finish=None, divide=None):
        """Adds `src` (a device tensor) to the open bucket, in a region of the arena;
        once the bucket is sent on, `exchange(buffer)` on the pusher thread starts its
        push (it returns something with result(), a rackweave Future) with the answer to
        land over the gradient in the same region, or `exchange` is an InPlace (the
        bucket's are pushed in one native call); the answer goes into `dst` (of src's
        shape; default: `src`), after `finish(buffer)` where given (on the host), and is
        divided there by `divide` where given (on the device, after its copy: a mean).
        Returns the bucket's Future. `name` names the tensor for the caller; the
        pipeline does not use it."""
        if self._closed:
            raise RuntimeError("rackweave staging: the pipeline is closed")
        if isinstance(exchange, InPlace) and self._push_pull_regions is None:
            raise ValueError("rackweave staging: an InPlace exchange needs the pipeline's "
                             "push_pull_regions")
        n = src.numel()
        # No room: the open bucket is sent on first, so the regions waited for are ones
        # on their way.
        region = self._arena.acquire(n, self._is_closed, self.flush)
        b = self._open
        if b is None:
            b = self._open = _Bucket()
        b.items.append([src, src if dst is None else dst, region, n, exchange, finish,
                        divide])
        b.bytes += n * 4
        if self._bucket_bytes is not None and b.bytes >= self._bucket_bytes:
            self.flush()
        return b.done

    def _is_closed(self):
        return self._closed

    def flush(self):
        """Sends the open bucket on (nothing if none is open)."""
        b, self._open = self._open, None
        if b is None:
            return
        # The compute stream's work so far: what made each src, and every read of each
        # dst this step (forward and backward); the copies back into the dsts wait for
        # it too, and nothing reads a dst again before compute_wait.
        views = self._arena.views
        for it in b.items:
            it.extend(views(it[2][0], it[0].shape, it[3]))
        try:
            after = self.ops.after_compute()
            copied = self.ops.to_host([(it[8], it[0]) for it in b.items], after)
        except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
            self._arena.landed([it[2] for it in b.items], None)
            b.done.set_exception(e)
            return
        for it in b.items:
            it[0] = None  # the gradient: copied (its memory is the caller's again)
        self._to_push.put((b, copied, after))

    def submit(self, name, src, exchange, dst=None, finish=None, divide=None):
        """stage() then flush(): a bucket of one (a DDP bucket)."""
        done = self.stage(name, src, exchange, dst, finish, divide)
        self.flush()
        return done

    def _push_loop(self):
        self.ops.bind_thread()
        while True:
            item = self._to_push.get()
            if item is None:
                self._to_land.put(None)
                return
            b, copied, reads_done = item
            calls, error = [], None
            try:
                self.ops.host_wait(copied)
                self._push(b.items, calls)
            except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
                error = e  # the pushes started still land (in their regions) first
            self._to_land.put((b, calls, error, reads_done))

    def _push(self, items, calls):
        """Starts each item's exchange, in order, appending one call per item (the
        items of a run of InPlace exchanges share one native call)."""
        run, regions = 0, []
        for it in items:
            exchange = it[4]
            if isinstance(exchange, InPlace):
                start = it[2][0]
                regions.extend((name, start + first) for name, first in exchange.regions)
                run += 1
                continue
            if run:
                calls.extend([self._push_pull_regions(self._arena.buffer, regions)] * run)
                run, regions = 0, []
            calls.append(exchange(it[7]))
        if run:
            calls.extend([self._push_pull_regions(self._arena.buffer, regions)] * run)

    def _land_loop(self):
        self.ops.bind_thread()
        while True:
            item = self._to_land.get()
            if item is None:
                return
            b, calls, error, reads_done = item
            waited = None
            for it, call in zip(b.items, calls):
                try:
                    if call is not waited:  # a run of InPlace items shares one
                        waited = call
                        call.result()
                    if error is None and it[5] is not None:
                        it[5](it[7])
                except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
                    error = error or e
            event = None
            if error is None:
                try:
                    event = self.ops.to_device([(it[1], it[8], it[6]) for it in b.items],
                                               reads_done)
                except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
                    error = e
            self._arena.landed([it[2] for it in b.items], event)
            if error is None:
                b.done.set_result(event)
            else:
                b.done.set_exception(error)

    def close(self, timeout=None):
        """Sends the open bucket on, ends the threads once everything staged has landed
        (at most `timeout` seconds; None: as long as it takes), then releases the arena's
        registration and pinning. Called at interpreter exit for a pipeline nobody
        closed."""
        if self._closed:
            return
        self.flush()
        self._closed = True
        _open.discard(self)
        self._to_push.put(None)
        end = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            t.join(None if end is None else max(0.0, end - time.monotonic()))
        if any(t.is_alive() for t in self._threads):
            return  # still waiting for the node: the arena stays registered
        for pin in self._pins:
            pin.release()
        self._pins = []
        self.ops.release_host(self._arena.buffer)
