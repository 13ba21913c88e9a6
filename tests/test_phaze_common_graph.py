"""The shared topological order: networkx's smallest-first order, and short on a cycle."""

from __future__ import annotations

import doctest

import networkx as nx
from hypothesis import given
from hypothesis import strategies as st

import phaze_common.graph
from phaze_common.graph import topological_order


@st.composite
def _dags(draw):
    """Nodes with shuffled ids and edges from lower to higher positions (acyclic)."""
    n = draw(st.integers(0, 12))
    ids = draw(st.permutations(range(n)))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), unique=True)) if pairs else []
    return list(range(n)), [(ids[i], ids[j]) for i, j in edges]


@given(_dags())
def test_the_order_is_networkx_smallest_first(case):
    nodes, edges = case
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from(edges)
    assert topological_order(nodes, edges) == list(nx.lexicographical_topological_sort(g))


def test_a_cycle_leaves_nodes_out():
    assert topological_order([0, 1, 2, 3], [(0, 1), (1, 2), (2, 1), (0, 3)]) == [0, 3]


def test_examples():
    assert doctest.testmod(phaze_common.graph).failed == 0
