"""Packaging beyond what pyproject.toml can say: the protocol files ship inside the package.

The declarative protocol definitions live in ``protocols/`` at the top of the tree (SPEC §1: the
files a reader opens and a contributor edits). A wheel maps that folder to the package directory
``benchmark/protocols/``, where :func:`benchmark.config.protocols_dir` finds them with
importlib.resources once installed. pyproject.toml cannot list a mapped package next to
``packages.find``, hence this file; everything else is in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["benchmark*"]), "benchmark.protocols"])
