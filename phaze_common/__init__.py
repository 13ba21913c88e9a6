"""What every Phaze package shares and nothing of ours depends on: the error hierarchy
(:mod:`phaze_common.errors`), the bounds on the sizes a user may ask for
(:mod:`phaze_common.limits`) and the deterministic topological order of a small DAG
(:mod:`phaze_common.graph`).

It is the one leaf of the package graph, so ``workloads``, ``arch_space``, ``ilp``,
``placement`` and ``results`` raise the same errors without importing ``phaze``.
"""
