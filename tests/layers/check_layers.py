#!/usr/bin/env python3
"""The library's layers include only downward (docs/architecture.md, "Layers").

    python3 tests/layers/check_layers.py SOURCE_DIR

Layers, lowest first: include/rackweave (the public API), runtime/ (with the generated
schemas/), protocol/, transports/, services/, logic/, actors/, worker/. A file may include its own layer and
those below it. logic/ is the CAF-free layer: none of its files includes a CAF header
or names caf::. So is the chunk shard's logic inside actors/ (shard_core,
actors/shard/core.hpp, and the files it is made of: CAF_FREE_ACTORS), which besides
includes of actors/ only the others of that set. The linker checks calls the same way (CMakeLists.txt, RW_LAYER_CHECK);
this checks the includes, which the linker cannot see (a type or an inline function).

Prints "check_layers: ok" and exits 0, or prints each violation and exits 1. Before
it looks at the tree it checks itself on made-up files, so a rule that stopped
matching fails the run.
"""
import pathlib
import re
import sys

LAYERS = ["include", "runtime", "protocol", "transports", "services", "logic", "actors",
          "worker"]
# What an include's first path component means.
PREFIX_LAYER = {"rackweave": "include", "runtime": "runtime", "schemas": "runtime",
                "protocol": "protocol", "transports": "transports", "services": "services",
                "logic": "logic", "actors": "actors", "worker": "worker"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
CAF_INCLUDE = re.compile(r'^\s*#\s*include\s+<caf/', re.M)
# The chunk shard's logic: plain classes its actor (actors/shard/chunk_shard.cpp) drives.
CAF_FREE_ACTORS = re.compile(
    r"^actors/shard/(core|handlers|handle_\w+|job|checkpoint|moves|balance|hyper|outbox|"
    r"requests|settings|slow_steps)\.(hpp|cpp)$")


def layer_of(path):
    top = path.split("/", 1)[0]
    return top if top in LAYERS else None


def violations(files):
    """files: {path relative to the source dir: text}. Yields one line per violation."""
    for path, text in sorted(files.items()):
        layer = layer_of(path)
        if layer is None:
            continue
        rank = LAYERS.index(layer)
        for m in INCLUDE.finditer(text):
            target = m.group(1)
            if "/" not in target:
                continue  # a file beside this one
            prefix = target.split("/", 1)[0]
            to = PREFIX_LAYER.get(prefix)
            line = text.count("\n", 0, m.start()) + 1
            if to is None:
                yield f"{path}:{line}: includes {target}, which is in no layer"
            elif LAYERS.index(to) > rank:
                yield f"{path}:{line}: {layer}/ includes {target} ({to}/ is above it)"
        caf_free = layer == "logic" or CAF_FREE_ACTORS.match(path)
        what = "logic/" if layer == "logic" else "the shard's logic"
        if caf_free:
            for m in CAF_INCLUDE.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                yield f"{path}:{line}: {what} includes a CAF header"
            for i, l in enumerate(text.splitlines(), 1):
                if "caf::" in l:
                    yield f"{path}:{i}: {what} names caf::"
        if layer == "actors" and caf_free:
            for m in INCLUDE.finditer(text):
                target = m.group(1)
                if target.startswith("actors/") and not CAF_FREE_ACTORS.match(target):
                    line = text.count("\n", 0, m.start()) + 1
                    yield (f"{path}:{line}: the shard's logic includes {target}, "
                           "which is not CAF-free")


def self_test():
    made_up = {
        "runtime/a.cpp": '#include "actors/messages.hpp"\n',
        "logic/b.hpp": '#include <caf/actor.hpp>\n// caf::actor\n#include "worker/link.hpp"\n',
        "transports/c.cpp": '#include "nowhere/x.hpp"\n',
        "protocol/d.hpp": '#include "transports/transport.hpp"\n',
        "actors/ok.cpp": '#include "logic/chunk_state.hpp"\n#include "rackweave/errc.hpp"\n'
                         '#include "schemas/frame.capnp.h"\n#include "local.hpp"\n',
        "actors/shard/core.cpp": '#include "actors/shard/job.hpp"\n'
                                 '#include "actors/messages.hpp"\n#include <caf/all.hpp>\n',
    }
    found = list(violations(made_up))
    want = ["runtime/a.cpp:1:", "logic/b.hpp:1: logic/ includes a CAF",
            "logic/b.hpp:2: logic/ names caf::", "logic/b.hpp:3:", "protocol/d.hpp:1:", "transports/c.cpp:1:",
            "actors/shard/core.cpp:2: the shard's logic includes actors/messages.hpp",
            "actors/shard/core.cpp:3: the shard's logic includes a CAF header"]
    missing = [w for w in want if not any(f.startswith(w) for f in found)]
    if missing or len(found) != len(want):
        print("check_layers: the self-test failed: found", found, "missing", missing)
        sys.exit(1)


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        sys.exit(2)
    self_test()
    root = pathlib.Path(sys.argv[1])
    files = {}
    for layer in LAYERS:
        base = root / layer
        for p in base.rglob("*"):
            if p.suffix in (".hpp", ".cpp", ".h") and p.is_file():
                files[str(p.relative_to(root))] = p.read_text(errors="replace")
    if len(files) < 50:
        print(f"check_layers: only {len(files)} source files under {root}: wrong directory?")
        sys.exit(1)
    bad = list(violations(files))
    for b in bad:
        print(b)
    if bad:
        print(f"check_layers: {len(bad)} violation(s) in {len(files)} files")
        sys.exit(1)
    print(f"check_layers: ok ({len(files)} files)")


if __name__ == "__main__":
    main()
