"""Wheel for tf-fused-int8: the Python package plus the compiled op library.

Do not run this from the source tree; build the wheel with

    bazel build //:build_pip_pkg && bazel-bin/build_pip_pkg dist

which stages tf_fused_int8/*.py together with bazel-bin/_fused_int8_ops.so and runs
`pip wheel` on the staged copy. The .so is built against one TensorFlow release, so the wheel is a
platform wheel and pins that release.
"""

import os
import re
import sys

from setuptools import find_packages, setup
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "tf_fused_int8"
OP_LIBRARY = "_fused_int8_ops.so"
TF_REQUIREMENT = "tensorflow==2.21.*"


class BinaryDistribution(Distribution):
    """Carries a native library, so the wheel gets a platform tag (not py3-none-any)."""

    def has_ext_modules(self):
        return True

    def is_pure(self):
        return False


def _version():
    for name in ("_version.py", "__init__.py"):
        path = os.path.join(HERE, PACKAGE, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                match = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", f.read(), re.M)
            if match:
                return match.group(1)
    return "0.1.0"


def _long_description():
    path = os.path.join(HERE, "README.md")
    if not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read()


if not os.path.exists(os.path.join(HERE, PACKAGE, OP_LIBRARY)):
    sys.exit(
        "setup.py: %s/%s is missing. Build the wheel with\n"
        "  bazel build //:build_pip_pkg && bazel-bin/build_pip_pkg dist" % (PACKAGE, OP_LIBRARY)
    )

setup(
    name="tf-fused-int8",
    version=_version(),
    description="A fused int8 conv2d TensorFlow custom op (conv, scale, side input, bias, ReLU, clip).",
    long_description=_long_description(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    packages=find_packages(include=[PACKAGE, PACKAGE + ".*"]),
    package_data={PACKAGE: [OP_LIBRARY, "benchmark/workers/*.c"]},
    install_requires=[TF_REQUIREMENT],
    python_requires=">=3.9",
    distclass=BinaryDistribution,
    zip_safe=False,
)
