"""The rackweave package for pip: `pip install .` builds the native part, _rackweave, with
CMake for the Python running pip, and puts librackweave.so beside it (the extension
finds it through its $ORIGIN RUNPATH, $ORIGIN alone in setup.py's own build); the Python
part is apps/python/rackweave.

The CMake build goes to build/pip/cmake-<python tag> (Release), or, when
RACKWEAVE_BUILD_DIR names an existing build configured for this Python, there (the test
suite does that, so that installing costs no second build). The libraries librackweave
needs (CAF, Cap'n Proto, spdlog, ...) are the system's: a wheel made here runs where
those packages are installed (Debian: apps/scripts/setup.sh --packages-only).
"""

import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    text = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    return re.search(r"project\(RackWeave VERSION ([0-9.]+)", text).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        suffix = sysconfig.get_config_var("EXT_SUFFIX")  # .cpython-311-x86_64-linux-gnu.so
        given = os.environ.get("RACKWEAVE_BUILD_DIR")
        build = given or os.path.join(ROOT, "build", "pip", f"cmake-{sys.implementation.cache_tag}")
        if not given:
            gen = ["-G", "Ninja"] if shutil.which("ninja") else []
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build, *gen,
                                   "-DCMAKE_BUILD_TYPE=Release",
                                   f"-DPYTHON_EXECUTABLE={sys.executable}",
                                   "-DRW_INTEGRATION_TESTS=OFF",
                                   "-DRW_PYTHON_ORIGIN_ONLY=ON"])
        elif not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            raise SystemExit(f"setup.py: RACKWEAVE_BUILD_DIR={build} is not a CMake build")
        subprocess.check_call(["cmake", "--build", build, "--target", "_rackweave",
                               "-j", os.environ.get("RW_JOBS", "2")])
        native = os.path.join(build, "python", "rackweave", "_rackweave" + suffix)
        if not os.path.exists(native):
            raise SystemExit(f"setup.py: {build} has no _rackweave{suffix}: it builds for "
                             f"another Python (configure it with "
                             f"-DPYTHON_EXECUTABLE={sys.executable})")
        target = os.path.abspath(self.get_ext_fullpath(ext.name))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(native, target)
        shutil.copyfile(os.path.realpath(os.path.join(build, "librackweave.so")),
                        os.path.join(os.path.dirname(target), "librackweave.so"))


setup(
    version=version(),
    packages=["rackweave"],
    package_dir={"rackweave": "apps/python/rackweave"},
    ext_modules=[Extension("rackweave._rackweave", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": os.path.join("build", "pip")}},
    zip_safe=False,
)
