"""Tensors that live on a GPU, through a node that reads and writes host memory.

RackWeave's workers read gradients from, and write answers into, host memory. A CUDA
parameter's bytes therefore go through pinned host buffers, allocated once per tensor
and reused every step, on two side streams, so that neither the copies nor the exchange
stop the GPU:

  gradient hook (autograd's thread)   a copy device -> pinned buffer on the D2H stream,
                                      after the compute stream's work so far; its event
  pusher thread                       (bound to the tensors' device at its start)
                                      waits for that event, then pushes the buffer
  lander thread                       (likewise bound) waits for the answer (in a
                                      second pinned buffer),
                                      copies it into the parameter on the H2D stream
                                      after the compute stream's reads of the old
                                      values; its event
  before the parameter is read again  the compute stream waits for that event (a stream
                                      wait, not a device synchronize)

The device steps sit behind one small interface (`DeviceOps`): `CudaOps` for a CUDA
device, and `HostOps`, where the buffers are plain host tensors, the copies are plain
copies and the events are already complete, so that the whole path, threads and buffers
included, runs and is tested on a machine without a GPU. CPU parameters do not take it
by default (the worker reads and writes them in place, no copy at all); `staging=True`
in ServerOptimizer or HookState sends them through it, which is how the suite tests it.
"""

import atexit
import concurrent.futures
import queue
import threading
import time
import weakref

import torch as _torch

__all__ = ["CudaOps", "DeviceOps", "HostOps", "Pipeline", "device_of"]


class DeviceOps:
    """The device steps of the staging path. `Event`s are opaque to the pipeline."""

    def bind_thread(self):
        """Called first on each thread of the pipeline (the pusher, the lander): makes
        this device the thread's current one, so that nothing the thread does later
        (an event's wait, a stream switch) goes through another device."""
        raise NotImplementedError

    def host_buffer(self, numel):
        """A float32 host buffer of `numel` elements, reused every step."""
        raise NotImplementedError

    def after_compute(self):
        """An event at the end of the compute stream's work so far."""
        raise NotImplementedError

    def to_host(self, dst, src, after):
        """Copies device tensor `src` into host buffer `dst` once `after` has completed;
        returns the copy's event."""
        raise NotImplementedError

    def to_device(self, dst, src, after):
        """Copies host buffer `src` into device tensor `dst` once `after` has completed
        (the compute stream's last reads of `dst`); returns the copy's event."""
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

    def after_compute(self):
        return None

    def to_host(self, dst, src, after):
        dst.copy_(src.reshape(-1))
        return None

    def to_device(self, dst, src, after):
        dst.reshape(-1).copy_(src)
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
        return _torch.empty(numel, dtype=_torch.float32, pin_memory=True)

    def after_compute(self):
        event = _torch.cuda.Event()
        event.record(_torch.cuda.current_stream(self.device))
        return event

    def to_host(self, dst, src, after):
        with _torch.cuda.stream(self.d2h):
            self.d2h.wait_event(after)
            dst.copy_(src.reshape(-1), non_blocking=True)
            # src was made on the compute stream: the caching allocator must not hand
            # its memory out again before this stream has read it.
            src.record_stream(self.d2h)
            # The pusher thread waits for it: asleep (blocking), not spinning on a core
            # the ranks need.
            event = _torch.cuda.Event(blocking=True)
            event.record(self.d2h)
        return event

    def to_device(self, dst, src, after):
        with _torch.cuda.stream(self.h2d):
            if after is not None:
                self.h2d.wait_event(after)
            dst.reshape(-1).copy_(src, non_blocking=True)
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


@atexit.register
def _close_at_exit():
    for p in list(_open):
        p.close(timeout=EXIT_WAIT_S)


class Pipeline:
    """One worker's staging path: per tensor name a pinned buffer out and one in, and the
    two threads that push what the D2H stream copied and land what the node answered.

    submit() returns a concurrent Future that completes, with the H2D copy's event,
    once the answer is on its way into its device tensor; the caller makes the compute
    stream wait for that event before reading the tensor. Errors (the node's, a
    copy's) complete the Future with the exception. close() ends the threads once
    everything submitted has landed."""

    def __init__(self, ops, register=None):
        """register(buffer): registers a host buffer with the fabric NIC where the
        worker's chunks travel over libfabric (Worker.register_buffer), returning what
        keeps the registration (None: nothing to register); each buffer is registered
        once, when it is made."""
        self.ops = ops
        self._register = register
        self._pins = {}
        self._out = {}
        self._in = {}
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

    def _buffer(self, kept, name, numel):
        b = kept.get(name)
        if b is None or b.numel() != numel:  # first use, or a DDP bucket rebuilt
            old = self._pins.pop((id(kept), name), None)
            if old is not None:
                old.release()
            b = kept[name] = self.ops.host_buffer(numel)
            if self._register is not None:
                pin = self._register(b)
                if pin is not None:
                    self._pins[(id(kept), name)] = pin
        return b

    def registrations(self):
        """The NIC registrations of the buffers (empty where none is needed)."""
        return list(self._pins.values())

    def buffers(self, name, numel):
        """The host buffers of `name` (out, in), made on first use and again when the
        size changes (a DDP bucket rebuilt)."""
        return self._buffer(self._out, name, numel), self._buffer(self._in, name, numel)

    def submit(self, name, src, dst, exchange, finish=None, in_place=False):
        """Stages `src` (a device tensor) out in `name`'s buffer, then, on the pusher
        thread, `exchange(out_buffer, in_buffer)` starts the push (it returns something
        with result(), a rackweave Future); its answer goes into `dst`, after
        `finish(in_buffer)` where given (on the host). in_place: the answer is written
        over the out buffer (a DDP bucket, answered in place)."""
        if self._closed:
            raise RuntimeError("rackweave staging: the pipeline is closed")
        out = self._buffer(self._out, name, src.numel())
        into = out if in_place else self._buffer(self._in, name, src.numel())
        done = concurrent.futures.Future()
        # The compute stream's work so far: what made src, and every read of dst this
        # step (forward and backward); the H2D copy into dst waits for it too, and
        # nothing reads dst again before compute_wait.
        after = self.ops.after_compute()
        copied = self.ops.to_host(out, src, after)
        self._to_push.put((exchange, copied, out, into, dst, after, finish, done))
        return done

    def _push_loop(self):
        self.ops.bind_thread()
        while True:
            item = self._to_push.get()
            if item is None:
                self._to_land.put(None)
                return
            exchange, copied, out, into, dst, reads_done, finish, done = item
            try:
                self.ops.host_wait(copied)
                call = exchange(out, into)
            except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
                done.set_exception(e)
                continue
            self._to_land.put((call, into, dst, reads_done, finish, done))

    def _land_loop(self):
        self.ops.bind_thread()
        while True:
            item = self._to_land.get()
            if item is None:
                return
            call, into, dst, reads_done, finish, done = item
            try:
                call.result()
                if finish is not None:
                    finish(into)
                done.set_result(self.ops.to_device(dst, into, reads_done))
            except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
                done.set_exception(e)

    def close(self, timeout=None):
        """Ends the threads once everything submitted has landed (at most `timeout`
        seconds; None: as long as it takes), then releases the buffers' registrations.
        Called at interpreter exit for a pipeline nobody closed."""
        if self._closed:
            return
        self._closed = True
        _open.discard(self)
        self._to_push.put(None)
        end = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            t.join(None if end is None else max(0.0, end - time.monotonic()))
        if any(t.is_alive() for t in self._threads):
            return  # still waiting for the node: the buffers stay registered
        for pin in self._pins.values():
            pin.release()
        self._pins = {}
