"""Builds the switchyard package: the stubs are generated from proto/ here, never committed.

`build_py` runs grpc_tools.protoc on ../../proto/switchyard/v1/*.proto (or the folder
named by SWITCHYARD_PROTO_DIR) and writes switchyard/v1/*_pb2*.py into the build, so
the stubs always match both the proto and the grpcio-tools of the build.
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

# setuptools.build_meta runs this file without its folder on sys.path.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from build_stubs import generate  # noqa: E402


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        proto = os.environ.get("SWITCHYARD_PROTO_DIR") or os.path.join(here, "..", "..", "proto")
        generate(proto, self.build_lib)


setup(cmdclass={"build_py": BuildWithStubs})
