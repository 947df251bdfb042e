"""Imported first by the scripts here: appends the repository root to
sys.path, so that they import benchmarks._common (and pygpukit_torch, where
no copy is installed) from this checkout. Appended, not prepended: a
pygpukit_torch on PYTHONPATH or installed comes first (ab_builds.sh chooses
the build to time with PYTHONPATH)."""

import pathlib
import sys

ROOT = str(pathlib.Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.append(ROOT)
