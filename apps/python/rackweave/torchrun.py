"""torchrun for Debian bookworm: `python3 -m rackweave.torchrun [torchrun options] train.py`.

Debian's torch 1.13 `torchrun` fails at start under Python 3.11 (AttributeError:
'NoneType' object has no attribute 'get'): its Std.from_str looks the value up by
iterating an IntFlag, which from Python 3.11 on skips the 0 (NONE) and composite (ALL)
members, so the default `--redirects 0` becomes None. This runs the same torchrun with
that lookup done by value; everything else (options, environment: RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT) is torchrun's own. On a Python or torch without
the bug, plain `torchrun` does the same.

One more difference: torch 1.13's `--standalone` puts every single-host run's rendezvous
on localhost:29400, so two runs at once on one host collide (the second fails with
RendezvousConnectionError: Broken pipe). Here `--standalone` asks the kernel for a free
port instead, as later torch does.
"""

import re
import socket
import uuid

from torch.distributed.elastic.multiprocessing import api as _api


def _from_str(cls, vm):
    if re.match(_api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(_api._MAPPING_REGEX, vm):
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{_api._VALUE_REGEX}> or <{_api._MAPPING_REGEX}>")


# Only where torch has that lookup (1.x): torch 2.x parses the value itself.
if all(hasattr(_api, n) for n in ("Std", "_VALUE_REGEX", "_MAPPING_REGEX")):
    _api.Std.from_str = classmethod(_from_str)


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    from torch.distributed.elastic.multiprocessing.errors import record
    from torch.distributed.run import parse_args, run

    args = parse_args(argv)
    if args.standalone:  # what torch's run() would set, on a port of this run's own
        args.standalone = False
        args.rdzv_backend = "c10d"
        args.rdzv_endpoint = f"localhost:{_free_port()}"
        args.rdzv_id = str(uuid.uuid4())
    record(run)(args)


if __name__ == "__main__":
    main()
