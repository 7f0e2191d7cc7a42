"""torchrun for Debian bookworm: `python3 -m rackweave.torchrun [torchrun options] train.py`.

Debian's torch 1.13 `torchrun` fails at start under Python 3.11 (AttributeError:
'NoneType' object has no attribute 'get'): its Std.from_str looks the value up by
iterating an IntFlag, which from Python 3.11 on skips the 0 (NONE) and composite (ALL)
members, so the default `--redirects 0` becomes None. This runs the same torchrun with
that lookup done by value; everything else (options, environment: RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT) is torchrun's own. On a Python or torch without
the bug, plain `torchrun` does the same.
"""

import re

from torch.distributed.elastic.multiprocessing import api as _api


def _from_str(cls, vm):
    if re.match(_api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(_api._MAPPING_REGEX, vm):
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{_api._VALUE_REGEX}> or <{_api._MAPPING_REGEX}>")


_api.Std.from_str = classmethod(_from_str)

if __name__ == "__main__":
    from torch.distributed.run import main

    main()
