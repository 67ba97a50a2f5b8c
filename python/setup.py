"""setuptools hook: the installed package remembers the build trees of the
checkout it was installed from (build/.libs, build-bench/.libs,
build-plain/lib), so that `pip install ./python` after
`./scripts/build.sh build` or `./scripts/bench.sh` finds the library
without an install of it (moeccl/_checkout.py, written into the wheel)."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    def run(self):
        super().run()
        top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        dirs = [os.path.join(top, d)
                for d in ("build/.libs", "build-bench/.libs", "build-plain/lib")]
        out = os.path.join(self.build_lib, "moeccl", "_checkout.py")
        with open(out, "w") as f:
            f.write('"""Written at install: the build trees of the checkout installed from."""\n'
                    "BUILD_LIBDIRS = %r\n" % dirs)


setup(cmdclass={"build_py": BuildPy})
