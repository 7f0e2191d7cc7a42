#!/usr/bin/env bash
# Packs a RackWeave build into a folder that runs on another x86-64 Linux machine with
# none of our Debian packages (the many-core and GPU machines: Ubuntu 24.04, glibc 2.39):
# the programs and librackweave, stripped, and every shared library `ldd` lists for them
# but glibc's own, so that the benchmark scripts take the folder as a build.
#
#   bash bench/bundle.sh DIR [--build-dir BUILD] [--name NAME]
#
# DIR/NAME (NAME default "rackweave") is laid out as a build is, for --build-dir:
#   DIR/NAME/apps/rw-node, apps/rw-bench   wrappers that set LD_LIBRARY_PATH and exec
#   DIR/NAME/peers/gloo-allreduce           the same, when BUILD/peers has it
#                                           (bench/setup-peers.sh builds it)
#   DIR/NAME/bench/rw-trace-cost            the same (bench/trace.sh's)
#   DIR/NAME/bin/                           the stripped programs and librackweave.so
#   DIR/NAME/python/rackweave/_rackweave*   the Python package's native part, one per
#                                           Python the build was made for (cmake
#                                           -DRW_PYTHON_EXTRA=.../include/python3.12 adds
#                                           the GPU machine's); bench/gpu.sh takes the
#                                           Python part from the checkout
#   DIR/NAME/python/digits.pt               scikit-learn's digits, for a machine without
#                                           it (apps/examples/torch/models.py)
#   DIR/NAME/BUNDLE                         what it was made from (commit, build, host)
# DIR/lib holds the libraries (DIR/lib/cxx the compiler's runtime), shared by every
# build packed into DIR: bundle an old and a new build into one DIR (two --name) and
# compare them in one run on the other machine, for about 12 MB more. The wrappers exec, so a script's PID is the program's.
# MPI is not packed (its launcher and plugins come with the machine's own OpenMPI):
# bench/peers.sh builds bench/peers/mpi_allreduce.c there with the machine's mpicc.
# Python and torch are not either: torch-gloo and bench/gpu.sh run on the machine's own.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build
name=rackweave
dir=
while (($#)); do
  case $1 in
    --build-dir) build=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    -h|--help) sed -n 2,27p "$0"; exit 0 ;;
    -*) echo "bundle.sh: unknown option $1" >&2; exit 2 ;;
    *) [[ -z $dir ]] || { echo "bundle.sh: one DIR only" >&2; exit 2; }; dir=$1; shift ;;
  esac
done
[[ -n $dir ]] || { echo "bundle.sh: usage: bash bench/bundle.sh DIR [--build-dir BUILD] [--name NAME]" >&2; exit 2; }
[[ $name =~ ^[A-Za-z0-9._-]+$ ]] || { echo "bundle.sh: --name takes letters, digits, . _ -" >&2; exit 2; }
programs=("$build/apps/rw-node" "$build/apps/rw-bench")
for f in "${programs[@]}" "$build/librackweave.so"; do
  [[ -x $f || -f $f ]] || { echo "bundle.sh: $f is missing: build first (apps/scripts/setup.sh)" >&2; exit 1; }
done
peers=()
[[ -x $build/peers/gloo-allreduce ]] && peers=("$build/peers/gloo-allreduce")
benches=() # bench/trace.sh's
[[ -x $build/bench/rw-trace-cost ]] && benches=("$build/bench/rw-trace-cost")
extensions=()
for f in "$build"/python/rackweave/_rackweave*.so; do [[ -f $f ]] && extensions+=("$f"); done

out=$dir/$name
rm -rf "$out"
mkdir -p "$out/bin" "$out/apps" "$out/peers" "$out/bench" "$dir/lib"
strip -o "$out/bin/librackweave.so" "$build/librackweave.so"
for f in "${programs[@]}" "${peers[@]}" "${benches[@]}"; do
  strip -o "$out/bin/${f##*/}" "$f"
done
if ((${#extensions[@]})); then
  mkdir -p "$out/python/rackweave"
  for f in "${extensions[@]}"; do strip -o "$out/python/rackweave/${f##*/}" "$f"; done
  # The digits, where the other machine has no scikit-learn.
  /usr/bin/python3 - "$out/python/digits.pt" <<'PY' ||
import sys, torch
from sklearn.datasets import load_digits
d = load_digits()
torch.save({"images": torch.tensor(d.images, dtype=torch.float32),
            "target": torch.tensor(d.target, dtype=torch.int64)}, sys.argv[1])
PY
    echo "bundle.sh: no digits.pt (Debian's python3-torch and python3-sklearn are needed)" >&2
fi

# Every library ldd resolves, but glibc's (the other machine has a newer one) and ours.
is_glibc() {
  case ${1##*/} in
    ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*|libanl.so*|libmvec.so*) return 0 ;;
  esac
  return 1
}
# libfabric is loaded when the fabric transport opens a domain (dlopen), so ldd of our
# programs does not list it: it and what it needs are added by name. (awk reads all of
# ldconfig's 70 KB: quitting at the match would end ldconfig with SIGPIPE, a failure
# under pipefail.)
fabric_lib=$(ldconfig -p | awk '$1 == "libfabric.so.1" && !found {print $NF; found = 1}')
# The compiler's runtime (libstdc++, libgcc_s, libatomic) goes to DIR/lib/cxx: the
# programs' wrappers take it, but a Python process that loads _rackweave (bench/gpu.sh)
# keeps the machine's own, which its torch was built against (newer than Debian's).
added=0
mkdir -p "$dir/lib/cxx"
while read -r lib; do
  is_glibc "$lib" && continue
  [[ ${lib##*/} == librackweave.so ]] && continue
  to=$dir/lib
  case ${lib##*/} in libstdc++.so*|libgcc_s.so*|libatomic.so*) to=$dir/lib/cxx ;; esac
  if [[ ! -e $to/${lib##*/} ]]; then
    cp -L "$lib" "$to/${lib##*/}"
    chmod u+w "$to/${lib##*/}"
    strip --strip-unneeded "$to/${lib##*/}" 2>/dev/null || true
    added=$((added + 1))
  fi
done < <({
           for f in "${programs[@]}" "${peers[@]}" "${benches[@]}" "$build/librackweave.so" \
             ${extensions[@]+"${extensions[@]}"} ${fabric_lib:+"$fabric_lib"}; do
             ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
           done
           if [[ -n $fabric_lib ]]; then echo "$fabric_lib"; fi
         } | sort -u)

# A wrapper per program: the bundle's libraries first, then exec (same PID).
wrap() {
  local target=$1 wrapper=$2
  cat >"$wrapper" <<EOF
#!/bin/sh
here=\$(cd "\$(dirname "\$0")/.." && pwd)
LD_LIBRARY_PATH=\$here/bin:\$here/../lib:\$here/../lib/cxx\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec "\$here/bin/$target" "\$@"
EOF
  chmod +x "$wrapper"
}
wrap rw-node "$out/apps/rw-node"
wrap rw-bench "$out/apps/rw-bench"
for f in "${peers[@]}"; do wrap "${f##*/}" "$out/peers/${f##*/}"; done
for f in "${benches[@]}"; do wrap "${f##*/}" "$out/bench/${f##*/}"; done

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=
[[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]] && dirty=" (with uncommitted changes)"
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
{
  echo "RackWeave bundle '$name': commit $commit$dirty, ${build_type:-unknown} build $(cd "$build" && pwd)"
  echo "made $(date -u '+%Y-%m-%d %H:%M') UTC on $(uname -n), $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "peers: ${peers[*]##*/}"
  echo "python: ${extensions[*]##*/}"
} >"$out/BUNDLE"

# It must run here without the build's RUNPATH: check it does.
"$out/apps/rw-node" --help >/dev/null
"$out/apps/rw-bench" comm --help >/dev/null
echo "bundle.sh: $out ($(du -sh "$out" | cut -f1)), $dir/lib ($(du -sh "$dir/lib" | cut -f1), $added added): $(head -1 "$out/BUNDLE")"
